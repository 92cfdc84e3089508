/**
 * The commit's latency for the `CommitLatency` metric: its COMMITTED write minus the oldest `stagedAt` of the
 * entries the checkpoint covered (the worst record's wait from staging to visibility). Prepare notes that time in
 * each shard's plan, which commit reads to write the manifest, so commit reads no staged entry for it.
 */
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import { commitLatencyMs, oldestCoveredStagedAt } from '../../observability/commit-latency.ts';
import type { CoordinatorParts } from '../parts.ts';
import type { ShardPlan } from '../promote/plan-store.ts';

/**
 * From the voted plans' `oldestStagedAt` when the commit read every plan and each one says it (`fromPlans`: no
 * call); else (a commit retried after COMMITTED, plans of the release before the field) from the first covered
 * entry of each changed partition, one Query each. A failed read is logged and leaves the metric out: it never
 * fails the commit.
 */
export async function commitLatency(
  parts: Pick<CoordinatorParts, 'store' | 'ledger' | 'concurrency' | 'log'>,
  record: CheckpointRecord,
  committedAt: number | undefined,
  fromPlans?: { readonly oldestStagedAt?: number },
): Promise<{ oldestStagedAt?: number; commitLatencyMs?: number }> {
  if (committedAt === undefined) return {};
  try {
    const oldestStagedAt = fromPlans
      ? fromPlans.oldestStagedAt
      : await oldestCoveredStagedAt(parts.ledger, await parts.store.readCut(record), parts.concurrency);
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

/**
 * The voted plans' earliest staging time, for {@link commitLatency}: `{}` when they covered no staged file;
 * undefined when a plan that covered some does not say it (made by the release before the field).
 */
export function oldestOfPlans(plans: readonly ShardPlan[]): { oldestStagedAt?: number } | undefined {
  let oldest: number | undefined;
  for (const plan of plans) {
    if (plan.oldestStagedAt === undefined) {
      if (plan.stagedFiles > 0) return undefined;
      continue;
    }
    if (oldest === undefined || plan.oldestStagedAt < oldest) oldest = plan.oldestStagedAt;
  }
  return oldest === undefined ? {} : { oldestStagedAt: oldest };
}
