/**
 * Adversarial interleavings of the exactly-once dead-letter redrive (shared/redrive/redrive.ts,
 * Processor.stageInLane, cli/redrive.ts): rounds, idempotency keys, crashed and concurrent runs, selections, lanes
 * and layouts. Real DynamoDB Local and S3 server; the coordinator runs its real steps.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../cli/eos.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError, OffsetsWentBackwardsError } from '../../shared/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { type RedriveResult, redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted, readManifests } from '../../shared/sink/reader.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { expectVerified } from '../support/generations.ts';
import { ledgerView } from '../support/ledger.ts';
import { mskEvent, order, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsets, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvrd');
});

const orders = builtinTransform('orders');

/** The transform with a bug: it rejects every order whose offset ends in 7. Guard: `orders` itself. */
const buggy: Transform = {
  name: 'orders-buggy',
  apply(record: DecodedRecord) {
    if (record.offset % 10 === 7) return { kind: 'poison', error: 'bug: offsets ending in 7 rejected' };
    return orders.apply(record);
  },
};

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rvrd', { maxTransactionItems: 12, ...overrides });
}

async function checkpoint(settings: Settings, clock?: ManualClock): Promise<string> {
  const outcome = await createLocalCoordinator({
    settings,
    clients: res.clients,
    ...(clock ? { clock } : {}),
  }).runCheckpoint();
  expect(['committed', 'empty']).toContain(outcome.status);
  return outcome.status;
}

function processorFor(settings: Settings, transform: Transform = buggy, clock?: ManualClock) {
  return createProcessor({ settings, clients: res.clients, transform, ...(clock ? { clock } : {}) });
}

/** Committed output order ids (NDJSON or Parquet), sorted, duplicates kept. */
async function committedOrderIds(settings: Settings): Promise<string[]> {
  const rows = await committedOffsets(res.clients, settings);
  return rows.map((row) => String(row.row.orderId)).sort();
}

/** Committed dead letters as `lane#partition@offset: error`. */
async function committedDeadLetters(settings: Settings): Promise<string[]> {
  const dead: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream: 'deadletter',
  })) {
    dead.push(
      `${file.topic}#${file.partition}@${(row.source as { offset: number }).offset}: ${String(row.error)}`,
    );
  }
  return dead.sort();
}

async function manifestFiles(settings: Settings) {
  const files = [];
  for await (const manifest of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    files.push(...manifest.files);
  }
  return files;
}

function ids(partition: number, from: number, count: number, prefix = `p${partition}`): string[] {
  return Array.from({ length: count }, (_, i) => `${prefix}-o${from + i}`);
}

function outcomes(result: RedriveResult) {
  return result.partitions.map((p) => [`${p.lane}#${p.partition}`, p.outcome, p.round ?? null, p.sent]);
}

/** Runs redrive then a checkpoint until a run has nothing left to do (at most `max` rounds). */
async function redriveUntilDone(settings: Settings, transform: Transform = orders, max = 4): Promise<void> {
  for (let i = 0; i < max; i++) {
    const result = await redrive({ settings, clients: res.clients, transform });
    await checkpoint(settings);
    if (result.partitions.every((p) => p.outcome === 'nothing')) return;
  }
  throw new Error(`redrive still had work after ${max} runs`);
}

/** A transform that keeps keyed state only (no output rows): a count per partition. */
function counter(withBug: boolean): Transform {
  return {
    name: withBug ? 'counter-buggy' : 'counter',
    apply(record) {
      if (withBug && record.offset % 10 === 7) return { kind: 'poison', error: 'bug: 7' };
      return {
        kind: 'ok',
        rows: [],
        state: [{ key: `count#${record.partition}`, fields: {}, add: { n: 1 } }],
      };
    },
  };
}

async function stateOf(settings: Settings, key: string): Promise<Record<string, unknown> | undefined> {
  const view = await ledgerView(res.clients, res.table, settings.pipelineId);
  return view.state[key] as Record<string, unknown> | undefined;
}

describe('rounds and records that make no output row', () => {
  it('a redriven record the fixed transform maps to no row (state only) is resolved once: its state is applied once', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    await processorFor(settings, counter(true)).processEvent(mskEvent(orderRecords(0, 0, 10)));
    await checkpoint(settings);
    expect((await stateOf(settings, 'count#0'))?.n).toBe(9);
    const first = await redrive({ settings, clients: res.clients, transform: counter(false) });
    expect(outcomes(first)).toEqual([['orders#0', 'redriven', 1, 1]]);
    await checkpoint(settings);
    expect((await stateOf(settings, 'count#0'))?.n).toBe(10);
    // A second run without any change: the contract says it changes nothing.
    const second = await redrive({ settings, clients: res.clients, transform: counter(false) });
    await checkpoint(settings);
    const third = await redrive({ settings, clients: res.clients, transform: counter(false) });
    await checkpoint(settings);
    expect({
      second: outcomes(second),
      third: outcomes(third),
      n: (await stateOf(settings, 'count#0'))?.n,
    }).toEqual({
      second: [['orders#0', 'nothing', null, 0]],
      third: [['orders#0', 'nothing', null, 0]],
      n: 10,
    });
  });

  it('a redriven record dropped as a producer duplicate (global claims) is resolved once: later runs start no round', async () => {
    const settings = settingsFor();
    // Offset 10 is a producer retry of offset 7: same Kafka key, value and idempotency key.
    const dup = { ...orderRecords(0, 7, 1)[0]!, key: 'k-7' };
    await processorFor(settings).processEvent(
      mskEvent([...orderRecords(0, 0, 7), dup, ...orderRecords(0, 8, 2), { ...dup, offset: 10 }]),
    );
    await checkpoint(settings);
    await redrive({ settings, clients: res.clients, transform: orders });
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort()); // no duplicate output: fine
    const again = await redrive({ settings, clients: res.clients, transform: orders });
    expect(outcomes(again)).toEqual([['orders#0', 'nothing', null, 0]]);
  });

  it('a dead letter the processor made from the ledger (state field stored as text) is left as it is while the transform accepts the record', async () => {
    const typed: Transform = {
      name: 'typed',
      apply(record) {
        if (record.offset === 0)
          return {
            kind: 'ok',
            rows: [{ n: 0 }],
            state: [{ key: 'acc', fields: { total: 'text' }, add: {} }],
          };
        return {
          kind: 'ok',
          rows: [{ n: record.offset }],
          state: [{ key: 'acc', fields: {}, add: { total: 1 } }],
        };
      },
    };
    const settings = settingsFor({ idempotencyKey: 'none' });
    await processorFor(settings, typed).processEvent(mskEvent(orderRecords(0, 0, 2)));
    await checkpoint(settings);
    expect(await committedDeadLetters(settings)).toHaveLength(1);
    // No fix: the state item is still text. The reason is the ledger's, not the transform's: no run sends it.
    await redrive({ settings, clients: res.clients, transform: typed });
    await checkpoint(settings);
    const second = await redrive({ settings, clients: res.clients, transform: typed });
    await checkpoint(settings);
    const third = await redrive({ settings, clients: res.clients, transform: typed });
    await checkpoint(settings);
    expect({
      second: outcomes(second).map((o) => o[1]),
      third: outcomes(third).map((o) => o[1]),
      deadLetters: (await committedDeadLetters(settings)).length,
    }).toEqual({ second: ['nothing'], third: ['nothing'], deadLetters: 1 });
  });
});

describe('idempotency keys', () => {
  /** Offset 10 is a producer retry of offset 7 (same key, value and idempotency key); the bug rejects only 7. */
  function withRetryOfSeven(): RecordSpec[] {
    const seven = { ...orderRecords(0, 7, 1)[0]!, key: 'k-7' };
    return [...orderRecords(0, 0, 7), seven, ...orderRecords(0, 8, 2), { ...seven, offset: 10 }];
  }

  it('global claims (ahead or in the transaction) drop a redriven record whose key the original lane already output', async () => {
    for (const claimWrite of ['ahead', 'in-transaction'] as const) {
      const settings = settingsFor({ claimWrite });
      await processorFor(settings).processEvent(mskEvent(withRetryOfSeven()));
      await checkpoint(settings);
      const result = await redrive({ settings, clients: res.clients, transform: orders });
      expect(result.partitions[0]!.staged).toEqual({ output: 0, deadLettered: 0 });
      await checkpoint(settings);
      expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort());
    }
  });

  it("idempotencyScope 'partition': a redriven record whose key the original lane already output is left as it is", async () => {
    const settings = settingsFor({ idempotencyScope: 'partition' });
    await processorFor(settings).processEvent(mskEvent(withRetryOfSeven()));
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort()); // 7 dead, its retry (10) output
    await redrive({ settings, clients: res.clients, transform: orders });
    await checkpoint(settings);
    // Exactly once after business-key dedupe: p0-o7 must be committed once, not twice.
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort());
  });

  it('a key-conflict dead letter is left as it is (not re-sent) and nothing is output twice', async () => {
    const settings = settingsFor();
    // Offset 3 reuses offset 1's idempotency key with another payload: a conflict dead letter.
    const specs = orderRecords(0, 0, 5);
    specs[3] = { ...specs[3]!, headers: { 'idempotency-key': 'p0-o1' } };
    await processorFor(settings, orders).processEvent(mskEvent(specs));
    await checkpoint(settings);
    expect((await committedDeadLetters(settings))[0]).toMatch(/already claimed by/);
    const result = await redrive({ settings, clients: res.clients, transform: orders });
    expect(result.partitions.map((p) => [p.outcome, p.sent, p.unchanged])).toEqual([['nothing', 0, 1]]);
  });
});

describe('resuming a crashed round', () => {
  /** 30 dead letters on partition 0 (every offset ending in 7 of 0..299). */
  async function manyDeadLetters(settings: Settings): Promise<void> {
    await processorFor(settings).processEvent(mskEvent(orderRecords(0, 0, 300)));
    await checkpoint(settings);
    expect(await committedDeadLetters(settings)).toHaveLength(30);
  }

  it("a run that crashed after more than 9 batches resumes above its round's fence, before any checkpoint", async () => {
    const settings = settingsFor();
    await manyDeadLetters(settings);
    let batches = 0;
    const hooks = {
      onStep(step: string) {
        if (step === 'after-batch' && ++batches === 12) throw new InjectedCrashError(step);
      },
    };
    await expect(
      redrive({ settings, clients: res.clients, transform: orders, batchSize: 2, hooks }),
    ).rejects.toThrow(InjectedCrashError);
    // The contract: "a run finds it open and goes on with it: the fence drops what the round staged already".
    const resumed = await redrive({ settings, clients: res.clients, transform: orders, batchSize: 2 }).catch(
      (error: unknown) => error,
    );
    expect(resumed).not.toBeInstanceOf(OffsetsWentBackwardsError);
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 300).sort());
  });

  it('the same crash after more than 9 batches resumes once a checkpoint committed the staged part', async () => {
    const settings = settingsFor();
    await manyDeadLetters(settings);
    let batches = 0;
    const hooks = {
      onStep(step: string) {
        if (step === 'after-batch' && ++batches === 12) throw new InjectedCrashError(step);
      },
    };
    await expect(
      redrive({ settings, clients: res.clients, transform: orders, batchSize: 2, hooks }),
    ).rejects.toThrow(InjectedCrashError);
    await checkpoint(settings);
    const resumed = await redrive({ settings, clients: res.clients, transform: orders, batchSize: 2 });
    expect(resumed.partitions.map((p) => [p.outcome, p.round])).toEqual([['redriven', 1]]);
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 300).sort());
    await expectVerified(res, settings);
  });

  it('a crashed round holding a record that made no output (a key duplicate) resumes', async () => {
    const settings = settingsFor();
    // Dead letters 7, 17, 27, 37, 47, 57; offset 60 is a producer retry of 17, output in the original lane.
    const seventeen = { ...orderRecords(0, 17, 1)[0]!, key: 'k-17' };
    const specs = orderRecords(0, 0, 60);
    specs[17] = seventeen;
    await processorFor(settings).processEvent(mskEvent([...specs, { ...seventeen, offset: 60 }]));
    await checkpoint(settings);
    let batches = 0;
    const hooks = {
      onStep(step: string) {
        if (step === 'after-batch' && ++batches === 2) throw new InjectedCrashError(step);
      },
    };
    // Batches [7, 17] (17 dropped as a duplicate: no row) and [27, 37], then the crash.
    await expect(
      redrive({ settings, clients: res.clients, transform: orders, batchSize: 2, hooks }),
    ).rejects.toThrow(InjectedCrashError);
    await checkpoint(settings);
    const errors: string[] = [];
    for (let i = 0; i < 2; i++) {
      // The re-run's first batch is [17, 47]: 17 is below the round's fence (37) and no fingerprint matches it.
      await redrive({ settings, clients: res.clients, transform: orders, batchSize: 2 }).catch(
        (error: unknown) => errors.push((error as Error).name),
      );
      await checkpoint(settings);
    }
    expect(errors).toEqual([]);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 60).sort());
  });
});

describe('concurrent runs', () => {
  /** 3 bug victims and a genuine poison per partition, on 2 partitions, committed. */
  async function withDeadLetters(): Promise<Settings> {
    const settings = settingsFor();
    await processorFor(settings).processEvent(
      mskEvent(
        [0, 1].flatMap((partition) => [
          ...orderRecords(partition, 0, 30),
          { partition, offset: 30, value: '{"not json', headers: { 'idempotency-key': `bad-${partition}` } },
        ]),
      ),
    );
    await checkpoint(settings);
    return settings;
  }

  async function expectEachOnce(settings: Settings): Promise<void> {
    expect(await committedOrderIds(settings)).toEqual([...ids(0, 0, 30), ...ids(1, 0, 30)].sort());
    const dead = await committedDeadLetters(settings);
    expect(dead.filter((d) => d.startsWith('orders#'))).toHaveLength(8);
    expect(dead.filter((d) => !d.startsWith('orders#'))).toEqual([]);
    await expectVerified(res, settings);
  }

  it('two runs at once (batch size 1) output every record once; a run that loses the close race fails loudly and a re-run finishes', async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const settings = await withDeadLetters();
      const results = await Promise.allSettled([
        redrive({ settings, clients: res.clients, transform: orders, batchSize: 1 }),
        redrive({ settings, clients: res.clients, transform: orders, batchSize: 1 }),
      ]);
      for (const result of results) {
        if (result.status === 'rejected')
          // The round the other run closed is named as such (its cause is the closed lane's EpochChangedError).
          expect((result.reason as Error).name).toMatch(/RedriveRoundClosed|FenceMoved/);
      }
      await checkpoint(settings);
      await redriveUntilDone(settings);
      await expectEachOnce(settings);
    }
  });

  it('two runs and a checkpoint at once, then runs until nothing is left: every record once', async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const settings = await withDeadLetters();
      await Promise.allSettled([
        redrive({ settings, clients: res.clients, transform: orders, batchSize: 1 }),
        checkpoint(settings),
        redrive({ settings, clients: res.clients, transform: orders, batchSize: 1 }),
      ]);
      await checkpoint(settings);
      await redriveUntilDone(settings);
      await expectEachOnce(settings);
    }
  });

  it('a run that finds a round open and nothing of its own to send closes it under a slower run; that run fails loudly and nothing is output twice', async () => {
    const settings = await withDeadLetters();
    let release!: () => void;
    const paused = new Promise<void>((resolve) => {
      release = resolve;
    });
    let reached!: () => void;
    const atPause = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let seen = 0;
    const slow = redrive({
      settings,
      clients: res.clients,
      transform: orders,
      batchSize: 1,
      hooks: {
        async onStep(step) {
          if (step === 'after-batch' && ++seen === 1) {
            reached();
            await paused;
          }
        },
      },
    });
    await atPause;
    // Another operator with --checkpoint 99 (nothing of it): resumes the open round with nothing and closes it.
    const other = await redrive({ settings, clients: res.clients, transform: orders, checkpoint: 99 });
    expect(other.partitions[0]!.outcome).toBe('redriven');
    release();
    await expect(slow).rejects.toThrow();
    await checkpoint(settings);
    await redriveUntilDone(settings);
    await expectEachOnce(settings);
  });
});

describe('selections, lanes and layouts', () => {
  it('--checkpoint N, then --all (also after a crashed --checkpoint run): every record once, nothing lost', async () => {
    for (const crash of [false, true]) {
      const settings = settingsFor();
      const processor = processorFor(settings);
      await processor.processEvent(mskEvent(orderRecords(0, 0, 20))); // 7, 17
      await checkpoint(settings);
      await processor.processEvent(mskEvent(orderRecords(0, 20, 20))); // 27, 37
      await checkpoint(settings);
      if (crash) {
        await expect(
          redrive({
            settings,
            clients: res.clients,
            transform: orders,
            checkpoint: 2,
            hooks: {
              onStep: (step) => {
                if (step === 'before-close') throw new InjectedCrashError(step);
              },
            },
          }),
        ).rejects.toThrow(InjectedCrashError);
      } else {
        const first = await redrive({ settings, clients: res.clients, transform: orders, checkpoint: 1 });
        expect(outcomes(first)).toEqual([['orders#0', 'redriven', 1, 2]]);
        const early = await redrive({ settings, clients: res.clients, transform: orders });
        expect(outcomes(early)).toEqual([['orders#0', 'waiting', 1, 0]]);
        await checkpoint(settings);
      }
      await redriveUntilDone(settings);
      expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 40).sort());
      await expectVerified(res, settings);
    }
  });

  it('dead letters of an epoch lane (orders~1) are redriven into orders~1~r1, each generation once', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    const gen2 = orderRecords(0, 0, 10, 'gen2-p0');
    // The mapping's retry confirms the stop (a stop seen once may be a zombie's).
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(processor.processEvent(mskEvent(gen2))).rejects.toThrow();
    }
    const epochs = new EpochLedger(
      res.clients.dynamodb,
      res.table,
      settings.pipelineId,
      new ManualClock(Date.now()),
    );
    expect((await epochs.startNew('orders', 0)).kind).toBe('opened');
    await processor.processEvent(mskEvent(gen2));
    await checkpoint(settings);
    const result = await redrive({ settings, clients: res.clients, transform: orders });
    expect(outcomes(result)).toEqual([
      ['orders#0', 'redriven', 1, 1],
      ['orders~1#0', 'redriven', 1, 1],
    ]);
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual([...ids(0, 0, 10), ...ids(0, 0, 10, 'gen2-p0')].sort());
    const lanes = new Set((await manifestFiles(settings)).map((f) => f.topic));
    expect(lanes).toEqual(new Set(['orders', 'orders~1', 'orders~r1', 'orders~1~r1']));
    await expectVerified(res, settings);
    const again = await redrive({ settings, clients: res.clients, transform: orders });
    expect(again.partitions.map((p) => p.outcome)).toEqual(['nothing', 'nothing']);
  });

  it("Parquet in day folders: a redriven row lands in its record's day folder (its Kafka timestamp), once", async () => {
    const settings = settingsFor({
      outputFormat: 'parquet',
      timePartitioning: 'day',
      outputColumns: [...orderDefinition.columns],
    });
    // The records are two days old when everything runs (inside the lateness window), on a clock that starts near
    // real time, as the ledger's TTL needs (shared/clock.ts).
    const clock = new ManualClock();
    const recordsAt = clock.now() - 2 * 86_400_000;
    const records = orderRecords(0, 0, 10).map((record) => ({
      ...record,
      timestamp: recordsAt + record.offset,
    }));
    await processorFor(settings, buggy, clock).processEvent(mskEvent(records));
    await checkpoint(settings, clock);
    clock.advance(60_000);
    await redrive({ settings, clients: res.clients, transform: orders, clock });
    await checkpoint(settings, clock);
    const redriven = (await manifestFiles(settings)).filter((f) => f.topic === 'orders~r1');
    expect(redriven.map((f) => f.key.replace(/^.*\/final\//, ''))).toEqual([
      `output/dt=${new Date(recordsAt).toISOString().slice(0, 10)}/orders~r1+0+${'7'.padStart(20, '0')}-${'7'.padStart(20, '0')}.parquet`,
    ]);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort());
    await expectVerified(res, settings);
  });

  it('1,500 dead letters in one partition go through in one run (batches of 500, 100-item transactions)', async () => {
    const settings = settingsFor({ maxTransactionItems: 100 });
    const all: Transform = { name: 'reject-all', apply: () => ({ kind: 'poison', error: 'bug: all' }) };
    await processorFor(settings, all).processEvent(mskEvent(orderRecords(0, 0, 1500)));
    await checkpoint(settings);
    const result = await redrive({ settings, clients: res.clients, transform: orders });
    expect(result.partitions.map((p) => [p.outcome, p.sent, p.staged.output])).toEqual([
      ['redriven', 1500, 1500],
    ]);
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 1500).sort());
  }, 120_000);
});

describe('dead letters redrive cannot take for the record', () => {
  // Without the `'row' in row` check of shared/redrive/partition-state.ts a run sends 3: each misfit row goes through
  // `orders` as a tombstone and is dead-lettered again as one.
  it("a coordinator's schema-mismatch dead letter (raw has no key, value or headers) is not redriven as a fabricated tombstone", async () => {
    const v1 = settingsFor({ outputFormat: 'parquet', outputColumns: [...orderDefinition.columns] });
    await processorFor(v1, orders).processEvent(mskEvent(orderRecords(0, 0, 3)));
    // The transform's columns change (a required column added) while v1's rows are staged: they commit as
    // schema-mismatch dead letters whose raw is {key: null, value: null, headers: []} (docs/output.md).
    const v2 = settingsFor({
      pipelineId: v1.pipelineId,
      outputFormat: 'parquet',
      outputColumns: [...orderDefinition.columns, { name: 'qty', type: 'int', nullable: false }],
    });
    await checkpoint(v2);
    const dead = await committedDeadLetters(v2);
    expect(dead).toHaveLength(3);
    expect(dead[0]).toMatch(/schema-mismatch/);
    const result = await redrive({ settings: v2, clients: res.clients, transform: orders });
    // The record cannot be rebuilt from such a row: nothing may be sent in its name.
    expect(result.partitions.map((p) => p.sent)).toEqual([0]);
  });

  it('a dead-letter row with headers as an object (an older row shape) is redriven, not skipped', async () => {
    const settings = settingsFor();
    const value = order('p0-o5');
    await stageFiles(res.clients, settings, [
      {
        partition: 0,
        firstOffset: 5,
        lastOffset: 5,
        stream: 'deadletter',
        rows: [
          {
            source: { topic: 'orders', partition: 0, offset: 5 },
            error: 'bug: old',
            raw: {
              key: null,
              value: Buffer.from(value).toString('base64'),
              headers: { 'idempotency-key': 'p0-o5' },
            },
          },
        ],
      },
    ]);
    await checkpoint(settings);
    expect(await committedDeadLetters(settings)).toHaveLength(1);
    const outcome = await redrive({ settings, clients: res.clients, transform: orders }).catch(
      (error: unknown) => error,
    );
    // Correct: the record (its key and value are there) is redriven, or the run fails naming the row. Observed:
    // `orders-0: nothing to redrive` with sent 0 and unchanged 0.
    const loud = outcome instanceof Error || (outcome as RedriveResult).partitions[0]?.sent === 1;
    expect(loud).toBe(true);
  });
});

describe('eos redrive', () => {
  async function run(args: string[], settings: Settings) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(
      [
        'node',
        'eos',
        'redrive',
        '--table',
        res.table,
        '--bucket',
        settings.bucket,
        '--pipeline',
        settings.pipelineId,
        ...args,
      ],
      { redrive: { clients: res.clients, write: (t) => out.push(t), env: {} } },
      { writeError: (t) => err.push(t), writeOut: (t) => out.push(t) },
    );
    return { code, out: out.join(''), err: err.join('') };
  }

  it('eos redrive runs (settings are parsed once)', async () => {
    const settings = settingsFor();
    const empty = await run(['--transform', 'orders'], settings);
    expect(empty).toMatchObject({ code: 0, out: 'no dead letters are committed: nothing to redrive\n' });
    await processorFor(settings).processEvent(mskEvent(orderRecords(0, 0, 10)));
    await checkpoint(settings);
    const first = await run(['--transform', 'orders'], settings);
    expect(first).toMatchObject({ code: 0 });
    expect(first.out).toMatch(/orders-0: round 1: 1 sent, 1 output rows/);
    expect((await run(['--transform', 'orders', '--all'], settings)).code).toBe(1); // waiting
    await checkpoint(settings);
    expect(await committedOrderIds(settings)).toEqual(ids(0, 0, 10).sort());
  });

  it('usage errors exit 2 before any effect (--all with --checkpoint, --checkpoint x, --checkpoint 0)', async () => {
    const settings = settingsFor();
    for (const args of [
      ['--all', '--checkpoint', '1'],
      ['--checkpoint', 'x'],
      ['--checkpoint', '0'],
    ]) {
      const result = await run(args, settings);
      expect(result.code).toBe(2);
      expect(result.err).toMatch(/^error: /);
    }
  });
});
