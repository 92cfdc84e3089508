/** One mode's runs summed up: spreads and medians over the runs, per committed record where it is bytes. */
import { COORDINATOR_STEPS, type CoordinatorStep } from '../shared/coordinator/definition.ts';
import type { ByteAttribution } from './e2e-bytes.ts';
import type { E2eRun } from './e2e-run.ts';
import { median, type Spread, spreadOf } from './stats.ts';

export interface ModeSummary {
  /** Sustained records/s over the runs (the steady window). */
  recordsPerSecond: Spread;
  wholeRecordsPerSecond: Spread;
  drainMs: Spread;
  tailMs: Spread;
  /** S3 bytes through Lambda per committed record, over the runs. */
  bytesPerRecord: Spread;
  /** Median over the runs, per committed record. */
  bytesPerRecordByKind: ByteAttribution;
  checkpointsCommitted: Spread;
  /** Median over the runs. */
  stepMs: Partial<Record<CoordinatorStep, number>>;
  executionMs: number;
  betweenStepsMs: number;
  /** Medians over the runs. */
  finalObjectsPer1000Records: number;
  /** AWS calls (processor and coordinator) per batch, over the runs. */
  callsPerBatch: Spread;
}

export function summary(runs: readonly E2eRun[]): ModeSummary {
  const perRecord = (pick: (run: E2eRun) => number) =>
    Number(median(runs.map((run) => pick(run) / Math.max(1, run.committed))).toFixed(1));
  const kinds = Object.keys(runs[0]!.attribution) as Array<keyof ByteAttribution>;
  const steps = COORDINATOR_STEPS.filter((step) => runs.some((r) => r.steps.stepMs[step] !== undefined));
  const steady = runs.flatMap((r) => (r.steady ? [r.steady.recordsPerSecond] : []));
  return {
    recordsPerSecond: steady.length ? spreadOf(steady) : { min: 0, median: 0, max: 0 },
    wholeRecordsPerSecond: spreadOf(runs.map((r) => r.wholeRecordsPerSecond)),
    drainMs: spreadOf(runs.map((r) => r.drainMs)),
    tailMs: spreadOf(runs.map((r) => r.tailMs)),
    bytesPerRecord: spreadOf(
      runs.map((r) => r.bytesPerRecord),
      1,
    ),
    bytesPerRecordByKind: Object.fromEntries(
      kinds.map((kind) => [kind, perRecord((r) => r.attribution[kind])]),
    ) as unknown as ByteAttribution,
    checkpointsCommitted: spreadOf(runs.map((r) => r.checkpointsCommitted)),
    stepMs: Object.fromEntries(
      steps.map((step) => [step, Math.round(median(runs.flatMap((r) => r.steps.stepMs[step] ?? [])))]),
    ),
    executionMs: Math.round(median(runs.map((r) => r.steps.executionMs))),
    betweenStepsMs: Math.round(median(runs.map((r) => r.steps.betweenStepsMs))),
    finalObjectsPer1000Records: Number(
      median(runs.map((r) => (r.objects.finalObjects * 1000) / Math.max(1, r.committed))).toFixed(2),
    ),
    callsPerBatch: spreadOf(
      runs.map((r) => r.calls.perBatch),
      2,
    ),
  };
}
