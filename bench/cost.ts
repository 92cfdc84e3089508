/**
 * The benchmark's cost figures. The monthly bill at a steady rate is cli/cost-model.ts's, from the counts the
 * benchmark measured (`bench/counts.ts`, shipped as `cli/cost-counts.json`): the page shows it at a few rates and
 * partition counts, and where each option is cheapest. The idle cost (nothing received) is priced here from the
 * idle measurement (`bench/idle.ts`).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CostCounts, expressGbSeconds, type MonthlyCost, monthlyCost } from '../cli/cost-model.ts';
import type { IdleResult } from './idle.ts';

interface IdlePrices {
  asOf: string;
  dynamodb: { readRequestUnitPerMillion: number };
  lambda: { arm64GbSecond: number; requestsPerMillion: number };
  stepFunctions: {
    standardTransitionPer1000: number;
    expressRequestsPerMillion: number;
    expressGbSecond: number;
    expressMemoryChunkMb: number;
    expressBillingIncrementMs: number;
  };
  cloudWatch: { alarmStandardPerMonth: number; dashboardPerMonth: number; customMetricPerMonth: number };
}

const prices = JSON.parse(
  readFileSync(join(dirname(fileURLToPath(import.meta.url)), 'prices.json'), 'utf8'),
) as IdlePrices;

const MILLION = 1_000_000;
const LAMBDA_GB = 1;
const DDB_READS = ['dynamodb:Query', 'dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Scan'];

function sum(calls: Record<string, number>, operations: readonly string[]): number {
  return operations.reduce((n, operation) => n + (calls[operation] ?? 0), 0);
}

const MONTH_SECONDS = 30 * 24 * 3600;
/** The monitor's own metrics (last commit age, oldest uncommitted age, consecutive aborts): all an idle pipeline emits. */
const IDLE_METRICS = 3;
/** Assumed billed duration of a scheduled coordinator or monitor invocation at 1,024 MB (not measurable locally). */
const SCHEDULED_INVOCATION_MS = 100;

export interface IdleCost {
  executionsPerMonth: number;
  /** The workflow the schedule starts: Express bills an execution and its duration, Standard its transitions. */
  workflow: string;
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
 * monitor's metrics. Step Functions transitions are the states the interpreter entered, as for checkpoints (a
 * Standard workflow); an Express one bills the execution and its duration, its invocations at the assumed billed
 * duration each, at one memory chunk. The dashboard is billed only beyond the account's first three.
 */
export function idleMonthlyCost(idle: IdleResult): IdleCost {
  const executions = MONTH_SECONDS / 60 / idle.checkpointIntervalMinutes;
  const transitions = idle.emptyCheckpoint.transitions;
  const reads = sum(idle.emptyCheckpoint.calls, DDB_READS) + sum(idle.monitor.calls, DDB_READS);
  const invocations = idle.emptyCheckpoint.lambdaInvocations + 1;
  const sf = prices.stepFunctions;
  const express = idle.defaults.coordinatorWorkflow === 'express';
  const gbSeconds = expressGbSeconds(sf, idle.emptyCheckpoint.lambdaInvocations * SCHEDULED_INVOCATION_MS);
  const parts = {
    stepFunctions: express
      ? executions * (sf.expressRequestsPerMillion / MILLION + gbSeconds * sf.expressGbSecond)
      : (executions * transitions * sf.standardTransitionPer1000) / 1000,
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
    workflow: idle.defaults.coordinatorWorkflow,
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

/** Rates and partition counts of the page's table (10,000 records/s over 100 partitions is the headline). */
export const COST_RATES = [1, 100, 1_000, 10_000, 100_000] as const;
export const COST_PARTITIONS = [10, 100] as const;
/** Record size of the page's figures: the "1 KB". */
export const COST_RECORD_BYTES = 1024;

export interface CostRow {
  recordsPerSecond: number;
  partitions: number;
  recordsPerBatch: number;
  exactlyOnce: number;
  atLeastOnce: number;
  /** Both with the benchmark workload's keyed-state items per batch (which Firehose and Flink do not keep). */
  exactlyOnceWithState: number;
  atLeastOnceWithState: number;
  firehose: number;
  managedFlink: number;
  cheapest: string;
}

export interface CostFigures {
  pricesAsOf: string;
  countsMeasuredAt: string;
  /**
   * 10,000 records/s of 1 KB over 100 partitions, every other input at the stack's defaults, no keyed state: the
   * workload Firehose and Flink can also run, so the four compare like for like.
   */
  headline: MonthlyCost;
  /** The same with the benchmark workload's keyed-state items per batch: exactly-once against at-least-once. */
  headlineWithState: MonthlyCost;
  rows: CostRow[];
}

function costAt(
  counts: CostCounts,
  recordsPerSecond: number,
  partitions: number,
  stateKeys = 0,
): MonthlyCost {
  const d = counts.defaults;
  return monthlyCost(counts, {
    recordsPerSecond,
    recordBytes: COST_RECORD_BYTES,
    partitions,
    checkpointIntervalMinutes: d.checkpointIntervalMinutes,
    batchingWindowSeconds: d.maxBatchingWindowSeconds,
    batchSize: d.batchSize,
    stateKeys,
  });
}

export function costFigures(counts: CostCounts): CostFigures {
  const rows = COST_PARTITIONS.flatMap((partitions) =>
    COST_RATES.map((rate) => {
      const c = costAt(counts, rate, partitions);
      const keyed = costAt(counts, rate, partitions, counts.stateKeys);
      const options: Array<[string, number]> = [
        ['exactly-once', c.exactlyOnce.total],
        ['at-least-once', c.atLeastOnce.total],
        ['Firehose', c.firehose.total],
        ['Managed Flink', c.managedFlink.total],
      ];
      return {
        recordsPerSecond: rate,
        partitions,
        recordsPerBatch: Number(c.traffic.recordsPerBatch.toFixed(1)),
        exactlyOnce: c.exactlyOnce.total,
        atLeastOnce: c.atLeastOnce.total,
        exactlyOnceWithState: keyed.exactlyOnce.total,
        atLeastOnceWithState: keyed.atLeastOnce.total,
        firehose: c.firehose.total,
        managedFlink: c.managedFlink.total,
        cheapest: options.sort((a, b) => a[1] - b[1])[0]![0],
      };
    }),
  );
  return {
    pricesAsOf: counts.prices.asOf,
    countsMeasuredAt: counts.measuredAt,
    headline: costAt(counts, 10_000, 100),
    headlineWithState: costAt(counts, 10_000, 100, counts.stateKeys),
    rows,
  };
}
