/**
 * `eos local` against servers it did not start, its signal handling and its checks before a run:
 * - DynamoDB Local and the S3 server started here, apart from the global setup's, on ports of their own, as a
 *   user would start them; `eos local --dynamodb-endpoint … --s3-endpoint …` runs against them (its table and
 *   bucket are found there afterwards) and is exactly-once;
 * - SIGTERM to a spawned `eos local` (the process boundary is the point) stops the DynamoDB Local and S3 server
 *   it started: both ports close and no Java process of that port is left;
 * - `--report`/`--export` paths that cannot be written stop the command before anything starts;
 * - `cli/eos.ts` loads no implementation statically: `--help` never loads the emulator, the runner, the local
 *   parts, the AWS SDK or a dev dependency.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { DynamoDBClient, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../cli/eos.ts';
import { partsPlan } from '../../cli/local.ts';
import { GUARANTEES, MAX_BATCH_SIZE } from '../../cli/local-defaults.ts';
import { MAX_BATCH_SIZE as EMULATOR_MAX_BATCH_SIZE } from '../../local/msk-emulator.ts';
import { LOCAL_CREDENTIALS, startDynamoDbLocal, startS3Server } from '../../local/parts.ts';
import type { RunReport } from '../../local/runner.ts';
import { DELIVERY_GUARANTEES } from '../../shared/config/settings.ts';

/** The unprivileged user and group (65534 on Debian and most Linux): a root test runs a command as it. */
const NOBODY = 65534;

const ENDPOINT_VARIABLES = ['AWS_ENDPOINT_URL', 'AWS_ENDPOINT_URL_DYNAMODB', 'AWS_ENDPOINT_URL_S3'];

/** process.env without any endpoint variable: what a user's shell has before they point it anywhere. */
function plainEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const name of ENDPOINT_VARIABLES) delete env[name];
  return env;
}

/**
 * The `eos` program as one file in a fresh temporary folder every user can read (esbuild, the dependencies
 * inside), with the package.json it reads its version from beside it: what a child running as another user
 * runs when the checkout may sit in a folder only its owner can enter.
 */
async function eosProgramAnyoneCanRun(): Promise<string> {
  const folder = mkdtempSync(join(tmpdir(), 'eos-program-'));
  chmodSync(folder, 0o755);
  const program = join(folder, 'cli', 'eos.mjs');
  await build({
    entryPoints: [resolve('cli/eos.ts')],
    outfile: program,
    bundle: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    // Loaded only by the commands that query output, never on the way to the --export check.
    external: ['@duckdb/*'],
    // ESM bundles of CommonJS dependencies still call require(): give them one.
    banner: {
      js: "import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);",
    },
    logLevel: 'error',
  });
  copyFileSync(resolve('package.json'), join(folder, 'package.json'));
  for (const path of [folder, dirname(program)]) chmodSync(path, 0o755);
  chmodSync(program, 0o644);
  return program;
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((done) => {
    child.once('exit', () => done());
    child.kill('SIGTERM');
  });
}

function portOpen(port: number): Promise<boolean> {
  return new Promise((answer) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      answer(true);
    });
    socket.once('error', () => answer(false));
  });
}

/** Linux: a running java process whose command line names this port. */
function javaOnPort(port: number): boolean {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .some((pid) => {
      try {
        const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        return args[0]?.endsWith('java') && args.includes('-port') && args.includes(String(port));
      } catch {
        return false; // gone meanwhile
      }
    });
}

describe('eos local --dynamodb-endpoint/--s3-endpoint against separately started servers', () => {
  let dynamodb: { endpoint: string; process: ChildProcess };
  let s3: { endpoint: string; process: ChildProcess };

  beforeAll(async () => {
    [dynamodb, s3] = await Promise.all([
      startDynamoDbLocal(),
      startS3Server(mkdtempSync(join(tmpdir(), 'eos-own-s3-'))),
    ]);
  }, 120_000);
  afterAll(async () => {
    await Promise.all([dynamodb && stop(dynamodb.process), s3 && stop(s3.process)]);
  });

  it('runs against them, creating its table and bucket there, and is exactly-once', async () => {
    expect([dynamodb.endpoint, s3.endpoint]).not.toContain(process.env.AWS_ENDPOINT_URL_DYNAMODB);
    const dir = mkdtempSync(join(tmpdir(), 'eos-endpoint-'));
    const out: string[] = [];
    const stderr: string[] = [];
    const code = await main(
      [
        'node',
        'eos',
        'local',
        '--dynamodb-endpoint',
        dynamodb.endpoint,
        '--s3-endpoint',
        s3.endpoint,
        '--records',
        '300',
        '--partitions',
        '2',
        '--checkpoint-interval',
        '300',
        '--report',
        join(dir, 'report.json'),
      ],
      { local: { write: (t) => out.push(t), progress: false, env: plainEnv() } },
      { writeError: (t) => stderr.push(t) },
    );
    expect({ code, stderr: stderr.join('') }).toEqual({ code: 0, stderr: '' });
    const text = out.join('');
    expect(text).toContain(`using DynamoDB at ${dynamodb.endpoint}, S3 at ${s3.endpoint}`);
    expect(text).toMatch(/verdict {2,}EXACTLY-ONCE/);
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as RunReport;
    expect(report).toMatchObject({ verdict: 'exactly-once', outcome: { lost: 0, duplicated: 0 } });

    // The run's table and objects are on the servers it was given, not on the global setup's.
    const common = { region: 'us-east-1', credentials: LOCAL_CREDENTIALS };
    const ddb = new DynamoDBClient({ ...common, endpoint: dynamodb.endpoint });
    const bucket = new S3Client({ ...common, endpoint: s3.endpoint, forcePathStyle: true });
    try {
      expect((await ddb.send(new ListTablesCommand({}))).TableNames).toContain('eos-local-ledger');
      const listed = await bucket.send(
        new ListObjectsV2Command({ Bucket: 'eos-local', Prefix: 'orders/_manifests/' }),
      );
      expect(listed.KeyCount).toBe(report.verify.manifests);
    } finally {
      ddb.destroy();
      bucket.destroy();
    }
    // The caller's environment is left as it was.
    expect(process.env.AWS_ENDPOINT_URL_DYNAMODB).not.toBe(dynamodb.endpoint);
  }, 300_000);
});

describe('which endpoints eos local uses', () => {
  const options = { partitions: 1, faults: { crash: 0 }, seed: 1, checkpointInterval: 1 } as never;
  it('--endpoint serves both services; a service flag wins over it; the variables come after the flags', () => {
    expect(partsPlan({ ...(options as object), endpoint: 'http://localhost:4566' } as never, {})).toEqual({
      kind: 'existing',
      dynamodb: 'http://localhost:4566',
      s3: 'http://localhost:4566',
    });
    expect(
      partsPlan({ ...(options as object), endpoint: 'http://a:1', s3Endpoint: 'http://b:2' } as never, {
        AWS_ENDPOINT_URL_S3: 'http://c:3',
      }),
    ).toEqual({ kind: 'existing', dynamodb: 'http://a:1', s3: 'http://b:2' });
    expect(partsPlan(options, { AWS_ENDPOINT_URL: 'http://localhost:4566' })).toEqual({
      kind: 'existing',
      dynamodb: 'http://localhost:4566',
      s3: 'http://localhost:4566',
    });
    expect(partsPlan(options, {})).toEqual({ kind: 'start' });
  });

  it('one service named alone is bad usage: both or neither', () => {
    expect(() => partsPlan({ ...(options as object), dynamodbEndpoint: 'http://a:1' } as never, {})).toThrow(
      /--s3-endpoint: is needed too \(or --endpoint for both\)/,
    );
  });
});

const NOT_A_FOLDER = join(mkdtempSync(join(tmpdir(), 'eos-export-')), 'a-file');
writeFileSync(NOT_A_FOLDER, '');

describe('eos local: --report and --export are checked before anything starts', () => {
  it.each([
    [
      ['--report', '/nonexistent/eos/report.json'],
      /^error: --report: the folder \/nonexistent\/eos does not exist/,
    ],
    [
      // The export makes missing folders, under the nearest one that exists: here a file.
      ['--export', join(NOT_A_FOLDER, 'runs', 'out')],
      new RegExp(`^error: --export: the folder ${NOT_A_FOLDER} does not exist or is not a folder`),
    ],
    [['--report', tmpdir()], /^error: --report: .* is a folder; name a file/],
  ])('%j', async (args, line) => {
    const startParts = vi.fn(async () => ({ env: {}, stop: async () => {} }));
    const stderr: string[] = [];
    const code = await main(
      ['node', 'eos', 'local', '--records', '5', ...args],
      { local: { startParts, progress: false, write: () => {} } },
      { writeError: (t) => stderr.push(t) },
    );
    expect({ code, started: startParts.mock.calls.length }).toEqual({ code: 2, started: 0 });
    expect(stderr.join('')).toMatch(line);
    expect(stderr.join('').trimEnd().split('\n')).toHaveLength(1);
  });

  // Root writes anywhere: run as root (CI), the command runs as nobody in a child process, the way a user would.
  // Nobody may not be able to reach the clone (a folder only its owner enters), so the child runs the `eos`
  // program bundled into a temporary folder anyone can read, not the checkout's files.
  it('refuses a read-only --export folder', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eos-ro-'));
    const asRoot = process.getuid?.() === 0;
    // Readable and traversable (nobody must see the folder), not writable.
    chmodSync(dir, asRoot ? 0o555 : 0o500);
    const args = ['local', '--records', '5', '--export', join(dir, 'out')];
    let code: number;
    let stderr: string;
    if (asRoot) {
      const program = await eosProgramAnyoneCanRun();
      const child = spawnSync(process.execPath, [program, ...args], {
        uid: NOBODY,
        gid: NOBODY,
        cwd: dirname(program),
        env: { PATH: process.env.PATH ?? '', HOME: dir },
        encoding: 'utf8',
        timeout: 60_000,
      });
      rmSync(dirname(dirname(program)), { recursive: true, force: true });
      code = child.status ?? -1;
      stderr = `${child.stderr}${child.error?.message ?? ''}`;
    } else {
      const lines: string[] = [];
      code = await main(
        ['node', 'eos', ...args],
        { local: { startParts: async () => ({ env: {}, stop: async () => {} }), progress: false } },
        { writeError: (t) => lines.push(t) },
      );
      stderr = lines.join('');
    }
    expect({ code, stderr }).toEqual({
      code: 2,
      stderr: expect.stringMatching(/--export: the folder .* is not writable/),
    });
  }, 180_000);
});

describe('eos local: a failed start', () => {
  it('without Java exits 3 with one line saying what to install, before any run', async () => {
    const emptyPath = mkdtempSync(join(tmpdir(), 'eos-no-java-'));
    const savedPath = process.env.PATH;
    process.env.PATH = emptyPath; // java is looked up on PATH; the S3 server runs from process.execPath
    const stderr: string[] = [];
    const out: string[] = [];
    try {
      const code = await main(
        ['node', 'eos', 'local', '--records', '5'],
        { local: { progress: false, write: (t) => out.push(t), env: plainEnv() } },
        { writeError: (t) => stderr.push(t) },
      );
      expect(code).toBe(3);
    } finally {
      process.env.PATH = savedPath;
    }
    expect(stderr.join('')).toMatch(
      /^error: java: DynamoDB Local needs a Java runtime \(17\+\) on PATH.*\n$/,
    );
    expect(out.join('')).toBe('');
  });
});

describe('eos local: SIGTERM stops the parts it started', () => {
  it('exits 143 and leaves no DynamoDB Local or S3 server behind', async () => {
    const child = spawn(process.execPath, ['bin/eos.mjs', 'local', '--records', '20000'], {
      env: plainEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const ports = await new Promise<[number, number]>((found, fail) => {
      child.stdout!.on('data', (chunk: Buffer) => {
        stdout += chunk.toString('utf8');
        const match =
          /started DynamoDB at http:\/\/127\.0\.0\.1:(\d+), S3 at http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout);
        if (match) found([Number(match[1]), Number(match[2])]);
      });
      child.once('exit', (code) => fail(new Error(`eos local exited (${code}) before starting: ${stderr}`)));
    });
    expect(await Promise.all(ports.map(portOpen))).toEqual([true, true]);
    expect(javaOnPort(ports[0])).toBe(true);
    const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
    child.kill('SIGTERM');
    expect(await exited).toBe(143);
    expect(stderr).toContain('SIGTERM: stopping the local parts');
    expect(await Promise.all(ports.map(portOpen))).toEqual([false, false]);
    expect(javaOnPort(ports[0])).toBe(false);
  }, 180_000);
});

describe('cli/eos.ts loads no implementation statically', () => {
  /** Every module reachable from `file` by static `import … from` (not `import type`, not `await import`). */
  function staticGraph(file: string, seen = new Set<string>()): Set<string> {
    if (seen.has(file)) return seen;
    seen.add(file);
    if (!file.startsWith('/')) return seen; // a package
    const source = readFileSync(file, 'utf8');
    for (const [, specifier] of source.matchAll(
      /^import\s+(?!type\s)(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]/gms,
    )) {
      const target = specifier!.startsWith('.') ? resolve(dirname(file), specifier!) : specifier!;
      staticGraph(target, seen);
    }
    return seen;
  }

  it('so that --help loads neither the emulator, the runner, the local parts, the AWS SDK nor a dev dependency', () => {
    const graph = [...staticGraph(resolve('cli/eos.ts'))];
    const local = graph.filter((m) => m.startsWith('/')).map((m) => m.slice(resolve('.').length + 1));
    expect(local).not.toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^local\/(runner|parts|msk-emulator|generator|provision|faults)\.ts$/),
      ]),
    );
    const packages = graph.filter((m) => !m.startsWith('/') && !m.startsWith('node:'));
    const { devDependencies } = JSON.parse(readFileSync('package.json', 'utf8')) as {
      devDependencies: Record<string, string>;
    };
    const dev = Object.keys(devDependencies);
    expect(
      packages.filter((p) => p.startsWith('@aws-sdk/') || dev.some((d) => p === d || p.startsWith(`${d}/`))),
    ).toEqual([]);
    expect(packages).toContain('commander');
    // zod alone costs about a second of start-up on a loaded machine: settings are parsed when a command runs.
    expect(packages).not.toContain('zod');
  });

  it('repeats the emulator batch size limit and the delivery guarantees exactly', () => {
    expect(MAX_BATCH_SIZE).toBe(EMULATOR_MAX_BATCH_SIZE);
    expect(GUARANTEES).toEqual(DELIVERY_GUARANTEES);
  });
});
