/**
 * The whole pipeline end to end, as `eos local` runs it (local/runner.ts: the MSK emulator, processor containers,
 * the coordinator's state machine checkpointing on its schedule, promote and commit), with faults off:
 *
 * - sustained throughput, exactly-once against at-least-once, in interleaved pairs on the same input (a backlog),
 *   each run on a fresh table, bucket and pipeline id. A record counts as out when its rows are in the committed
 *   output: for exactly-once when the commit step of the checkpoint whose manifest covers it returned, for
 *   at-least-once when its batch was acknowledged (the processor wrote its rows to final objects). Sustained: the
 *   slope of that count over the steady part of the run — from the first point at which 10 % of the input is out
 *   to the last point at or before the drain ended (exactly-once: the last commit while the processors were still
 *   busy), so neither the cold start nor the one-off final checkpoint weighs in. The whole run (first poll to the
 *   last record out, the final checkpoint included) is reported beside it;
 * - S3 object bytes moved through Lambda (GetObject bodies read, PutObject/UploadPart bodies written, by the
 *   processor and the coordinator; server-side copies move none) per committed record, in the same runs, attributed
 *   by what the key is (staged, candidate, final, manifest, plan);
 * - where exactly-once's checkpoint time goes: each state machine step's span (one Lambda invocation, or a Map of
 *   them) per committed checkpoint;
 * - visibility latency: input appended at a steady rate below capacity, each record's time from its append to the
 *   end of the commit step of the checkpoint whose manifest covers it (previous cut < offset ≤ cut), at several
 *   checkpoint intervals, in rounds that rotate the intervals.
 *
 * The runs and their interleaved rounds are here; the parts beside it: e2e-config.ts (what a run is given),
 * e2e-pipeline.ts (a fresh pipeline and what it left), e2e-probe.ts (the observer that counts calls and bytes),
 * e2e-run.ts (one run and its figures), e2e-bytes.ts (bytes by key), e2e-steps.ts (step times), e2e-summary.ts
 * (a mode's runs summed up), e2e-visibility.ts (visibility latency).
 */
import '../local/polyfills.ts';
import type { DeliveryGuarantee } from '../shared/config/settings.ts';
import { E2E_DEFAULTS, type E2eConfig } from './e2e-config.ts';
import { progress } from './e2e-progress.ts';
import { type E2eRun, runEndToEnd } from './e2e-run.ts';
import { type ModeSummary, summary } from './e2e-summary.ts';
import { type Spread, spreadOf } from './stats.ts';

export type { ByteAttribution } from './e2e-bytes.ts';
export { attributeBytes } from './e2e-bytes.ts';
export type { E2eConfig } from './e2e-config.ts';
export { E2E_DEFAULTS } from './e2e-config.ts';
export type { FinalObjects } from './e2e-pipeline.ts';
export { finalObjectsOf, manifestsOf } from './e2e-pipeline.ts';
export type { Probe } from './e2e-probe.ts';
export { probe } from './e2e-probe.ts';
export type { E2eCalls, E2eRun, RunDetail } from './e2e-run.ts';
export { runEndToEnd, steadyRate } from './e2e-run.ts';
export type { StepTimes } from './e2e-steps.ts';
export { stepTimes } from './e2e-steps.ts';
export type { ModeSummary } from './e2e-summary.ts';
export type { VisibilityConfig, VisibilityResult, VisibilityRun } from './e2e-visibility.ts';
export {
  measureVisibility,
  runVisibility,
  VISIBILITY_DEFAULTS,
  visibilityLatencies,
} from './e2e-visibility.ts';

export interface E2eResult {
  config: E2eConfig;
  runs: E2eRun[];
  exactlyOnce: ModeSummary;
  atLeastOnce: ModeSummary;
  /** Per pair, exactly-once sustained records/s ÷ the at-least-once run's that followed it. */
  pairRatios: number[];
  ratio: Spread;
  /** Per pair, the same for the whole run (the final checkpoint included). */
  wholeRatio: Spread;
  /** Per pair, exactly-once drain rate (first poll → every record acknowledged) ÷ at-least-once's. */
  drainRatio: Spread;
  /** Exactly-once with checkpoints deferred to the end: the processors alone, then the checkpoints' share. */
  deferred: {
    drainRecordsPerSecond: Spread;
    /** The final checkpoint(s) over the whole backlog. */
    tailMs: Spread;
    /** Per round, its drain rate ÷ at-least-once's: what exactly-once costs the processors themselves. */
    processorRatio: Spread;
    /** Per round, exactly-once's drain rate with scheduled checkpoints ÷ with them deferred. */
    checkpointShare: Spread;
  };
  /** Per pair, exactly-once bytes per record ÷ at-least-once's. */
  bytesRatio: Spread;
  /** Per pair, exactly-once AWS calls per batch (processor and coordinator) ÷ at-least-once's. */
  callsPerBatchRatio: Spread;
}

function describe(run: E2eRun): string {
  const steady = run.steady ? `${run.steady.recordsPerSecond}/s sustained` : 'no steady window';
  return (
    `${run.mode} (checkpoints ${run.checkpoints}) ${run.records} records: ${steady}, ${run.wholeRecordsPerSecond}/s whole (${run.wholeMs} ms, ` +
    `drained at ${run.drainMs} ms), ${run.checkpointsCommitted} checkpoints, ${run.bytesPerRecord} B/record ` +
    `through Lambda, ${run.verdict}`
  );
}

type Lane = readonly [DeliveryGuarantee, E2eRun['checkpoints']];
const LANES: readonly Lane[] = [
  ['exactly-once', 'scheduled'],
  ['at-least-once', 'scheduled'],
  ['exactly-once', 'deferred'],
];

/**
 * Interleaved rounds on the same input, after a warm-up of each: exactly-once and at-least-once as they run, and
 * exactly-once with its checkpoints deferred to the end (the breakdown); the order rotates round by round so that
 * no lane always follows the same one.
 */
export async function measureEndToEnd(config: E2eConfig = E2E_DEFAULTS): Promise<E2eResult> {
  for (const [mode, checkpoints] of LANES) {
    progress(`end to end: warm-up, ${mode}, checkpoints ${checkpoints}`);
    await runEndToEnd(mode, config, config.warmUpRecords, 'warm', checkpoints);
  }
  const runs: E2eRun[] = [];
  const rounds: Array<Map<string, E2eRun>> = [];
  for (let pair = 1; pair <= config.pairs; pair++) {
    const round = new Map<string, E2eRun>();
    for (let i = 0; i < LANES.length; i++) {
      const [mode, checkpoints] = LANES[(i + pair - 1) % LANES.length]!;
      const { run } = await runEndToEnd(mode, config, config.records, `p${pair}`, checkpoints);
      progress(`end to end, round ${pair}/${config.pairs}: ${describe(run)}`);
      // At-least-once writes final objects no manifest lists, which `eos verify` reports: by design, not a fault.
      const violations =
        mode === 'exactly-once' ? run.violations : run.violations.filter((v) => !v.startsWith('eos verify'));
      if (violations.length > 0) {
        throw new Error(`end-to-end ${mode} run ${run.pipelineId} with faults off: ${violations.join(', ')}`);
      }
      round.set(`${mode}/${checkpoints}`, run);
      runs.push(run);
    }
    rounds.push(round);
  }
  const lane = (key: string) => rounds.map((round) => round.get(key)!);
  const eo = lane('exactly-once/scheduled');
  const alo = lane('at-least-once/scheduled');
  const deferred = lane('exactly-once/deferred');
  const ratio3 = (a: number, b: number) => Number((a / Math.max(1e-9, b)).toFixed(3));
  const pairRatios = eo.flatMap((run, i) => {
    const other = alo[i]!;
    return run.steady && other.steady
      ? [ratio3(run.steady.recordsPerSecond, other.steady.recordsPerSecond)]
      : [];
  });
  return {
    config,
    runs,
    exactlyOnce: summary(eo),
    atLeastOnce: summary(alo),
    pairRatios,
    ratio: pairRatios.length ? spreadOf(pairRatios, 3) : { min: 0, median: 0, max: 0 },
    wholeRatio: spreadOf(
      eo.map((run, i) => ratio3(run.wholeRecordsPerSecond, alo[i]!.wholeRecordsPerSecond)),
      3,
    ),
    drainRatio: spreadOf(
      eo.map((run, i) => ratio3(run.drainRecordsPerSecond, alo[i]!.drainRecordsPerSecond)),
      3,
    ),
    deferred: {
      drainRecordsPerSecond: spreadOf(deferred.map((r) => r.drainRecordsPerSecond)),
      tailMs: spreadOf(deferred.map((r) => r.tailMs)),
      processorRatio: spreadOf(
        deferred.map((run, i) => ratio3(run.drainRecordsPerSecond, alo[i]!.drainRecordsPerSecond)),
        3,
      ),
      checkpointShare: spreadOf(
        eo.map((run, i) => ratio3(run.drainRecordsPerSecond, deferred[i]!.drainRecordsPerSecond)),
        3,
      ),
    },
    bytesRatio: spreadOf(
      eo.map((run, i) => run.bytesPerRecord / Math.max(1e-9, alo[i]!.bytesPerRecord)),
      2,
    ),
    callsPerBatchRatio: spreadOf(
      eo.map((run, i) => run.calls.perBatch / Math.max(1e-9, alo[i]!.calls.perBatch)),
      2,
    ),
  };
}
