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
 */
import '../local/polyfills.ts';
import { LOCAL_DEFAULTS } from '../cli/local.ts';
import { LOCAL_SETTING_DEFAULTS } from '../cli/local-defaults.ts';
import { NO_FAULTS } from '../local/faults.ts';
import { generateOrders } from '../local/generator.ts';
import { DEFAULT_BATCHING_WINDOW_MS } from '../local/msk-emulator.ts';
import { createBucket, createLedgerTable } from '../local/provision.ts';
import { type RunObserver, type RunReport, runLocal } from '../local/runner.ts';
import { ByteCounter, type ByteCounts, CallCounter, type CountedCall } from '../shared/aws/call-counter.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { type DeliveryGuarantee, parseSettings, type Settings } from '../shared/config/settings.ts';
import { COORDINATOR_STEPS, type CoordinatorStep } from '../shared/coordinator/definition.ts';
import { checkpointWorkPrefix, STAGED_COPY_DIR } from '../shared/coordinator/work-objects.ts';
import {
  finalPrefix,
  inProgressPrefix,
  manifestsPrefix,
  parseStagedObjectKey,
} from '../shared/sink/layout.ts';
import type { Manifest } from '../shared/sink/manifest.ts';
import { readManifests } from '../shared/sink/reader.ts';
import { listKeys } from '../shared/sink/verify.ts';
import { median, percentile, type Spread, spreadOf } from './stats.ts';

export interface E2eConfig {
  /** Input records per run (generated orders, the same seed every run). */
  readonly records: number;
  readonly partitions: number;
  /** Records per partition per invocation (the event source mapping's batch size). */
  readonly batchSize: number;
  /** The event source mapping's batching window, ms (default the emulator's, as MSK's own default). */
  readonly batchingWindowMs?: number;
  readonly checkpointIntervalMs: number;
  /** The exactly-once runs' idempotency key source (`none`: offset dedupe only, as the processor benchmark). */
  readonly idempotencyKey: string;
  /** Interleaved exactly-once / at-least-once pairs, after one unmeasured warm-up pair. */
  readonly pairs: number;
  readonly warmUpRecords: number;
  readonly seed: number;
}

export const E2E_DEFAULTS: E2eConfig = {
  records: Number(process.env.BENCH_E2E_RECORDS ?? 16_000),
  partitions: LOCAL_DEFAULTS.partitions,
  // The event source mapping's default batch size (eos local's 20 is for many invocations under faults).
  batchSize: 100,
  checkpointIntervalMs: LOCAL_DEFAULTS.checkpointIntervalMs,
  idempotencyKey: 'none',
  pairs: Number(process.env.BENCH_E2E_PAIRS ?? 5),
  warmUpRecords: 1_000,
  seed: 1,
};

/** Where a counted S3 byte went, by key. */
export interface ByteAttribution {
  /** Processor: staged objects written (exactly-once). */
  stagedWritten: number;
  /** Processor: final objects written directly (at-least-once). */
  directFinalWritten: number;
  /** Coordinator, prepare: staged objects read to verify them and merge their bytes. */
  prepareStagedRead: number;
  /** Coordinator, prepare: candidate final objects written (promote copies them into place server-side). */
  candidateWritten: number;
  /** Coordinator, promote: reads of candidates or of copies of staged objects (plans made before candidates). */
  promoteRead: number;
  /** Coordinator: final objects written through Lambda (promote copies candidates server-side instead). */
  finalWritten: number;
  /** Coordinator: manifests written. */
  manifestWritten: number;
  /** Coordinator: plans and promoted markers (its working objects) written and read. */
  workWritten: number;
  workRead: number;
  /** Anything else (expected 0). */
  other: number;
}

/** The objects a run left: final objects in the bucket, and staged objects the processors wrote. */
export interface FinalObjects {
  finalObjects: number;
  stagedObjects: number;
}

export interface StepTimes {
  /** Median per committed checkpoint of each step's span (first invocation started → last returned), ms. */
  stepMs: Partial<Record<CoordinatorStep, number>>;
  /** Median per committed checkpoint: begin started → last step returned, ms. */
  executionMs: number;
  /** Median of executionMs minus the sum of the step spans: the state machine between its Tasks, ms. */
  betweenStepsMs: number;
}

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

function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

let seq = 0;

/** A fresh table, bucket and pipeline id. */
async function freshPipeline(
  mode: DeliveryGuarantee,
  idempotencyKey: string,
  tag: string,
): Promise<Settings> {
  const n = ++seq;
  const name = `bench-e2e-${process.pid}-${n}`;
  const clients = createAwsClients();
  try {
    await Promise.all([createLedgerTable(clients.dynamodb, name), createBucket(clients.s3, name)]);
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
  return parseSettings({
    ledgerTable: name,
    bucket: name,
    pipelineId: `e2e-${tag}-${mode === 'exactly-once' ? 'eo' : 'alo'}-${n}`,
    deliveryGuarantee: mode,
    idempotencyKey: mode === 'exactly-once' ? idempotencyKey : 'none',
    checkpointLeaseSeconds: LOCAL_SETTING_DEFAULTS.checkpointLeaseSeconds,
  });
}

/** What a run's probes saw. */
export interface Probe {
  readonly observer: RunObserver;
  started: number;
  drained: number;
  readonly commits: Map<number, number>;
  /** Per partition, each offset's append time. */
  readonly appended: Map<number, number[]>;
  /** Acknowledgements: (time, records acknowledged so far). */
  readonly acks: Array<[number, number]>;
  readonly stepEvents: Array<{ step: CoordinatorStep; phase: 'before' | 'after'; at: number }>;
  readonly processor: ByteCounter;
  readonly coordinator: ByteCounter;
  /** Every AWS call by operation, the processors' and the coordinator's apart. */
  readonly calls: { readonly processor: CallCounter; readonly coordinator: CallCounter };
}

export function probe(): Probe {
  const p: Probe = {
    started: Number.NaN,
    drained: Number.NaN,
    commits: new Map(),
    appended: new Map(),
    acks: [],
    stepEvents: [],
    processor: new ByteCounter({ keepCalls: true }),
    coordinator: new ByteCounter({ keepCalls: true }),
    calls: { processor: new CallCounter(), coordinator: new CallCounter() },
    observer: {},
  };
  let acknowledged = 0;
  (p as { observer: RunObserver }).observer = {
    clients: (clients, role) => {
      if (role === 'processor') p.processor.attach(clients);
      if (role === 'coordinator') p.coordinator.attach(clients);
      if (role === 'processor') p.calls.processor.attach(clients);
      if (role === 'coordinator') p.calls.coordinator.attach(clients);
    },
    started: (at) => {
      p.started = at;
    },
    drained: (at) => {
      p.drained = at;
    },
    committed: (id, at) => {
      p.commits.set(id, at);
    },
    acknowledged: (records, at) => {
      acknowledged += records;
      p.acks.push([at, acknowledged]);
    },
    step: (step, phase, at) => {
      p.stepEvents.push({ step, phase, at });
    },
    appended: (partition, offset, at) => {
      const times = p.appended.get(partition) ?? [];
      times[offset] = at;
      p.appended.set(partition, times);
    },
  };
  return p;
}

/** The committed manifests of a pipeline, in checkpoint order (read with clients of their own: not counted). */
export async function manifestsOf(bucket: string, pipeline: string): Promise<Manifest[]> {
  const clients = createAwsClients();
  const manifests: Manifest[] = [];
  try {
    for await (const manifest of readManifests({ s3: clients.s3, bucket, pipeline }))
      manifests.push(manifest);
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
  return manifests.sort((a, b) => a.checkpointId - b.checkpointId);
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

type KeyKind = 'staged' | 'final' | 'manifest' | 'candidate' | 'copy' | 'work' | 'other';

function kindOf(pipeline: string, key: string): KeyKind {
  if (key.startsWith(inProgressPrefix(pipeline))) return 'staged';
  if (key.startsWith(finalPrefix(pipeline))) return 'final';
  if (key.startsWith(manifestsPrefix(pipeline))) return 'manifest';
  const work = checkpointWorkPrefix(pipeline);
  if (key.startsWith(work)) {
    // <work><checkpoint>/<attempt>/candidate-<sha256>, or …/<attempt>/staged/… for plans made before candidates.
    const rest = key.slice(work.length).split('/');
    if (rest[2]?.startsWith('candidate-')) return 'candidate';
    return rest[2] === STAGED_COPY_DIR ? 'copy' : 'work';
  }
  return 'other';
}

/** Attributes every counted byte by role, direction and key. */
export function attributeBytes(
  pipeline: string,
  processor: readonly CountedCall[],
  coordinator: readonly CountedCall[],
): ByteAttribution {
  const a: ByteAttribution = {
    stagedWritten: 0,
    directFinalWritten: 0,
    prepareStagedRead: 0,
    candidateWritten: 0,
    promoteRead: 0,
    finalWritten: 0,
    manifestWritten: 0,
    workWritten: 0,
    workRead: 0,
    other: 0,
  };
  for (const call of processor) {
    const kind = kindOf(pipeline, call.key);
    if (call.direction === 'written' && kind === 'staged') a.stagedWritten += call.bytes;
    else if (call.direction === 'written' && kind === 'final') a.directFinalWritten += call.bytes;
    else a.other += call.bytes;
  }
  for (const call of coordinator) {
    const kind = kindOf(pipeline, call.key);
    const read = call.direction === 'read';
    if (read && kind === 'staged') a.prepareStagedRead += call.bytes;
    else if (!read && kind === 'candidate') a.candidateWritten += call.bytes;
    else if (read && (kind === 'candidate' || kind === 'copy')) a.promoteRead += call.bytes;
    else if (!read && kind === 'final') a.finalWritten += call.bytes;
    else if (!read && kind === 'manifest') a.manifestWritten += call.bytes;
    else if (kind === 'work') {
      if (read) a.workRead += call.bytes;
      else a.workWritten += call.bytes;
    } else a.other += call.bytes;
  }
  return a;
}

/** The final objects in the bucket once a run ended (listed with clients of their own: not counted), and the staged
 * objects its processors wrote. */
export async function finalObjectsOf(
  bucket: string,
  pipeline: string,
  processor: readonly CountedCall[],
): Promise<FinalObjects> {
  const staged = processor.filter(
    (call) => call.direction === 'written' && parseStagedObjectKey(pipeline, call.key) !== undefined,
  );
  const clients = createAwsClients();
  try {
    const finals = await listKeys(clients.s3, bucket, finalPrefix(pipeline));
    return { finalObjects: finals.length, stagedObjects: new Set(staged.map((c) => c.key)).size };
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
}

/** Step spans per committed checkpoint, from the step events (executions run one at a time; each opens with begin). */
export function stepTimes(events: Probe['stepEvents']): StepTimes {
  const executions: Array<typeof events> = [];
  for (const event of events) {
    if (event.step === 'begin' && event.phase === 'before') executions.push([]);
    executions.at(-1)?.push(event);
  }
  const spans = new Map<CoordinatorStep, number[]>();
  const totals: number[] = [];
  const between: number[] = [];
  for (const execution of executions) {
    if (!execution.some((e) => e.step === 'commit' && e.phase === 'after')) continue; // not a committed one
    let sum = 0;
    for (const step of COORDINATOR_STEPS) {
      const mine = execution.filter((e) => e.step === step);
      if (mine.length === 0) continue;
      const span =
        Math.max(...mine.filter((e) => e.phase === 'after').map((e) => e.at)) -
        Math.min(...mine.filter((e) => e.phase === 'before').map((e) => e.at));
      sum += span;
      spans.set(step, [...(spans.get(step) ?? []), span]);
    }
    const total = Math.max(...execution.map((e) => e.at)) - execution[0]!.at;
    totals.push(total);
    between.push(total - sum);
  }
  return {
    stepMs: Object.fromEntries([...spans].map(([step, values]) => [step, Math.round(median(values))])),
    executionMs: totals.length ? Math.round(median(totals)) : 0,
    betweenStepsMs: between.length ? Math.round(median(between)) : 0,
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

function summary(runs: readonly E2eRun[]): ModeSummary {
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
