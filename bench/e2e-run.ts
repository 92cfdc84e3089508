/**
 * One run of the whole pipeline on a backlog, and its figures: throughput (the whole run and the steady window of
 * the out-count timeline), bytes, objects, step times and AWS calls per batch.
 */
import '../local/polyfills.ts';
import { NO_FAULTS } from '../local/faults.ts';
import { generateOrders } from '../local/generator.ts';
import { type RunReport, runLocal } from '../local/runner.ts';
import type { ByteCounts } from '../shared/aws/call-counter.ts';
import type { DeliveryGuarantee, Settings } from '../shared/config/settings.ts';
import type { Manifest } from '../shared/sink/manifest.ts';
import { attributeBytes, type ByteAttribution } from './e2e-bytes.ts';
import type { E2eConfig } from './e2e-config.ts';
import { type FinalObjects, finalObjectsOf, freshPipeline, manifestsOf } from './e2e-pipeline.ts';
import { type Probe, probe } from './e2e-probe.ts';
import { type StepTimes, stepTimes } from './e2e-steps.ts';

export interface E2eRun {
  mode: DeliveryGuarantee;
  /**
   * `scheduled`: checkpoints on the interval while the log drains (the pipeline as it runs); `deferred`
   * (exactly-once only, for the breakdown): none until the log drained, so the drain is the processors' own cost.
   */
  checkpoints: 'scheduled' | 'deferred';
  bucket: string;
  pipelineId: string;
  records: number;
  /** Output rows in the final prefix once the run ended. */
  committed: number;
  verdict: RunReport['verdict'];
  violations: readonly string[];
  /** First poll → every record acknowledged. */
  drainMs: number;
  drainRecordsPerSecond: number;
  /** First poll → the last record out (exactly-once: the last checkpoint's commit step returned). */
  wholeMs: number;
  wholeRecordsPerSecond: number;
  /** Exactly-once: drained → the last commit (the final checkpoint, which no later work hides). */
  tailMs: number;
  /** The steady window (ms since the first poll) and its slope; undefined when the run is too short for one. */
  steady?: { fromMs: number; toMs: number; records: number; recordsPerSecond: number };
  checkpointsCommitted: number;
  bytes: { processor: ByteCounts; coordinator: ByteCounts; total: number };
  bytesPerRecord: number;
  attribution: ByteAttribution;
  objects: FinalObjects;
  steps: StepTimes;
  calls: E2eCalls;
}

/** AWS calls of a run: per batch (an acknowledged delivery, one partition's records) and by operation. */
export interface E2eCalls {
  batches: number;
  processor: Record<string, number>;
  coordinator: Record<string, number>;
  /** Processor and coordinator calls over the batches. */
  perBatch: number;
}

/** Records a manifest's cut covers in all (offsets 0..cut of every partition). */
function coveredBy(manifest: Manifest): number {
  return Object.values(manifest.cut).reduce((sum, cut) => sum + cut + 1, 0);
}

/**
 * The sustained rate from an out-count timeline (time, records out so far): the slope from the first point with at
 * least `fromShare` of the input out to the last point at or before `until`; undefined when there are not two.
 */
export function steadyRate(
  timeline: ReadonlyArray<readonly [number, number]>,
  total: number,
  started: number,
  until: number,
  fromShare = 0.1,
): E2eRun['steady'] {
  const sorted = [...timeline].sort((a, b) => a[0] - b[0]);
  const from = sorted.find(([, out]) => out >= fromShare * total);
  const to = sorted.filter(([at]) => at <= until).at(-1);
  if (!from || !to || to[0] <= from[0] || to[1] <= from[1]) return undefined;
  return {
    fromMs: Math.round(from[0] - started),
    toMs: Math.round(to[0] - started),
    records: to[1] - from[1],
    recordsPerSecond: Math.round(((to[1] - from[1]) * 1000) / (to[0] - from[0])),
  };
}

/** What one run returns: the figures, the settings and the counted calls (for tests to check against the bucket). */
export interface RunDetail {
  run: E2eRun;
  settings: Settings;
  probe: Probe;
  manifests: Manifest[];
}

const DEFERRED_INTERVAL_MS = 24 * 3600 * 1000;

/** One run of the whole pipeline on a backlog of `records` generated orders, on a fresh pipeline. */
export async function runEndToEnd(
  mode: DeliveryGuarantee,
  config: E2eConfig,
  records: number,
  tag: string,
  checkpoints: E2eRun['checkpoints'] = 'scheduled',
): Promise<RunDetail> {
  const settings = await freshPipeline(mode, config.idempotencyKey, tag);
  const input = generateOrders({ seed: config.seed, records, partitions: config.partitions, poisonRate: 0 });
  const p = probe();
  const { report } = await runLocal({
    settings,
    input,
    partitions: config.partitions,
    faults: NO_FAULTS,
    seed: config.seed,
    // Deferred: no checkpoint while the log drains, only the final one(s) after it.
    checkpointIntervalMs: checkpoints === 'deferred' ? DEFERRED_INTERVAL_MS : config.checkpointIntervalMs,
    batchSize: config.batchSize,
    observer: p.observer,
  });
  const manifests = mode === 'exactly-once' ? await manifestsOf(settings.bucket, settings.pipelineId) : [];
  const timeline: Array<[number, number]> =
    mode === 'exactly-once'
      ? manifests.flatMap((m) => {
          const at = p.commits.get(m.checkpointId);
          return at === undefined ? [] : [[at, coveredBy(m)] as [number, number]];
        })
      : p.acks;
  const end = Math.max(...timeline.map(([at]) => at));
  const processorCalls = p.processor.calls();
  const coordinatorCalls = p.coordinator.calls();
  const total = p.processor.total() + p.coordinator.total();
  const committed = report.records.committed;
  const run: E2eRun = {
    mode,
    checkpoints,
    bucket: settings.bucket,
    pipelineId: settings.pipelineId,
    records: input.length,
    committed,
    verdict: report.verdict,
    violations: report.violations,
    drainMs: Math.round(p.drained - p.started),
    drainRecordsPerSecond: Math.round((input.length * 1000) / (p.drained - p.started)),
    wholeMs: Math.round(end - p.started),
    wholeRecordsPerSecond: Math.round((input.length * 1000) / (end - p.started)),
    tailMs: Math.round(Math.max(0, end - p.drained)),
    ...(() => {
      const steady = steadyRate(timeline, input.length, p.started, p.drained);
      return steady ? { steady } : {};
    })(),
    checkpointsCommitted: report.checkpoints.committed,
    bytes: { processor: p.processor.snapshot(), coordinator: p.coordinator.snapshot(), total },
    bytesPerRecord: Number((total / Math.max(1, committed)).toFixed(1)),
    attribution: attributeBytes(settings.pipelineId, processorCalls, coordinatorCalls),
    objects: await finalObjectsOf(settings.bucket, settings.pipelineId, processorCalls),
    steps: stepTimes(p.stepEvents),
    calls: {
      batches: p.acks.length,
      processor: p.calls.processor.snapshot(),
      coordinator: p.calls.coordinator.snapshot(),
      perBatch: Number(
        ((p.calls.processor.total() + p.calls.coordinator.total()) / Math.max(1, p.acks.length)).toFixed(2),
      ),
    },
  };
  return { run, settings, probe: p, manifests };
}
