/**
 * The examples a user copies (examples/*), and the complete example of docs/transforms.md, run as their READMEs say: through `eos local` — the real command, on the
 * local parts (DynamoDB Local and the S3 server of the vitest global setup), the emulator, the processor and the
 * synthesized state machine, under every fault kind — and commit what their input implies. Expected rows and
 * aggregates are computed here from the committed input files by the rules each README states, independently of
 * the transforms' code; the committed output is read back from `--export` (the files and aggregates a user
 * would look at).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import avro from 'avro-js/lib/schemas.js';
import type { Command } from 'commander';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { buildProgram } from '../../cli/eos.ts';
import { makeClicks } from '../../examples/clickstream/make-input.ts';
import clickstream from '../../examples/clickstream/transform.ts';
import { makePayments } from '../../examples/payments-avro/make-input.ts';
import { type RunningRegistry, serveRegistry } from '../../examples/payments-avro/registry.ts';
import { eosLocalArgs } from '../../examples/payments-avro/run.ts';
// Types only: importing the module would read SCHEMA_REGISTRY_URL before the test's registry is up.
import type { PaymentEvent } from '../../examples/payments-avro/transform.ts';
import type { RunReport } from '../../local/runner.ts';
import { uniqueName } from '../support/aws.ts';

const example = (path: string): string => fileURLToPath(new URL(`../../examples/${path}`, import.meta.url));

interface InputLine {
  readonly partition: number;
  readonly key?: string | null;
  readonly value?: string | null;
  readonly valueBase64?: string | null;
  readonly headers?: Record<string, string>;
  readonly timestamp: number;
}

/** The input file's lines, each with the offset `eos local` gives it (its position within its partition). */
function readInput(file: string): (InputLine & { readonly offset: number })[] {
  const next = new Map<number, number>();
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const parsed = JSON.parse(line) as InputLine;
      const offset = next.get(parsed.partition) ?? 0;
      next.set(parsed.partition, offset + 1);
      return { ...parsed, offset };
    });
}

interface Lineage {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}
type Row = Record<string, unknown> & { readonly source: Lineage };

/** Runs `eos local` with `args` as a user types them; returns the report, the exported rows and aggregates. */
async function eosLocal(args: string[], pipelineId: string) {
  const dir = mkdtempSync(join(tmpdir(), 'eos-example-'));
  const out: string[] = [];
  const root = buildProgram({
    local: {
      startParts: async () => ({ env: {}, stop: async () => {} }),
      write: (text) => out.push(text),
      writeError: (text) => out.push(text),
      progress: false,
      // A table and bucket of this run's own on the shared local parts (other test files run meanwhile).
      env: {
        ...process.env,
        EOS_PIPELINE_ID: pipelineId,
        EOS_LEDGER_TABLE: uniqueName('example-ledger'),
        EOS_BUCKET: uniqueName('example-bucket'),
      },
    },
  });
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (text) => out.push(text), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  await root.parseAsync(['node', 'eos', 'local', ...args, '--export', dir, '--report', join(dir, 'r.json')]);
  const exitCode = process.exitCode;
  const report = JSON.parse(readFileSync(join(dir, 'r.json'), 'utf8')) as RunReport;
  const rowsOf = (stream: 'output' | 'deadletter'): Row[] => {
    const streamDir = join(dir, 'bucket', pipelineId, 'final', stream);
    let files: string[];
    try {
      files = readdirSync(streamDir, { recursive: true }).map(String);
    } catch {
      return [];
    }
    return files
      .filter((file) => file.endsWith('.ndjson.gz'))
      .flatMap((file) =>
        gunzipSync(readFileSync(join(streamDir, file)))
          .toString()
          .split('\n')
          .filter((line) => line !== '')
          .map((line) => JSON.parse(line) as Row),
      );
  };
  const aggregates = JSON.parse(readFileSync(join(dir, 'aggregates.json'), 'utf8')) as Record<
    string,
    string | number
  >[];
  return {
    exitCode,
    text: out.join(''),
    report,
    output: rowsOf('output'),
    deadLetters: rowsOf('deadletter'),
    aggregates,
  };
}

const byLineage = (a: { source: Lineage }, b: { source: Lineage }) =>
  a.source.partition - b.source.partition || a.source.offset - b.source.offset;
/** Faults that fired (poison counts the input's bad records, not a fault): a run that met none proves less. */
const faultsFired = (report: RunReport): number =>
  Object.entries(report.faults)
    .filter(([kind]) => kind !== 'poison')
    .reduce((sum, [, count]) => sum + count, 0);
const withoutSource = ({ source: _source, ...rest }: Row) => rest;

/** Every fault kind, crashes and lost offset commits more often than the default so a small run meets them. */
const FAULTS = 'all,crash=0.2,redeliver=0.2';

afterEach(() => {
  process.exitCode = 0;
});

describe('examples/clickstream', () => {
  const input = readInput(example('clickstream/clicks.jsonl'));
  const utcDay = (ms: number) => new Date(ms).toISOString().slice(0, 10);

  /** The README's rules: a view is a JSON object with the three strings, a path, epoch-ms `ts`, an optional referrer. */
  function click(line: InputLine): Record<string, unknown> | undefined {
    let value: unknown;
    try {
      value = line.value == null ? null : JSON.parse(line.value);
    } catch {
      return undefined;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
    const v = value as Record<string, unknown>;
    const text = (field: string) => typeof v[field] === 'string' && v[field] !== '';
    if (!text('eventId') || !text('userId') || !text('page')) return undefined;
    if (!(v.page as string).startsWith('/') || !Number.isSafeInteger(v.ts) || (v.ts as number) < 0)
      return undefined;
    if (v.referrer !== undefined && typeof v.referrer !== 'string') return undefined;
    return v;
  }

  /** One row per distinct eventId (the first sent; producer retries are the same bytes), in input order. */
  const firsts = new Map<string, { line: (typeof input)[number]; click: Record<string, unknown> }>();
  const malformed: (typeof input)[number][] = [];
  for (const line of input) {
    const valid = click(line);
    if (valid === undefined) malformed.push(line);
    else if (!firsts.has(valid.eventId as string))
      firsts.set(valid.eventId as string, { line, click: valid });
  }
  const views = new Map<string, number>();
  for (const { click } of firsts.values()) {
    const key = `${click.userId}#${utcDay(click.ts as number)}`;
    views.set(key, (views.get(key) ?? 0) + 1);
  }

  it('has what the README promises: producer retries, malformed views, views sent after their day', () => {
    expect(input.length).toBeGreaterThanOrEqual(300);
    expect(input.length - malformed.length - firsts.size).toBeGreaterThanOrEqual(10); // retries
    expect(malformed.length).toBeGreaterThanOrEqual(7);
    const late = [...firsts.values()].filter(
      ({ line, click }) => utcDay(line.timestamp) !== utcDay(click.ts as number),
    );
    expect(late.length).toBeGreaterThan(0);
  });

  it('is what make-input.ts writes (the committed file and its generator agree)', () => {
    const generated = makeClicks().map((line) => JSON.stringify(line));
    const committed = readFileSync(example('clickstream/clicks.jsonl'), 'utf8').trimEnd().split('\n');
    expect(committed).toEqual(generated);
  });

  it('counts each view once per user per UTC event day under faults of every kind, dead-lettering the malformed', async () => {
    const run = await eosLocal(
      [
        '--transform',
        example('clickstream/transform.ts'),
        '--input',
        example('clickstream/clicks.jsonl'),
        '--idempotency-key',
        'json:eventId',
        '--topic',
        'clicks',
        '--partitions',
        '2',
        '--batch-size',
        '20',
        '--checkpoint-interval',
        '300',
        '--faults',
        FAULTS,
        '--seed',
        '5',
      ],
      'clickstream',
    );
    expect(run.text).toMatch(/verdict {2,}EXACTLY-ONCE/);
    expect(run.exitCode).toBe(0);
    expect(faultsFired(run.report)).toBeGreaterThan(0);
    expect(run.report).toMatchObject({
      verdict: 'exactly-once',
      records: { in: input.length, committed: firsts.size, deadLettered: malformed.length },
      outcome: { lost: 0, duplicated: 0, unexpected: 0 },
    });

    // Every distinct view is one row with the declared columns, at the lineage of its first sending.
    const expectedRows = [...firsts.values()].map(({ line, click }) => ({
      eventId: click.eventId,
      userId: click.userId,
      page: click.page,
      ts: click.ts,
      day: utcDay(click.ts as number),
      referrer: click.referrer ?? null,
      source: { topic: 'clicks', partition: line.partition, offset: line.offset },
    }));
    expect(run.output.sort(byLineage)).toEqual(expectedRows.sort(byLineage));
    const declared = clickstream.columns.map((column) => column.name).sort();
    for (const row of run.output) expect(Object.keys(withoutSource(row)).sort()).toEqual(declared);

    // Every malformed line is one dead letter, at its lineage, with its reason.
    const lineages = (sources: Lineage[]) => sources.sort((a, b) => byLineage({ source: a }, { source: b }));
    expect(lineages(run.deadLetters.map((row) => row.source))).toEqual(
      lineages(
        malformed.map((line) => ({ topic: 'clicks', partition: line.partition, offset: line.offset })),
      ),
    );
    const reasons = run.deadLetters.map((row) => String(row.error));
    expect(reasons).toContain('tombstone: a page view cannot be deleted');
    expect(reasons).toContain('field "userId" is missing or not a non-empty string');
    expect(reasons).toContain('field "ts" is not epoch milliseconds');
    expect(reasons.some((reason) => /^undecodable value: value is not valid JSON/.test(reason))).toBe(true);

    // The aggregates: views per user per UTC day of the event time, as computed from the input.
    const exported = new Map(run.aggregates.map((a) => [`${a.userId}#${a.day}`, a]));
    expect(new Map([...exported].map(([key, a]) => [key, a.views]))).toEqual(views);
    for (const [key, a] of exported) expect(key).toBe(`${a.userId}#${a.day}`);
    // One user's day, spelled out: the views whose event time falls on that UTC day, each eventId once.
    const [someone, day] = [...views.keys()].sort()[0]!.split('#') as [string, string];
    const theirs = new Set(
      input
        .map(click)
        .filter((c) => c?.userId === someone && utcDay(c.ts as number) === day)
        .map((c) => c!.eventId),
    );
    expect(exported.get(`${someone}#${day}`)).toEqual({ userId: someone, day, views: theirs.size });
  }, 300_000);
});

describe('examples/payments-avro', () => {
  const input = readInput(example('payments-avro/payments.jsonl'));
  /** The registry's contents as the README states them: id 1 is payment-v1.avsc, id 2 payment-v2.avsc. */
  const writers = new Map([
    [1, avro.createType(JSON.parse(readFileSync(example('payments-avro/payment-v1.avsc'), 'utf8')))],
    [2, avro.createType(JSON.parse(readFileSync(example('payments-avro/payment-v2.avsc'), 'utf8')))],
  ]);
  const EXPONENT: Record<string, number> = { EUR: 2, USD: 2, GBP: 2, JPY: 0 };

  /** Confluent framing read from the wire format (0x00, 4-byte big-endian id), the Avro by the writer's schema. */
  function decoded(line: InputLine): { schemaId: number; event: PaymentEvent } | undefined {
    if (line.valueBase64 == null) return undefined;
    const bytes = Buffer.from(line.valueBase64, 'base64');
    if (bytes.length < 5 || bytes[0] !== 0) return undefined;
    const schemaId = bytes.readUInt32BE(1);
    const writer = writers.get(schemaId);
    if (writer === undefined) return undefined;
    try {
      return { schemaId, event: writer.fromBuffer(bytes.subarray(5)) as PaymentEvent };
    } catch {
      return undefined;
    }
  }

  /** The README's amount rule: a decimal with at most the currency's minor digits, not zero; in minor units. */
  function minor(amount: string, currency: string): number | undefined {
    const match = /^(\d+)(?:\.(\d+))?$/.exec(amount);
    const exponent = EXPONENT[currency]!;
    if (!match || (match[2] ?? '').length > exponent) return undefined;
    const value = Number(`${match[1]}${(match[2] ?? '').padEnd(exponent, '0')}`);
    return value === 0 ? undefined : value;
  }

  const firsts = new Map<
    string,
    { line: (typeof input)[number]; event: PaymentEvent; schemaId: number; minor: number }
  >();
  const rejected: (typeof input)[number][] = [];
  for (const line of input) {
    const record = decoded(line);
    const amount = record && minor(record.event.amount, record.event.currency);
    if (record === undefined || amount === undefined) rejected.push(line);
    else if (!firsts.has(record.event.eventId))
      firsts.set(record.event.eventId, { line, ...record, minor: amount });
  }
  const totals = new Map<string, Record<string, string | number>>();
  for (const { event, minor } of firsts.values()) {
    const key = `${event.merchantId}#${event.currency}`;
    const t = totals.get(key) ?? { merchantId: event.merchantId, currency: event.currency, netMinor: 0 };
    const [count, sum, sign] =
      event.kind === 'CAPTURE' ? ['captures', 'capturedMinor', 1] : ['refunds', 'refundedMinor', -1];
    t[count] = Number(t[count] ?? 0) + 1;
    t[sum] = Number(t[sum] ?? 0) + minor;
    t.netMinor = Number(t.netMinor) + sign * minor;
    totals.set(key, t);
  }

  let registry: RunningRegistry;
  beforeAll(async () => {
    registry = await serveRegistry();
    process.env.SCHEMA_REGISTRY_URL = registry.url;
  });
  afterAll(async () => {
    delete process.env.SCHEMA_REGISTRY_URL;
    await registry.close();
  });

  it('has what the README promises: both schema versions, retries, rejected and undecodable records', () => {
    const versions = new Set([...firsts.values()].map((f) => f.schemaId));
    expect(versions).toEqual(new Set([1, 2]));
    expect([...firsts.values()].some((f) => f.event.kind === 'REFUND')).toBe(true);
    expect(input.length - rejected.length - firsts.size).toBeGreaterThanOrEqual(5); // retries
    expect(rejected.length).toBe(8);
  });

  it('is what make-input.ts writes (the committed file and its generator agree)', () => {
    const generated = makePayments().map((line) => JSON.stringify(line));
    const committed = readFileSync(example('payments-avro/payments.jsonl'), 'utf8').trimEnd().split('\n');
    expect(committed).toEqual(generated);
  });

  it('decodes with the registry, totals each event once per merchant and currency under faults of every kind', async () => {
    const run = await eosLocal(
      [...eosLocalArgs(), '--checkpoint-interval', '300', '--faults', FAULTS, '--seed', '5'],
      'payments',
    );
    expect(run.text).toMatch(/verdict {2,}EXACTLY-ONCE/);
    expect(run.exitCode).toBe(0);
    expect(faultsFired(run.report)).toBeGreaterThan(0);
    expect(run.report).toMatchObject({
      verdict: 'exactly-once',
      records: { in: input.length, committed: firsts.size, deadLettered: rejected.length },
      outcome: { lost: 0, duplicated: 0, unexpected: 0 },
    });
    // Every schema id met was asked of the registry over HTTP (again only when a crash discarded the cache).
    expect(new Set(registry.requests)).toEqual(
      new Set(['/schemas/ids/1', '/schemas/ids/2', '/schemas/ids/99']),
    );

    const expectedRows = [...firsts.values()].map(({ line, event, minor }) => ({
      eventId: event.eventId,
      paymentId: event.paymentId,
      merchantId: event.merchantId,
      kind: event.kind,
      currency: event.currency,
      amountMinor: minor,
      method: event.method?.string ?? null,
      createdAt: event.createdAt,
      producedAt: line.timestamp,
      source: { topic: 'payments', partition: line.partition, offset: line.offset },
    }));
    expect(run.output.sort(byLineage)).toEqual(expectedRows.sort(byLineage));
    expect(run.output.some((row) => row.method !== null)).toBe(true);
    // The Avro longs (timestamp-millis) came through as their exact values: binary input reaches the processor.
    expect(
      run.output.every((row) => Number.isSafeInteger(row.createdAt) && row.createdAt !== row.producedAt),
    ).toBe(true);

    const lineages = (sources: Lineage[]) => sources.sort((a, b) => byLineage({ source: a }, { source: b }));
    expect(lineages(run.deadLetters.map((row) => row.source))).toEqual(
      lineages(
        rejected.map((line) => ({ topic: 'payments', partition: line.partition, offset: line.offset })),
      ),
    );
    const reasons = run.deadLetters.map((row) => String(row.error)).sort();
    // Sorted as the reasons are: the transform's rejections, then the decoder's.
    expect(reasons).toEqual([
      'amount "12.345" has more decimals than EUR allows (2)',
      'amount "150.5" has more decimals than JPY allows (0)',
      'amount "twelve" is not a decimal number',
      'amount is zero',
      'tombstone: a payment event cannot be deleted',
      expect.stringMatching(/^undecodable value: bad magic byte 0x7b/),
      expect.stringMatching(/^undecodable value: truncated/),
      expect.stringMatching(/^undecodable value: unknown schema id 99/),
    ]);

    // Per merchant and currency: captures, refunds and the net, as summed here from the decoded input.
    const exported = new Map(run.aggregates.map((a) => [`${a.merchantId}#${a.currency}`, a]));
    expect(exported).toEqual(totals);
  }, 300_000);
});

describe("docs/transforms.md's complete example, as written", () => {
  const page = readFileSync(fileURLToPath(new URL('../../docs/transforms.md', import.meta.url)), 'utf8');
  /** The first fenced block after `marker` on the page (its body). */
  const blockAfter = (marker: string): string => {
    const at = page.indexOf(marker);
    const body = at < 0 ? null : /```[a-z]*\n([\s\S]*?)```/.exec(page.slice(at))?.[1];
    if (body == null) throw new Error(`docs/transforms.md: no code block after ${JSON.stringify(marker)}`);
    return body;
  };
  // Inside the package, where `msk-exactly-once-pipeline/transform` resolves as in a project that installed it.
  const dir = fileURLToPath(new URL(`../../examples/.docs-example-${process.pid}/`, import.meta.url));
  const files: Record<string, string> = {
    './my-transform.ts': join(dir, 'my-transform.ts'),
    'my-records.jsonl': join(dir, 'my-records.jsonl'),
  };
  beforeAll(() => {
    mkdirSync(dir, { recursive: true });
    writeFileSync(files['./my-transform.ts']!, blockAfter('`my-transform.ts`:'));
    writeFileSync(files['my-records.jsonl']!, blockAfter('`my-records.jsonl`'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs with the command the page gives and prints the report lines and aggregates the page shows', async () => {
    const command = blockAfter('Run the whole pipeline on them').trim();
    expect(command).toMatch(/^npx eos local /);
    // The page's arguments, its two file names pointing at the files written from its blocks.
    const args = command
      .replace(/^npx eos local /, '')
      .split(/\s+/)
      .map((arg) => files[arg] ?? arg);
    const run = await eosLocal(args, 'orders');
    for (const line of blockAfter('What you get').trimEnd().split('\n')) expect(run.text).toContain(line);
    expect(run.exitCode).toBe(0);
    expect(run.aggregates).toEqual(JSON.parse(blockAfter('aggregates.json`')));
    expect(run.deadLetters.map((row) => String(row.error)).sort()).toEqual([
      'celsius 999 is out of range',
      expect.stringMatching(/^undecodable value: value is not valid JSON: /),
    ]);
    expect(run.output.map(withoutSource)).toEqual(
      expect.arrayContaining([
        { sensorId: 's-1', celsius: 21.5, at: 1796029200000, hour: '2026-11-30T09', site: 'lab' },
        { sensorId: 's-2', celsius: -4, at: 1796029260000, hour: '2026-11-30T09', site: null },
      ]),
    );
  }, 300_000);
});
