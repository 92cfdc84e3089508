/**
 * The monthly bill of a pipeline at a steady rate, from the AWS calls the benchmark counted (`cli/cost-counts.json`,
 * written by `npm run bench` or `npx tsx bench/counts.ts`) and the list prices it copied there with their date.
 * Pure: `eos cost` (cli/cost.ts) and the benchmark's page (bench/cost.ts) both price through it.
 *
 * Traffic: MSK delivers each partition's records in batches of its own, so at R records/s over P partitions and a
 * batching window W every partition makes a batch each window holding R·W/P records, unless the batch size caps
 * it first (then R / batch size batches a second) or fewer records than partitions arrive in a window (then every
 * record is a batch of its own). Each batch is one processor invocation and, exactly-once, one staged file.
 * Calls per batch are linear in its records (fitted from two measured batch sizes); transaction items are a fixed
 * part plus one per distinct state key the batch touches. A transform without keyed state (0 state keys) is priced
 * from batches measured with one (`passthrough`): its chunks write the fence alone, one UpdateItem with the staged
 * entry inline. Exactly-once, its write units follow the fence item's size, which grows with each inline entry
 * until a checkpoint's cleanup empties it, or the first chunk past the inline budget moves the entries into items
 * (one transaction): a stateless batch costs the mean of the units measured at positions 1..n after a cleanup, n
 * the files a partition stages in a checkpoint interval, the measured positions repeating after that chunk.
 * DynamoDB write units otherwise: two per transaction item (items of at most 1 KB), one per PartiQL write, and for
 * single writes (PutItem, UpdateItem, DeleteItem) the units DynamoDB reported for each, by the item's size. A
 * checkpoint's calls are a fixed part plus parts per shard (one per `partitionsPerShard` partitions that moved, at
 * most `maxShards`), per partition, per staged file and per final object, fitted from measured checkpoints of five
 * shapes; the final objects of a partition are its files cut by the promotion limits (members, rows and bytes,
 * bytes taken as the records' size: an upper bound, since staged files are compressed), and merged final objects
 * (the default) pack a shard's partition objects whole into objects of the same limits. Step Functions: a Standard
 * workflow bills each transition; an Express one (the default) each execution and its duration ({@link workflowUsage}).
 */

import type { Workflow } from '../shared/coordinator/definition.ts';
import {
  type CheckpointShape,
  type CostInput,
  MONTH_SECONDS,
  type Traffic,
  trafficOf,
} from './cost-traffic.ts';
import type {
  BatchTerms,
  CheckpointCounts,
  CheckpointTerms,
  CostCounts,
  Prices,
  ProcessorCounts,
} from './measured-counts.ts';

export {
  type CheckpointLayout,
  type CheckpointShape,
  type CostInput,
  MONTH_SECONDS,
  mergedObjectCount,
  type Traffic,
  trafficOf,
} from './cost-traffic.ts';
export type {
  BatchTerms,
  CheckpointCounts,
  CheckpointTerms,
  CostCounts,
  ExactlyOnceProcessorCounts,
  Prices,
  ProcessorCounts,
  StatelessProcessorCounts,
} from './measured-counts.ts';

export interface BillLine {
  readonly item: string;
  readonly quantity: number;
  readonly unit: string;
  readonly usd: number;
}

export interface Bill {
  readonly lines: readonly BillLine[];
  readonly total: number;
}

export interface MonthlyCost {
  readonly input: CostInput;
  readonly pricesAsOf: string;
  readonly countsMeasuredAt: string;
  readonly traffic: Traffic;
  readonly exactlyOnce: Bill;
  readonly atLeastOnce: Bill;
  readonly firehose: Bill;
  readonly managedFlink: Bill;
}

const MONTH_HOURS = MONTH_SECONDS / 3600;
const PUT_CLASS = [
  's3:PutObject',
  's3:CopyObject',
  's3:ListObjectsV2',
  's3:CreateMultipartUpload',
  's3:UploadPart',
];
const GET_CLASS = ['s3:GetObject', 's3:HeadObject'];
const DDB_READS = ['dynamodb:Query', 'dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Scan'];
const DDB_PLAIN_WRITES = [
  'dynamodb:PutItem',
  'dynamodb:UpdateItem',
  'dynamodb:DeleteItem',
  'dynamodb:BatchWriteItem',
];

function sum(calls: Record<string, number>, operations: readonly string[]): number {
  return operations.reduce((n, operation) => n + (calls[operation] ?? 0), 0);
}

const round = (value: number, digits: number) => Number(value.toFixed(digits));

/** Calls of one batch of `records` records, by operation. */
export function batchCalls(counts: Pick<ProcessorCounts, 'calls'>, records: number): Record<string, number> {
  return Object.fromEntries(
    Object.entries(counts.calls).map(([operation, t]) => [operation, t.fixed + t.perRecord * records]),
  );
}

export function batchTransactionItems(counts: ProcessorCounts, stateKeys: number): number {
  return counts.transactionItems.fixed + counts.transactionItems.perStateKey * stateKeys;
}

function atShape(t: CheckpointTerms, shape: CheckpointShape): number {
  return (
    t.fixed +
    t.perShard * shape.shards +
    t.perPartition * shape.partitions +
    t.perStagedFile * shape.stagedFiles +
    t.perFinalObject * shape.finalObjects
  );
}

/** One checkpoint of `shape`: its calls by operation, transaction items, Lambda invocations and transitions. */
export function checkpointCalls(counts: CheckpointCounts, shape: CheckpointShape) {
  return {
    calls: Object.fromEntries(Object.entries(counts.calls).map(([op, t]) => [op, atShape(t, shape)])),
    transactionItems: atShape(counts.transactionItems, shape),
    statementWrites: atShape(counts.statementWrites, shape),
    singleWriteUnits: atShape(counts.singleWriteUnits, shape),
    lambdaInvocations: atShape(counts.lambdaInvocations, shape),
    transitions: atShape(counts.transitions, shape),
    executions: atShape(counts.executions, shape),
  };
}

interface Usage {
  calls: Record<string, number>;
  transactionItems: number;
  statementWrites: number;
  /** Write units measured by the items' sizes: single writes, and every write of a batch priced by position. */
  writeUnits: number;
  invocations: number;
  gbSeconds: number;
  /** Billed by a Standard workflow. */
  transitions: number;
  /** Billed by an Express workflow: its executions, and their duration at the memory they are billed for. */
  expressRequests: number;
  expressGbSeconds: number;
}

function addUsage(into: Usage, from: Usage, times: number): void {
  for (const [op, n] of Object.entries(from.calls)) into.calls[op] = (into.calls[op] ?? 0) + n * times;
  into.transactionItems += from.transactionItems * times;
  into.statementWrites += from.statementWrites * times;
  into.writeUnits += from.writeUnits * times;
  into.invocations += from.invocations * times;
  into.gbSeconds += from.gbSeconds * times;
  into.transitions += from.transitions * times;
  into.expressRequests += from.expressRequests * times;
  into.expressGbSeconds += from.expressGbSeconds * times;
}

const emptyUsage = (): Usage => ({
  calls: {},
  transactionItems: 0,
  statementWrites: 0,
  writeUnits: 0,
  invocations: 0,
  gbSeconds: 0,
  transitions: 0,
  expressRequests: 0,
  expressGbSeconds: 0,
});

function line(item: string, quantity: number, unit: string, usd: number): BillLine {
  return { item, quantity: Math.round(quantity), unit, usd: round(usd, 2) };
}

function billOf(usage: Usage, counts: CostCounts, withDashboard: boolean): Bill {
  const p = counts.prices;
  const puts = sum(usage.calls, PUT_CLASS);
  const gets = sum(usage.calls, GET_CLASS);
  const wru = usage.transactionItems * 2 + usage.statementWrites + usage.writeUnits;
  const rru = sum(usage.calls, DDB_READS);
  const { alarms, dashboards, customMetrics } = counts.stack;
  const cloudWatch =
    alarms * p.cloudWatch.alarmStandardPerMonth +
    (withDashboard ? dashboards * p.cloudWatch.dashboardPerMonth : 0) +
    customMetrics * p.cloudWatch.customMetricPerMonth;
  const lines = [
    line('S3 PUT/COPY/LIST requests', puts, 'requests', (puts * p.s3.putCopyPostListPer1000) / 1000),
    line('S3 GET/HEAD requests', gets, 'requests', (gets * p.s3.getHeadPer1000) / 1000),
    line('DynamoDB write request units', wru, 'WRU', (wru * p.dynamodb.writeRequestUnitPerMillion) / 1e6),
    line('DynamoDB read request units', rru, 'RRU', (rru * p.dynamodb.readRequestUnitPerMillion) / 1e6),
    line(
      'Lambda requests',
      usage.invocations,
      'invocations',
      (usage.invocations * p.lambda.requestsPerMillion) / 1e6,
    ),
    line('Lambda duration', usage.gbSeconds, 'GB-s', usage.gbSeconds * p.lambda.arm64GbSecond),
    line(
      'Step Functions state transitions',
      usage.transitions,
      'transitions',
      (usage.transitions * p.stepFunctions.standardTransitionPer1000) / 1000,
    ),
    line(
      'Step Functions Express requests',
      usage.expressRequests,
      'executions',
      (usage.expressRequests * p.stepFunctions.expressRequestsPerMillion) / 1e6,
    ),
    line(
      'Step Functions Express duration',
      usage.expressGbSeconds,
      'GB-s',
      usage.expressGbSeconds * p.stepFunctions.expressGbSecond,
    ),
    line(
      `CloudWatch (${alarms} alarms, ${withDashboard ? `${dashboards} dashboard, ` : ''}${customMetrics} metrics)`,
      alarms + customMetrics,
      'alarms and metrics',
      cloudWatch,
    ),
  ];
  return {
    lines,
    total: round(
      lines.reduce((a, l) => a + l.usd, 0),
      2,
    ),
  };
}

/**
 * The mean of `units` (by position after a cleanup, index 0 first) over positions 1..n. The measured positions end
 * with the chunk that moves the fence's inline entries into items, after which the fence is as a cleanup leaves it:
 * later positions repeat them. A fractional n weighs its last position by its fraction; n below 1 counts as 1 (a
 * partition that stages at all stages a first batch).
 */
export function meanOverCycle(units: readonly number[], n: number): number {
  if (units.length === 0) throw new Error('no write units measured by position');
  const positions = Math.max(1, n);
  const at = (position: number) => units[(position - 1) % units.length]!;
  const whole = Math.floor(positions);
  const period = units.reduce((a, b) => a + b, 0);
  let sum = Math.floor(whole / units.length) * period;
  for (let position = whole - (whole % units.length) + 1; position <= whole; position++) sum += at(position);
  sum += (positions - whole) * at(whole + 1);
  return sum / positions;
}

/** Staged files a partition makes in a checkpoint interval: the batch's position runs 1..this after a cleanup. */
export function filesPerPartition(traffic: Traffic): number {
  const { stagedFiles, partitions } = traffic.checkpoint;
  return partitions > 0 ? Math.max(1, stagedFiles / partitions) : 1;
}

function processorUsage(
  counts: CostCounts,
  mode: keyof CostCounts['processor'],
  input: CostInput,
  traffic: Traffic,
): Usage {
  const processor = counts.processor[mode];
  const n = traffic.recordsPerBatch;
  const at = (t: BatchTerms) => t.fixed + t.perRecord * n;
  // Without keyed state a chunk writes its fence alone: the counts measured so, not the fit with state keys.
  const stateless = input.stateKeys === 0;
  const ms = Math.max(1, at(stateless ? processor.stateless.ms : processor.ms));
  const cycle = stateless ? processor.stateless.writeUnitsAfterCleanup : undefined;
  // The cycle's units are the batch's writes, single and transactional: the fit's would count them again.
  const units = cycle
    ? { transactionItems: 0, writeUnits: meanOverCycle(cycle, filesPerPartition(traffic)) }
    : {
        transactionItems: stateless
          ? at(processor.stateless.transactionItems)
          : batchTransactionItems(processor, Math.min(n, input.stateKeys)),
        writeUnits: at(stateless ? processor.stateless.singleWriteUnits : processor.singleWriteUnits),
      };
  return {
    calls: batchCalls(stateless ? processor.stateless : processor, n),
    ...units,
    statementWrites: 0,
    invocations: 1,
    gbSeconds: (ms / 1000) * (counts.defaults.processorMemoryMb / 1024),
    transitions: 0,
    expressRequests: 0,
    expressGbSeconds: 0,
  };
}

/** The monitor's run each checkpoint interval (billed duration: the coordinator's measured per invocation). */
function monitorUsage(counts: CostCounts): Usage {
  return {
    calls: { ...counts.monitor },
    transactionItems: 0,
    statementWrites: 0,
    // The monitor's writes are small items (its marks): one unit each.
    writeUnits: sum(counts.monitor, DDB_PLAIN_WRITES),
    invocations: 1,
    gbSeconds: (counts.checkpoint.msPerInvocation / 1000) * (counts.defaults.monitorMemoryMb / 1024),
    transitions: 0,
    expressRequests: 0,
    expressGbSeconds: 0,
  };
}

/**
 * What Step Functions bills for a checkpoint's executions. Standard: each transition. Express: each execution, and
 * its duration, taken as its invocations' measured time end to end (an upper bound: a Map's shards overlap), rounded
 * up to the billing increment, at one memory chunk.
 */
/** What Express bills for one execution of `ms`: its duration rounded up to the increment, at one memory chunk. */
export function expressGbSeconds(
  sf: Pick<Prices['stepFunctions'], 'expressBillingIncrementMs' | 'expressMemoryChunkMb'>,
  ms: number,
): number {
  const billedMs = Math.ceil(ms / sf.expressBillingIncrementMs) * sf.expressBillingIncrementMs;
  return (billedMs / 1000) * (sf.expressMemoryChunkMb / 1024);
}

export function workflowUsage(
  counts: CostCounts,
  c: ReturnType<typeof checkpointCalls>,
  workflow: Workflow,
): Pick<Usage, 'transitions' | 'expressRequests' | 'expressGbSeconds'> {
  if (workflow === 'standard') return { transitions: c.transitions, expressRequests: 0, expressGbSeconds: 0 };
  const sf = counts.prices.stepFunctions;
  const executions = Math.max(1, c.executions);
  const msEach = (c.lambdaInvocations * counts.checkpoint.msPerInvocation) / executions;
  return {
    transitions: 0,
    expressRequests: executions,
    expressGbSeconds: executions * expressGbSeconds(sf, msEach),
  };
}

function checkpointUsage(counts: CostCounts, shape: CheckpointShape, workflow: Workflow): Usage {
  const c = checkpointCalls(counts.checkpoint, shape);
  return {
    calls: c.calls,
    transactionItems: c.transactionItems,
    statementWrites: c.statementWrites,
    writeUnits: c.singleWriteUnits,
    invocations: c.lambdaInvocations,
    gbSeconds:
      c.lambdaInvocations *
      (counts.checkpoint.msPerInvocation / 1000) *
      (counts.defaults.coordinatorMemoryMb / 1024),
    ...workflowUsage(counts, c, workflow),
  };
}

/** The month's bill of each option at a steady rate: this pipeline both ways, Firehose and Managed Flink. */
export function monthlyCost(counts: CostCounts, input: CostInput): MonthlyCost {
  const traffic = trafficOf(counts, input);
  const batchesPerMonth = traffic.batchesPerSecond * MONTH_SECONDS;
  const eo = emptyUsage();
  addUsage(eo, processorUsage(counts, 'exactly-once', input, traffic), batchesPerMonth);
  const workflow = input.coordinatorWorkflow ?? counts.defaults.coordinatorWorkflow ?? 'standard';
  addUsage(eo, checkpointUsage(counts, traffic.checkpoint, workflow), traffic.checkpointsPerMonth);
  addUsage(eo, monitorUsage(counts), traffic.checkpointsPerMonth);
  const alo = emptyUsage();
  addUsage(alo, processorUsage(counts, 'at-least-once', input, traffic), batchesPerMonth);
  addUsage(alo, monitorUsage(counts), traffic.checkpointsPerMonth);
  const p = counts.prices;
  const bytesPerSecond = input.recordsPerSecond * input.recordBytes;
  const gb = (bytesPerSecond * MONTH_SECONDS) / 2 ** 30;
  const kpus =
    input.flinkKpus ?? Math.max(1, Math.ceil(bytesPerSecond / p.managedFlink.assumedBytesPerSecondPerKpu));
  const kpuHours = (kpus + p.managedFlink.orchestrationKpus) * MONTH_HOURS;
  const firehoseLines = [line('Firehose ingestion, MSK source', gb, 'GB', gb * p.firehose.mskSourcePerGb)];
  const flinkLines = [
    line(
      `Managed Flink, ${kpus} KPU + ${p.managedFlink.orchestrationKpus} orchestration`,
      kpuHours,
      'KPU-hours',
      kpuHours * p.managedFlink.kpuHour,
    ),
  ];
  const total = (lines: readonly BillLine[]) =>
    round(
      lines.reduce((a, l) => a + l.usd, 0),
      2,
    );
  return {
    input,
    pricesAsOf: p.asOf,
    countsMeasuredAt: counts.measuredAt,
    traffic,
    exactlyOnce: billOf(eo, counts, true),
    atLeastOnce: billOf(alo, counts, true),
    firehose: { lines: firehoseLines, total: total(firehoseLines) },
    managedFlink: { lines: flinkLines, total: total(flinkLines) },
  };
}

/** The options by monthly total, cheapest first. */
export function cheapestFirst(cost: MonthlyCost): Array<{ option: string; total: number }> {
  return [
    { option: 'this pipeline, exactly-once', total: cost.exactlyOnce.total },
    { option: 'this pipeline, at-least-once', total: cost.atLeastOnce.total },
    { option: 'Firehose', total: cost.firehose.total },
    { option: 'Managed Flink', total: cost.managedFlink.total },
  ].sort((a, b) => a.total - b.total);
}
