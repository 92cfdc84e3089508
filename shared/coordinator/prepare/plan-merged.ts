/**
 * A shard's plan in merged final objects (C3, C5; `promote/merged-plan.ts`), where nothing is re-encoded: each
 * partition's covered entries are planned into objects as before (`planFinalObjects`), those objects are packed
 * across the shard's partitions into merged groups, and each group's members are read and verified, concatenated
 * object by object (each object's bytes and SHA-256 become its slice) and written once as the group's candidate.
 * ONE read per staged object, and one candidate a group rather than one a partition.
 *
 * What prepare holds is bounded as before: a group is at most `maxObjectBytes` of staged bytes (or one larger
 * object alone), and the shard's `builds` slots bound the groups merged at once.
 *
 * A member holding rows staged with a timestamp (time folders switched off since) needs its stream re-encoded from
 * a census, which merged objects do not do: the whole shard is then planned per partition (`plan-partition.ts`)
 * instead, and the candidates written so far are left unnamed in the attempt's working prefix (cleanup removes them
 * with it). Only such a switch meets that path.
 */
import { createHash } from 'node:crypto';
import { mapLimit } from '../../concurrency.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { type PlannedObject, planFinalObjects } from '../promote/final-plan.ts';
import { type MergedGroup, mergedGroups, mergedKeyOf } from '../promote/merged-plan.ts';
import type { ReadMember } from '../promote/object-bytes.ts';
import { type CandidateRef, writeCandidate } from './candidates.ts';
import { concatenatedReads, StampedMemberError, verifyEmptyEntries } from './concatenated-reads.ts';
import type { PlanParts, PrepareSlots } from './plan-partition.ts';

/**
 * The shard's planned objects as slices of merged objects, each group's candidate written; undefined if a member
 * holds rows staged with a timestamp (plan the shard per partition then).
 */
export async function planMergedShard(
  parts: PlanParts,
  ref: CandidateRef,
  shard: number,
  covered: readonly (readonly StagedFileEntry[])[],
  slots: PrepareSlots,
): Promise<PlannedObject[] | undefined> {
  const entries = covered.flat();
  const where = { s3: parts.clients.s3, bucket: parts.settings.bucket, slots: slots.reads };
  await verifyEmptyEntries(where, entries);
  const objects = covered.flatMap((ofPartition) =>
    planFinalObjects(ref.pipeline, ofPartition, parts.limits, parts.shape),
  );
  const { read, stamped } = concatenatedReads(where, entries, 'shard');
  const source = { ...ref, shard };
  // Every build settles before this returns (a stray one must not write a candidate after the fallback began).
  const built = await mapLimit(mergedGroups(objects, parts.limits), slots.builds.size, (group) =>
    slots.builds
      .run(() => buildGroup(parts, ref, mergedKeyOf(source, group), group, read))
      .then(
        (planned) => ({ planned }),
        (error: unknown) => ({ error }),
      ),
  );
  const failed = built.find((b) => 'error' in b && !(b.error instanceof StampedMemberError));
  if (failed && 'error' in failed) throw failed.error;
  if (stamped()) return undefined;
  return built.flatMap((b) => ('planned' in b ? b.planned : []));
}

/** One group's objects as slices of its merged object, its candidate written. */
async function buildGroup(
  parts: PlanParts,
  ref: CandidateRef,
  finalKey: string,
  group: MergedGroup,
  read: ReadMember,
): Promise<PlannedObject[]> {
  // The group's members read at once (a group of one-file partitions would otherwise read one at a time).
  const members = group.objects.flatMap((object) => object.members);
  const memberBodies = await mapLimit(members, parts.concurrency, read);
  const bodies: Buffer[] = [];
  let next = 0;
  for (const object of group.objects) {
    bodies.push(Buffer.concat(memberBodies.slice(next, next + object.members.length)));
    next += object.members.length;
  }
  const recordCount = group.objects.reduce((sum, o) => sum + o.recordCount, 0);
  const candidate = await writeCandidate(
    parts.clients.s3,
    parts.settings.bucket,
    ref,
    { recordCount },
    Buffer.concat(bodies),
  );
  let start = 0;
  return group.objects.map((object, index) => {
    const body = bodies[index]!;
    const slice = { start, bytes: body.length, sha256: createHash('sha256').update(body).digest('hex') };
    start += body.length;
    return { ...object, finalKey, candidate, slice };
  });
}
