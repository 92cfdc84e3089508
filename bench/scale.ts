/**
 * Scale: a checkpoint over 1,000 Kafka partitions and 10,000 staged files (`commit_s_1000p` and its AWS calls,
 * `checkpoint_calls_1000p`, measured), staged by a transform without keyed state after one committed checkpoint,
 * and the most writes one DynamoDB partition key takes at 1,000 partitions staging once a second each
 * (`max_writes_per_key_per_s_1000p`, from the ledger layout: every item a staging transaction writes, by key).
 */
import '../local/polyfills.ts';
import { createLocalCoordinator } from '../local/coordinator-runner.ts';
import { CallCounter } from '../shared/aws/call-counter.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { parseSettings } from '../shared/config/settings.ts';
import { TransientAwsError } from '../shared/errors.ts';
import type { MskEvent } from '../shared/kafka/event.ts';
import { FENCE_SHARDS, fenceKeys } from '../shared/ledger/fences.ts';
import { keys } from '../shared/ledger/layout.ts';
import { createProcessor } from '../shared/processor/processor.ts';
import { batchEvent } from './workload.ts';

export interface ScaleResult {
  readonly partitions: number;
  readonly stagedFiles: number;
  /** Staging the files (the processor, every partition of an event concurrently), seconds. */
  readonly stageSeconds: number;
  readonly status: string;
  /** The checkpoint that covers them, begin to cleanup, seconds. */
  readonly commitSeconds: number;
  readonly lambdaInvocations: number;
  /** AWS calls of that checkpoint (every step), by operation, counted on the coordinator's own clients. */
  readonly calls?: Record<string, number>;
  /** Their sum (`checkpoint_calls_1000p`). */
  readonly callsTotal?: number;
}

export interface KeyWriteRates {
  readonly partitions: number;
  readonly batchesPerPartitionPerSecond: number;
  readonly fenceShards: number;
  /** The busiest key's writes a second, and which kind of item it holds. */
  readonly maxWritesPerKeyPerSecond: number;
  readonly busiestKey: string;
}

/** Writes per second per partition key when each of `partitions` partitions of `topic` stages once a second. */
export function keyWriteRates(pipeline: string, topic: string, partitions: number): KeyWriteRates {
  const writes = new Map<string, number>();
  const add = (pk: string) => writes.set(pk, (writes.get(pk) ?? 0) + 1);
  for (let partition = 0; partition < partitions; partition++) {
    // One staging transaction: the fence, the staged entry (per stream: same key), the key-window bucket
    // (partition scope) — claims (global scope) and state items are keyed by record, not by partition.
    add(fenceKeys.fence(pipeline, topic, partition).pk);
    add(keys.stagedPk(pipeline, topic, partition));
    add(keys.keyWindowPk(pipeline, topic, partition));
  }
  const [busiestKey, max] = [...writes].sort((a, b) => b[1] - a[1])[0]!;
  return {
    partitions,
    batchesPerPartitionPerSecond: 1,
    fenceShards: FENCE_SHARDS,
    maxWritesPerKeyPerSecond: max,
    busiestKey: busiestKey.replace(pipeline, '<pl>'),
  };
}

/** One event holding `size` records of every partition from `first` to `last`. */
function eventOf(partitions: number, from: number, size: number): MskEvent {
  const event = batchEvent(0, from, size);
  for (let partition = 1; partition < partitions; partition++)
    Object.assign(event.records, batchEvent(partition, from, size).records);
  return event;
}

const DELIVERY_ATTEMPTS = 5;

/**
 * One delivery, retried as the event source mapping retries a batch whose invocation failed transiently: a
 * thousand partitions at once can exhaust the local S3 server's sockets on a busy machine.
 */
async function deliver(run: () => Promise<unknown>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await run();
      return;
    } catch (error) {
      if (!(error instanceof TransientAwsError) || attempt >= DELIVERY_ATTEMPTS) throw error;
      process.stderr.write(`[bench] scale: ${error.message}; delivering again (attempt ${attempt + 1})\n`);
    }
  }
}

export async function measureScale(
  base: { table: string; bucket: string },
  partitions = Number(process.env.BENCH_SCALE_PARTITIONS ?? 1000),
  filesPerPartition = Number(process.env.BENCH_SCALE_FILES_PER_PARTITION ?? 10),
): Promise<ScaleResult> {
  // The headline's pipeline: a transform without keyed state, so each chunk's entry rides inline in its fence.
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: `bench-scale-${partitions}`,
    idempotencyKey: 'none',
    transform: 'passthrough',
  });
  const clients = createAwsClients();
  const processor = createProcessor({ settings, clients });
  // The steady state: every partition staged and committed once before (a partition's first staging settles the
  // legacy fence key in a transaction, so its entry is an item); not timed, not counted.
  await deliver(() => processor.processEvent(eventOf(partitions, 0, 5)));
  const warmUp = await createLocalCoordinator({ settings, clients }).runCheckpoint();
  process.stderr.write(`[bench] scale: warm-up checkpoint ${warmUp.status}\n`);
  const staging = performance.now();
  for (let round = 1; round <= filesPerPartition; round++) {
    await deliver(() => processor.processEvent(eventOf(partitions, round * 5, 5)));
    process.stderr.write(`[bench] scale: staged round ${round}/${filesPerPartition}\n`);
  }
  const stageSeconds = (performance.now() - staging) / 1000;
  const coordinatorClients = createAwsClients();
  const counter = new CallCounter().attach(coordinatorClients);
  const started = performance.now();
  const outcome = await createLocalCoordinator({ settings, clients: coordinatorClients }).runCheckpoint();
  const commitSeconds = (performance.now() - started) / 1000;
  process.stderr.write(
    `[bench] checkpoint over ${partitions} partitions, ${partitions * filesPerPartition} staged files: ${outcome.status} in ${commitSeconds.toFixed(1)}s\n`,
  );
  return {
    partitions,
    stagedFiles: partitions * filesPerPartition,
    stageSeconds: Number(stageSeconds.toFixed(1)),
    status: outcome.status,
    commitSeconds: Number(commitSeconds.toFixed(1)),
    lambdaInvocations: outcome.invocations.length,
    calls: counter.snapshot(),
    callsTotal: counter.total(),
  };
}
