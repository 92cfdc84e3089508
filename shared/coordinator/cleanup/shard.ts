/**
 * One shard's cleanup once its checkpoint is COMMITTED, from the plan the shard voted for: the plan names every
 * staged file it promoted (its members), so their objects and entries are deleted without reading the ledger —
 * one GetObject for the plan, then deletes gathered across partitions (`partition.ts`). Calls grow with the staged
 * files, not with the partitions.
 *
 * The plan is used only when it accounts for every entry prepare covered (its distinct members number exactly its
 * `stagedFiles`: an entry without records is no member) and each member is a staged key of this pipeline in a
 * partition of the shard, at or below that partition's cut and above the previous one. Anything else — a plan
 * already deleted or not the voted one, a covered entry that is no member, a member outside the cut — and the
 * shard is cleaned from the ledger instead (`cleanPartitions`: a Query per partition, from offset 0, leftovers of
 * earlier cleanups included). Either way only what this COMMITTED checkpoint covered goes: nothing a later
 * checkpoint needs. What the plan path leaves is what prepare passed over: a stray copy of an entry at another
 * entry's key (processor-written, logged by prepare), which nothing reads once a committed cut is past it, and
 * leftovers of an earlier cleanup, which the catch-up reads the ledger for.
 *
 * A processor cannot write at or below the cut (every staging write is conditioned on the fence, which is past
 * it). So an entry item's delete, still conditioned on the entry naming the member's object, never fails for a
 * reason other than the entry being gone already: a guard that never costs a call unless it fails. An inline
 * entry's attribute is removed without one (its fence item holds the member's entry or none), then the item is
 * deleted only for a member no inline entry was removed for.
 */
import { isTransient } from '../../aws/classify.ts';
import type { CheckpointRecord, CutEntry } from '../../ledger/checkpoints.ts';
import { inlineAttribute } from '../../ledger/inline-entries.ts';
import { keys, partitionId } from '../../ledger/layout.ts';
import type { CoordinatorParts } from '../parts.ts';
import type { ShardPlan } from '../promote/plan-store.ts';
import { loadVotedPlan } from '../promote/voted-plan.ts';
import { parseStagedKey } from './orphans.ts';
import { type CleanupParts, cleanPartitions, deleteStaged, type StagedDeletes } from './partition.ts';

type ShardCleanupParts = CleanupParts & Pick<CoordinatorParts, 'store' | 'plans'>;

/** The voted plan of `shard`, or undefined (logged) when it cannot be read any more; transient failures throw. */
async function votedPlanIfAny(
  parts: ShardCleanupParts,
  record: CheckpointRecord,
  shard: number,
): Promise<ShardPlan | undefined> {
  try {
    return await loadVotedPlan(parts, record, shard);
  } catch (error) {
    if (isTransient(error)) throw error;
    parts.log.info('cleanup: the voted plan is not readable; cleaning the shard from the ledger', {
      checkpointId: record.checkpointId,
      shard,
      error: error instanceof Error ? error.message : String(error),
    });
    return undefined;
  }
}

/**
 * The deletes the plan names (see the module comment), or why it cannot be used: then the ledger is read instead.
 */
export function plannedDeletes(
  pipeline: string,
  plan: ShardPlan,
  cuts: readonly CutEntry[],
): StagedDeletes | { readonly refused: string } {
  const byPartition = new Map(cuts.map((cut) => [cut.partition, cut]));
  const members = new Set<string>();
  for (const object of plan.objects) for (const member of object.members) members.add(member.key);
  if (members.size !== plan.stagedFiles) {
    return {
      refused: `the plan has ${members.size} staged files with records of ${plan.stagedFiles} covered`,
    };
  }
  const deletes: StagedDeletes = { targets: [], objects: [] };
  for (const key of members) {
    const staged = parseStagedKey(pipeline, key);
    const cut = staged && byPartition.get(partitionId(staged.topic, staged.partition));
    if (!staged || !cut || staged.lastOffset <= cut.previous || staged.lastOffset > cut.cut)
      return { refused: `member ${key} is no staged file of the shard's cut` };
    const at = keys.staged(pipeline, staged.topic, staged.partition, staged.lastOffset, staged.stream);
    // The plan names files, not where their entries lie: in a partition prepare found inline entries in (every
    // partition, for a plan that does not say), inline or else the item (`staged-entries.ts`); elsewhere the item.
    const inlineHere = plan.inlinePartitions?.includes(partitionId(staged.topic, staged.partition)) ?? true;
    if (!inlineHere) {
      deletes.targets.push({ at, key });
    } else {
      const inline = {
        fence: keys.fence(pipeline, staged.topic, staged.partition),
        attribute: inlineAttribute(staged.lastOffset, staged.stream),
      };
      deletes.targets.push({ at, key, inline, orItem: true });
    }
    deletes.objects.push(key);
  }
  return deletes;
}

/**
 * Deletes the staged objects and entries `shard` of the COMMITTED `record` covered: from its voted plan when the
 * plan accounts for them all, else from the ledger (see the module comment). Returns the ledger items deleted.
 */
export async function cleanShard(
  parts: ShardCleanupParts,
  record: CheckpointRecord,
  shard: number,
): Promise<number> {
  const cuts = await parts.store.readCut(record, shard);
  const plan = await votedPlanIfAny(parts, record, shard);
  if (plan !== undefined) {
    const planned = plannedDeletes(parts.settings.pipelineId, plan, cuts);
    if (!('refused' in planned)) return deleteStaged(parts, planned);
    parts.log.error('cleanup: the voted plan does not account for the covered entries; reading the ledger', {
      checkpointId: record.checkpointId,
      shard,
      reason: planned.refused,
    });
  }
  return cleanPartitions(parts, cuts);
}
