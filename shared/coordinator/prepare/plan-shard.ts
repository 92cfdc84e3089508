/**
 * One shard's promotion plan (C3, C5): its covered entries, each copied under the coordinator's prefix and the
 * copy verified (`staged-copy.ts`, `staged-check.ts`), grouped into final objects (`promote/promoter.ts`
 * planFinalObjects). Promote reads the copies, so what a vote is for cannot be rewritten by a processor after it.
 *
 * A pure function of the cut pages, the covered entries, the verified copies and the promotion limits: planning
 * again yields the same bytes, which is how a lost plan is derived again (`promote/voted-plan.ts`).
 */
import { gunzipSync } from 'node:zlib';
import { mapLimit } from '../../concurrency.ts';
import type { CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { getBytes } from '../../sink/objects.ts';
import { mayHoldStagedTime } from '../../sink/record-time.ts';
import type { CoordinatorParts } from '../parts.ts';
import { type PlannedObject, planFinalObjects } from '../promote/final-plan.ts';
import { censusOf, type FolderCounts, planEncoding, reencodes } from '../promote/folder-plan.ts';
import type { ShardPlan } from '../promote/plan-store.ts';
import { StagedObjectLostError } from '../promote/promoter.ts';
import { stagedCopyKey } from '../work-objects.ts';
import { verifyStagedContents } from './staged-check.ts';

type PlanParts = Pick<CoordinatorParts, 'settings' | 'clients' | 'shape' | 'limits' | 'concurrency'>;

/** Called with each copy's bytes once read (and, when verifying, once it passed every check). */
type Take = (entry: StagedFileEntry, body: Uint8Array, text: string) => void;

/**
 * The plan of `shard` from its covered entries, one list per partition of its cut pages. `verify`: copy and
 * verify every covered object (prepare); else read the copies a vote already verified (a plan derived again).
 */
export async function planShard(
  parts: PlanParts,
  record: Pick<CheckpointRecord, 'checkpointId' | 'attempt'>,
  shard: number,
  covered: readonly (readonly StagedFileEntry[])[],
  verify: boolean,
): Promise<ShardPlan> {
  const { settings, shape } = parts;
  const { checkpointId, attempt } = record;
  const pipeline = settings.pipelineId;
  const copyKeyOf = (entry: StagedFileEntry) => stagedCopyKey(pipeline, checkpointId, attempt, entry.key);
  // Re-encoded streams (Parquet, time folders) are planned from each copy's rows per folder. So is a stream
  // holding rows staged with a timestamp while time folders were on (switched off since): re-encoded without
  // folders, so that the staged-only field never reaches a final row.
  const census = new Map<string, FolderCounts>();
  const needsCensus = (entry: StagedFileEntry) => entry.recordCount > 0 && reencodes(shape, entry.stream);
  const take: Take = (entry, body, text) => {
    if (needsCensus(entry) || (entry.recordCount > 0 && mayHoldStagedTime(text))) {
      census.set(entry.key, censusOf(entry, body, shape));
    }
  };
  // Every covered object of the shard is read with bounded concurrency, across its partitions.
  const all = covered.flat();
  if (verify) {
    await verifyStagedContents(parts.clients.s3, settings.bucket, all, copyKeyOf, parts.concurrency, take);
  } else {
    const withRows = all.filter((entry) => entry.recordCount > 0);
    await censusOfCopies(parts, withRows, copyKeyOf, take);
  }
  let stagedFiles = 0;
  const objects: PlannedObject[] = [];
  for (const entries of covered) {
    stagedFiles += entries.length;
    objects.push(...planFinalObjects(pipeline, entries, parts.limits, shape, census));
  }
  const encoding = planEncoding(shape);
  return { checkpointId, attempt, shard, stagedFiles, objects, ...(encoding ? { encoding } : {}) };
}

/** The census of copies already verified by the vote (a plan derived again). */
async function censusOfCopies(
  parts: PlanParts,
  entries: readonly StagedFileEntry[],
  copyKeyOf: (entry: StagedFileEntry) => string,
  take: Take,
): Promise<void> {
  await mapLimit(entries, parts.concurrency, async (entry) => {
    const key = copyKeyOf(entry);
    const body = await getBytes(parts.clients.s3, parts.settings.bucket, key);
    if (!body) throw new StagedObjectLostError(entry.key, `missing its verified copy ${key}`);
    take(entry, body, (entry.gzip ? gunzipSync(body) : Buffer.from(body)).toString('utf8'));
  });
}
