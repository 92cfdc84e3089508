/**
 * The plan a shard voted for (C5): the plan named by the digest recorded with the vote (plans are
 * content-addressed), used only if its bytes hash to that digest.
 *
 * The vote is a plain `SET planDigests.#shard`, so of two overlapping prepare runs of one shard (a Step Functions
 * retry while the first invocation still runs) the last vote wins. That is sound because each run writes its own
 * plan under its own digest before its vote, and a plan votes only for SHA-256s its run checked on the copies
 * promote reads (a copy key is a function of the attempt and staged key, and copies are write-once: every run of
 * the attempt verifies the first copy made there, `staged-copy.ts`). So any recorded digest names a plan that can
 * roll forward. "First vote wins" would need a condition on the vote and a second way for a losing run to learn
 * the winner's digest; content addressing needs neither.
 *
 * If that plan is missing or does not hash to its digest (only a coordinator role, an operator or a defect can
 * cause this: the prefix is closed to processors), it is derived again from the ledger, the same pure planning
 * prepare did, and used only if its digest is the voted one, so nothing unvoted is ever promoted; a changed
 * ledger just leaves the original error standing (loud, never wrong). The derived plan is not written back: the
 * key is write-once, and a repair there is the operator's (the error is logged each time).
 */
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { CoordinatorParts } from '../parts.ts';
import { PlanDigestMismatchError, planDigest, type ShardPlan, WorkObjectMissingError } from './plan-store.ts';

/** The voted plan of `shard`; `derive` plans it again from the ledger without verifying (prepare's planning). */
export async function loadVotedPlan(
  parts: Pick<CoordinatorParts, 'plans' | 'log'>,
  record: CheckpointRecord,
  shard: number,
  derive: () => Promise<ShardPlan>,
): Promise<ShardPlan> {
  const digest = record.planDigests?.[String(shard)];
  try {
    return await parts.plans.readPlan(record.checkpointId, record.attempt, shard, digest);
  } catch (error) {
    if (!(error instanceof PlanDigestMismatchError || error instanceof WorkObjectMissingError)) throw error;
    if (digest === undefined) throw error;
    let derived: ShardPlan;
    try {
      derived = await derive();
    } catch {
      // The ledger no longer yields a plan at all (an entry the processor rewrote): the plan's error is the cause.
      throw error;
    }
    if (planDigest(derived) !== digest) throw error;
    parts.log.error('a coordinator plan did not match its vote: derived it again from the ledger', {
      checkpointId: record.checkpointId,
      attempt: record.attempt,
      shard,
      cause: error.message,
    });
    return derived;
  }
}
