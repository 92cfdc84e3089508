/**
 * The cost model (cli/cost-model.ts) against calls counted on the real local parts: the fit of bench/counts.ts
 * predicts, exactly, the calls of checkpoints and batches it never saw; the counts `eos cost` ships
 * (cli/cost-counts.json) are the ones the code makes now (rerun `npm run bench:counts` after changing the
 * processor or the coordinator); a call added per staged file moves the fit and the bill; and a stateless batch's
 * write units follow its position after a checkpoint's cleanup.
 */

import { readFileSync } from 'node:fs';
import { HeadObjectCommand } from '@aws-sdk/client-s3';
import type { MetadataBearer, MiddlewareStack } from '@smithy/types';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  BATCH_SIZES,
  COST_COUNTS_FILE,
  FIT_SHAPES,
  fitCheckpoints,
  fitProcessor,
  type MeasuredCheckpoint,
  measureBatches,
  measureCheckpoint,
  measureCheckpointCycle,
} from '../../bench/counts.ts';
import {
  batchCalls,
  batchTransactionItems,
  type CheckpointCounts,
  type CostCounts,
  type CostInput,
  checkpointCalls,
  filesPerPartition,
  MONTH_SECONDS,
  meanOverCycle,
  mergedObjectCount,
  monthlyCost,
  trafficOf,
} from '../../cli/cost-model.ts';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { parseStagedObjectKey } from '../../shared/sink/layout.ts';
import { freshResources, type TestResources } from '../support/aws.ts';

const shipped = JSON.parse(readFileSync(COST_COUNTS_FILE, 'utf8')) as CostCounts;

/**
 * The fitted counts of the calls, without the measured time and the write units by item size (both vary run to run:
 * the units with the length of each run's pipeline id, a few bytes of every fence item).
 */
function callTerms(c: CheckpointCounts) {
  const { msPerInvocation: _time, singleWriteUnits: _units, ...terms } = c;
  return terms;
}

function predicted(fit: CheckpointCounts, m: MeasuredCheckpoint) {
  const p = checkpointCalls(fit, m.shape);
  // Terms may be fractions: round the sums so that 0.1 + 0.2 compares as the count it predicts.
  const count = (n: number) => Math.round(n * 1e6) / 1e6;
  const nonZero = Object.fromEntries(
    Object.entries(p.calls)
      .filter(([, n]) => count(n) !== 0)
      .map(([op, n]) => [op, count(n)]),
  );
  return {
    calls: nonZero,
    transactionItems: count(p.transactionItems),
    statementWrites: count(p.statementWrites),
    lambdaInvocations: count(p.lambdaInvocations),
    transitions: count(p.transitions),
  };
}

/** A coordinator that HEADs every staged object it reads: one more call per staged file. */
function headEachStagedRead(clients: AwsClients, pipeline: string): void {
  type Stack = MiddlewareStack<object, MetadataBearer>;
  (clients.s3.middlewareStack as unknown as Stack).add(
    (next, context) => async (args) => {
      const input = args.input as { Bucket?: string; Key?: string };
      if (context.commandName === 'GetObjectCommand' && parseStagedObjectKey(pipeline, input.Key)) {
        await clients.s3.send(new HeadObjectCommand({ Bucket: input.Bucket, Key: input.Key }));
      }
      return next(args);
    },
    { step: 'initialize', name: 'headEachStagedRead' },
  );
}

let res: TestResources;
let base: { table: string; bucket: string };
let measured: MeasuredCheckpoint[];

beforeAll(async () => {
  res = await freshResources('cost');
  base = { table: res.table, bucket: res.bucket };
  measured = [];
  for (const spec of FIT_SHAPES) measured.push(await measureCheckpoint(base, spec));
}, 240_000);

describe('checkpoint counts', () => {
  it('every measured shape commits, and the shapes determine the fit', () => {
    expect(measured.map((m) => m.status)).toEqual(FIT_SHAPES.map(() => 'committed'));
    const fit = fitCheckpoints(measured);
    for (const m of measured) expect(predicted(fit, m)).toEqual(pick(m));
  });

  it('predicts the calls of checkpoints whose shapes the fit never saw', async () => {
    const fit = fitCheckpoints(measured);
    const unseen = [
      { partitions: 3, filesPerPartition: 5, maxMembers: 2 },
      { partitions: 18, filesPerPartition: 2, partitionsPerShard: 5 },
    ];
    for (const spec of unseen) {
      const m = await measureCheckpoint(base, spec);
      expect(m.status).toBe('committed');
      // Each partition's files cut by the member limit, then packed whole into each shard's merged objects.
      const each = Math.ceil(spec.filesPerPartition / (spec.maxMembers ?? 2000));
      expect(m.shape.finalObjects).toBe(
        mergedObjectCount(spec.partitions * each, m.shape.shards, {
          bytes: 1,
          members: spec.filesPerPartition / each,
          limits: { ...shipped.promotionLimits, ...(spec.maxMembers ? { maxMembers: spec.maxMembers } : {}) },
        }),
      );
      expect(predicted(fit, m)).toEqual(pick(m));
    }
  }, 120_000);

  it('cli/cost-counts.json holds the counts the coordinator makes now (else: npm run bench:counts)', () => {
    expect(callTerms(shipped.checkpoint)).toEqual(callTerms(fitCheckpoints(measured)));
  });

  it('a call added per staged file moves the fit by one per file, and the bill with it', async () => {
    const mutated: MeasuredCheckpoint[] = [];
    for (const spec of FIT_SHAPES) mutated.push(await measureCheckpoint(base, spec, headEachStagedRead));
    const fit = fitCheckpoints(mutated);
    expect(fit.calls['s3:HeadObject']).toEqual({
      fixed: 0,
      perShard: 0,
      perPartition: 0,
      perStagedFile: 1,
      perFinalObject: 0,
    });
    const input = {
      recordsPerSecond: 10_000,
      recordBytes: 1024,
      partitions: 100,
      checkpointIntervalMinutes: 1,
      batchingWindowSeconds: 1,
      batchSize: 500,
      stateKeys: 40,
    };
    const before = monthlyCost(shipped, input);
    const after = monthlyCost({ ...shipped, checkpoint: { ...shipped.checkpoint, calls: fit.calls } }, input);
    const gets = (c: typeof before) => c.exactlyOnce.lines.find((l) => l.item.startsWith('S3 GET'))!;
    const files = trafficOf(shipped, input).checkpoint.stagedFiles * (30 * 24 * 60);
    expect(gets(after).quantity - gets(before).quantity).toBe(Math.round(files));
    expect(after.exactlyOnce.total).toBeGreaterThan(before.exactlyOnce.total);
  }, 120_000);
});

function pick(m: MeasuredCheckpoint) {
  return {
    calls: m.calls,
    transactionItems: m.transactionItems,
    statementWrites: m.statementWrites,
    lambdaInvocations: m.lambdaInvocations,
    transitions: m.transitions,
  };
}

describe('processor counts', () => {
  for (const mode of ['exactly-once', 'at-least-once'] as const) {
    it(`${mode}: the fit from batches of ${BATCH_SIZES.join(' and ')} predicts a batch of 100, and ships`, async () => {
      const measure = (records: number, transform?: 'passthrough') =>
        measureBatches(base, mode, records, 3, transform);
      const small = await measure(BATCH_SIZES[0]);
      const large = await measure(BATCH_SIZES[1]);
      const stateless = [
        await measure(BATCH_SIZES[0], 'passthrough'),
        await measure(BATCH_SIZES[1], 'passthrough'),
      ] as const;
      const fit = fitProcessor(small, large, stateless);
      const unseen = await measure(100);
      expect(batchCalls(fit, 100)).toEqual(unseen.calls);
      expect(batchTransactionItems(fit, unseen.stateKeys)).toBe(unseen.transactionItems);
      const unseenStateless = await measure(100, 'passthrough');
      expect(batchCalls(fit.stateless, 100)).toEqual(unseenStateless.calls);
      expect(shipped.processor[mode].calls).toEqual(fit.calls);
      expect(shipped.processor[mode].transactionItems).toEqual(fit.transactionItems);
      expect(shipped.processor[mode].stateless.calls).toEqual(fit.stateless.calls);
      expect(shipped.processor[mode].stateless.transactionItems).toEqual(fit.stateless.transactionItems);
      // Write units follow the fence item's size, which differs by a few bytes run to run: within one unit.
      const units = (t: { fixed: number; perRecord: number }) => t.fixed + t.perRecord * 100;
      expect(
        Math.abs(
          units(shipped.processor[mode].stateless.singleWriteUnits) - unseenStateless.singleWriteUnits,
        ),
      ).toBeLessThanOrEqual(1);
    }, 60_000);
  }

  it('exactly-once without keyed state writes its fence alone: one UpdateItem a batch, no transaction', async () => {
    const batch = await measureBatches(base, 'exactly-once', 100, 3, 'passthrough');
    expect(batch.calls).toEqual({ 'dynamodb:UpdateItem': 1, 's3:PutObject': 1 });
    expect(batch.transactionItems).toBe(0);
    // The fence with its inline entries weighs over 1 KB (the identity alone is about one), under 3.
    expect(batch.singleWriteUnits).toBeGreaterThanOrEqual(1);
    expect(batch.singleWriteUnits).toBeLessThanOrEqual(3);
  }, 60_000);
});

describe('stateless write units by position after a cleanup', () => {
  it('the mean over positions 1..n, the measured ones repeating after the last, a fraction weighing the last', () => {
    const units = [1, 1, 2, 9];
    expect(meanOverCycle(units, 2)).toBe(1);
    expect(meanOverCycle(units, 6)).toBeCloseTo((1 + 1 + 2 + 9 + 1 + 1) / 6, 12);
    expect(meanOverCycle(units, 2.5)).toBeCloseTo((1 + 1 + 0.5 * 2) / 2.5, 12);
    expect(meanOverCycle(units, 4)).toBe(13 / 4);
    expect(meanOverCycle(units, 8)).toBe(13 / 4);
    expect(meanOverCycle(units, 10.5)).toBeCloseTo((13 * 2 + 1 + 1 + 0.5 * 2) / 10.5, 12);
    expect(meanOverCycle(units, 0.3)).toBe(1);
    expect(meanOverCycle([3, 9], 1)).toBe(3);
    expect(() => meanOverCycle([], 2)).toThrow();
  });

  const headline: CostInput = {
    recordsPerSecond: 10_000,
    recordBytes: 1024,
    partitions: 100,
    checkpointIntervalMinutes: 1,
    batchingWindowSeconds: 5,
    batchSize: 500,
    stateKeys: 0,
  };
  /** The shipped counts with `units` by position, and the stateless fit's write units at `fit` a batch. */
  const withCycle = (units: readonly number[], fit = 0): CostCounts => {
    const eo = shipped.processor['exactly-once'];
    const terms = { fixed: fit, perRecord: 0 };
    const stateless = {
      ...eo.stateless,
      singleWriteUnits: terms,
      transactionItems: terms,
      writeUnitsAfterCleanup: units,
    };
    return { ...shipped, processor: { ...shipped.processor, 'exactly-once': { ...eo, stateless } } };
  };
  const wru = (counts: CostCounts, input: CostInput) =>
    monthlyCost(counts, input).exactlyOnce.lines.find((l) => l.item.startsWith('DynamoDB write'))!.quantity;

  it("prices a stateless batch's units by the cycle alone, at the interval's files per partition", () => {
    for (const minutes of [1, 5]) {
      const input = { ...headline, checkpointIntervalMinutes: minutes };
      const traffic = trafficOf(shipped, input);
      const n = filesPerPartition(traffic);
      expect(n).toBe(12 * minutes);
      const batches = traffic.batchesPerSecond * MONTH_SECONDS;
      const cycle = [1, 1, 2, 2];
      // The fit measured without a checkpoint is not added to the cycle's units.
      expect(wru(withCycle(cycle, 5), input)).toBe(wru(withCycle(cycle), input));
      // Bill quantities are rounded to whole units: their difference within one of the exact one.
      const added = wru(withCycle(cycle), input) - wru(withCycle([0]), input);
      expect(Math.abs(added - batches * meanOverCycle(cycle, n))).toBeLessThanOrEqual(1);
    }
    // Keyed state is priced by its fit, not the cycle.
    const keyed = { ...headline, stateKeys: 40 };
    expect(wru(withCycle([1, 1, 2, 2]), keyed)).toBe(wru(withCycle([50]), keyed));
  });

  it('the measured cycle: grows from at least a unit until the budget, then one transaction moves the entries to items', async () => {
    const cycle = await measureCheckpointCycle(base);
    const { writeUnits: units, transactions } = cycle;
    expect(units.length).toBe(transactions.length);
    // A checkpoint interval's batches at the defaults (12) fit the budget, with room.
    expect(units.length).toBeGreaterThan(24);
    expect(units[0]).toBeGreaterThanOrEqual(1);
    // Every batch an UpdateItem of the fence, but the last: the transaction that moves the entries into items.
    expect(transactions).toEqual([...units.slice(1).map(() => 0), 1]);
    const inline = units.slice(0, -1);
    for (let i = 1; i < inline.length; i++) expect(inline[i]).toBeGreaterThanOrEqual(inline[i - 1]!);
    // The cleanup emptied the fence: the first batch after it costs less than the last before the budget.
    expect(units[0]).toBeLessThan(inline.at(-1)!);
    // Two units an entry moved, and the fence twice.
    expect(units.at(-1)).toBeGreaterThanOrEqual(2 * units.length);
    // Item sizes differ by a few bytes with the pipeline id: within one unit, position by position.
    const shippedUnits = shipped.processor['exactly-once'].stateless.writeUnitsAfterCleanup;
    expect(shippedUnits.length).toBe(units.length);
    for (const [i, u] of units.entries()) expect(Math.abs(shippedUnits[i]! - u)).toBeLessThanOrEqual(1);
  }, 60_000);
});
