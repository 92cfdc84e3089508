/**
 * The monitor: on a schedule, reads the ledger (the same reader as `eos status`) and emits the ages the alarms
 * watch — the oldest uncommitted staged file and the last commit — plus consecutive aborts and the records
 * staged but not committed (their sum; per partition in its log line).
 *
 * With an Iceberg table it also emits the committed checkpoints the table does not hold yet: the execution goes on
 * past a failed publish (the next one catches up), so a publish that always fails shows only there.
 *
 * Why a separate Lambda rather than metrics from the coordinator: the "no commit for N intervals" alarm must fire
 * precisely when the coordinator is broken, so its signal cannot come from the coordinator. An idle pipeline has
 * no uncommitted staged file (age 0) and does not alarm; a missing datapoint (the monitor itself down) does.
 */
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Clock } from '../clock.ts';
import { TableSnapshots } from '../ledger/table-snapshots.ts';
import { type LedgerStatus, readLedgerStatus } from '../status/ledger-status.ts';
import { METRIC } from './names.ts';
import { recordLedgerAges, type Telemetry } from './telemetry.ts';

export interface MonitorDependencies {
  readonly dynamodb: DynamoDBClient;
  readonly table: string;
  readonly pipeline: string;
  readonly clock: Clock;
  readonly telemetry: Telemetry;
  /** The pipeline publishes its checkpoints to an Iceberg table: report how far the table is behind. */
  readonly publishes?: boolean;
}

export interface MonitorReport {
  readonly oldestUncommittedStagedAgeSeconds: number;
  readonly lastCommitAgeSeconds?: number;
  readonly consecutiveAborts: number;
  readonly uncommittedFiles: number;
  /** Records staged but not committed, over all partitions (`UncommittedRecords`). */
  readonly uncommittedRecords: number;
  /** With a table: committed checkpoints it does not hold yet (`UnpublishedCheckpoints`). */
  readonly unpublishedCheckpoints?: number;
}

/** One partition's lag in the monitor's log line. */
export interface PartitionLag {
  readonly topic: string;
  readonly partition: number;
  readonly stagedOffset: number;
  readonly committedOffset: number;
  readonly uncommittedRecords: number;
  /** Age of its oldest uncommitted staged file, seconds. */
  readonly behindSeconds: number;
}

/** Most partitions the log line lists (the laggiest first): one CloudWatch log event holds at most 256 KB. */
export const MAX_LOGGED_PARTITIONS = 100;

export async function runMonitor(deps: MonitorDependencies): Promise<MonitorReport> {
  const status = await readLedgerStatus({ ...deps, historyLimit: 1 });
  const report = {
    ...reportOf(status),
    ...(deps.publishes ? { unpublishedCheckpoints: await unpublishedCheckpoints(deps, status) } : {}),
  };
  recordLedgerAges(deps.telemetry.metrics, {
    oldestUncommittedStagedSeconds: report.oldestUncommittedStagedAgeSeconds,
    lastCommitSeconds: report.lastCommitAgeSeconds,
  });
  deps.telemetry.metrics.addMetric(METRIC.consecutiveAborts, MetricUnit.Count, report.consecutiveAborts);
  // The sum only. A per-partition dimension would make each partition its own custom metric (1,000 partitions:
  // 1,000 metrics, each billed); the per-partition detail goes to the log line below, for Logs Insights, and
  // `eos status` shows every partition.
  deps.telemetry.metrics.addMetric(METRIC.uncommittedRecords, MetricUnit.Count, report.uncommittedRecords);
  if (report.unpublishedCheckpoints !== undefined) {
    deps.telemetry.metrics.addMetric(
      METRIC.unpublishedCheckpoints,
      MetricUnit.Count,
      report.unpublishedCheckpoints,
    );
  }
  const lagging = laggingPartitions(status);
  deps.telemetry.logger.info('ledger ages', {
    ...report,
    metric: METRIC.oldestUncommittedStagedAge,
    laggingPartitions: lagging.slice(0, MAX_LOGGED_PARTITIONS),
    laggingPartitionsOmitted: Math.max(0, lagging.length - MAX_LOGGED_PARTITIONS),
  });
  return report;
}

/** The last committed checkpoint's id less the published mark, read after the head (a publish between: 0). */
async function unpublishedCheckpoints(deps: MonitorDependencies, status: LedgerStatus): Promise<number> {
  const mark = await new TableSnapshots(deps.dynamodb, deps.table, deps.pipeline).readMark();
  return Math.max(0, (status.head?.committedId ?? 0) - mark.upTo);
}

/** Partitions with something uncommitted, the one behind longest first. */
export function laggingPartitions(status: LedgerStatus): PartitionLag[] {
  return status.partitions
    .filter((p) => p.uncommittedRecords > 0 || p.oldestUncommittedStagedAt !== undefined)
    .map((p) => ({
      topic: p.topic,
      partition: p.partition,
      stagedOffset: p.stagedOffset,
      committedOffset: p.committedOffset,
      uncommittedRecords: p.uncommittedRecords,
      behindSeconds: Math.round(p.freshness.committedBehindStagingSeconds),
    }))
    .sort((a, b) => b.behindSeconds - a.behindSeconds || b.uncommittedRecords - a.uncommittedRecords);
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
    uncommittedRecords: status.partitions.reduce((sum, p) => sum + p.uncommittedRecords, 0),
  };
}
