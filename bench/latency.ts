/**
 * Visibility latency at the stack's defaults: the checkpoint interval, batching window and batch size a
 * `cdk deploy` gets without props, run end to end on the local parts with input appended at a steady rate below
 * capacity. The stack's batching window is chosen by cost (fewer, fuller batches, so fewer staged files and
 * transactions); what it may cost in freshness is bounded: a record must be in committed output within one
 * checkpoint interval plus 10 s of its arrival. Each record's latency is its append to the end of the commit step
 * of the checkpoint whose manifest covers it (bench/e2e-visibility.ts `visibilityLatencies`).
 *
 * Locally a checkpoint takes well under a second; on AWS each step is a Lambda invocation and the state machine
 * adds its own transitions, a few seconds more, which the margin left by the window must absorb.
 */
import { pipelineConfigSchema } from '../infra/config.ts';
import { E2E_DEFAULTS, type E2eConfig, runVisibility } from './e2e.ts';
import { percentile } from './stats.ts';

/** The bound the defaults must keep: one checkpoint interval plus this, from a record's arrival to its commit. */
export const LATENCY_MARGIN_MS = 10_000;

export interface StackDefaultsLatency {
  checkpointIntervalMs: number;
  batchingWindowMs: number;
  batchSize: number;
  partitions: number;
  paceRecordsPerSecond: number;
  records: number;
  checkpointsCommitted: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  /** checkpointIntervalMs + LATENCY_MARGIN_MS. */
  boundMs: number;
  /** Median checkpoint execution (begin started → commit returned), ms. */
  checkpointMs: number;
}

/** The stack's defaults as a deploy without props gets them (the construct's config schema). */
export function stackDefaults(): {
  checkpointIntervalMs: number;
  batchingWindowMs: number;
  batchSize: number;
} {
  const shape = pipelineConfigSchema.shape;
  return {
    checkpointIntervalMs: shape.checkpointIntervalMinutes.parse(undefined) * 60_000,
    batchingWindowMs: shape.maxBatchingWindowSeconds.parse(undefined) * 1000,
    batchSize: shape.batchSize.parse(undefined),
  };
}

export interface StackDefaultsLatencyConfig {
  /** How many checkpoint intervals of input to append. */
  readonly intervals: number;
  readonly paceRecordsPerSecond: number;
  readonly partitions: number;
  /** Overrides of the stack's defaults (tests use short ones; the benchmark none). */
  readonly checkpointIntervalMs?: number;
  readonly batchingWindowMs?: number;
}

export const STACK_LATENCY_DEFAULTS: StackDefaultsLatencyConfig = {
  intervals: 3,
  paceRecordsPerSecond: 40,
  partitions: 4,
};

/** One paced exactly-once run at the stack's defaults; every record's arrival → committed latency. */
export async function measureStackDefaultsLatency(
  config: StackDefaultsLatencyConfig = STACK_LATENCY_DEFAULTS,
  e2e: E2eConfig = E2E_DEFAULTS,
): Promise<StackDefaultsLatency> {
  const defaults = stackDefaults();
  const checkpointIntervalMs = config.checkpointIntervalMs ?? defaults.checkpointIntervalMs;
  const batchingWindowMs = config.batchingWindowMs ?? defaults.batchingWindowMs;
  const records = Math.round((config.intervals * checkpointIntervalMs * config.paceRecordsPerSecond) / 1000);
  const run = await runVisibility(checkpointIntervalMs, records, config.paceRecordsPerSecond, {
    ...e2e,
    partitions: config.partitions,
    batchSize: defaults.batchSize,
    batchingWindowMs,
  });
  if (run.latencies.length !== records) {
    throw new Error(`stack-defaults latency: ${run.latencies.length} of ${records} records measured`);
  }
  return {
    checkpointIntervalMs,
    batchingWindowMs,
    batchSize: defaults.batchSize,
    partitions: config.partitions,
    paceRecordsPerSecond: config.paceRecordsPerSecond,
    records,
    checkpointsCommitted: run.checkpointsCommitted,
    p50Ms: Math.round(percentile(run.latencies, 50)),
    p99Ms: Math.round(percentile(run.latencies, 99)),
    maxMs: Math.round(Math.max(...run.latencies)),
    boundMs: checkpointIntervalMs + LATENCY_MARGIN_MS,
    checkpointMs: run.checkpointMs,
  };
}
