/**
 * `eos local`'s operations scenarios. The recreated topic: the topic is deleted and created again mid-run, the processor
 * stops each partition whose offsets went backwards, the run opens a new epoch for it (as `eos epoch --start-new`)
 * and goes on. The verdict is the end-to-end property per epoch: 0 lost, 0 duplicated in each. Real DynamoDB Local
 * and S3 server, the virtual clock, and the fault schedules of the chaos test.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { type FaultRates, NO_FAULTS } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { runLocal } from '../../local/runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

const HEAVY: FaultRates = {
  crash: 0.3,
  redeliver: 0.2,
  zombie: 0.2,
  throttle: 0.1,
  'server-error': 0.1,
  conflict: 0.1,
  'coordinator-crash': 0.3,
  poison: 0.05,
};

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rep');
});

async function recreatedRun(seed: number, faults: typeof NO_FAULTS) {
  const settings = parseSettings({
    pipelineId: uniqueName('rep'),
    ledgerTable: res.table,
    bucket: res.bucket,
    maxTransactionItems: 10,
  });
  const generation = (s: number, records: number) =>
    generateOrders({
      seed: s,
      records,
      partitions: 3,
      duplicateRate: 0.1,
      poisonRate: faults.poison,
      customers: 5,
    });
  const { report } = await runLocal({
    settings,
    input: generation(seed, 40),
    recreateTopicWith: generation(seed + 1, 25),
    partitions: 3,
    faults,
    seed,
    checkpointIntervalMs: 300,
    clock: 'virtual',
    batchSize: 6,
  });
  return { report, settings };
}

describe('a topic recreated mid-run', () => {
  it('without faults: every partition the new generation reaches moves to epoch 1, each epoch exactly once', async () => {
    const { report, settings } = await recreatedRun(11, NO_FAULTS);
    expect(report.violations).toEqual([]);
    expect(report.verdict).toBe('exactly-once');
    expect(report.records.in).toBe(65);
    const epochs = await new EpochLedger(
      res.clients.dynamodb,
      res.table,
      settings.pipelineId,
      new ManualClock(0),
    ).partitions();
    const switched = epochs.filter((p) => p.epoch === 1);
    expect(report.epochsOpened).toBe(switched.length);
    expect(switched.length).toBeGreaterThan(0);
    for (const p of switched) {
      expect(p.epochs[0]!.closedAt).toBeDefined();
      expect(p.epochs[0]!.stop?.reason).toBeTruthy();
    }
    expect(report.verify.ok).toBe(true);
  });

  it('under heavy faults (processor crashes at every step, zombies, transient errors, lost commits, coordinator crashes)', async () => {
    const injected = new Set<string>();
    for (const seed of [5, 23, 42, 77]) {
      const { report } = await recreatedRun(seed, HEAVY);
      expect({ seed, violations: report.violations }).toEqual({ seed, violations: [] });
      expect(report.epochsOpened).toBeGreaterThan(0);
      for (const [kind, count] of Object.entries(report.faults)) if (count > 0) injected.add(kind);
    }
    expect([...injected]).toEqual(
      expect.arrayContaining(['crash', 'zombie', 'redeliver', 'coordinator-crash', 'throttle', 'poison']),
    );
  });
});

describe('a redrive after fixing a transform', () => {
  /** `orders` with a bug: GBP orders are rejected. The fix is `orders` itself. */
  const orders = builtinTransform('orders');
  const buggy: Transform = {
    name: 'orders-gbp-bug',
    apply(record) {
      if (record.value?.includes('"currency":"GBP"'))
        return { kind: 'poison', error: 'bug: GBP not supported' };
      return orders.apply(record);
    },
  };

  async function redriveRun(seed: number, faults: FaultRates) {
    const settings = parseSettings({
      pipelineId: uniqueName('rdr'),
      ledgerTable: res.table,
      bucket: res.bucket,
      maxTransactionItems: 10,
    });
    const { report } = await runLocal({
      settings,
      transform: buggy,
      redriveWith: orders,
      input: generateOrders({
        seed,
        records: 60,
        partitions: 3,
        duplicateRate: 0.1,
        poisonRate: 0.05,
        customers: 5,
      }),
      partitions: 3,
      faults,
      seed,
      checkpointIntervalMs: 300,
      clock: 'virtual',
      batchSize: 6,
    });
    return report;
  }

  it('every fixed record is committed once, genuine poison stays dead-lettered, a second redrive stages nothing', async () => {
    const report = await redriveRun(3, NO_FAULTS);
    expect(report.violations).toEqual([]);
    expect(report.redrive!.output).toBeGreaterThan(0);
    expect(report.redrive!.unchanged).toBeGreaterThan(0);
    expect(report.redrive!.secondRunStaged).toBe(0);
  });

  it('under heavy faults, with the first redrive crashing at a seeded step', async () => {
    for (const seed of [4, 8, 12]) {
      const report = await redriveRun(seed, HEAVY);
      expect({ seed, violations: report.violations }).toEqual({ seed, violations: [] });
      expect(report.redrive!.secondRunStaged).toBe(0);
      expect(report.redrive!.output).toBeGreaterThan(0);
    }
  });
});

describe('a replay of a range with a changed transform', () => {
  const orders = builtinTransform('orders');
  const buggy: Transform = {
    name: 'orders-gbp-bug',
    apply(record) {
      if (record.value?.includes('"currency":"GBP"'))
        return { kind: 'poison', error: 'bug: GBP not supported' };
      return orders.apply(record);
    },
  };

  async function replayRun(seed: number, faults: FaultRates) {
    const settings = parseSettings({
      pipelineId: uniqueName('rpl'),
      ledgerTable: res.table,
      bucket: res.bucket,
      maxTransactionItems: 10,
    });
    const { report } = await runLocal({
      settings,
      transform: buggy,
      replayWith: orders,
      input: generateOrders({
        seed,
        records: 60,
        partitions: 3,
        duplicateRate: 0.1,
        poisonRate: 0.05,
        customers: 5,
      }),
      partitions: 3,
      faults,
      seed,
      checkpointIntervalMs: 300,
      clock: 'virtual',
      batchSize: 6,
    });
    return report;
  }

  it('readers see the old generation, then the new one for the range: never both, never neither', async () => {
    const report = await replayRun(3, NO_FAULTS);
    expect(report.violations).toEqual([]);
    const replay = report.replay!;
    expect(replay.switchedIn).toBeGreaterThan(0);
    expect(replay.viewsChecked).toBeGreaterThan(replay.viewsSwitched);
    expect(replay.viewsSwitched).toBeGreaterThan(0);
    expect(replay.crashed).toBe(false);
    // The verdict is judged on the view against the fixed transform inside the range: its GBP orders are output.
    expect(report.outcome).toMatchObject({ lost: 0, duplicated: 0, unexpected: 0, aggregatesMatch: true });
  });

  it('under heavy faults, with the replay processor crashing once at a seeded step and lost acknowledgements', async () => {
    for (const seed of [4, 8]) {
      const report = await replayRun(seed, HEAVY);
      expect({ seed, violations: report.violations }).toEqual({ seed, violations: [] });
      expect(report.replay!.crashed).toBe(true);
      expect(report.replay!.switchedIn).toBeGreaterThan(0);
    }
  });
});
