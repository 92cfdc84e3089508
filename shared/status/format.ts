/** Renders a pipeline's status for the terminal (text) or for scripts (JSON). */
import { EPOCH_SEPARATOR } from '../ledger/epochs.ts';
import type { AbortedAttempt, CheckpointView } from './checkpoint-view.ts';
import type { ClusterStatus } from './cluster-status.ts';
import type { LedgerStatus, PartitionStatus } from './ledger-status.ts';

export interface PipelineStatus {
  readonly ledger: LedgerStatus;
  /** Absent when no cluster ARN was given. */
  readonly cluster?: ClusterStatus;
}

export function statusToJson(status: PipelineStatus): unknown {
  const checkpoint = (view: CheckpointView | undefined) =>
    view && { ...view, cut: Object.fromEntries(view.cut) };
  const { ledger } = status;
  return {
    ...status,
    ledger: {
      ...ledger,
      lastCommitted: checkpoint(ledger.lastCommitted),
      inFlight: checkpoint(ledger.inFlight),
      history: ledger.history.map(checkpoint),
    },
  };
}

export function formatStatus(status: PipelineStatus): string {
  const { ledger } = status;
  const lines = [`Pipeline ${ledger.pipeline} (read ${iso(ledger.readAt)})`, '', 'Checkpoints'];
  lines.push(
    `  last committed  ${ledger.lastCommitted ? describe(ledger.lastCommitted, ledger.readAt) : 'none yet'}`,
  );
  lines.push(`  in flight       ${ledger.inFlight ? describe(ledger.inFlight, ledger.readAt) : 'none'}`);
  if (ledger.inFlight && ledger.head && ledger.head.leaseUntil > 0) {
    const expired = ledger.head.leaseUntil <= ledger.readAt;
    lines.push(
      `                  lease until ${iso(ledger.head.leaseUntil)}${expired ? ' (expired: the next execution recovers it)' : ''}`,
    );
  }
  const aborted = ledger.abortedSinceLastCommit;
  lines.push(`  aborted since last commit: ${aborted.length === 0 ? 'none' : ''}`.trimEnd());
  for (const abort of aborted) lines.push(`    ${describeAbort(abort)}`);
  if (ledger.head && ledger.head.consecutiveAborts > 0) {
    lines.push(
      `  consecutive aborts: ${ledger.head.consecutiveAborts} (last: ${ledger.head.lastAbortReason ?? 'unknown'})`,
    );
  }
  if (ledger.history.length > 0) {
    lines.push('  history (newest first):');
    for (const view of ledger.history) lines.push(`    ${describe(view, ledger.readAt)}`);
  }
  lines.push('', 'Partitions', ...partitionTable(ledger));
  lines.push(
    '',
    `Oldest uncommitted staged file: ${ledger.oldestUncommittedStagedAgeSeconds > 0 ? duration(ledger.oldestUncommittedStagedAgeSeconds) : 'none waiting'}`,
    freshnessLine(ledger),
  );
  if (status.cluster) lines.push('', ...clusterLines(status.cluster));
  return `${lines.join('\n')}\n`;
}

function describe(view: CheckpointView, now: number): string {
  const parts = [`#${view.id} ${view.status}${view.attempt > 1 ? ` (attempt ${view.attempt})` : ''}`];
  if (view.begunAt !== undefined)
    parts.push(`begun ${iso(view.begunAt)} (${duration((now - view.begunAt) / 1000)} ago)`);
  if (view.endedAt !== undefined) {
    parts.push(`ended ${iso(view.endedAt)}`);
    if (view.begunAt !== undefined) parts.push(`took ${duration((view.endedAt - view.begunAt) / 1000)}`);
  }
  if (view.status === 'ABORTED' && view.abortReason) parts.push(`reason: ${view.abortReason}`);
  return parts.join(', ');
}

function describeAbort(abort: AbortedAttempt): string {
  return `#${abort.checkpointId} attempt ${abort.attempt}${abort.at === undefined ? '' : ` at ${iso(abort.at)}`}: ${abort.reason}`;
}

function partitionTable(ledger: LedgerStatus): string[] {
  if (ledger.partitions.length === 0) return ['  no partition has staged anything yet'];
  const header = [
    'topic',
    'partition',
    'staged',
    'committed',
    'uncommitted files (out/dlq)',
    'records',
    'oldest',
    'last committed data staged',
  ];
  const rows = ledger.partitions.map((p) => [
    p.topic,
    String(p.partition),
    String(p.stagedOffset),
    String(p.committedOffset),
    `${p.uncommittedFiles.output}/${p.uncommittedFiles.deadletter}`,
    String(p.uncommittedRecords),
    p.oldestUncommittedStagedAt === undefined
      ? '-'
      : duration((ledger.readAt - p.oldestUncommittedStagedAt) / 1000),
    lastCommittedStaged(p, ledger.readAt),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const table = [header, ...rows].map(
    (row) =>
      `  ${row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd()}`,
  );
  // Lanes (`ledger/epochs.ts`) read as topics: say what they are, once, when there are any.
  const lanes = ledger.partitions.some((p) => p.topic.includes(EPOCH_SEPARATOR));
  return lanes
    ? [
        ...table,
        `  (<topic>${EPOCH_SEPARATOR}N is epoch N of the topic, <lane>${EPOCH_SEPARATOR}gG replay generation G of that epoch, <lane>${EPOCH_SEPARATOR}rR redrive round R of that lane: eos epoch shows the epochs, eos replay the generations)`,
      ]
    : table;
}

/** When the partition's newest committed data was staged, as far as the ledger tells (see PartitionFreshness). */
function lastCommittedStaged(p: PartitionStatus, now: number): string {
  const last = p.freshness.lastCommittedStaged;
  if (!last) return p.committedOffset < 0 ? 'nothing committed' : 'unknown';
  const when = `${iso(last.at)} (${duration((now - last.at) / 1000)} ago)`;
  return last.bound === 'exact' ? when : `at or before ${when}`;
}

/** The pipeline-wide freshness: committed output lags staging by at most the oldest waiting file's age. */
function freshnessLine(ledger: LedgerStatus): string {
  if (ledger.partitions.length === 0) return 'Freshness: nothing staged yet';
  const { committedBehindStagingSeconds: behind, worstPartition: worst } = ledger.freshness;
  if (!worst) return 'Freshness: committed output holds everything staged';
  return `Freshness: committed output is at most ${duration(behind)} (${Math.round(behind)} s) behind staging (worst: ${worst.topic} partition ${worst.partition})`;
}

function clusterLines(cluster: ClusterStatus): string[] {
  const on = (flag: boolean) => (flag ? 'on' : 'off');
  const a = cluster.authentication;
  return [
    'MSK cluster',
    `  ${cluster.name ?? cluster.arn} (${cluster.type}) state ${cluster.state}`,
    `  authentication: IAM ${on(a.iam)}, SASL/SCRAM ${on(a.scram)}, TLS ${on(a.tls)}, unauthenticated ${on(a.unauthenticated)}`,
    ...cluster.warnings.map((w) => `  WARNING: ${w}`),
  ];
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

/** `3h 4m`, `4m 12s`, `12.3s`. */
export function duration(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${Math.floor(s % 60)}s`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86_400)}d ${Math.floor((s % 86_400) / 3600)}h`;
}
