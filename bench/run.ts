/**
 * `npm run bench`: the processor's throughput and AWS calls per batch under each delivery guarantee, the
 * checkpoint's commit time against the number of staged files, the bundle size and module initialisation time,
 * the processor's cold start (bench/cold-start.ts), the whole pipeline end to end (bench/e2e.ts: sustained
 * throughput, S3 bytes through Lambda, visibility latency), and the counts behind the monthly cost model (bench/counts.ts,
 * shipped as cli/cost-counts.json for `eos cost`). One process, against the local parts; every configuration after a
 * warm-up, several runs, median reported; the modes interleaved run by run so that background load hits them
 * alike. Writes `bench/results.json` and `docs/benchmark.md`. `npm run bench -- --only e2e,cost` reruns those sections
 * and keeps the others from the last results.
 *
 * Figures are from DynamoDB Local and s3rver on this machine: absolute numbers are not AWS's, ratios between
 * modes measured in the same run are the point.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startLocalParts } from '../local/parts.ts';
import { createBucket, createLedgerTable } from '../local/provision.ts';
import { renderBenchmarkPageOf } from '../scripts/docs-benchmark.ts';
import { CallCounter } from '../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients } from '../shared/aws/clients.ts';
import { type DeliveryGuarantee, parseSettings, type Settings } from '../shared/config/settings.ts';
import { createProcessor, type Processor } from '../shared/processor/processor.ts';
import { measureBundles } from './bundle.ts';
import { measureCheckpoints } from './checkpoint.ts';
import { measureColdStart } from './cold-start.ts';
import { costFigures, idleMonthlyCost } from './cost.ts';
import { measureCostCounts, writeCostCounts } from './counts.ts';
import { E2E_DEFAULTS, measureEndToEnd, measureVisibility, VISIBILITY_DEFAULTS } from './e2e.ts';
import { measureFirstRun } from './first-run.ts';
import { measureIdle } from './idle.ts';
import { measureStackDefaultsLatency } from './latency.ts';
import type { BenchResults } from './report.ts';
import { keyWriteRates, measureScale } from './scale.ts';
import { median } from './stats.ts';
import { batchEvent, CUSTOMER_POOL, recordBytes } from './workload.ts';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** The call global-scope claims are created with, 25 INSERTs each (`shared/ledger/claim-batch.ts`). */
const CLAIMS_OPERATION = 'dynamodb:BatchExecuteStatement';
const MODES: readonly DeliveryGuarantee[] = ['exactly-once', 'at-least-once', 'none'];
const BATCH_SIZES = [100, 500, 2000] as const;
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
/** Records per timed run, per batch size (so each run is a few hundred milliseconds at least). */
const RECORDS_PER_RUN = Number(process.env.BENCH_RECORDS_PER_RUN ?? 10_000);
/** Fresh processes per cold-start variant (bench/cold-start.ts alone defaults to 15). */
const COLD_START_RUNS = Number(process.env.BENCH_COLD_START_RUNS ?? 9);

export interface ThroughputResult {
  mode: DeliveryGuarantee;
  idempotencyKeys: boolean;
  /** With keys: where they are remembered (`idempotencyScope`); absent for results of runs before the setting. */
  idempotencyScope?: 'global' | 'partition';
  batchSize: number;
  recordsPerSecond: number;
  runs: number[];
  msPerBatch: number;
  callsPerBatchSteady: Record<string, number>;
  callsPerBatchSteadyTotal: number;
  callsColdStart: Record<string, number>;
  transactionItemsPerBatch: number;
  /**
   * Per batch in steady state, by operation: milliseconds during which a call of it was in flight
   * (`CallCounter.busyMs`). Absent in results of runs before it.
   */
  busyMsPerBatch?: Record<string, number>;
}

function progress(message: string): void {
  process.stderr.write(`[bench] ${message}\n`);
}

interface Lane {
  readonly key: string;
  readonly mode: DeliveryGuarantee;
  readonly idempotencyKeys: boolean;
  readonly idempotencyScope: 'global' | 'partition';
  readonly batchSize: number;
  readonly clients: AwsClients;
  readonly calls: CallCounter;
  processor: Processor;
  settings: Settings;
  nextOffset: number;
  runs: number[];
  steadyCalls: Record<string, number>;
  steadyBatches: number;
  steadyItems: number;
  steadyBusyMs: Record<string, number>;
  cold: Record<string, number>;
}

let pipelineSeq = 0;

function newLane(
  base: { table: string; bucket: string },
  mode: DeliveryGuarantee,
  batchSize: number,
  idempotencyKeys: boolean,
  idempotencyScope: 'global' | 'partition' = 'global',
): Lane {
  const clients = createAwsClients();
  const calls = new CallCounter().attach(clients);
  const settings = parseSettings({
    ledgerTable: base.table,
    bucket: base.bucket,
    pipelineId: `bench-${++pipelineSeq}`,
    deliveryGuarantee: mode,
    idempotencyKey: idempotencyKeys ? 'header:idempotency-key' : 'none',
    idempotencyScope,
  });
  return {
    key: `${mode}/${batchSize}/${idempotencyKeys ? `keys-${idempotencyScope}` : 'offsets'}`,
    mode,
    idempotencyKeys,
    idempotencyScope,
    batchSize,
    clients,
    calls,
    settings,
    processor: createProcessor({ settings, clients }),
    nextOffset: 0,
    runs: [],
    steadyCalls: {},
    steadyBatches: 0,
    steadyItems: 0,
    steadyBusyMs: {},
    cold: {},
  };
}

async function runBatches(lane: Lane, batches: number): Promise<number> {
  const events = Array.from({ length: batches }, (_, i) =>
    batchEvent(0, lane.nextOffset + i * lane.batchSize, lane.batchSize),
  );
  lane.nextOffset += batches * lane.batchSize;
  const started = performance.now();
  for (const event of events) await lane.processor.processEvent(event);
  return performance.now() - started;
}

async function warmUp(lane: Lane): Promise<void> {
  lane.calls.reset();
  await runBatches(lane, 1);
  lane.cold = lane.calls.snapshot();
  await runBatches(lane, 2);
}

async function timedRun(lane: Lane): Promise<void> {
  const batches = Math.max(2, Math.round(RECORDS_PER_RUN / lane.batchSize));
  lane.calls.reset();
  const ms = await runBatches(lane, batches);
  lane.runs.push((batches * lane.batchSize * 1000) / ms);
  for (const [operation, count] of Object.entries(lane.calls.snapshot())) {
    lane.steadyCalls[operation] = (lane.steadyCalls[operation] ?? 0) + count;
  }
  for (const [operation, ms] of Object.entries(lane.calls.busyMs())) {
    lane.steadyBusyMs[operation] = (lane.steadyBusyMs[operation] ?? 0) + ms;
  }
  lane.steadyItems += lane.calls.transactionItems();
  lane.steadyBatches += batches;
}

function resultOf(lane: Lane): ThroughputResult {
  const perBatch = Object.fromEntries(
    Object.entries(lane.steadyCalls).map(([operation, count]) => [operation, count / lane.steadyBatches]),
  );
  const recordsPerSecond = median(lane.runs);
  return {
    mode: lane.mode,
    idempotencyKeys: lane.idempotencyKeys,
    ...(lane.idempotencyKeys ? { idempotencyScope: lane.idempotencyScope } : {}),
    batchSize: lane.batchSize,
    recordsPerSecond: Math.round(recordsPerSecond),
    runs: lane.runs.map(Math.round),
    msPerBatch: Number(((lane.batchSize * 1000) / recordsPerSecond).toFixed(2)),
    callsPerBatchSteady: perBatch,
    callsPerBatchSteadyTotal: Object.values(perBatch).reduce((a, b) => a + b, 0),
    callsColdStart: lane.cold,
    transactionItemsPerBatch: lane.steadyItems / lane.steadyBatches,
    busyMsPerBatch: Object.fromEntries(
      Object.entries(lane.steadyBusyMs).map(([operation, ms]) => [
        operation,
        Number((ms / lane.steadyBatches).toFixed(2)),
      ]),
    ),
  };
}

async function measureThroughput(base: { table: string; bucket: string }): Promise<ThroughputResult[]> {
  const lanes: Lane[] = [];
  for (const batchSize of BATCH_SIZES)
    for (const mode of MODES) lanes.push(newLane(base, mode, batchSize, false));
  lanes.push(newLane(base, 'exactly-once', 500, true));
  lanes.push(newLane(base, 'exactly-once', 500, true, 'partition'));
  for (const lane of lanes) await warmUp(lane);
  for (let run = 1; run <= RUNS; run++) {
    progress(`throughput run ${run}/${RUNS}`);
    // Rotate the order run by run, so that no lane always follows the same neighbour (GC debt, cache state).
    for (let i = 0; i < lanes.length; i++) await timedRun(lanes[(i + run) % lanes.length]!);
  }
  return lanes.map(resultOf);
}

/**
 * What global-scope claims alone take a batch, and the slowdown they put a floor under: a keyed batch makes the
 * offset-only batch's calls after its claims (the staged object is written once the claims have decided which
 * records it holds), so it takes at least the offset-only batch's time plus the claims'.
 */
function claimsFloor(
  offsetsOnly: ThroughputResult,
  keyed: ThroughputResult,
): Pick<BenchResults, 'keyed_global_claims_ms' | 'keyed_global_floor'> {
  const claimsMs = keyed.busyMsPerBatch?.[CLAIMS_OPERATION];
  if (claimsMs === undefined) return {};
  return {
    keyed_global_claims_ms: claimsMs,
    keyed_global_floor: Number((1 + claimsMs / offsetsOnly.msPerBatch).toFixed(2)),
  };
}

/** Offset-only throughput divided by a keyed mode's (`keyed_*_slowdown` in the targets): 1 means keys cost nothing. */
function slowdown(offsetsOnly: ThroughputResult, keyed: ThroughputResult): number {
  return Number((offsetsOnly.recordsPerSecond / keyed.recordsPerSecond).toFixed(2));
}

type Base = { table: string; bucket: string };
type Fragment = Partial<BenchResults>;

/** The processor alone: throughput and calls per batch by mode and batch size, and what keys cost. */
async function throughputSection(base: Base): Promise<Fragment> {
  const throughput = await measureThroughput(base);
  const find = (mode: DeliveryGuarantee, batchSize: number, keys = false, scope = 'global') =>
    throughput.find(
      (r) =>
        r.mode === mode &&
        r.batchSize === batchSize &&
        r.idempotencyKeys === keys &&
        (!keys || r.idempotencyScope === scope),
    )!;
  const eo = find('exactly-once', 500);
  const alo = find('at-least-once', 500);
  return {
    workload: {
      recordBytes: recordBytes(),
      customerPool: CUSTOMER_POOL,
      runs: RUNS,
      recordsPerRun: RECORDS_PER_RUN,
    },
    ratio_eo_alo_batch500: Number((eo.recordsPerSecond / alo.recordsPerSecond).toFixed(3)),
    calls_per_batch_eo_steady: eo.callsPerBatchSteadyTotal,
    calls_per_batch_alo_steady: alo.callsPerBatchSteadyTotal,
    calls_per_batch_eo_keys_steady: find('exactly-once', 500, true).callsPerBatchSteadyTotal,
    calls_per_batch_eo_keyed_partition_steady: find('exactly-once', 500, true, 'partition')
      .callsPerBatchSteadyTotal,
    keyed_partition_slowdown: slowdown(eo, find('exactly-once', 500, true, 'partition')),
    keyed_global_slowdown: slowdown(eo, find('exactly-once', 500, true)),
    ...claimsFloor(eo, find('exactly-once', 500, true)),
    throughput,
  };
}

/** A checkpoint's time by staged files, and one over 1,000 partitions. */
async function checkpointSection(base: Base): Promise<Fragment> {
  const checkpoints = await measureCheckpoints(base, [10, 100, 1000]);
  progress('a checkpoint over 1,000 partitions (bench/scale.ts)');
  const scale = await measureScale(base);
  const keyWrites = keyWriteRates('bench', 'orders', 1000);
  return {
    checkpoints,
    commit_s_1000p: scale.commitSeconds,
    ...(scale.callsTotal === undefined ? {} : { checkpoint_calls_1000p: scale.callsTotal }),
    max_writes_per_key_per_s_1000p: keyWrites.maxWritesPerKeyPerSecond,
    scale,
    keyWrites,
  };
}

/** An idle pipeline's fixed bill, and the counted calls behind the monthly cost model (shipped for `eos cost`). */
async function costSection(base: Base): Promise<Fragment> {
  const idle = await measureIdle(base);
  const idleCost = idleMonthlyCost(idle);
  progress('the counts behind the cost model (bench/counts.ts)');
  const costCounts = await measureCostCounts(base, idle, 'npm run bench');
  writeCostCounts(costCounts.counts);
  const cost = costFigures(costCounts.counts);
  return {
    idle,
    idle_cost_per_month_usd: idleCost.perMonth.total,
    idle_cost: idleCost,
    cost,
    cost_counts: costCounts.counts,
    cost_measurements: { batches: [...costCounts.batches], checkpoints: [...costCounts.checkpoints] },
    cost_month_eo_10k_100p: cost.headline.exactlyOnce.total,
    cost_ratio_eo_alo: Number((cost.headline.exactlyOnce.total / cost.headline.atLeastOnce.total).toFixed(3)),
  };
}

/** Bundle sizes, module initialisation and the processor's cold start. */
async function startupSection(): Promise<Fragment> {
  const bundles = await measureBundles(root);
  progress('the processor cold start (bench/cold-start.ts)');
  const coldStart = await measureColdStart(COLD_START_RUNS);
  return { bundles, coldStart, init_ms_processor: coldStart.init_ms_processor };
}

/** The whole pipeline end to end: sustained throughput, bytes and calls, and visibility latency. */
async function e2eSection(): Promise<Fragment> {
  const e2e = await measureEndToEnd(E2E_DEFAULTS);
  progress('visibility latency');
  const visibility = await measureVisibility(VISIBILITY_DEFAULTS, E2E_DEFAULTS);
  const atDefault = visibility.find((v) => v.checkpointIntervalMs === E2E_DEFAULTS.checkpointIntervalMs)!;
  progress("latency at the stack's defaults (bench/latency.ts)");
  const latency = await measureStackDefaultsLatency();
  return {
    latency_defaults: latency,
    latency_defaults_max_ms: latency.maxMs,
    e2e,
    visibility,
    ratio_eo_alo_e2e: e2e.ratio.median,
    bytes_through_lambda_ratio: e2e.bytesRatio.median,
    calls_per_batch_e2e_eo: e2e.exactlyOnce.callsPerBatch.median,
    calls_per_batch_e2e_alo: e2e.atLeastOnce.callsPerBatch.median,
    calls_per_batch_e2e_ratio: e2e.callsPerBatchRatio.median,
    visibility_p50_ms: atDefault.p50Ms.median,
    visibility_p99_ms: atDefault.p99Ms.median,
  };
}

async function firstRunSection(): Promise<Fragment> {
  const firstRun = await measureFirstRun(root);
  progress(`first run: ${firstRun.seconds}s, ${firstRun.verdict}`);
  return { firstRun, first_run_s: firstRun.seconds };
}

/** The benchmark's sections in the order they run; `--only a,b` reruns those and keeps the rest of results.json. */
const SECTIONS: Record<string, { title: string; run: (base: Base) => Promise<Fragment> }> = {
  throughput: { title: 'the processor alone', run: throughputSection },
  checkpoints: { title: 'checkpoints', run: checkpointSection },
  cost: { title: 'an idle pipeline and the cost model', run: costSection },
  startup: { title: 'bundles and the cold start', run: () => startupSection() },
  e2e: { title: 'the whole pipeline end to end', run: () => e2eSection() },
  'first-run': { title: 'a first run: npm start in a fresh clone', run: () => firstRunSection() },
};

/** The sections `--only` names (every section without it); a one-line error on an unknown name. */
export function sectionsToRun(argv: readonly string[]): string[] {
  const at = argv.indexOf('--only');
  if (at < 0) return Object.keys(SECTIONS);
  const names = (argv[at + 1] ?? '').split(',').filter(Boolean);
  const unknown = names.filter((name) => !(name in SECTIONS));
  if (names.length === 0 || unknown.length > 0) {
    throw new Error(
      `--only takes sections from ${Object.keys(SECTIONS).join(', ')}` +
        (unknown.length ? `: unknown ${unknown.join(', ')}` : ''),
    );
  }
  return names;
}

function summaryLines(results: BenchResults): string {
  return (
    `ratio exactly-once / at-least-once at batch 500: ${results.ratio_eo_alo_batch500}\n` +
    `calls per batch, exactly-once steady state: ${results.calls_per_batch_eo_steady}\n` +
    `end to end, exactly-once / at-least-once sustained: ${results.ratio_eo_alo_e2e}\n` +
    `S3 bytes through Lambda per record, exactly-once / at-least-once: ${results.bytes_through_lambda_ratio}\n` +
    `visibility p50 / p99 at ${E2E_DEFAULTS.checkpointIntervalMs} ms: ${results.visibility_p50_ms} / ${results.visibility_p99_ms} ms\n` +
    `processor init: ${results.init_ms_processor} ms\n` +
    `monthly cost at 10,000 records/s over 100 partitions, exactly-once: ${results.cost_month_eo_10k_100p} USD ` +
    `(${results.cost_ratio_eo_alo} × at-least-once)\n` +
    `calls per batch end to end, exactly-once: ${results.calls_per_batch_e2e_eo} ` +
    `(${results.calls_per_batch_e2e_ratio} × at-least-once)\n`
  );
}

async function main(): Promise<void> {
  const startedAt = Date.now();
  const sections = sectionsToRun(process.argv.slice(2));
  const resultsFile = join(root, 'bench', 'results.json');
  const partial = sections.length < Object.keys(SECTIONS).length;
  const previous: Fragment = partial ? JSON.parse(readFileSync(resultsFile, 'utf8')) : {};
  // The 1-minute load average every 10 s: on a shared 2-core machine it tells whether other work ran alongside.
  const loads = [loadavg()[0]!];
  const sampler = setInterval(() => loads.push(loadavg()[0]!), 10_000);
  sampler.unref();
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  progress('starting the local parts');
  const parts = await startLocalParts();
  Object.assign(process.env, parts.env, { AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' });
  try {
    const clients = createAwsClients();
    const base = { table: 'bench-ledger', bucket: 'bench-bucket' };
    await Promise.all([
      createLedgerTable(clients.dynamodb, base.table),
      createBucket(clients.s3, base.bucket),
    ]);
    let measured: Fragment = {};
    for (const name of sections) {
      progress(SECTIONS[name]!.title);
      measured = { ...measured, ...(await SECTIONS[name]!.run(base)) };
    }
    const results = {
      ...previous,
      ...measured,
      generatedAt: new Date().toISOString(),
      machine: {
        node: process.version,
        note:
          `DynamoDB Local + s3rver on loopback, not AWS latencies; ${cpus().length} cores, 1-minute load average ` +
          `${median(loads).toFixed(1)} (median of ${loads.length} samples, max ${Math.max(...loads).toFixed(1)}): the ` +
          'benchmark alone keeps it near 2, more means other work shared the machine' +
          (partial ? `; this run measured ${sections.join(', ')}, the rest is from the run before` : ''),
      },
      durationSeconds: Math.round((Date.now() - startedAt) / 1000),
    } as BenchResults;
    writeFileSync(resultsFile, `${JSON.stringify(results, null, 2)}\n`);
    writeFileSync(join(root, 'docs', 'benchmark.md'), renderBenchmarkPageOf(results));
    progress(`done in ${results.durationSeconds}s: bench/results.json, docs/benchmark.md`);
    process.stdout.write(summaryLines(results));
  } finally {
    clearInterval(sampler);
    await parts.stop();
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  try {
    await main();
  } catch (error) {
    process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exitCode = 1;
  }
}
