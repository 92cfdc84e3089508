/**
 * The plan a shard voted for (C5): the plan named by the digest recorded with the vote (plans are
 * content-addressed), used only if its bytes hash to that digest.
 *
 * The vote is a plain `SET planDigests.#shard`, so of two overlapping prepare runs of one shard (a Step Functions
 * retry while the first invocation still runs) the last vote wins. That is sound because each run writes its
 * candidates and then its own plan under its own digest before its vote, and a plan names only candidates its run
 * merged from bytes it verified (content-addressed and write-once, `prepare/candidates.ts`). So any recorded
 * digest names a plan that can roll forward. "First vote wins" would need a condition on the vote and a second
 * way for a losing run to learn the winner's digest; content addressing needs neither.
 *
 * A plan that is missing or does not hash to its digest (only a coordinator role, an operator or a defect can
 * cause this: the prefix is closed to processors) fails promote and commit loudly, every time, with
 * {@link WorkObjectMissingError} or {@link PlanDigestMismatchError}; the checkpoint stays COMMITTING (never
 * aborted: C4) and rolls forward once the plan is back (the bucket is versioned: its previous version). It is not
 * derived again: the candidates' ETags exist only in the plan, and planning again would read the staged objects,
 * which the processor may have rewritten since the vote and which promote's and commit's roles may not read.
 */
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { CoordinatorParts } from '../parts.ts';
import type { PlanDigestMismatchError, ShardPlan, WorkObjectMissingError } from './plan-store.ts';

/** The voted plan of `shard`; throws {@link PlanDigestMismatchError} or {@link WorkObjectMissingError}. */
export async function loadVotedPlan(
  parts: Pick<CoordinatorParts, 'plans'>,
  record: CheckpointRecord,
  shard: number,
): Promise<ShardPlan> {
  return parts.plans.readPlan(
    record.checkpointId,
    record.attempt,
    shard,
    record.planDigests?.[String(shard)],
  );
}
