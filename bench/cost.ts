/**
 * Cost per million records, from the counted calls and the list prices in `bench/prices.json` (with their date).
 *
 * Assumptions, stated so they can be challenged:
 * - batch 500 records; every ledger item under 1 KB (a transactional write: 2 WRU per item, a plain write 1);
 * - a Query or GetItem reads under 4 KB (1 RRU); each S3 PutObject/CopyObject/List is one PUT-class request,
 *   each Get/Head one GET-class request; deletes are free;
 * - Lambda at 1,024 MB (the stack's processor default), billed for the locally measured time per batch — an
 *   approximation, since DynamoDB Local and s3rver are not AWS's latencies;
 * - the coordinator's cost per staged file is taken from the 1,000-file checkpoint; Step Functions transitions
 *   are estimated as half the interpreter's history events.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CheckpointResult } from './checkpoint.ts';
import type { IdleResult } from './idle.ts';
import type { ThroughputResult } from './run.ts';

interface Prices {
  asOf: string;
  dynamodb: { writeRequestUnitPerMillion: number; readRequestUnitPerMillion: number };
  s3: { putCopyPostListPer1000: number; getHeadPer1000: number };
  stepFunctions: { standardTransitionPer1000: number };
  lambda: { arm64GbSecond: number; requestsPerMillion: number };
  cloudWatch: { alarmStandardPerMonth: number; dashboardPerMonth: number; customMetricPerMonth: number };
}

const prices = JSON.parse(
  readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'prices.json'), 'utf8'),
) as Prices;

const MILLION = 1_000_000;
const LAMBDA_GB = 1;
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

export interface CostLine {
  dynamodbWrites: number;
  dynamodbReads: number;
  s3Requests: number;
  stepFunctions: number;
  lambda: number;
  total: number;
}

function sum(calls: Record<string, number>, operations: readonly string[]): number {
  return operations.reduce((n, operation) => n + (calls[operation] ?? 0), 0);
}

function line(parts: Omit<CostLine, 'total'>): CostLine {
  const rounded = Object.fromEntries(
    Object.entries(parts).map(([k, v]) => [k, Number(v.toFixed(4))]),
  ) as Omit<CostLine, 'total'>;
  const total = Object.values(parts).reduce((a, b) => a + b, 0);
  return { ...rounded, total: Number(total.toFixed(4)) };
}

/** DynamoDB and S3 request costs of `calls` (and `transactionItems`) made `times` times. */
function requestCosts(
  calls: Record<string, number>,
  transactionItems: number,
  times: number,
): Pick<CostLine, 'dynamodbWrites' | 'dynamodbReads' | 's3Requests'> {
  const wru = transactionItems * 2 + sum(calls, DDB_PLAIN_WRITES);
  return {
    dynamodbWrites: (wru * times * prices.dynamodb.writeRequestUnitPerMillion) / MILLION,
    dynamodbReads: (sum(calls, DDB_READS) * times * prices.dynamodb.readRequestUnitPerMillion) / MILLION,
    s3Requests:
      (times *
        (sum(calls, PUT_CLASS) * prices.s3.putCopyPostListPer1000 +
          sum(calls, GET_CLASS) * prices.s3.getHeadPer1000)) /
      1000,
  };
}

function processorCost(result: ThroughputResult): CostLine {
  const batches = MILLION / result.batchSize;
  return line({
    ...requestCosts(result.callsPerBatchSteady, result.transactionItemsPerBatch, batches),
    stepFunctions: 0,
    lambda:
      (batches * result.msPerBatch * LAMBDA_GB * prices.lambda.arm64GbSecond) / 1000 +
      (batches * prices.lambda.requestsPerMillion) / MILLION,
  });
}

function checkpointCost(checkpoint: CheckpointResult, stagedFiles: number): CostLine {
  const scale = stagedFiles / checkpoint.stagedFiles;
  return line({
    ...requestCosts(checkpoint.calls, checkpoint.transactionItems, scale),
    stepFunctions:
      (scale * (checkpoint.historyEvents / 2) * prices.stepFunctions.standardTransitionPer1000) / 1000,
    lambda: (scale * checkpoint.lambdaInvocations * prices.lambda.requestsPerMillion) / MILLION,
  });
}

function add(a: CostLine, b: CostLine): CostLine {
  const { total: _a, ...pa } = a;
  return line(
    Object.fromEntries(Object.entries(pa).map(([k, v]) => [k, v + b[k as keyof CostLine]])) as Omit<
      CostLine,
      'total'
    >,
  );
}

export function costModel(input: {
  eo: ThroughputResult;
  alo: ThroughputResult;
  eoKeys: ThroughputResult;
  checkpoints: readonly CheckpointResult[];
}) {
  const largest = [...input.checkpoints].sort((a, b) => b.stagedFiles - a.stagedFiles)[0]!;
  const stagedFilesPerMillion =
    (MILLION / input.eo.batchSize) * (input.eo.callsPerBatchSteady['s3:PutObject'] ?? 1);
  const coordinator = checkpointCost(largest, stagedFilesPerMillion);
  return {
    pricesAsOf: prices.asOf,
    currency: 'USD',
    perMillionRecords: {
      atLeastOnce: processorCost(input.alo),
      exactlyOnceProcessor: processorCost(input.eo),
      exactlyOnceCoordinator: coordinator,
      exactlyOnce: add(processorCost(input.eo), coordinator),
      exactlyOnceWithKeys: add(processorCost(input.eoKeys), coordinator),
    },
  };
}

const MONTH_SECONDS = 30 * 24 * 3600;
/** The monitor's own metrics (last commit age, oldest uncommitted age, consecutive aborts): all an idle pipeline emits. */
const IDLE_METRICS = 3;
/** Assumed billed duration of a scheduled coordinator or monitor invocation at 1,024 MB (not measurable locally). */
const SCHEDULED_INVOCATION_MS = 100;
/** The event source mapping's default batching window: at low rates a batch holds what arrives in it. */
const BATCHING_WINDOW_SECONDS = 1;

export interface IdleCost {
  executionsPerMonth: number;
  stateTransitionsPerExecution: number;
  perMonth: {
    stepFunctions: number;
    lambda: number;
    dynamodbReads: number;
    alarms: number;
    dashboard: number;
    customMetrics: number;
    total: number;
  };
}

/**
 * The fixed monthly cost of a deployed pipeline that receives nothing: the scheduled coordinator executions that
 * find nothing to commit and the monitor runs (one each per checkpoint interval), the alarms, the dashboard, and the
 * monitor's metrics. Step Functions transitions are estimated as half the interpreter's history events, as for
 * checkpoints; the dashboard is billed only beyond the account's first three.
 */
export function idleMonthlyCost(idle: IdleResult): IdleCost {
  const executions = MONTH_SECONDS / 60 / idle.checkpointIntervalMinutes;
  const transitions = idle.emptyCheckpoint.historyEvents / 2;
  const reads = sum(idle.emptyCheckpoint.calls, DDB_READS) + sum(idle.monitor.calls, DDB_READS);
  const invocations = idle.emptyCheckpoint.lambdaInvocations + 1;
  const parts = {
    stepFunctions: (executions * transitions * prices.stepFunctions.standardTransitionPer1000) / 1000,
    lambda:
      executions *
      invocations *
      ((SCHEDULED_INVOCATION_MS / 1000) * LAMBDA_GB * prices.lambda.arm64GbSecond +
        prices.lambda.requestsPerMillion / MILLION),
    dynamodbReads: (executions * reads * prices.dynamodb.readRequestUnitPerMillion) / MILLION,
    alarms: idle.alarms * prices.cloudWatch.alarmStandardPerMonth,
    dashboard: idle.dashboards * prices.cloudWatch.dashboardPerMonth,
    customMetrics: IDLE_METRICS * prices.cloudWatch.customMetricPerMonth,
  };
  const round = (v: number) => Number(v.toFixed(3));
  const total = Object.values(parts).reduce((a, b) => a + b, 0);
  return {
    executionsPerMonth: executions,
    stateTransitionsPerExecution: transitions,
    perMonth: {
      ...(Object.fromEntries(Object.entries(parts).map(([k, v]) => [k, round(v)])) as Omit<
        IdleCost['perMonth'],
        'total'
      >),
      total: round(total),
    },
  };
}

export interface RateCost {
  recordsPerSecond: number;
  recordsPerBatch: number;
  stagedFilesPerCheckpoint: number;
  perMonth: number;
  /** Everything the deployed pipeline costs in the month, divided by the month's records (in millions). */
  perMillionRecords: number;
}

/** A checkpoint's cost as a fixed part plus a part per staged file, from the smallest and largest measured. */
function checkpointCostModel(checkpoints: readonly CheckpointResult[]): (files: number) => number {
  const sorted = [...checkpoints].sort((a, b) => a.stagedFiles - b.stagedFiles);
  const small = sorted[0]!;
  const large = sorted.at(-1)!;
  const costOf = (c: CheckpointResult) => checkpointCost(c, c.stagedFiles).total;
  const perFile = (costOf(large) - costOf(small)) / (large.stagedFiles - small.stagedFiles);
  const fixed = Math.max(0, costOf(small) - perFile * small.stagedFiles);
  return (files) => fixed + perFile * files;
}

/**
 * The monthly cost at a steady rate, exactly-once without idempotency keys, and that cost per million records.
 * At low rates a batch holds only what arrives within the batching window (1 s), so a batch's fixed costs (one S3
 * put, one transaction of the fence and staged entry) are shared by fewer records; and every checkpoint interval
 * commits a checkpoint whose fixed cost (its state transitions, manifest, ledger writes) is shared by fewer
 * records. Per batch of n records: the measured steady calls of a 500-record batch; transaction items
 * 2 + min(n, items of a 500-record batch − 2) (fence and staged entry, plus at most one state item per record);
 * Lambda time the measured time of a 500-record batch scaled by n/500, at least 10 ms. Checkpoints: a fixed part
 * and a part per staged file, fitted to the smallest and largest measured checkpoints. On top: the idle cost's
 * monitor, alarms and dashboard, and every custom metric the functions emit.
 */
export function costAtRates(
  input: {
    eo: ThroughputResult;
    checkpoints: readonly CheckpointResult[];
    idle: IdleResult;
    idleCost: IdleCost;
  },
  rates: readonly number[],
): RateCost[] {
  const checkpoint = checkpointCostModel(input.checkpoints);
  const checkpointsPerMonth = input.idleCost.executionsPerMonth;
  const { idleCost } = input;
  const alwaysOn =
    idleCost.perMonth.alarms +
    idleCost.perMonth.dashboard +
    input.idle.customMetrics * prices.cloudWatch.customMetricPerMonth +
    // The monitor still runs every interval: its share of the idle Lambda and read costs.
    idleCost.perMonth.lambda / 2;
  return rates.map((rate) => {
    const perBatch = Math.max(1, Math.min(input.eo.batchSize, rate * BATCHING_WINDOW_SECONDS));
    const millionsPerMonth = (rate * MONTH_SECONDS) / MILLION;
    const batchesPerMonth = (millionsPerMonth * MILLION) / perBatch;
    const items = 2 + Math.min(perBatch, input.eo.transactionItemsPerBatch - 2);
    const ms = Math.max(10, (input.eo.msPerBatch * perBatch) / input.eo.batchSize);
    const processor = line({
      ...requestCosts(input.eo.callsPerBatchSteady, items, batchesPerMonth),
      stepFunctions: 0,
      lambda:
        (batchesPerMonth * ms * LAMBDA_GB * prices.lambda.arm64GbSecond) / 1000 +
        (batchesPerMonth * prices.lambda.requestsPerMillion) / MILLION,
    }).total;
    const filesPerCheckpoint =
      (batchesPerMonth / checkpointsPerMonth) * (input.eo.callsPerBatchSteady['s3:PutObject'] ?? 1);
    const checkpoints = checkpointsPerMonth * checkpoint(filesPerCheckpoint);
    const perMonth = processor + checkpoints + alwaysOn;
    return {
      recordsPerSecond: rate,
      recordsPerBatch: perBatch,
      stagedFilesPerCheckpoint: Number(filesPerCheckpoint.toFixed(1)),
      perMonth: Number(perMonth.toFixed(2)),
      perMillionRecords: Number((perMonth / millionsPerMonth).toFixed(3)),
    };
  });
}
