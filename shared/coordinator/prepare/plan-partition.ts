/**
 * One partition's planned final objects, each with its candidate (C3, C5), holding a few final objects' worth of
 * staged bytes at once, whatever the partition's backlog: the shard's {@link PrepareSlots} let at most `reads`
 * staged objects be read and verified and at most `builds` groups of final objects be merged at once, and a staged
 * object's bytes are dropped once the objects they go to are written as candidates (or once its census is taken).
 *
 * Stream by stream (`final-plan.ts` plans each one on its own, the dead letters from the output's misfits too):
 * - a stream whose objects concatenate staged bytes (NDJSON without time folders) is planned from its entries
 *   alone; then each planned object's members are read, verified, merged and written: ONE read per staged object.
 *   A member holding rows staged with a timestamp (time folders switched off since) makes the stream's plan a
 *   re-encoded one after all: its candidates so far are left unnamed in the attempt's working prefix (cleanup
 *   removes them with it) and the stream is planned as below. Only such a switch meets that path.
 * - a re-encoded stream (Parquet, time folders, schema misfits) is planned from each object's rows per folder: a
 *   first pass reads and verifies every staged object of the stream for its census (`folder-plan.ts` censusOf).
 *   When the stream's staged bytes fit the shard's `held` budget they are kept and merged from: ONE read each, as
 *   for a small backlog before. Otherwise only the census is kept, and the planned objects are merged in groups of
 *   consecutive objects whose distinct members stay within `maxObjectBytes`, each member read and verified again
 *   once per group: a second GET per staged object, and one more for each further group it gives rows to (folders,
 *   slices over the row cap, misfits), only for re-encoded streams over the budget. A member read again is checked
 *   against the same size and SHA-256, so it is the bytes the census was taken of, or the attempt aborts.
 *
 * Every covered staged object is verified, and the plan is the one `planFinalObjects` gives for the entries and the
 * census of every re-encoded or stamped object: the same entries give the same candidates under the same keys.
 */
import { mapLimit } from '../../concurrency.ts';
import { STREAMS, type Stream } from '../../ledger/layout.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { mayHoldStagedTime } from '../../sink/record-time.ts';
import type { CoordinatorParts } from '../parts.ts';
import { type PlannedObject, planFinalObjects, type StagedMember } from '../promote/final-plan.ts';
import { misfitPartsOf } from '../promote/folder-pack.ts';
import { censusOf, type FolderCounts, planEncoding, reencodes } from '../promote/folder-plan.ts';
import { buildObjects, type ReadMember } from '../promote/object-bytes.ts';
import { StagedObjectLostError } from '../promote/promoter.ts';
import { type CandidateRef, writeCandidate } from './candidates.ts';
import { concatenatedReads, StampedMemberError, verifyEmptyEntries } from './concatenated-reads.ts';
import type { ByteBudget, Slots } from './slots.ts';
import { verifyStagedObject } from './staged-check.ts';

export type PlanParts = Pick<CoordinatorParts, 'settings' | 'clients' | 'shape' | 'limits' | 'concurrency'>;

/** What one shard's prepare may hold at once, shared by its partitions. */
export interface PrepareSlots {
  /** Staged objects being read and verified. */
  readonly reads: Slots;
  /** Groups of final objects being merged and written as candidates. */
  readonly builds: Slots;
  /** Staged bytes a re-encoded stream may keep from its census to its merge (one read instead of two). */
  readonly held: ByteBudget;
}

type Census = Map<string, FolderCounts>;

/** One partition's planned objects, each with its candidate, in `planFinalObjects`' order. */
export async function planPartition(
  parts: PlanParts,
  ref: CandidateRef,
  entries: readonly StagedFileEntry[],
  slots: PrepareSlots,
): Promise<PlannedObject[]> {
  const byKey = new Map(entries.map((e) => [e.key, e]));
  const census: Census = new Map();
  const planned: PlannedObject[] = [];
  for (const stream of STREAMS) {
    const ofStream = entries.filter((e) => e.stream === stream);
    if (!reencodedFromCensus(parts, stream, entries, census)) {
      const merged = await mergeFromEntries(parts, ref, slots, ofStream);
      if (merged) {
        planned.push(...merged);
        continue;
      }
    }
    planned.push(...(await mergeFromCensus(parts, ref, slots, { byKey, entries, stream, census })));
  }
  return planned;
}

/** A re-encoded stream's objects, planned from its census and each written as its candidate. */
async function mergeFromCensus(
  parts: PlanParts,
  ref: CandidateRef,
  slots: PrepareSlots,
  of: {
    byKey: ReadonlyMap<string, StagedFileEntry>;
    entries: readonly StagedFileEntry[];
    stream: Stream;
    census: Census;
  },
): Promise<PlannedObject[]> {
  const { byKey, entries, stream, census } = of;
  const ofStream = entries.filter((e) => e.stream === stream);
  const heldBytes = ofStream.reduce((sum, e) => sum + e.bytes, 0);
  const bodies = slots.held.tryTake(heldBytes) ? new Map<string, Buffer>() : undefined;
  try {
    await takeCensus(parts, slots, ofStream, census, bodies);
    // The dead letters' plan takes the output's misfits: their census is taken by then (STREAMS order).
    const objects = planFinalObjects(
      ref.pipeline,
      stream === 'deadletter' ? entries : ofStream,
      parts.limits,
      parts.shape,
      census,
    ).filter((object) => object.stream === stream);
    const { s3 } = parts.clients;
    const read: ReadMember = async (m) =>
      bodies?.get(m.key) ??
      slots.reads.run(
        async () => (await verifyStagedObject(s3, parts.settings.bucket, entryOf(byKey, m))).body,
      );
    const groups = await mapLimit(
      groupsOf(objects, parts.limits.maxObjectBytes),
      slots.builds.size,
      (group) => slots.builds.run(() => buildCandidates(parts, ref, group, read)),
    );
    return groups.flat();
  } finally {
    if (bodies) slots.held.give(heldBytes);
  }
}

/**
 * Consecutive objects whose distinct members' staged bytes stay within `budget` (at least one object each): a
 * member several of them take rows from (folders, slices) is read once for the group.
 */
function groupsOf(objects: readonly PlannedObject[], budget: number): PlannedObject[][] {
  const groups: PlannedObject[][] = [];
  let group: PlannedObject[] = [];
  let members = new Set<string>();
  let bytes = 0;
  for (const object of objects) {
    const added = new Map(object.members.filter((m) => !members.has(m.key)).map((m) => [m.key, m.bytes]));
    const more = [...added.values()].reduce((sum, b) => sum + b, 0);
    if (group.length > 0 && bytes + more > budget) {
      groups.push(group);
      group = [];
      members = new Set();
      bytes = 0;
      for (const m of object.members) added.set(m.key, m.bytes);
    }
    for (const [key, b] of added) {
      members.add(key);
      bytes += b;
    }
    group.push(object);
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/** Whether `stream` is planned from a census whatever its staged rows hold: re-encoded, or the output's misfits. */
function reencodedFromCensus(
  parts: PlanParts,
  stream: Stream,
  entries: readonly StagedFileEntry[],
  census: Census,
): boolean {
  if (reencodes(parts.shape, stream)) return true;
  if (stream !== 'deadletter') return false;
  const output = entries.filter((e) => e.stream === 'output' && e.recordCount > 0);
  return misfitPartsOf(output, census).length > 0;
}

/**
 * A concatenated stream's objects, planned from its entries and each written as its candidate from its members
 * read and verified; undefined if a member holds rows staged with a timestamp (the stream needs a census).
 */
async function mergeFromEntries(
  parts: PlanParts,
  ref: CandidateRef,
  slots: PrepareSlots,
  ofStream: readonly StagedFileEntry[],
): Promise<PlannedObject[] | undefined> {
  const where = { s3: parts.clients.s3, bucket: parts.settings.bucket, slots: slots.reads };
  await verifyEmptyEntries(where, ofStream);
  const reads = concatenatedReads(where, ofStream, 'partition');
  const objects = planFinalObjects(ref.pipeline, ofStream, parts.limits, parts.shape);
  const built = await mapLimit(objects, slots.builds.size, (object) =>
    slots.builds.run(async () => {
      if (reads.stamped()) return undefined;
      try {
        const [built] = await buildCandidates(parts, ref, [object], reads.read);
        return built;
      } catch (error) {
        if (error instanceof StampedMemberError) return undefined;
        throw error;
      }
    }),
  );
  return reads.stamped() ? undefined : built.map((object) => object!);
}

/**
 * Reads and verifies each of `ofStream`, keeping the census of those the plan files by their rows, and their bytes
 * in `bodies` if given.
 */
async function takeCensus(
  parts: PlanParts,
  slots: PrepareSlots,
  ofStream: readonly StagedFileEntry[],
  census: Census,
  bodies?: Map<string, Buffer>,
): Promise<void> {
  const { shape } = parts;
  await mapLimit(ofStream, slots.reads.size, async (entry) => {
    await slots.reads.run(() =>
      verifyStagedObject(parts.clients.s3, parts.settings.bucket, entry, (e, body, text) => {
        if (e.recordCount > 0 && (reencodes(shape, e.stream) || mayHoldStagedTime(text)))
          census.set(e.key, censusOf(e, body, shape));
        bodies?.set(e.key, body);
      }),
    );
  });
}

/**
 * `objects` merged one at a time from their members as `read` gives them (a re-encoded member decoded once for all
 * of them), each written as its candidate.
 */
async function buildCandidates(
  parts: PlanParts,
  ref: CandidateRef,
  objects: readonly PlannedObject[],
  read: ReadMember,
): Promise<PlannedObject[]> {
  const options = {
    objects: 1,
    members: parts.concurrency,
    maxCachedRows: parts.limits.maxObjectRows ?? Number.POSITIVE_INFINITY,
  };
  return buildObjects(
    ref.pipeline,
    objects,
    planEncoding(parts.shape) ?? {},
    read,
    options,
    async (o, body) => ({
      ...o,
      candidate: await writeCandidate(parts.clients.s3, parts.settings.bucket, ref, o, body),
    }),
  );
}

function entryOf(byKey: ReadonlyMap<string, StagedFileEntry>, m: StagedMember): StagedFileEntry {
  const entry = byKey.get(m.key);
  if (!entry) throw new StagedObjectLostError(m.key, 'not among the covered objects of its partition');
  return entry;
}
