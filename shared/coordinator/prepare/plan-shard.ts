/**
 * One shard's promotion plan (C3, C5), partition by partition: the covered entries, each staged object read once
 * and verified (`staged-check.ts`), grouped into final objects (`promote/final-plan.ts` planFinalObjects), and
 * each final object's bytes merged from those verified bytes and written once as its candidate
 * (`candidates.ts`), which the plan names and promote copies to the final key. What a vote is for cannot be
 * rewritten by a processor after it: the staged objects are never read again.
 *
 * A pure function of the cut pages, the covered entries, the verified bytes and the promotion limits: two runs of
 * one shard over the same entries plan the same bytes (and name the same content-addressed candidates).
 */
import { mapLimit } from '../../concurrency.ts';
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { mayHoldStagedTime } from '../../sink/record-time.ts';
import type { CoordinatorParts } from '../parts.ts';
import { type PlannedObject, planFinalObjects } from '../promote/final-plan.ts';
import { censusOf, type FolderCounts, planEncoding, reencodes } from '../promote/folder-plan.ts';
import { buildObjects } from '../promote/object-bytes.ts';
import type { ShardPlan } from '../promote/plan-store.ts';
import { StagedObjectLostError } from '../promote/promoter.ts';
import { type CandidateRef, writeCandidate } from './candidates.ts';
import { verifyStagedContents } from './staged-check.ts';

type PlanParts = Pick<CoordinatorParts, 'settings' | 'clients' | 'shape' | 'limits' | 'concurrency'>;

/** The plan of `shard` from its covered entries, one list per partition of its cut pages, its candidates written. */
export async function planShard(
  parts: PlanParts,
  record: Pick<CheckpointRecord, 'checkpointId' | 'attempt'>,
  shard: number,
  covered: readonly (readonly StagedFileEntry[])[],
): Promise<ShardPlan> {
  const { checkpointId, attempt } = record;
  const ref: CandidateRef = { pipeline: parts.settings.pipelineId, checkpointId, attempt };
  // A partition's verified bytes are held until its candidates are written: a few partitions at once.
  const planned = await mapLimit(covered, Math.max(1, Math.floor(parts.concurrency / 4)), (entries) =>
    planPartition(parts, ref, entries),
  );
  const stagedFiles = covered.reduce((sum, entries) => sum + entries.length, 0);
  const encoding = planEncoding(parts.shape);
  return {
    checkpointId,
    attempt,
    shard,
    stagedFiles,
    objects: planned.flat(),
    ...(encoding ? { encoding } : {}),
  };
}

/** One partition's planned objects, each with its candidate. */
async function planPartition(
  parts: PlanParts,
  ref: CandidateRef,
  entries: readonly StagedFileEntry[],
): Promise<PlannedObject[]> {
  const { settings, shape, clients } = parts;
  // Re-encoded streams (Parquet, time folders) are planned from each object's rows per folder. So is a stream
  // holding rows staged with a timestamp while time folders were on (switched off since): re-encoded without
  // folders, so that the staged-only field never reaches a final row.
  const census = new Map<string, FolderCounts>();
  const bodies = new Map<string, Buffer>();
  await verifyStagedContents(clients.s3, settings.bucket, entries, parts.concurrency, (entry, body, text) => {
    bodies.set(entry.key, body);
    if (entry.recordCount > 0 && (reencodes(shape, entry.stream) || mayHoldStagedTime(text)))
      census.set(entry.key, censusOf(entry, body, shape));
  });
  const objects = planFinalObjects(ref.pipeline, entries, parts.limits, shape, census);
  const read = async (m: { key: string }) => {
    const body = bodies.get(m.key);
    if (!body) throw new StagedObjectLostError(m.key, 'not among the verified objects of its partition');
    return body;
  };
  const options = {
    objects: 2,
    members: parts.concurrency,
    maxCachedRows: parts.limits.maxObjectRows ?? Number.POSITIVE_INFINITY,
  };
  return buildObjects(
    ref.pipeline,
    objects,
    planEncoding(shape) ?? {},
    read,
    options,
    async (object, body) => ({
      ...object,
      candidate: await writeCandidate(clients.s3, settings.bucket, ref, object, body),
    }),
  );
}
