/**
 * The monitor: on a schedule, reads the ledger (the same reader as `eos status`) and emits the ages the alarms
 * watch — the oldest uncommitted staged file and the last commit — plus consecutive aborts.
 *
 * Why a separate Lambda rather than metrics from the coordinator: the "no commit for N intervals" alarm must fire
 * precisely when the coordinator is broken, so its signal cannot come from the coordinator. An idle pipeline has
 * no uncommitted staged file (age 0) and does not alarm; a missing datapoint (the monitor itself down) does.
 */
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Clock } from '../clock.ts';
import { type LedgerStatus, readLedgerStatus } from '../status/ledger-status.ts';
import { METRIC } from './names.ts';
import { recordLedgerAges, type Telemetry } from './telemetry.ts';

export interface MonitorDependencies {
  readonly dynamodb: DynamoDBClient;
  readonly table: string;
  readonly pipeline: string;
  readonly clock: Clock;
  readonly telemetry: Telemetry;
}

export interface MonitorReport {
  readonly oldestUncommittedStagedAgeSeconds: number;
  readonly lastCommitAgeSeconds?: number;
  readonly consecutiveAborts: number;
  readonly uncommittedFiles: number;
}

export async function runMonitor(deps: MonitorDependencies): Promise<MonitorReport> {
  const status = await readLedgerStatus({ ...deps, historyLimit: 1 });
  const report = reportOf(status);
  recordLedgerAges(deps.telemetry.metrics, {
    oldestUncommittedStagedSeconds: report.oldestUncommittedStagedAgeSeconds,
    lastCommitSeconds: report.lastCommitAgeSeconds,
  });
  deps.telemetry.metrics.addMetric(METRIC.consecutiveAborts, MetricUnit.Count, report.consecutiveAborts);
  deps.telemetry.logger.info('ledger ages', { ...report, metric: METRIC.oldestUncommittedStagedAge });
  return report;
}

function reportOf(status: LedgerStatus): MonitorReport {
  return {
    oldestUncommittedStagedAgeSeconds: Math.round(status.oldestUncommittedStagedAgeSeconds),
    lastCommitAgeSeconds:
      status.lastCommitAgeSeconds === undefined ? undefined : Math.round(status.lastCommitAgeSeconds),
    consecutiveAborts: status.head?.consecutiveAborts ?? 0,
    uncommittedFiles: status.partitions.reduce(
      (sum, p) => sum + p.uncommittedFiles.output + p.uncommittedFiles.deadletter,
      0,
    ),
  };
}
