/**
 * Adversarial interleavings of claims written ahead once per batch, before its first chunk is planned and staged
 * (P1, P2, P4, P5): crashes at every step followed by the mapping's retry, a zombie and a retry of the same batch
 * raced at every pair of pause points, redelivery after partial progress, claims expiring (TTL) between the claims
 * and the transaction, a key handed over from a record refused its state, a fence moved between the claims and the
 * first transaction, a new epoch opened meanwhile, and a staged write failing after the claims (deterministically
 * or transiently). The end-to-end property is checked on the ledger and the staged objects it references: every
 * record's effects (output row, keyed state) applied exactly once, each key held by exactly one output record, and
 * nothing staged that no committed transaction references in a run without races. Real DynamoDB Local and S3
 * server, the real processor; attempts raced with step hooks and gates, faults injected by client middleware.
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { MskEvent } from '../../shared/kafka/event.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { EpochChangedError, RELEASED } from '../../shared/ledger/staging-ledger.ts';
import {
  createProcessor,
  type ProcessorDeps,
  type ProcessorHooks,
  type ProcessorStep,
} from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { clientsWith, readClaim } from '../support/claims.ts';
import { crashAt, gate } from '../support/hooks.ts';
import { ledgerView, stagedEntries, stagedRows } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claims-first');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'claims-first', overrides);
}

/**
 * Values `<id>`: one output row `{ id }` and one add to the state key `s-<id>` (a key of its own per payload, so a
 * chunk of 8 items holds at most 6 records, and `n` counts how often the payload's effects were applied). Values
 * `grow:<state key>` and `add:<state key>` (the handover tests): `grow` adds 99 text fields of 1 KB (four fill an
 * item, a fifth is refused for its size), `add` one more to `n`.
 */
const tagged: Transform = {
  name: 'tagged',
  apply(record) {
    const value = Buffer.from(record.rawValue ?? '', 'base64').toString();
    const [kind = '', key = ''] = value.split(':');
    if (kind === 'grow' || kind === 'add') {
      const fields: Record<string, string> = {};
      if (kind === 'grow') for (let i = 0; i < 99; i++) fields[`r${record.offset}f${i}`] = 'v'.repeat(1000);
      return { kind: 'ok', rows: [{ id: value }], state: [{ key, fields, add: { n: 1 } }] };
    }
    return { kind: 'ok', rows: [{ id: value }], state: [{ key: `s-${value}`, fields: {}, add: { n: 1 } }] };
  },
};

/** A record without a Kafka key whose idempotency key (header) is `key`: equal values carry equal digests. */
const spec = (partition: number, offset: number, value: string, key: string): RecordSpec => ({
  partition,
  offset,
  key: null,
  value,
  headers: { 'idempotency-key': key },
});

function container(settings: Settings, clock: ManualClock, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, clock, transform: tagged, ...extra });
}

const claimOf = (settings: Settings, key: string) => readClaim(res, settings.pipelineId, key);

const byLineage = (a: string, b: string) => {
  const [pa, oa] = a.split('@').map(Number);
  const [pb, ob] = b.split('@').map(Number);
  return pa! - pb! || oa! - ob!;
};

/**
 * What the pipeline applied, as the ledger references it: output and dead-letter rows by lineage (`p@o`, a row
 * staged twice shows twice), output rows per payload, keyed state per key, claims by key, fences and entries
 * (without what legitimately differs between runs: attempt ids, object keys, times, the pipeline id).
 */
async function outcome(settings: Settings) {
  const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
  const lineage = (stream: string) =>
    rows
      .filter((row) => row.stream === stream)
      .map(({ row }) => row.source as { partition: number; offset: number })
      .map((source) => `${source.partition}@${source.offset}`)
      .sort(byLineage);
  const perPayload: Record<string, number> = {};
  for (const { stream, row } of rows) {
    if (stream === 'output') perPayload[String(row.id)] = (perPayload[String(row.id)] ?? 0) + 1;
  }
  const view = await ledgerView(res.clients, res.table, settings.pipelineId);
  const state = Object.fromEntries(Object.entries(view.state).map(([key, item]) => [key, Number(item.n)]));
  const entries = view.entries.map(({ stream, topic, partition, firstOffset, lastOffset, recordCount }) => ({
    stream,
    topic,
    partition,
    firstOffset,
    lastOffset,
    recordCount,
  }));
  return {
    output: lineage('output'),
    deadletter: lineage('deadletter'),
    perPayload,
    state,
    claims: view.claims,
    fences: view.fences,
    entries,
  };
}

/**
 * No record staged twice, and every payload (but the handover tests' `kind:key` ones, which repeat on purpose) output
 * at most once with its state applied once.
 */
function expectAppliedOnce(found: Awaited<ReturnType<typeof outcome>>): void {
  const rows = [...found.output, ...found.deadletter];
  expect(rows.filter((row, i) => rows.indexOf(row) !== i)).toEqual([]);
  for (const [payload, count] of Object.entries(found.perPayload)) {
    if (payload.includes(':')) continue;
    expect({ payload, count }).toEqual({ payload, count: 1 });
    if (!payload.includes(':'))
      expect({ payload, n: found.state[`s-${payload}`] }).toEqual({ payload, n: 1 });
  }
}

/** An outcome without its staged-file entries (how the records were chunked). */
function withoutEntries(found: Awaited<ReturnType<typeof outcome>>) {
  const { entries: _entries, ...rest } = found;
  return rest;
}

/** Pauses an invocation the `nth` time it reaches `step` until `go()`; `reached` resolves once it paused. */
function pauseAt(step: ProcessorStep, nth = 1) {
  const reached = gate();
  const resume = gate();
  let seen = 0;
  let paused = false;
  const hooks: ProcessorHooks = {
    async onStep(at) {
      if (at !== step || ++seen !== nth) return;
      paused = true;
      reached.open();
      await resume.opened;
    },
  };
  return { hooks, reached: reached.opened, go: resume.open, wasReached: () => paused };
}

/** The mapping's retry: the batch again on a fresh container until it succeeds (at most a few times). */
async function retryUntilDone(settings: Settings, clock: ManualClock, batch: MskEvent) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await container(settings, clock).processEvent(batch);
    } catch (error) {
      if (attempt >= 3) throw error;
    }
  }
}

/** Refuses the `nth` PutObject (1-based) and every one after it, with `error`; counts the puts tried. */
function failingPuts(nth: number, error: () => Error) {
  const seen = { puts: 0 };
  const clients = clientsWith(
    'failPut',
    (next, context) => async (args) => {
      if (context.commandName === 'PutObjectCommand' && ++seen.puts >= nth) throw error();
      return next(args);
    },
    's3',
  );
  return { clients, seen };
}

const accessDenied = () =>
  Object.assign(new Error('Access Denied'), { name: 'AccessDenied', $metadata: { httpStatusCode: 403 } });
const slowDown = () =>
  Object.assign(new Error('Please reduce your request rate.'), {
    name: 'SlowDown',
    $metadata: { httpStatusCode: 503 },
  });

// ---------------------------------------------------------------------------------------------------------------
// The multi-chunk keyed batch most tests stage: partition 0, offsets 0..19, `maxTransactionItems` 8 (four chunks:
// 0..5 | 6..11 | 12..18 | 19, the first one item short for the legacy fence key, a dropped record taking no item).
// Partition 1 staged before: k-3 with 0@3's payload (0@3 is a duplicate) and k-6 with another one (0@6 is a
// conflict). In the batch: 18 repeats 0@1 (an in-batch duplicate), 19 carries k-2 with another payload (an
// in-batch conflict). After it, partition 2 sends 0@9's payload again (a duplicate elsewhere: dropped).
// ---------------------------------------------------------------------------------------------------------------
const BEFORE = () => mskEvent([spec(1, 0, 'v-3', 'k-3'), spec(1, 1, 'x-6', 'k-6')]);
const BATCH_SPECS: readonly RecordSpec[] = [
  ...Array.from({ length: 18 }, (_, i) => spec(0, i, `v-${i}`, `k-${i}`)),
  spec(0, 18, 'v-1', 'k-1'),
  spec(0, 19, 'w-2', 'k-2'),
];
const BATCH = () => mskEvent(BATCH_SPECS);
const AFTER = () => mskEvent([spec(2, 0, 'v-9', 'k-9')]);
const EXPECTED_OUTPUT = [
  ...[0, 1, 2, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17].map((offset) => `0@${offset}`),
  '1@0',
  '1@1',
];

async function baseline() {
  const settings = settingsFor({ maxTransactionItems: 8 });
  const clock = new ManualClock();
  await container(settings, clock).processEvent(BEFORE());
  clock.advance(1_000);
  const report = await container(settings, clock).processEvent(BATCH());
  clock.advance(1_000);
  await container(settings, clock).processEvent(AFTER());
  return { report: report.partitions[0], found: await outcome(settings) };
}

/** Partition 2's duplicate of 0@9 a second later, then the outcome, each effect applied once. */
async function afterBatch(settings: Settings, clock: ManualClock) {
  clock.advance(1_000);
  await container(settings, clock).processEvent(AFTER());
  const found = await outcome(settings);
  expectAppliedOnce(found);
  return found;
}

let reference: Awaited<ReturnType<typeof baseline>> | undefined;
async function referenceRun() {
  reference ??= await baseline();
  return reference;
}

describe('the reference run of the multi-chunk keyed batch', () => {
  it('stages every record once in four chunks: duplicates dropped, conflicts dead-lettered, claims naming the holders', async () => {
    const { report, found } = await referenceRun();
    expect(report).toMatchObject({ stagedOffset: 19, chunks: 4, duplicatesByKey: 2, keyConflicts: 2 });
    expect(found.output).toEqual(EXPECTED_OUTPUT);
    expect(found.deadletter).toEqual(['0@6', '0@19']);
    expectAppliedOnce(found);
    expect(found.claims).toMatchObject({
      'k-0': 'orders#0#0',
      'k-1': 'orders#0#1',
      'k-2': 'orders#0#2',
      'k-3': 'orders#1#0',
      'k-6': 'orders#1#1',
      'k-9': 'orders#0#9',
      'k-17': 'orders#0#17',
    });
  });
});

const CRASHES: ReadonlyArray<[ProcessorStep, number]> = [
  ['after-claims', 1],
  ['before-stage-write', 1],
  ['after-stage-write', 1],
  ['after-transaction', 1],
  ['before-stage-write', 2],
  ['after-stage-write', 2],
  ['after-transaction', 2],
  ['before-stage-write', 3],
  ['after-transaction', 3],
  ['after-stage-write', 4],
  ['after-transaction', 4],
  ['before-return', 1],
];

describe('a crash at any step of a multi-chunk keyed batch, then the mapping’s retry (P5)', () => {
  it.each(CRASHES)('crash at %s #%i: the ledger ends as in a run without the crash', async (step, nth) => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    await expect(
      container(settings, clock, { hooks: crashAt(step, nth) }).processEvent(BATCH()),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    clock.advance(1_000);
    const retry = await container(settings, clock).processEvent(BATCH());
    expect(retry.partitions[0]?.stagedOffset).toBe(19);
    const found = await afterBatch(settings, clock);
    expect(found).toEqual(expected);
  });
});

/** Where an attempt pauses in a race: a step and which time it reaches it, or nowhere. */
type Pause = readonly [ProcessorStep, number] | undefined;

const ZOMBIE_PAUSES: ReadonlyArray<Pause> = [
  ['after-claims', 1],
  ['before-stage-write', 1],
  ['after-stage-write', 1],
  ['after-transaction', 1],
  ['after-stage-write', 2],
];
const RETRY_PAUSES: ReadonlyArray<Pause> = [
  ['after-claims', 1],
  ['before-stage-write', 1],
  ['after-stage-write', 1],
  undefined,
];
const RACES = ZOMBIE_PAUSES.flatMap((zombie) =>
  RETRY_PAUSES.map((retry) => [zombie!.join(' #'), retry?.join(' #') ?? 'nowhere', zombie, retry] as const),
);

describe('a zombie and the mapping’s retry of the same batch, each paused around its claims (P2, P4)', () => {
  // The zombie (attempt A) runs to its pause; the retry B starts and runs to its own (or to its end); A goes on to
  // its end; then B. Whatever fails is retried by the mapping. Each record is applied once, each key held by one
  // output record, and the ledger is the one of a run without the race.
  it.each(RACES)('zombie paused at %s, retry at %s: every record applied once', async (_a, _b, zp, rp) => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const zombiePause = pauseAt(zp![0], zp![1]);
    const zombie = container(settings, clock, { hooks: zombiePause.hooks })
      .processEvent(BATCH())
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await Promise.race([zombiePause.reached, zombie]);
    const retryPause = rp === undefined ? undefined : pauseAt(rp[0], rp[1]);
    const retry = container(settings, clock, retryPause ? { hooks: retryPause.hooks } : {})
      .processEvent(BATCH())
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await Promise.race([retryPause?.reached ?? retry, retry]);
    zombiePause.go();
    await zombie;
    retryPause?.go();
    const outcomes = [await zombie, await retry];
    expect([zombiePause.wasReached(), retryPause?.wasReached() ?? true]).toEqual([true, true]);
    if (outcomes.some((o) => o !== 'ok')) await retryUntilDone(settings, clock, BATCH());
    const found = await afterBatch(settings, clock);
    expect(withoutEntries(found)).toEqual(withoutEntries(expected));
  });
});

describe('a fence moved between an attempt’s re-read and its claims (P2, P4)', () => {
  // Attempt A re-reads the fence (nothing staged) and is held at its first claim write (BatchExecuteStatement). The
  // retry B stages the batch: all of it, or only its first chunk before crashing. A then claims on a stale
  // decision: it confirms B's live claims as its records' own, plans, stages, and its transaction finds the fence
  // moved; whatever is left is staged once by A or the mapping's next retry.
  it.each([
    ['the whole batch', undefined],
    ['its first chunk, then crashes', ['after-transaction', 1] as const],
  ])('B stages %s: every record applied once', async (_, crash) => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const atClaims = gate();
    const goOn = gate();
    let held = false;
    const clients = clientsWith('holdFirstClaims', (next, context) => async (args) => {
      if (context.commandName === 'BatchExecuteStatementCommand' && !held) {
        held = true;
        atClaims.open();
        await goOn.opened;
      }
      return next(args);
    });
    const a = container(settings, clock, { clients })
      .processEvent(BATCH())
      .then(
        (report) => report.partitions[0],
        (error: unknown) => error,
      );
    await atClaims.opened;
    const b = container(settings, clock, crash ? { hooks: crashAt(crash[0], crash[1]) } : {}).processEvent(
      BATCH(),
    );
    if (crash) await expect(b).rejects.toBeInstanceOf(InjectedCrashError);
    else expect((await b).partitions[0]).toMatchObject({ stagedOffset: 19 });
    goOn.open();
    expect(await a).toMatchObject({ stagedOffset: 19 });
    await retryUntilDone(settings, clock, BATCH());
    const found = await afterBatch(settings, clock);
    expect(withoutEntries(found)).toEqual(withoutEntries(expected));
  });
});

describe('a redelivery after partial progress (P4, P5)', () => {
  it('a batch whose first chunks committed, redelivered with more records after a crash: each record applied once', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    await expect(
      container(settings, clock, { hooks: crashAt('after-transaction', 2) }).processEvent(BATCH()),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    clock.advance(1_000);
    // The mapping redelivers from the batch's first offset, with records that arrived meanwhile: 20 repeats 0@18's
    // bytes (0@1's payload, k-1), 21 is new.
    const larger = mskEvent([...BATCH_SPECS, spec(0, 20, 'v-1', 'k-1'), spec(0, 21, 'v-21', 'k-21')]);
    const report = await container(settings, clock).processEvent(larger);
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 21 });
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual([...EXPECTED_OUTPUT.slice(0, -2), '0@21', '1@0', '1@1']);
    expect(found.deadletter).toEqual(['0@6', '0@19']);
    expect(found.claims).toMatchObject({ 'k-1': 'orders#0#1', 'k-21': 'orders#0#21' });
  });
});

describe('claims that expire between the claims and the transaction (P4, TTL)', () => {
  const TTL_MS = (settings: Settings) => (settings.idempotencyTtlSeconds + 60) * 1_000;

  it('a crashed attempt’s claim expired before the retry: the retry takes it over in its transaction, the record output once holding its key', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    const batch = () => mskEvent([spec(0, 0, 'v-0', 'K'), spec(0, 1, 'v-1', 'k-1')]);
    await expect(
      container(settings, clock, { hooks: crashAt('before-stage-write') }).processEvent(batch()),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#0');
    clock.advance(TTL_MS(settings));
    await container(settings, clock).processEvent(batch());
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual(['0@0', '0@1']);
    const claim = await claimOf(settings, 'K');
    expect(claim?.claimant).toBe('orders#0#0');
    expect(claim?.expiresAt).toBeGreaterThan(clock.now() / 1000);
  });

  it.each([
    ['the same payload', 'v-0', [] as string[], ['1@0']],
    ['another payload', 'w-0', ['0@0'], ['1@0']],
  ])(
    'a duplicate elsewhere took the expired claim over first (%s): the key is held by exactly one output record',
    async (_, value, deadletter, output) => {
      const settings = settingsFor({ maxTransactionItems: 8 });
      const clock = new ManualClock();
      const batch = () => mskEvent([spec(0, 0, 'v-0', 'K')]);
      await expect(
        container(settings, clock, { hooks: crashAt('after-claims') }).processEvent(batch()),
      ).rejects.toBeInstanceOf(InjectedCrashError);
      clock.advance(TTL_MS(settings));
      await container(settings, clock).processEvent(mskEvent([spec(1, 0, value, 'K')]));
      await container(settings, clock).processEvent(batch());
      const found = await outcome(settings);
      expectAppliedOnce(found);
      expect(found.output).toEqual(output);
      expect(found.deadletter).toEqual(deadletter);
      expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#1#0');
    },
  );

  it('a zombie paused after its claims past their TTL, the retry taking its own expired claim over: the record output once', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    const batch = () => mskEvent([spec(0, 0, 'v-0', 'K'), spec(0, 1, 'v-1', 'k-1')]);
    const paused = pauseAt('after-claims');
    const zombie = container(settings, clock, { hooks: paused.hooks })
      .processEvent(batch())
      .then(
        (report) => report.partitions[0],
        (error: unknown) => error,
      );
    await paused.reached;
    clock.advance(TTL_MS(settings));
    const retry = await container(settings, clock).processEvent(batch());
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 1, stagedRows: 2 });
    paused.go();
    expect(await zombie).toMatchObject({ stagedOffset: 1, stagedRows: 0 });
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual(['0@0', '0@1']);
    expect(found.claims).toEqual({ K: 'orders#0#0', 'k-1': 'orders#0#1' });
  });
});

describe('a key handed over from a record refused its state, across chunks (P4, P6)', () => {
  // 0..3 fill `customer` to just under 400 KB. Batch 5..13: 5 (K) grows `customer` past 400 KB (refused,
  // dead-lettered); 6..12 add to state keys of their own; 13 (K, another payload: 5's conflict until 5 is refused)
  // is its heir, in a later chunk. Claims ahead are written for 5 only; 13 takes K over in its own transaction.
  const fill = () => mskEvent([0, 1, 2, 3].map((offset) => spec(0, offset, 'grow:customer', `f-${offset}`)));
  const batch = () =>
    mskEvent([
      spec(0, 5, 'grow:customer', 'K'),
      ...[6, 7, 8, 9, 10, 11, 12].map((offset) => spec(0, offset, `add:s${offset}`, `k-${offset}`)),
      spec(0, 13, 'add:customer', 'K'),
    ]);
  const HANDOVER_CRASHES: ReadonlyArray<[ProcessorStep, number] | undefined> = [
    undefined,
    ['after-claims', 1],
    ['before-stage-write', 1],
    ['after-stage-write', 1],
    ['before-stage-write', 2],
    ['after-transaction', 1],
    ['before-stage-write', 3],
    ['after-transaction', 2],
  ];
  it.each(HANDOVER_CRASHES.map((crash) => [crash?.join(' #') ?? 'nowhere', crash] as const))(
    'crash at %s, then the retry: the heir is output holding the key, the refused record dead-lettered once',
    async (_, crash) => {
      const settings = settingsFor({ maxTransactionItems: 8 });
      const clock = new ManualClock();
      await container(settings, clock).processEvent(fill());
      clock.advance(1_000);
      if (crash !== undefined) {
        await expect(
          container(settings, clock, { hooks: crashAt(crash[0], crash[1]) }).processEvent(batch()),
        ).rejects.toBeInstanceOf(InjectedCrashError);
        clock.advance(1_000);
      }
      const report = await container(settings, clock).processEvent(batch());
      expect(report.partitions[0]?.stagedOffset).toBe(13);
      const found = await outcome(settings);
      expectAppliedOnce(found);
      expect(found.deadletter).toEqual(['0@5']);
      expect(found.output).toEqual([
        '0@0',
        '0@1',
        '0@2',
        '0@3',
        ...[6, 7, 8, 9, 10, 11, 12, 13].map((o) => `0@${o}`),
      ]);
      expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#13');
      // A duplicate of the heir elsewhere is dropped: 13 holds K.
      const elsewhere = await container(settings, clock).processEvent(
        mskEvent([spec(1, 0, 'add:customer', 'K')]),
      );
      expect(elsewhere.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    },
  );
});

describe('a staged write that fails after the claims (P4, P5)', () => {
  it('a deterministic failure of the first write releases every claim the attempt took; the retry stages every record once', async () => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const { clients, seen } = failingPuts(1, accessDenied);
    await expect(container(settings, clock, { clients }).processEvent(BATCH())).rejects.toMatchObject({
      name: 'AccessDenied',
    });
    expect(seen.puts).toBe(1);
    for (const key of ['k-0', 'k-1', 'k-2', 'k-5', 'k-17']) {
      expect({ key, expiresAt: (await claimOf(settings, key))?.expiresAt }).toEqual({
        key,
        expiresAt: RELEASED,
      });
    }
    // Claims another partition holds are untouched.
    expect((await claimOf(settings, 'k-3'))?.claimant).toBe('orders#1#0');
    expect((await claimOf(settings, 'k-3'))?.expiresAt).not.toBe(RELEASED);
    clock.advance(1_000);
    await container(settings, clock).processEvent(BATCH());
    const found = await afterBatch(settings, clock);
    // The retry takes the released claims over inside its transactions (an item each): smaller chunks, the rest
    // as in the reference run.
    expect(withoutEntries(found)).toEqual(withoutEntries(expected));
  });

  it('a deterministic failure of a later chunk’s write releases only the claims of records above the fence', async () => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const { clients } = failingPuts(2, accessDenied);
    await expect(container(settings, clock, { clients }).processEvent(BATCH())).rejects.toMatchObject({
      name: 'AccessDenied',
    });
    // Chunk 0..5 committed: its claims stay; those of 7.. are released.
    expect((await claimOf(settings, 'k-5'))?.expiresAt).not.toBe(RELEASED);
    expect((await claimOf(settings, 'k-7'))?.expiresAt).toBe(RELEASED);
    expect((await claimOf(settings, 'k-17'))?.expiresAt).toBe(RELEASED);
    clock.advance(1_000);
    await container(settings, clock).processEvent(BATCH());
    const found = await afterBatch(settings, clock);
    // The retry takes the released claims over inside its transactions (an item each): smaller chunks, the rest
    // as in the reference run.
    expect(withoutEntries(found)).toEqual(withoutEntries(expected));
  });

  it('a transient failure of the first write keeps the claims for the retry, which confirms them and stages every record once', async () => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const { clients } = failingPuts(1, slowDown);
    await expect(container(settings, clock, { clients }).processEvent(BATCH())).rejects.toThrow();
    expect((await claimOf(settings, 'k-0'))?.claimant).toBe('orders#0#0');
    expect((await claimOf(settings, 'k-0'))?.expiresAt).not.toBe(RELEASED);
    // A duplicate elsewhere meanwhile is dropped: 0@0 holds k-0 while its batch is retried.
    const meanwhile = await container(settings, clock).processEvent(mskEvent([spec(3, 0, 'v-0', 'k-0')]));
    expect(meanwhile.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    clock.advance(1_000);
    await container(settings, clock).processEvent(BATCH());
    const found = await afterBatch(settings, clock);
    // As the reference run, plus partition 3's fence (its duplicate staged nothing else).
    expect(found).toMatchObject(expected);
  });

  it('a zombie whose write fails for good after its claims leaves the claims its concurrent retry confirmed and commits without', async () => {
    const { found: expected } = await referenceRun();
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const { clients } = failingPuts(1, accessDenied);
    const zombiePause = pauseAt('before-stage-write');
    const zombie = container(settings, clock, { clients, hooks: zombiePause.hooks })
      .processEvent(BATCH())
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await zombiePause.reached;
    const retryPause = pauseAt('before-stage-write');
    const retry = container(settings, clock, { hooks: retryPause.hooks }).processEvent(BATCH());
    await retryPause.reached;
    zombiePause.go();
    expect(await zombie).toMatchObject({ name: 'AccessDenied' });
    // The zombie left the claims' holders; the retry still holds them.
    expect((await claimOf(settings, 'k-7'))?.expiresAt).not.toBe(RELEASED);
    retryPause.go();
    expect((await retry).partitions[0]).toMatchObject({ stagedOffset: 19 });
    const found = await afterBatch(settings, clock);
    expect(found).toEqual(expected);
  });

  it('a duplicate elsewhere dropped while the failing attempt held the key: the retry still outputs the record once', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    const batch = () => mskEvent([spec(0, 0, 'v-0', 'K'), spec(0, 1, 'v-1', 'k-1')]);
    const { clients } = failingPuts(1, accessDenied);
    const paused = pauseAt('before-stage-write');
    const failing = container(settings, clock, { clients, hooks: paused.hooks })
      .processEvent(batch())
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await paused.reached;
    const elsewhere = await container(settings, clock).processEvent(mskEvent([spec(1, 0, 'v-0', 'K')]));
    expect(elsewhere.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    paused.go();
    expect(await failing).toMatchObject({ name: 'AccessDenied' });
    expect((await claimOf(settings, 'K'))?.expiresAt).toBe(RELEASED);
    clock.advance(1_000);
    await container(settings, clock).processEvent(batch());
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual(['0@0', '0@1']);
    expect(found.perPayload['v-0']).toBe(1);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#0');
  });

  it('another payload takes the released key over before the retry: the key is held by exactly one output record', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    const batch = () => mskEvent([spec(0, 0, 'v-0', 'K')]);
    const { clients } = failingPuts(1, accessDenied);
    await expect(container(settings, clock, { clients }).processEvent(batch())).rejects.toMatchObject({
      name: 'AccessDenied',
    });
    await container(settings, clock).processEvent(mskEvent([spec(1, 0, 'w-0', 'K')]));
    await container(settings, clock).processEvent(batch());
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual(['1@0']);
    expect(found.deadletter).toEqual(['0@0']);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#1#0');
  });
});

describe('a new epoch opened between the claims and the first transaction (P4, epochs)', () => {
  it('the old lane’s attempt fails, its orphan claim is taken over by the retry in the new lane: each record once', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(mskEvent([spec(0, 0, 'v-0', 'k-0')]));
    const batch = () => mskEvent([1, 2, 3].map((offset) => spec(0, offset, `v-${offset}`, `k-${offset}`)));
    const paused = pauseAt('after-claims');
    const zombie = container(settings, clock, { hooks: paused.hooks })
      .processEvent(batch())
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await paused.reached;
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, clock);
    await epochs.startNew('orders', 0, { force: true });
    const retry = await container(settings, clock).processEvent(batch());
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 3 });
    paused.go();
    expect(await zombie).toBeInstanceOf(EpochChangedError);
    const found = await outcome(settings);
    expectAppliedOnce(found);
    expect(found.output).toEqual(['0@0', '0@1', '0@2', '0@3']);
    for (const offset of [1, 2, 3]) {
      const claim = await claimOf(settings, `k-${offset}`);
      expect(claim?.claimant).toMatch(new RegExp(`~1#0#${offset}$`));
      expect(claim?.expiresAt).not.toBe(RELEASED);
    }
  });
});

describe('staged objects of a batch holding keys claimed elsewhere (P3)', () => {
  it('a multi-chunk batch with duplicates, conflicts and an expired claim writes only objects its transactions reference', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await container(settings, clock).processEvent(mskEvent([spec(4, 0, 'v-10', 'k-10')]));
    clock.advance((settings.idempotencyTtlSeconds + 60) * 1_000);
    await container(settings, clock).processEvent(BEFORE());
    clock.advance(1_000);
    const report = await container(settings, clock).processEvent(BATCH());
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 19, chunks: 4 });
    const listed = await res.clients.s3.send(
      new ListObjectsV2Command({ Bucket: res.bucket, Prefix: `${settings.pipelineId}/_inprogress/` }),
    );
    const written = (listed.Contents ?? [])
      .map((object) => object.Key ?? '')
      .filter((key) => key.includes('/partition=0/'))
      .sort();
    const referenced = (await stagedEntries(res.clients, res.table, settings.pipelineId))
      .filter((entry) => entry.partition === 0)
      .map((entry) => entry.key)
      .sort();
    expect(written).toEqual(referenced);
    // The expired claim of k-10 was taken over: 0@10 holds it (4@0 was output too: its claim outlived the TTL).
    expect((await claimOf(settings, 'k-10'))?.claimant).toBe('orders#0#10');
  });
});
