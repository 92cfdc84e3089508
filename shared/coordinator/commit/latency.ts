/**
 * The commit's latency for the `CommitLatency` metric: its COMMITTED write minus the oldest `stagedAt` of the
 * entries the checkpoint covered (the worst record's wait from staging to visibility).
 */
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import { commitLatencyMs, oldestCoveredStagedAt } from '../../observability/commit-latency.ts';
import type { CoordinatorParts } from '../parts.ts';

/** A failed read is logged and leaves the metric out: it never fails the commit. */
export async function commitLatency(
  parts: Pick<CoordinatorParts, 'store' | 'ledger' | 'concurrency' | 'log'>,
  record: CheckpointRecord,
  committedAt: number | undefined,
): Promise<{ oldestStagedAt?: number; commitLatencyMs?: number }> {
  if (committedAt === undefined) return {};
  try {
    const cut = await parts.store.readCut(record);
    const oldestStagedAt = await oldestCoveredStagedAt(parts.ledger, cut, parts.concurrency);
    if (oldestStagedAt === undefined) return {};
    return { oldestStagedAt, commitLatencyMs: commitLatencyMs(committedAt, oldestStagedAt) };
  } catch (error) {
    parts.log.error('commit latency: could not read the covered entries', {
      checkpointId: record.checkpointId,
      error: error instanceof Error ? error.message : String(error),
    });
    return {};
  }
}
