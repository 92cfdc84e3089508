/**
 * `eos local`'s settings, flags and input reach the run: each `EOS_*` variable and each flag is asserted on the
 * run's report and on what it committed (read back from the S3 server), with the real local parts (DynamoDB
 * Local and the S3 server the global setup started; the MSK broker is the emulator, as in every local run). A
 * bad value stops the command with exit code 2 naming the flag or variable, before any part starts.
 *
 * Every run gets its own table, bucket and pipeline id through EOS_LEDGER_TABLE, EOS_BUCKET and EOS_PIPELINE_ID,
 * which is itself the proof that those variables are honoured.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Command, CommanderError } from 'commander';
import { describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../cli/eos.ts';
import { parseInputText } from '../../local/input.ts';
import type { RunReport } from '../../local/runner.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { type FinalRow, readFinalRows } from '../../shared/sink/verify.ts';

const WORDS = 'test/fixtures/local/words.ts';
const CLICKS = 'test/fixtures/transforms/clicks.ts';

function tempFile(name: string, text: string): string {
  const file = join(mkdtempSync(join(tmpdir(), 'eos-opt-')), name);
  writeFileSync(file, text);
  return file;
}

interface LocalRun {
  readonly code: number | undefined;
  readonly text: string;
  readonly errors: string;
  readonly started: boolean;
  readonly thrown: unknown;
  readonly report: RunReport | undefined;
  readonly rows: readonly FinalRow[];
  readonly env: Readonly<Record<string, string>>;
}

let runs = 0;

/** `eos local …` with `env` as its EOS_* variables, on the shared local parts, isolated by its own names. */
async function local(args: readonly string[], env: Record<string, string> = {}): Promise<LocalRun> {
  const id = `opt-${process.pid}-${++runs}`;
  const fullEnv = { EOS_LEDGER_TABLE: `eos-${id}`, EOS_BUCKET: `eos-${id}`, EOS_PIPELINE_ID: id, ...env };
  const reportFile = join(mkdtempSync(join(tmpdir(), 'eos-opt-')), 'report.json');
  const out: string[] = [];
  const errors: string[] = [];
  const startParts = vi.fn(async () => ({ env: {}, stop: async () => {} }));
  const root = buildProgram({
    local: {
      startParts,
      write: (t) => out.push(t),
      writeError: (t) => errors.push(t),
      progress: false,
      env: fullEnv,
    },
  });
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (t) => errors.push(t), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  process.exitCode = undefined;
  let thrown: unknown;
  try {
    await root.parseAsync(['node', 'eos', 'local', ...args, '--report', reportFile]);
  } catch (error) {
    thrown = error;
  }
  const code = typeof process.exitCode === 'number' ? process.exitCode : undefined;
  process.exitCode = 0;
  const report = existsSync(reportFile)
    ? (JSON.parse(readFileSync(reportFile, 'utf8')) as RunReport)
    : undefined;
  const rows = report
    ? await readFinalRows({
        s3: createAwsClients().s3,
        bucket: fullEnv.EOS_BUCKET,
        pipeline: report.pipeline,
      })
    : [];
  return {
    code,
    text: out.join(''),
    errors: errors.join(''),
    started: startParts.mock.calls.length > 0,
    thrown,
    report,
    rows,
    env: fullEnv,
  };
}

const output = (run: LocalRun) => run.rows.filter((r) => r.stream === 'output').map((r) => r.row);
const quick = ['--faults', 'none', '--partitions', '2', '--checkpoint-interval', '300'];
/** For input without idempotency keys, where a test is not about keys (by default such records are dead-lettered). */
const noKeys = ['--idempotency-key', 'none'];

describe('eos local: EOS_* variables and flags reach the run', () => {
  it('honours EOS_PIPELINE_ID, EOS_LEDGER_TABLE, EOS_BUCKET, EOS_GZIP and EOS_DELIVERY_GUARANTEE', async () => {
    const run = await local(['--records', '150', ...quick], {
      EOS_GZIP: 'false',
      EOS_DELIVERY_GUARANTEE: 'at-least-once',
    });
    expect(run.errors).toBe('');
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ pipeline: run.env.EOS_PIPELINE_ID, guarantee: 'at-least-once' });
    // Committed in the variable's bucket under the variable's pipeline, uncompressed as EOS_GZIP=false says.
    expect(run.rows.length).toBe(run.report!.records.committed + run.report!.records.deadLettered);
    expect(run.rows.length).toBeGreaterThan(0);
    expect(run.rows.every((r) => r.key.endsWith('.ndjson'))).toBe(true);
  }, 180_000);

  it('--guarantee wins over EOS_DELIVERY_GUARANTEE; --topic names the emulated topic; --batch-size sizes the events', async () => {
    const run = await local(
      [
        '--records',
        '200',
        ...quick,
        '--guarantee',
        'exactly-once',
        '--topic',
        'shop.orders-v2',
        '--batch-size',
        '10',
      ],
      { EOS_DELIVERY_GUARANTEE: 'none' },
    );
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ guarantee: 'exactly-once', verdict: 'exactly-once' });
    const topics = new Set(run.rows.map((r) => (r.row.source as { topic: string }).topic));
    expect([...topics]).toEqual(['shop.orders-v2']);
    // 200 records over 2 partitions, at most 10 per event: at least 20 invocations (the default 20 needs about 10).
    expect(run.report!.invocations.total).toBeGreaterThanOrEqual(20);
  }, 180_000);

  it('EOS_TOPICS names the emulated topic when --topic is absent', async () => {
    const run = await local(['--records', '100', ...quick], { EOS_TOPICS: 'clicks,views' });
    expect(run.code).toBe(0);
    const topics = new Set(run.rows.map((r) => (r.row.source as { topic: string }).topic));
    expect([...topics]).toEqual(['clicks']);
  }, 180_000);

  it('EOS_IDEMPOTENCY_KEY=none keeps producer resends; --idempotency-key wins over it', async () => {
    // The generator resends about 5% of orders with the same idempotency-key header.
    const none = await local(['--records', '300', ...quick], { EOS_IDEMPOTENCY_KEY: 'none' });
    expect(none.code).toBe(0);
    expect(none.report!.records.duplicatesDroppedByKey).toBe(0);
    expect(none.report!.records.expected).toBe(300);
    const keyed = await local(['--records', '300', ...quick, '--idempotency-key', 'json:orderId'], {
      EOS_IDEMPOTENCY_KEY: 'none',
    });
    expect(keyed.code).toBe(0);
    expect(keyed.report!.records.expected).toBeLessThan(300);
    expect(keyed.report!.records.duplicatesDroppedByKey).toBe(300 - keyed.report!.records.expected);
    expect(keyed.report!.verdict).toBe('exactly-once');
  }, 300_000);
});

describe('eos local --transform with the user’s own module and input', () => {
  it('--time-field files each row in the time folder of that column, not of its Kafka timestamp', async () => {
    // Both within the week a record may lag its staging (older rows are filed by when they were staged).
    const hour = (ms: number) => new Date(ms).toISOString().slice(0, 13).replace('T', '/hour=');
    const at = Date.now() - 3 * 86_400_000;
    const kafka = Date.now() - 86_400_000;
    const view = (viewId: string) =>
      JSON.stringify({
        partition: 0,
        key: 'u',
        value: JSON.stringify({ viewId, userId: 'u', page: '/', at }),
        timestamp: kafka,
      });
    const input = tempFile('views.jsonl', [view('v1'), view('v2')].join('\n'));
    const args = ['--input', input, '--transform', CLICKS, ...quick, '--idempotency-key', 'transform'];
    const run = await local([...args, '--partition-by', 'hour', '--time-field', 'at']);
    expect(run.errors).toBe('');
    expect(run.code).toBe(0);
    const keys = new Set(run.rows.filter((r) => r.stream === 'output').map((r) => r.key));
    expect([...keys]).toEqual([expect.stringContaining(`/dt=${hour(at)}/`)]);
    expect(keys.size).toBeGreaterThan(0);
    // Without it, the Kafka timestamp files them.
    const byKafka = await local([...args, '--partition-by', 'hour']);
    const kafkaKeys = [...new Set(byKafka.rows.filter((r) => r.stream === 'output').map((r) => r.key))];
    expect(kafkaKeys).toEqual([expect.stringContaining(`/dt=${hour(kafka)}/`)]);
  }, 180_000);

  it('runs a user transform file named by path#export over an input file with text and binary lines', async () => {
    const input = tempFile(
      'words.jsonl',
      [
        '{"partition":0,"key":"a","value":"{\\"word\\":\\"kafka\\",\\"n\\":2}"}',
        // The same kind of record given as its exact bytes, with its producer timestamp.
        `{"partition":1,"keyBase64":"${Buffer.from('b').toString('base64')}","valueBase64":"${Buffer.from('{"word":"lambda","n":3}').toString('base64')}","timestamp":1700000000000}`,
        '{"partition":1,"key":null,"value":"{\\"word\\":\\"kafka\\",\\"n\\":5}"}',
        '{"partition":0,"key":"c","value":"not json"}',
      ].join('\n'),
    );
    // These records carry no idempotency key: deduplicated by offset, as the test is about the transform.
    const run = await local(['--input', input, '--transform', `${WORDS}#words`, ...quick, ...noKeys]);
    expect(run.errors).toBe('');
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({
      verdict: 'exactly-once',
      records: { in: 4, committed: 3, deadLettered: 1 },
    });
    expect(
      output(run)
        .map((r) => `${r.word}:${r.n}`)
        .sort(),
    ).toEqual(['KAFKA:2', 'KAFKA:5', 'LAMBDA:3']);
    const dead = run.rows.filter((r) => r.stream === 'deadletter').map((r) => r.row);
    expect(dead).toEqual([expect.objectContaining({ error: expect.stringMatching(/./) })]);
  }, 180_000);

  it("does not count the transform's own rejections of a file's records as injected poison", async () => {
    const input = tempFile(
      'words.jsonl',
      [
        '{"partition":0,"key":"a","value":"{\\"word\\":\\"kafka\\",\\"n\\":2}"}',
        '{"partition":0,"key":"c","value":"not json"}',
      ].join('\n'),
    );
    const run = await local([
      '--input',
      input,
      '--transform',
      `${WORDS}#words`,
      ...noKeys,
      '--partitions',
      '2',
    ]);
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ records: { deadLettered: 1 } });
    expect(run.report!.faults.poison).toBe(0);
    expect(run.text).not.toMatch(/poison [1-9]/);
  }, 180_000);

  it('finds the only transform a module exports when the path has no #export (./path, as a user writes it)', async () => {
    const input = tempFile(
      'two.jsonl',
      '{"partition":0,"key":null,"value":"{\\"word\\":\\"s3\\",\\"n\\":1}"}\n',
    );
    const run = await local(['--input', input, '--transform', `./${WORDS}`, ...quick, ...noKeys]);
    expect(run.code).toBe(0);
    expect(output(run).map((r) => r.word)).toEqual(['S3']);
  }, 180_000);

  it('passes a binary line’s bytes and timestamp through to the output (passthrough)', async () => {
    const bytes = Buffer.from('héllo ✓', 'utf8');
    const input = tempFile(
      'bin.jsonl',
      [
        `{"partition":0,"keyBase64":null,"valueBase64":"${bytes.toString('base64')}","timestamp":1234567890123,"headers":{"h":[1,2,255]}}`,
        // Not UTF-8 (an Avro or Protobuf encoding usually is not): the exact bytes reach the processor.
        '{"partition":0,"keyBase64":"/w==","valueBase64":"AP8=","timestamp":1234567890124}',
      ].join('\n'),
    );
    const run = await local(['--input', input, '--transform', 'passthrough', ...quick, ...noKeys]);
    expect(run.code).toBe(0);
    expect(output(run)).toEqual([
      expect.objectContaining({
        key: null,
        value: 'héllo ✓',
        valueEncoding: 'utf8',
        timestamp: 1234567890123,
      }),
      expect.objectContaining({
        key: '/w==',
        keyEncoding: 'base64',
        value: 'AP8=',
        valueEncoding: 'base64',
        timestamp: 1234567890124,
      }),
    ]);
  }, 180_000);

  it('says in the verdict when most records were dead-lettered, and --fail-on-dead-letter exits 1', async () => {
    // Click events fed to the orders transform: exactly-once, and all of it dead-lettered.
    const clicks = tempFile(
      'clicks.jsonl',
      Array.from(
        { length: 8 },
        (_, i) => `{"partition":0,"key":"u${i}","value":"{\\"page\\":\\"/p${i}\\"}"}`,
      ).join('\n'),
    );
    const run = await local(['--input', clicks, ...quick]);
    expect(run.code).toBe(0);
    expect(run.text).toMatch(
      /verdict {2,}EXACTLY-ONCE — but 100% of records were dead-lettered: is --transform right for this input\?/,
    );
    const strict = await local(['--input', clicks, ...quick, '--fail-on-dead-letter']);
    expect(strict.report).toMatchObject({ verdict: 'exactly-once', records: { deadLettered: 8 } });
    expect(strict.code).toBe(1);
  }, 180_000);

  it('keeps the plain verdict when dead letters are a minority, and --fail-on-dead-letter passes with none', async () => {
    const run = await local(['--records', '100', ...quick, '--fail-on-dead-letter']);
    expect(run.report!.records.deadLettered).toBe(0);
    expect(run.code).toBe(0);
    expect(run.text).toMatch(/verdict {2,}EXACTLY-ONCE\n/);
  }, 180_000);
});

describe('eos local: a bad setting or flag exits 2 naming it, before anything starts', () => {
  const input = () => tempFile('ok.jsonl', '{"partition":0,"key":null,"value":"a"}\n');
  it.each([
    [[], { EOS_GZIP: 'maybe' }, /^error: invalid setting EOS_GZIP: /],
    [[], { EOS_COLOUR: 'red' }, /^error: invalid setting EOS_COLOUR: unknown setting/],
    [
      [],
      { EOS_IDEMPOTENCY_KEY: 'bogus' },
      /^error: invalid setting EOS_IDEMPOTENCY_KEY: expected "header:<name>"/,
    ],
    [
      ['--idempotency-key', 'bogus'],
      {},
      /^error: invalid setting --idempotency-key: expected "header:<name>"/,
    ],
    [[], { EOS_MAX_TRANSACTION_ITEMS: '500' }, /^error: invalid setting EOS_MAX_TRANSACTION_ITEMS: /],
    [[], { EOS_TOPICS: 'a b' }, /^error: invalid setting EOS_TOPICS: "a b" is not a Kafka topic name/],
    [['--topic', 'c'], { EOS_TOPICS: 'a,b' }, /^error: --topic: "c" is not among EOS_TOPICS \(a, b\)/],
    [
      ['--transform', 'nosuch'],
      {},
      /^error: --transform: unknown transform "nosuch": not a built-in \(known: orders, passthrough/,
    ],
    [[], { EOS_TRANSFORM: 'nosuch' }, /^error: EOS_TRANSFORM: unknown transform "nosuch"/],
    [
      ['--scenario', 'replay'],
      { EOS_IDEMPOTENCY_SCOPE: 'partition' },
      /^error: --scenario: replay is judged with the global idempotency scope/,
    ],
    [
      ['--transform', './missing/transform.ts'],
      {},
      /^error: --transform: transform module not found: .*missing\/transform\.ts/,
    ],
    [
      ['--transform', `${WORDS}#nope`],
      {},
      /^error: --transform: transform module .*words\.ts has no export "nope" \(exports: (helper, words|words, helper)\)/,
    ],
    [
      ['--transform', `${WORDS}#helper`],
      {},
      /^error: --transform: export "helper" of .*words\.ts is not a transform/,
    ],
    [['--transform', 'passthrough'], {}, /^error: --input: is needed with --transform passthrough/],
    [
      [],
      { EOS_TRANSFORM: `${WORDS}#words` },
      /^error: --input: is needed with EOS_TRANSFORM .*words\.ts#words/,
    ],
  ] as const)('rejects %j with %j', async (args, env, message) => {
    const run = await local([...args, ...quick], env);
    expect(run.errors).toMatch(message);
    expect(run.code).toBe(2);
    expect(run.started).toBe(false);
  });

  it('checks EOS_EVENT_SOURCE_ARN but does not apply it: a real cluster’s ARN would refuse the emulated events', async () => {
    const bad = await local(['--input', input(), ...quick], { EOS_EVENT_SOURCE_ARN: 'cluster-1' });
    expect(bad.errors).toMatch(/^error: invalid setting EOS_EVENT_SOURCE_ARN: /);
    expect(bad.code).toBe(2);
    expect(bad.started).toBe(false);
    const real = await local(['--input', input(), ...quick], {
      EOS_EVENT_SOURCE_ARN:
        'arn:aws:kafka:eu-west-1:123456789012:cluster/prod/6b1c7b0e-0000-0000-0000-000000000000-1',
    });
    expect(real.code).toBe(0);
    expect(real.report).toMatchObject({ verdict: 'exactly-once', records: { in: 1, deadLettered: 1 } });
  }, 180_000);

  it.each([
    [['--batch-size', '0'], /option '--batch-size <n>' argument '0' is invalid/],
    [
      ['--batch-size', '10001'],
      /option '--batch-size <n>' argument '10001' is invalid\. expected an integer in 1\.\.10000/,
    ],
    [
      ['--topic', 'a b'],
      /option '--topic <name>' argument 'a b' is invalid\. "a b" is not a Kafka topic name/,
    ],
    [['--topic', '..'], /option '--topic <name>' argument '\.\.' is invalid/],
  ] as const)('rejects the flag %j', async (args, message) => {
    const run = await local(args);
    expect(run.thrown).toBeInstanceOf(CommanderError);
    expect(run.errors).toMatch(message);
    expect(run.started).toBe(false);
  });

  it('exits 2 from the command line for a flag commander rejects and for a bad variable', () => {
    const flag = spawnSync(process.execPath, ['bin/eos.mjs', 'local', '--batch-size', 'x'], {
      encoding: 'utf8',
    });
    expect(flag.stderr).toMatch(/option '--batch-size <n>' argument 'x' is invalid/);
    expect(flag.status).toBe(2);
    const variable = spawnSync(process.execPath, ['bin/eos.mjs', 'local'], {
      encoding: 'utf8',
      env: { ...process.env, EOS_CLAIM_WRITE: 'later' },
    });
    expect(variable.stderr).toMatch(/^error: invalid setting EOS_CLAIM_WRITE: /);
    expect(variable.status).toBe(2);
  }, 120_000);
});

describe('the input file: binary keys and values, timestamps', () => {
  const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

  it('reads keyBase64/valueBase64 as the exact bytes and keeps the timestamp; the text form stays valid', () => {
    const records = parseInputText(
      'in.jsonl',
      [
        `{"partition":0,"keyBase64":"${b64('k1')}","valueBase64":"${b64('{"a":1}')}","timestamp":42}`,
        `{"partition":0,"key":"k2","valueBase64":null}`,
        `{"partition":0,"key":null,"value":"v3","headers":{"h":"x"}}`,
      ].join('\n'),
      1,
    );
    expect(records).toEqual([
      {
        partition: 0,
        key: new Uint8Array(Buffer.from('k1')),
        value: new Uint8Array(Buffer.from('{"a":1}')),
        headers: {},
        timestamp: 42,
      },
      { partition: 0, key: 'k2', value: null, headers: {} },
      { partition: 0, key: null, value: 'v3', headers: { h: 'x' } },
    ]);
  });

  it.each([
    [
      `{"partition":0,"key":"a","keyBase64":"${b64('a')}","value":"v"}`,
      /in\.jsonl:1: "key" and "keyBase64" are exclusive/,
    ],
    [
      `{"partition":0,"key":"a","value":"v","valueBase64":"${b64('v')}"}`,
      /in\.jsonl:1: "value" and "valueBase64" are exclusive/,
    ],
    ['{"partition":0,"value":"v"}', /in\.jsonl:1: needs "key" or "keyBase64"/],
    ['{"partition":0,"key":null}', /in\.jsonl:1: needs "value" or "valueBase64"/],
    ['{"partition":0,"key":null,"valueBase64":"a=b"}', /in\.jsonl:1: "valueBase64": not standard base64/],
    ['{"partition":0,"key":null,"value":"v","timestamp":-1}', /in\.jsonl:1: "timestamp": /],
    ['{"partition":0,"key":null,"value":"v","timestamp":1.5}', /in\.jsonl:1: "timestamp": /],
  ])('rejects %s naming the file and line', (line, message) => {
    expect(() => parseInputText('in.jsonl', `${line}\n`, 1)).toThrow(message);
  });
});
