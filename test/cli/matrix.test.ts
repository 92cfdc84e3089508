/**
 * Every `eos` command × the ways it is commonly misused or cannot reach AWS: the exit code (cli/failures.ts: 2 bad
 * usage or input, 3 AWS cannot be reached or used) and exactly one line on stderr, no stack. The commands run
 * in-process through `main()` (the same function bin/eos.mjs calls) against the real local parts the global setup
 * started; only the no-credentials and no-region cases change the process environment, and restore it.
 *
 * Cases that do not apply to `eos local` are listed with the reason: it creates its own table and bucket, and on
 * local endpoints it supplies a region and credentials of its own (a local run must not need an AWS account).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../cli/eos.ts';
import { classifyFailure } from '../../cli/failures.ts';
import { createBucket, createLedgerTable } from '../../local/provision.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { InvalidSettingError, MissingResourceError } from '../../shared/errors.ts';
import { uniqueName } from '../support/aws.ts';

type Command = 'local' | 'verify' | 'read' | 'query' | 'status' | 'epoch' | 'redrive' | 'replay';
type Case =
  | 'no args'
  | 'bad flag'
  | 'unreachable endpoint'
  | 'missing bucket'
  | 'missing table'
  | 'no credentials'
  | 'no region';

/** A port nothing listens on (1 is reserved, and connecting to it is refused at once). */
const UNREACHABLE = 'http://127.0.0.1:1';

/** A table and a bucket that exist (created before the matrix runs): `eos redrive` needs both. */
const EXISTING = uniqueName('eos-matrix');

interface Row {
  readonly args: readonly string[];
  readonly code: 2 | 3;
  readonly line: RegExp;
}

const MATRIX: Record<Command, Partial<Record<Case, Row>>> = {
  local: {
    // `eos local` with no arguments is a complete default run (4,000 orders): not a failure, covered elsewhere.
    'bad flag': { args: ['--bogus'], code: 2, line: /^error: unknown option '--bogus'$/ },
    'unreachable endpoint': {
      args: ['--endpoint', UNREACHABLE, '--records', '10'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED 127\.0\.0\.1:1/,
    },
  },
  verify: {
    'no args': {
      args: [],
      code: 2,
      line: /^error: --bucket or --export-dir is required \(or set EOS_BUCKET\)$/,
    },
    'bad flag': { args: ['--bucket', 'b', '--bogus'], code: 2, line: /^error: unknown option '--bogus'$/ },
    'unreachable endpoint': {
      args: ['--bucket', 'b', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing bucket': {
      args: ['--bucket', 'eos-no-such-bucket'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(NoSuchBucket; check the --bucket\/--table names/,
    },
    'no credentials': {
      args: ['--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: set AWS_REGION/,
    },
  },
  read: {
    'no args': {
      args: [],
      code: 2,
      line: /^error: --bucket or --export-dir is required \(or set EOS_BUCKET\)$/,
    },
    'bad flag': {
      args: ['--bucket', 'b', '--stream', 'sideways'],
      code: 2,
      line: /^error: option '--stream <stream>' argument 'sideways' is invalid/,
    },
    'unreachable endpoint': {
      args: ['--bucket', 'b', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing bucket': {
      args: ['--bucket', 'eos-no-such-bucket'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*NoSuchBucket/,
    },
    'no credentials': {
      args: ['--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
  query: {
    'no args': { args: [], code: 2, line: /^error: missing required argument 'sql'$/ },
    'bad flag': {
      args: ['SELECT 1', '--bucket', 'b', '--format', 'xml'],
      code: 2,
      line: /^error: option '--format <format>' argument 'xml' is invalid/,
    },
    'unreachable endpoint': {
      args: ['SELECT count(*) FROM output', '--bucket', 'b', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing bucket': {
      args: ['SELECT count(*) FROM output', '--bucket', 'eos-no-such-bucket'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*NoSuchBucket/,
    },
    'no credentials': {
      args: ['SELECT count(*) FROM output', '--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['SELECT count(*) FROM output', '--bucket', 'b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
  status: {
    'no args': { args: [], code: 2, line: /^error: --table is required \(or set EOS_LEDGER_TABLE\)$/ },
    'bad flag': {
      args: ['--table', 't', '--history', '0'],
      code: 2,
      line: /^error: option '--history <n>' argument '0' is invalid/,
    },
    'unreachable endpoint': {
      args: ['--table', 't', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing table': {
      args: ['--table', 'eos-no-such-table'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(ResourceNotFoundException; check the --bucket\/--table names/,
    },
    'no credentials': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
  epoch: {
    'no args': { args: [], code: 2, line: /^error: --table is required \(or set EOS_LEDGER_TABLE\)$/ },
    'bad flag': {
      args: ['--table', 't', '--start-new'],
      code: 2,
      line: /^error: --start-new needs --topic \(and optionally --partition\)$/,
    },
    'unreachable endpoint': {
      args: ['--table', 't', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing table': {
      args: ['--table', 'eos-no-such-table'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(ResourceNotFoundException; check the --bucket\/--table names/,
    },
    'no credentials': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
  replay: {
    'no args': { args: [], code: 2, line: /^error: --table is required \(or set EOS_LEDGER_TABLE\)$/ },
    'bad flag': {
      args: ['--table', 't', '--from-offset', '-1'],
      code: 2,
      line: /^error: option '--from-offset <n>' argument '-1' is invalid/,
    },
    'unreachable endpoint': {
      args: ['--table', 't', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing table': {
      args: ['--table', 'eos-no-such-table'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(ResourceNotFoundException; check the --bucket\/--table names/,
    },
    'no credentials': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--table', 't'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
  redrive: {
    'no args': { args: [], code: 2, line: /^error: --table is required \(or set EOS_LEDGER_TABLE\)$/ },
    'bad flag': {
      args: ['--table', 'eos-t', '--bucket', 'eos-b', '--checkpoint', '0'],
      code: 2,
      line: /^error: option '--checkpoint <n>' argument '0' is invalid/,
    },
    'unreachable endpoint': {
      args: ['--table', 'eos-t', '--bucket', 'eos-b', '--endpoint', UNREACHABLE],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: connect ECONNREFUSED/,
    },
    'missing bucket': {
      args: ['--table', EXISTING, '--bucket', 'eos-no-such-bucket'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(NoSuchBucket; check the --bucket\/--table names/,
    },
    'missing table': {
      args: ['--table', 'eos-no-such-table', '--bucket', EXISTING],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*\(ResourceNotFoundException; check the --bucket\/--table names/,
    },
    'no credentials': {
      args: ['--table', 'eos-t', '--bucket', 'eos-b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS credentials: /,
    },
    'no region': {
      args: ['--table', 'eos-t', '--bucket', 'eos-b'],
      code: 3,
      line: /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?no AWS region: /,
    },
  },
};

beforeAll(async () => {
  const clients = createAwsClients();
  await Promise.all([createLedgerTable(clients.dynamodb, EXISTING), createBucket(clients.s3, EXISTING)]);
});

/** Runs `eos <command> <args>` in-process with `env` overlaid on (and `unset` removed from) process.env. */
async function run(
  command: Command,
  args: readonly string[],
  change: { set?: Record<string, string>; unset?: readonly string[] } = {},
): Promise<{ code: number; stderr: string }> {
  const saved = { ...process.env };
  for (const name of change.unset ?? []) delete process.env[name];
  Object.assign(process.env, change.set ?? {});
  // No EOS_* defaults leak in from the shell running the tests.
  for (const name of Object.keys(process.env)) if (name.startsWith('EOS_')) delete process.env[name];
  const stderr: string[] = [];
  try {
    const code = await main(
      ['node', 'eos', command, ...args],
      { local: { progress: false, write: () => {} } },
      {
        writeError: (text) => stderr.push(text),
        writeOut: () => {},
      },
    );
    return { code, stderr: stderr.join('') };
  } finally {
    for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
    Object.assign(process.env, saved);
  }
}

/** No credentials anywhere the chain looks: variables, files, SSO, the instance metadata service. */
const NO_CREDENTIALS = {
  unset: [
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_SESSION_TOKEN',
    'AWS_PROFILE',
    'AWS_CONTAINER_CREDENTIALS_RELATIVE_URI',
    'AWS_CONTAINER_CREDENTIALS_FULL_URI',
    'AWS_WEB_IDENTITY_TOKEN_FILE',
  ],
  set: {
    AWS_CONFIG_FILE: '/nonexistent/eos-config',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/eos-credentials',
    AWS_EC2_METADATA_DISABLED: 'true',
  },
};
const NO_REGION = {
  unset: ['AWS_REGION', 'AWS_DEFAULT_REGION', 'AWS_PROFILE'],
  set: {
    AWS_CONFIG_FILE: '/nonexistent/eos-config',
    AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/eos-credentials',
  },
};

const rows = Object.entries(MATRIX).flatMap(([command, cases]) =>
  Object.entries(cases).map(([name, row]) => [command as Command, name as Case, row] as const),
);

describe('eos CLI matrix: exit code and one line on stderr, no stack', () => {
  it.each(rows)('eos %s, %s', async (command, name, row) => {
    const change = name === 'no credentials' ? NO_CREDENTIALS : name === 'no region' ? NO_REGION : {};
    const { code, stderr } = await run(command, row.args, change);
    const lines = stderr.trimEnd().split('\n');
    expect({ code, lines }).toMatchObject({ code: row.code, lines: [expect.stringMatching(row.line)] });
    expect(stderr).not.toMatch(/\n\s+at /);
  });

  it('covers every command with every case that applies to it', () => {
    const all: Case[] = [
      'no args',
      'bad flag',
      'unreachable endpoint',
      'missing bucket',
      'missing table',
      'no credentials',
      'no region',
    ];
    const applies: Record<Command, Case[]> = {
      local: ['bad flag', 'unreachable endpoint'],
      verify: all.filter((c) => c !== 'missing table'),
      read: all.filter((c) => c !== 'missing table'),
      query: all.filter((c) => c !== 'missing table'),
      status: all.filter((c) => c !== 'missing bucket'),
      epoch: all.filter((c) => c !== 'missing bucket'),
      redrive: all,
      replay: all.filter((c) => c !== 'missing bucket'),
    };
    for (const [command, cases] of Object.entries(applies)) {
      expect(Object.keys(MATRIX[command as Command]).sort()).toEqual([...cases].sort());
    }
  });

  it('--debug adds the stack to the line', async () => {
    const { code, stderr } = await run('verify', ['--bucket', 'b', '--endpoint', UNREACHABLE, '--debug']);
    expect(code).toBe(3);
    expect(stderr).toMatch(
      /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: .*\n.*ECONNREFUSED[\s\S]*\n\s+at /,
    );
  });

  it('an AWS_ENDPOINT_URL that is not a URL is bad usage (2), not an unreachable host', async () => {
    const { code, stderr } = await run('verify', ['--bucket', 'b'], {
      set: { AWS_ENDPOINT_URL: 'localhost:4566' },
    });
    expect(code).toBe(2);
    expect(stderr).toMatch(
      /^error: AWS_ENDPOINT_URL: expected an http\(s\) URL, got the scheme localhost:\n$/,
    );
  });

  it('help and --version exit 0', async () => {
    expect((await run('verify', ['--help'])).code).toBe(0);
    const out: string[] = [];
    const code = await main(['node', 'eos', '--version'], {}, { writeOut: (t) => out.push(t) });
    expect({ code, out: out.join('') }).toEqual({ code: 0, out: '0.1.0\n' });
  });
});

describe('classifyFailure: AWS errors by name, code and status', () => {
  const aws = (name: string, extra: Record<string, unknown> = {}) =>
    Object.assign(new Error(`${name} happened`), { name, ...extra });
  it.each([
    [aws('AccessDenied', { $metadata: { httpStatusCode: 403 } }), 3, /^access denied: /],
    [aws('AccessDeniedException'), 3, /^access denied: /],
    [aws('UnrecognizedClientException', { $metadata: { httpStatusCode: 400 } }), 3, /^access denied: /],
    [aws('Error', { code: 'ENOTFOUND' }), 3, /^cannot reach AWS: /],
    [aws('TimeoutError'), 3, /^cannot reach AWS: /],
    [
      Object.assign(new AggregateError([aws('Error', { code: 'ECONNREFUSED' })], ''), {}),
      3,
      /^cannot reach AWS: /,
    ],
    [aws('ResourceNotFoundException', { $metadata: { httpStatusCode: 400 } }), 3, /^not found: /],
    [new Error('Region is missing'), 3, /^no AWS region: /],
    [
      new MissingResourceError('java', 'DynamoDB Local needs a Java runtime'),
      3,
      /^java: DynamoDB Local needs/,
    ],
    [new InvalidSettingError('EOS_BATCH', 'unknown'), 2, /^invalid setting EOS_BATCH: unknown$/],
    [
      Object.assign(
        new Error("Cannot find package '/app/node_modules/@aws/s3-server/index.js' imported from /app/x.js"),
        { code: 'ERR_MODULE_NOT_FOUND' },
      ),
      3,
      /^@aws\/s3-server is not installed: eos local, checkpoint and deliver need the repository's development dependencies/,
    ],
    [new TypeError('x is undefined'), 1, /^TypeError: x is undefined \(unexpected; rerun with --debug/],
  ])('%s → exit %i', (error, code, message) => {
    const failure = classifyFailure(error);
    expect(failure.code).toBe(code);
    expect(failure.message).toMatch(message);
  });
});
