/**
 * One shard's promotion plan (C3, C5): in merged final objects where nothing is re-encoded (`plan-merged.ts`), else
 * partition by partition (`plan-partition.ts`): the covered entries, each
 * staged object read and verified (`staged-check.ts`), grouped into final objects (`promote/final-plan.ts`
 * planFinalObjects), and each final object's bytes merged from verified bytes and written once as its candidate
 * (`candidates.ts`), which the plan names and promote copies to the final key. What a vote is for cannot be
 * rewritten by a processor after it: promote copies the candidates, never a staged object.
 *
 * A pure function of the cut pages, the covered entries, the verified bytes and the promotion limits: two runs of
 * one shard over the same entries plan the same bytes (and name the same content-addressed candidates).
 */
import { mapLimit } from '../../concurrency.ts';
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { planEncoding } from '../promote/folder-plan.ts';
import type { ShardPlan } from '../promote/plan-store.ts';
import type { CandidateRef } from './candidates.ts';
import { planMergedShard } from './plan-merged.ts';
import { type PlanParts, planPartition } from './plan-partition.ts';
import { ByteBudget, Slots } from './slots.ts';

/**
 * Groups of final objects a shard merges at once, each of at most `PromotionLimits.maxObjectBytes` of staged bytes
 * (or one object of one larger member); re-encoded streams may also keep this many objects' worth from their census
 * to their merge. With `concurrency` staged objects being read, prepare holds a few final objects' worth of bytes.
 */
const OBJECTS_AT_ONCE = 2;

/**
 * The plan of `shard` from its covered entries, one list per partition of its cut pages, its candidates written;
 * `inlinePartitions`: those with covered entries inline in their fence item (for cleanup).
 */
export async function planShard(
  parts: PlanParts,
  record: Pick<CheckpointRecord, 'checkpointId' | 'attempt'>,
  shard: number,
  covered: readonly (readonly StagedFileEntry[])[],
  inlinePartitions: readonly string[] = [],
): Promise<ShardPlan> {
  const { checkpointId, attempt } = record;
  const ref: CandidateRef = { pipeline: parts.settings.pipelineId, checkpointId, attempt };
  // The partitions share the shard's slots: what prepare holds is bounded per shard, not per partition.
  const slots = {
    reads: new Slots(parts.concurrency),
    builds: new Slots(OBJECTS_AT_ONCE),
    held: new ByteBudget(OBJECTS_AT_ONCE * parts.limits.maxObjectBytes),
  };
  const encoding = planEncoding(parts.shape);
  // Merged objects concatenate: with nothing re-encoded, the shard's partitions share a few final objects.
  const merged =
    parts.settings.finalObjects === 'merged' && encoding === undefined
      ? await planMergedShard(parts, ref, shard, covered, slots)
      : undefined;
  const planned =
    merged ??
    (
      await mapLimit(covered, Math.max(1, Math.floor(parts.concurrency / 4)), (entries) =>
        planPartition(parts, ref, entries, slots),
      )
    ).flat();
  const stagedFiles = covered.reduce((sum, entries) => sum + entries.length, 0);
  const oldestStagedAt = oldestOf(covered);
  return {
    checkpointId,
    attempt,
    shard,
    stagedFiles,
    objects: planned,
    ...(encoding ? { encoding } : {}),
    ...(oldestStagedAt === undefined ? {} : { oldestStagedAt }),
    inlinePartitions: [...inlinePartitions].sort(),
  };
}

/** The earliest `stagedAt` among the covered entries (the commit's latency is measured from it). */
function oldestOf(covered: readonly (readonly StagedFileEntry[])[]): number | undefined {
  let oldest: number | undefined;
  for (const entries of covered) {
    for (const { stagedAt } of entries) {
      if (Number.isSafeInteger(stagedAt) && stagedAt >= 0 && (oldest === undefined || stagedAt < oldest)) {
        oldest = stagedAt;
      }
    }
  }
  return oldest;
}
