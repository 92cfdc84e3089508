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
import type { ThroughputResult } from './run.ts';

interface Prices {
  asOf: string;
  dynamodb: { writeRequestUnitPerMillion: number; readRequestUnitPerMillion: number };
  s3: { putCopyPostListPer1000: number; getHeadPer1000: number };
  stepFunctions: { standardTransitionPer1000: number };
  lambda: { arm64GbSecond: number; requestsPerMillion: number };
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
