/**
 * Visibility latency: input appended at a steady rate below capacity, each record's time from its append to the end
 * of the commit step of the checkpoint whose manifest covers it, at several checkpoint intervals.
 */
import '../local/polyfills.ts';
import { LOCAL_DEFAULTS } from '../cli/local.ts';
import { NO_FAULTS } from '../local/faults.ts';
import { generateOrders } from '../local/generator.ts';
import { DEFAULT_BATCHING_WINDOW_MS } from '../local/msk-emulator.ts';
import { runLocal } from '../local/runner.ts';
import type { Settings } from '../shared/config/settings.ts';
import type { Manifest } from '../shared/sink/manifest.ts';
import { E2E_DEFAULTS, type E2eConfig } from './e2e-config.ts';
import { type FinalObjects, finalObjectsOf, freshPipeline, manifestsOf } from './e2e-pipeline.ts';
import { type Probe, probe } from './e2e-probe.ts';
import { progress } from './e2e-progress.ts';
import { stepTimes } from './e2e-steps.ts';
import { median, percentile, type Spread, spreadOf } from './stats.ts';

export interface VisibilityResult {
  checkpointIntervalMs: number;
  paceRecordsPerSecond: number;
  /** The event source mapping's batching window (the emulator's, as MSK's default): a batch not full waits it out. */
  batchingWindowMs: number;
  records: number;
  /** Runs at this interval (one per round). */
  runs: number;
  /** Over the runs. */
  p50Ms: Spread;
  p99Ms: Spread;
  maxMs: Spread;
  /** Median time between the ends of consecutive commit steps. */
  commitPeriodMs: Spread;
  /** Median over the runs of the median checkpoint execution (begin started → commit returned). */
  checkpointMs: number;
  checkpointsCommitted: Spread;
  /** Median over the runs: S3 bytes through Lambda per record. */
  bytesPerRecord: number;
}

export interface VisibilityConfig {
  readonly intervalsMs: readonly number[];
  readonly paceRecordsPerSecond: number;
  readonly records: number;
  /** Rounds; each runs every interval once, the order rotated round by round. */
  readonly rounds: number;
}

export const VISIBILITY_DEFAULTS: VisibilityConfig = {
  // eos local's default (500 ms), a short one, and a longer one that shows the interval's share.
  intervalsMs: [LOCAL_DEFAULTS.checkpointIntervalMs, 100, 3_000],
  paceRecordsPerSecond: 150,
  records: 1_500,
  rounds: 2,
};

/**
 * Each committed record's visibility latency: the commit time of the checkpoint whose manifest covers its offset
 * (previous cut < offset ≤ cut) minus its append time. Records with no append time or no commit time are skipped.
 */
export function visibilityLatencies(
  manifests: readonly Manifest[],
  commits: ReadonlyMap<number, number>,
  appended: ReadonlyMap<number, readonly number[]>,
): number[] {
  const latencies: number[] = [];
  for (const manifest of manifests) {
    const committedAt = commits.get(manifest.checkpointId);
    if (committedAt === undefined) continue;
    for (const [partitionId, cut] of Object.entries(manifest.cut)) {
      const partition = Number(partitionId.slice(partitionId.lastIndexOf('#') + 1));
      const times = appended.get(partition) ?? [];
      for (let offset = (manifest.previousCut[partitionId] ?? -1) + 1; offset <= cut; offset++) {
        const at = times[offset];
        if (at !== undefined) latencies.push(committedAt - at);
      }
    }
  }
  return latencies;
}

/** One paced exactly-once run at one checkpoint interval. */
export interface VisibilityRun {
  checkpointIntervalMs: number;
  latencies: number[];
  checkpointsCommitted: number;
  commitPeriodMs: number;
  checkpointMs: number;
  objects: FinalObjects;
  bytesPerRecord: number;
  settings: Settings;
  probe: Probe;
  manifests: Manifest[];
}

export async function runVisibility(
  interval: number,
  records: number,
  paceRecordsPerSecond: number,
  e2e: E2eConfig = E2E_DEFAULTS,
): Promise<VisibilityRun> {
  const settings = await freshPipeline('exactly-once', e2e.idempotencyKey, `vis${interval}`);
  const input = generateOrders({ seed: e2e.seed, records, partitions: e2e.partitions, poisonRate: 0 });
  const p = probe();
  const { report } = await runLocal({
    settings,
    input,
    partitions: e2e.partitions,
    faults: NO_FAULTS,
    seed: e2e.seed,
    checkpointIntervalMs: interval,
    batchSize: e2e.batchSize,
    ...(e2e.batchingWindowMs === undefined ? {} : { batchingWindowMs: e2e.batchingWindowMs }),
    paceRecordsPerSecond,
    observer: p.observer,
  });
  if (report.verdict !== 'exactly-once') {
    throw new Error(`visibility run at ${interval} ms: ${report.violations.join(', ')}`);
  }
  const manifests = await manifestsOf(settings.bucket, settings.pipelineId);
  const latencies = visibilityLatencies(manifests, p.commits, p.appended);
  const commitTimes = [...p.commits.values()].sort((a, b) => a - b);
  const gaps = commitTimes.slice(1).map((t, i) => t - commitTimes[i]!);
  const steps = stepTimes(p.stepEvents);
  return {
    checkpointIntervalMs: interval,
    latencies,
    checkpointsCommitted: report.checkpoints.committed,
    commitPeriodMs: gaps.length ? Math.round(median(gaps)) : 0,
    checkpointMs: steps.executionMs,
    objects: await finalObjectsOf(settings.bucket, settings.pipelineId, p.processor.calls()),
    bytesPerRecord: (p.processor.total() + p.coordinator.total()) / Math.max(1, input.length),
    settings,
    probe: p,
    manifests,
  };
}

/** Paced exactly-once runs, every interval once per round (rotated): each record's append → its manifest written. */
export async function measureVisibility(
  config: VisibilityConfig = VISIBILITY_DEFAULTS,
  e2e: E2eConfig = E2E_DEFAULTS,
): Promise<VisibilityResult[]> {
  const byInterval = new Map<number, VisibilityRun[]>(config.intervalsMs.map((i) => [i, []]));
  for (let round = 0; round < config.rounds; round++) {
    for (let i = 0; i < config.intervalsMs.length; i++) {
      const interval = config.intervalsMs[(i + round) % config.intervalsMs.length]!;
      const run = await runVisibility(interval, config.records, config.paceRecordsPerSecond, e2e);
      if (run.latencies.length !== config.records) {
        throw new Error(
          `visibility run at ${interval} ms: ${run.latencies.length} of ${config.records} measured`,
        );
      }
      progress(
        `visibility, round ${round + 1}/${config.rounds}, ${interval} ms interval: p50 ` +
          `${Math.round(percentile(run.latencies, 50))} ms, p99 ${Math.round(percentile(run.latencies, 99))} ms ` +
          `(${run.checkpointsCommitted} checkpoints, one every ${run.commitPeriodMs} ms, each ${run.checkpointMs} ms)`,
      );
      byInterval.get(interval)!.push(run);
    }
  }
  return config.intervalsMs.map((interval) => {
    const runs = byInterval.get(interval)!;
    return {
      checkpointIntervalMs: interval,
      paceRecordsPerSecond: config.paceRecordsPerSecond,
      batchingWindowMs: DEFAULT_BATCHING_WINDOW_MS,
      records: config.records,
      runs: runs.length,
      p50Ms: spreadOf(runs.map((r) => percentile(r.latencies, 50))),
      p99Ms: spreadOf(runs.map((r) => percentile(r.latencies, 99))),
      maxMs: spreadOf(runs.map((r) => Math.max(...r.latencies))),
      commitPeriodMs: spreadOf(runs.map((r) => r.commitPeriodMs)),
      checkpointMs: Math.round(median(runs.map((r) => r.checkpointMs))),
      checkpointsCommitted: spreadOf(runs.map((r) => r.checkpointsCommitted)),
      bytesPerRecord: Number(median(runs.map((r) => r.bytesPerRecord)).toFixed(1)),
    };
  });
}
