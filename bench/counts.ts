/**
 * The counts behind the cost model (cli/cost-model.ts), measured on the local parts and fitted: the processor's
 * calls per batch under each guarantee at two batch sizes, an exactly-once stateless batch's write units by its
 * position after a checkpoint's cleanup (its fence item grows until then), and a checkpoint's calls at five shapes
 * that tell its terms apart (a fixed part, per shard, per partition, per staged file, per final object).
 * `npm run bench` writes them to `cli/cost-counts.json`, which ships with the package for `eos cost`; alone, after
 * a change to the processor or the coordinator:
 *
 *   npm run bench:counts        (starts the local parts; under a minute)
 *
 * test/bench/cost-model.test.ts measures a shape the fit never saw and checks the model predicts its counts.
 */
import '../local/polyfills.ts';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CheckpointShape, CostCounts, Prices, ProcessorCounts } from '../cli/cost-model.ts';
import { createLocalCoordinator } from '../local/coordinator-runner.ts';
import { CallCounter } from '../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients } from '../shared/aws/clients.ts';
import { type DeliveryGuarantee, parseSettings } from '../shared/config/settings.ts';
import { MAX_SHARDS } from '../shared/coordinator/definition.ts';
import { DEFAULT_PROMOTION_LIMITS } from '../shared/coordinator/promote/final-plan.ts';
import { PARTITIONS_PER_SHARD, shardCountFor } from '../shared/coordinator/shards.ts';
import { RECENT_STARTS } from '../shared/ledger/records.ts';
import { createProcessor } from '../shared/processor/processor.ts';
import { finalPrefix } from '../shared/sink/layout.ts';
import { listObjects } from '../shared/sink/objects.ts';
import { fitBatch, fitCheckpointCalls, fitCheckpointTerms } from './cost-fit.ts';
import { type IdleResult, measureIdle } from './idle.ts';
import { median } from './stats.ts';
import { batchEvent, CUSTOMER_POOL } from './workload.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const COST_COUNTS_FILE = join(root, 'cli', 'cost-counts.json');
export const PRICES_FILE = join(root, 'bench', 'prices.json');
const RECORDS_PER_FILE = 5;

/** A checkpoint to measure: `partitions` partitions with `filesPerPartition` staged files each. */
export interface CheckpointSpec {
  readonly partitions: number;
  readonly filesPerPartition: number;
  /** Promotion's member limit (default the coordinator's): a low one makes several final objects a partition. */
  readonly maxMembers?: number;
  /** The coordinator's partitions per shard (default its own): a low one gives small shapes several shards. */
  readonly partitionsPerShard?: number;
}

/**
 * Five shapes whose (1, shards, partitions, files, final objects) rows are independent: files alone vary from
 * the first to the second, final objects alone from the second to the fourth, shards alone from the first to the
 * third (one shard a partition there), and the last deals 20 partitions to 5 shards.
 */
export const FIT_SHAPES: readonly CheckpointSpec[] = [
  { partitions: 2, filesPerPartition: 2 },
  { partitions: 2, filesPerPartition: 6 },
  { partitions: 2, filesPerPartition: 2, partitionsPerShard: 1 },
  { partitions: 2, filesPerPartition: 6, maxMembers: 2 },
  { partitions: 20, filesPerPartition: 1, partitionsPerShard: 4 },
];

export interface MeasuredCheckpoint {
  readonly spec: CheckpointSpec;
  readonly status: string;
  readonly shape: CheckpointShape;
  readonly calls: Record<string, number>;
  readonly transactionItems: number;
  readonly statementWrites: number;
  /** Write units of the single writes, as DynamoDB Local reported them by item size. */
  readonly singleWriteUnits: number;
  readonly lambdaInvocations: number;
  /** State transitions (states entered and retried), what a Standard workflow bills. */
  readonly transitions: number;
  /** Step Functions executions (one, or an Express one and the Standard one it handed off to). */
  readonly executions: number;
  /** Summed over the coordinator's invocations. */
  readonly invocationMs: number;
}

let seq = 0;
const tag = () => `${process.pid}-${Date.now().toString(36)}-${++seq}`;

async function finalObjectCount(bucket: string, pipeline: string): Promise<number> {
  const clients = createAwsClients();
  try {
    let count = 0;
    for await (const _ of listObjects(clients.s3, bucket, finalPrefix(pipeline))) count++;
    return count;
  } finally {
    clients.s3.destroy();
    clients.dynamodb.destroy();
  }
}

/**
 * Stages the spec's files on a pipeline whose partitions each committed a file before, then counts the calls of
 * the one checkpoint that covers them.
 * `instrument` sees the coordinator's clients before it runs (a test adds calls through it).
 */
export async function measureCheckpoint(
  base: { table: string; bucket: string },
  spec: CheckpointSpec,
  instrument?: (clients: AwsClients, pipeline: string) => void,
): Promise<MeasuredCheckpoint> {
  // Staged by a transform without keyed state, as the headline's pipeline: each chunk's entries ride inline in its
  // fence item (shared/ledger/inline-entries.ts), so cleanup removes them with one write a partition.
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: `cost-cp-${tag()}`,
    idempotencyKey: 'none',
    transform: 'passthrough',
  });
  const clients = createAwsClients();
  const processor = createProcessor({ settings, clients });
  const coordinatorOptions = {
    ...(spec.maxMembers ? { promotionLimits: { maxMembers: spec.maxMembers } } : {}),
    ...(spec.partitionsPerShard ? { partitionsPerShard: spec.partitionsPerShard } : {}),
  };
  // The steady state: every partition staged and committed once before (a partition's first staging also settles
  // the legacy fence key, a transaction, so its entries are items: fences.ts).
  for (let partition = 0; partition < spec.partitions; partition++)
    await processor.processEvent(batchEvent(partition, 0, RECORDS_PER_FILE));
  const warmUp = await createLocalCoordinator({ settings, clients, ...coordinatorOptions }).runCheckpoint();
  if (warmUp.status !== 'committed')
    throw new Error(`the warm-up checkpoint did not commit: ${warmUp.status}`);
  const finalsBefore = await finalObjectCount(settings.bucket, settings.pipelineId);
  for (let file = 1; file <= spec.filesPerPartition; file++) {
    for (let partition = 0; partition < spec.partitions; partition++) {
      await processor.processEvent(batchEvent(partition, file * RECORDS_PER_FILE, RECORDS_PER_FILE));
    }
  }
  const calls = new CallCounter().attach(clients);
  instrument?.(clients, settings.pipelineId);
  const outcome = await createLocalCoordinator({ settings, clients, ...coordinatorOptions }).runCheckpoint();
  const finalObjects = (await finalObjectCount(settings.bucket, settings.pipelineId)) - finalsBefore;
  return {
    spec,
    status: outcome.status,
    shape: {
      shards: shardCountFor(spec.partitions, spec.partitionsPerShard ?? PARTITIONS_PER_SHARD),
      partitions: spec.partitions,
      stagedFiles: spec.partitions * spec.filesPerPartition,
      finalObjects,
    },
    calls: calls.snapshot(),
    transactionItems: calls.transactionItems(),
    statementWrites: calls.statementWrites(),
    singleWriteUnits: calls.singleWriteUnits(),
    lambdaInvocations: outcome.invocations.length,
    transitions: outcome.transitions,
    executions: outcome.executions.length,
    invocationMs: outcome.invocations.reduce((a, i) => a + i.durationMs, 0),
  };
}

export interface MeasuredBatches {
  readonly mode: DeliveryGuarantee;
  readonly records: number;
  /** Distinct state keys (customers) in each batch. */
  readonly stateKeys: number;
  /** Per batch, steady state (after a warm-up). */
  readonly calls: Record<string, number>;
  readonly transactionItems: number;
  /** Per batch: write units of the single writes, by item size (a fence holding inline entries weighs more). */
  readonly singleWriteUnits: number;
  readonly ms: number;
}

/**
 * `batches` batches of `records` records of one partition, after two of warm-up: calls, items and time per batch.
 * `transform`: the benchmark's `orders` (keyed state: one item per customer) or `passthrough` (no state). No
 * checkpoint runs meanwhile, so a fence's inline entries grow from the third batch to the last: about the middle
 * of a checkpoint interval at the stack's defaults ({@link measureCheckpointCycle} measures each position).
 */
export async function measureBatches(
  base: { table: string; bucket: string },
  mode: DeliveryGuarantee,
  records: number,
  batches = 6,
  transform: 'orders' | 'passthrough' = 'orders',
): Promise<MeasuredBatches> {
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: `cost-batch-${tag()}`,
    deliveryGuarantee: mode,
    idempotencyKey: 'none',
    transform,
  });
  const clients = createAwsClients();
  const processor = createProcessor({ settings, clients });
  let offset = 0;
  const next = async () => {
    const started = performance.now();
    await processor.processEvent(batchEvent(0, offset, records));
    offset += records;
    return performance.now() - started;
  };
  await next();
  await next();
  const calls = new CallCounter().attach(clients);
  const times: number[] = [];
  for (let i = 0; i < batches; i++) times.push(await next());
  return {
    mode,
    records,
    stateKeys: transform === 'orders' ? Math.min(records, CUSTOMER_POOL) : 0,
    calls: Object.fromEntries(Object.entries(calls.snapshot()).map(([op, n]) => [op, n / batches])),
    transactionItems: calls.transactionItems() / batches,
    singleWriteUnits: calls.singleWriteUnits() / batches,
    ms: Number(median(times).toFixed(2)),
  };
}

/** Two batch sizes with different numbers of distinct state keys, so items per key and per batch separate. */
export const BATCH_SIZES = [20, 500] as const;

/**
 * Batches measured after a checkpoint's cleanup at most. The measurement ends with the first chunk past the inline
 * budget, which moves the fence's entries into items (a transaction): the fence is then as a cleanup leaves it, so
 * the positions after it repeat the measured ones, and the model prices them so.
 */
export const CYCLE_MAX_BATCHES = 100;

export interface MeasuredCycle {
  readonly records: number;
  /**
   * DynamoDB write units of each batch after a checkpoint's cleanup, by position (index 0: the first batch after
   * it): single writes and transactions by the items' sizes (`CallCounter.transactionUnits`), PartiQL writes one.
   */
  readonly writeUnits: readonly number[];
  /** TransactWriteItems calls of each batch, by position: 1 for the last, the chunk past the inline budget. */
  readonly transactions: readonly number[];
}

/**
 * The exactly-once write units of a stateless batch (`passthrough`) by its position in a checkpoint cycle: the
 * staging write updates the partition's fence item, which carries the entries staged since the last cleanup, and
 * DynamoDB bills it by the item's size, so the k-th batch after a cleanup costs more than the first. One partition
 * stages enough batches to fill the fence's ring of batch starts (as in steady state), one checkpoint commits and
 * empties the fence, then each batch is counted on its own, up to and with the first that moves the fence's
 * entries into items (at most {@link CYCLE_MAX_BATCHES}; none by then is an error: the cycle would not repeat).
 */
export async function measureCheckpointCycle(
  base: { table: string; bucket: string },
  records: number = BATCH_SIZES[1],
): Promise<MeasuredCycle> {
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: `cost-cycle-${tag()}`,
    deliveryGuarantee: 'exactly-once',
    idempotencyKey: 'none',
    transform: 'passthrough',
  });
  const clients = createAwsClients();
  try {
    const processor = createProcessor({ settings, clients });
    let offset = 0;
    const stage = async () => {
      await processor.processEvent(batchEvent(0, offset, records));
      offset += records;
    };
    for (let i = 0; i < RECENT_STARTS + 2; i++) await stage();
    const checkpoint = await createLocalCoordinator({ settings, clients }).runCheckpoint();
    if (checkpoint.status !== 'committed')
      throw new Error(`the cycle's checkpoint did not commit: ${checkpoint.status}`);
    const calls = new CallCounter().attach(clients);
    const writeUnits: number[] = [];
    const transactions: number[] = [];
    while (!transactions.some((n) => n > 0)) {
      if (writeUnits.length === CYCLE_MAX_BATCHES)
        throw new Error(`no chunk moved the fence's inline entries within ${CYCLE_MAX_BATCHES} batches`);
      calls.reset();
      await stage();
      writeUnits.push(calls.singleWriteUnits() + calls.transactionUnits() + calls.statementWrites());
      transactions.push(calls.snapshot()['dynamodb:TransactWriteItems'] ?? 0);
    }
    return { records, writeUnits, transactions };
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
}

/** The terms of a count per batch, from the same count at two batch sizes. */
function byRecords(small: MeasuredBatches, large: MeasuredBatches, of: (m: MeasuredBatches) => number) {
  return fitBatch({ x: small.records, y: of(small) }, { x: large.records, y: of(large) });
}

function callTermsOf(small: MeasuredBatches, large: MeasuredBatches): ProcessorCounts['calls'] {
  const operations = [...new Set([...Object.keys(small.calls), ...Object.keys(large.calls)])].sort();
  return Object.fromEntries(operations.map((op) => [op, byRecords(small, large, (m) => m.calls[op] ?? 0)]));
}

/**
 * The processor's counts: `small` and `large` measured with keyed state (`orders`), `stateless` with a transform
 * that keeps none (`passthrough`), whose chunks write their fence alone (one UpdateItem, inline entries).
 */
export function fitProcessor(
  small: MeasuredBatches,
  large: MeasuredBatches,
  stateless: readonly [MeasuredBatches, MeasuredBatches],
): ProcessorCounts {
  const items = fitBatch(
    { x: small.stateKeys, y: small.transactionItems },
    { x: large.stateKeys, y: large.transactionItems },
  );
  const [plainSmall, plainLarge] = stateless;
  return {
    calls: callTermsOf(small, large),
    transactionItems: { fixed: items.fixed, perStateKey: items.perRecord },
    singleWriteUnits: byRecords(small, large, (m) => m.singleWriteUnits),
    ms: byRecords(small, large, (m) => m.ms),
    stateless: {
      calls: callTermsOf(plainSmall, plainLarge),
      transactionItems: byRecords(plainSmall, plainLarge, (m) => m.transactionItems),
      singleWriteUnits: byRecords(plainSmall, plainLarge, (m) => m.singleWriteUnits),
      ms: byRecords(plainSmall, plainLarge, (m) => m.ms),
    },
  };
}

export function fitCheckpoints(measured: readonly MeasuredCheckpoint[]): CostCounts['checkpoint'] {
  const shapes = measured.map((m) => m.shape);
  const invocations = measured.reduce((a, m) => a + m.lambdaInvocations, 0);
  return {
    calls: fitCheckpointCalls(
      shapes,
      measured.map((m) => m.calls),
    ),
    transactionItems: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.transactionItems),
    ),
    statementWrites: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.statementWrites),
    ),
    singleWriteUnits: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.singleWriteUnits),
    ),
    lambdaInvocations: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.lambdaInvocations),
    ),
    transitions: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.transitions),
    ),
    executions: fitCheckpointTerms(
      shapes,
      measured.map((m) => m.executions),
    ),
    msPerInvocation: Number((measured.reduce((a, m) => a + m.invocationMs, 0) / invocations).toFixed(1)),
  };
}

export function readPrices(): Prices {
  return JSON.parse(readFileSync(PRICES_FILE, 'utf8')) as Prices;
}

export interface CostCountsRun {
  readonly counts: CostCounts;
  readonly batches: readonly MeasuredBatches[];
  readonly checkpoints: readonly MeasuredCheckpoint[];
  readonly cycle: MeasuredCycle;
}

/** Measures and fits everything the cost model needs; `idle` from bench/idle.ts (the stack and the monitor). */
export async function measureCostCounts(
  base: { table: string; bucket: string },
  idle: IdleResult,
  by: string,
): Promise<CostCountsRun> {
  const batches: MeasuredBatches[] = [];
  const fits = {} as Record<keyof CostCounts['processor'], ProcessorCounts>;
  for (const mode of ['exactly-once', 'at-least-once'] as const) {
    const [small, large] = [
      await measureBatches(base, mode, BATCH_SIZES[0]),
      await measureBatches(base, mode, BATCH_SIZES[1]),
    ];
    const stateless = [
      await measureBatches(base, mode, BATCH_SIZES[0], 6, 'passthrough'),
      await measureBatches(base, mode, BATCH_SIZES[1], 6, 'passthrough'),
    ] as const;
    batches.push(small, large, ...stateless);
    fits[mode] = fitProcessor(small, large, stateless);
  }
  // At-least-once stages nothing in the ledger and runs no checkpoint: its batches have no cycle to measure.
  const cycle = await measureCheckpointCycle(base);
  const eo = fits['exactly-once'];
  const processor: CostCounts['processor'] = {
    'exactly-once': { ...eo, stateless: { ...eo.stateless, writeUnitsAfterCleanup: cycle.writeUnits } },
    'at-least-once': fits['at-least-once'],
  };
  const checkpoints: MeasuredCheckpoint[] = [];
  for (const spec of FIT_SHAPES) checkpoints.push(await measureCheckpoint(base, spec));
  const failed = checkpoints.find((c) => c.status !== 'committed');
  if (failed)
    throw new Error(`a measured checkpoint did not commit: ${JSON.stringify(failed.spec)}: ${failed.status}`);
  const counts: CostCounts = {
    measuredAt: new Date().toISOString(),
    by,
    defaults: idle.defaults,
    maxShards: MAX_SHARDS,
    partitionsPerShard: PARTITIONS_PER_SHARD,
    promotionLimits: {
      maxObjectBytes: DEFAULT_PROMOTION_LIMITS.maxObjectBytes,
      maxMembers: DEFAULT_PROMOTION_LIMITS.maxMembers,
      maxObjectRows: DEFAULT_PROMOTION_LIMITS.maxObjectRows!,
    },
    stateKeys: CUSTOMER_POOL,
    processor,
    checkpoint: fitCheckpoints(checkpoints),
    monitor: idle.monitor.calls,
    stack: { alarms: idle.alarms, dashboards: idle.dashboards, customMetrics: idle.customMetrics },
    prices: readPrices(),
  };
  return { counts, batches, checkpoints, cycle };
}

/** The counts as `biome check` wants them (it fills arrays of numbers to the line width), so `npm run lint` passes. */
export function writeCostCounts(counts: CostCounts): void {
  const text = execFileSync(
    join(root, 'node_modules', '.bin', 'biome'),
    ['format', '--stdin-file-path=cli/cost-counts.json'],
    { cwd: root, input: `${JSON.stringify(counts, null, 2)}\n`, encoding: 'utf8' },
  );
  writeFileSync(COST_COUNTS_FILE, text);
}

async function main(): Promise<void> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  const { startLocalParts } = await import('../local/parts.ts');
  const { createBucket, createLedgerTable } = await import('../local/provision.ts');
  const parts = await startLocalParts();
  Object.assign(process.env, parts.env);
  try {
    const clients = createAwsClients();
    const base = { table: 'cost-ledger', bucket: 'cost-bucket' };
    await Promise.all([
      createLedgerTable(clients.dynamodb, base.table),
      createBucket(clients.s3, base.bucket),
    ]);
    const idle = await measureIdle(base);
    const { counts } = await measureCostCounts(base, idle, 'npm run bench:counts');
    writeCostCounts(counts);
    process.stdout.write(`wrote ${COST_COUNTS_FILE}\n`);
  } finally {
    await parts.stop();
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === resolve(process.argv[1])) await main();
