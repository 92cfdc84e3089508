/**
 * Merged final objects (C5): where nothing is re-encoded (NDJSON output without time folders), a shard's planned
 * objects of one stream and lane are packed, across its partitions, into a few merged objects, each the concatenation of
 * its planned objects' bytes (gzip members and NDJSON lines both concatenate). The manifest lists every planned
 * object as a slice of its merged object (`ManifestFile.sliceStart`), with its own range, size, SHA-256 and rows,
 * so readers and `eos verify` still see one entry per partition range.
 *
 * Why: a final object costs a candidate PUT and a promote COPY whatever it holds, and a checkpoint that wrote one
 * a partition paid for as many as it had partitions (100 final objects a minute at 100 partitions). A shard's
 * merged objects are cut only by the promotion limits, so a checkpoint writes about one a shard and stream.
 *
 * The packing is a pure function of the planned objects and the limits; the key names the decided attempt and the
 * object's place in its shard (`mergedObjectKey`). Promote checks a plan's slices before it writes anything
 * ({@link assertMergedSlices}).
 */
import type { Stream } from '../../ledger/layout.ts';
import { type MergedObjectName, mergedObjectKey, parseMergedObjectKey } from '../../sink/layout.ts';
import type { FinalCandidate, PlannedObject, PromotionLimits } from './final-plan.ts';
import { isReencoded } from './final-plan.ts';
import { PlanRejectedError } from './object-bytes.ts';

/** One merged object to be: its planned objects, in the order their bytes follow each other. */
export interface MergedGroup {
  readonly stream: Stream;
  /** The lane all its objects belong to (the replay view reads it from the key). */
  readonly topic: string;
  readonly gzip: boolean;
  /** Its place among the shard's merged objects of the stream and lane, from 0. */
  readonly index: number;
  readonly objects: readonly PlannedObject[];
}

/** The attempt and shard whose plan names the merged objects. */
export interface MergedSource {
  readonly pipeline: string;
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
}

const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** The manifest's order (`sortManifestFiles`): stream, topic, partition, first offset. */
function manifestOrder(a: PlannedObject, b: PlannedObject): number {
  return (
    byCodeUnits(a.stream, b.stream) ||
    byCodeUnits(a.topic, b.topic) ||
    a.partition - b.partition ||
    a.firstOffset - b.firstOffset
  );
}

/**
 * Packs concatenated planned objects (none re-encoded) greedily, in manifest order, into merged groups of at most
 * `maxObjectBytes` staged bytes and `maxMembers` members (a larger single object makes a group alone), one stream,
 * lane and gzip flag each. Pure and deterministic.
 */
export function mergedGroups(objects: readonly PlannedObject[], limits: PromotionLimits): MergedGroup[] {
  const groups: MergedGroup[] = [];
  const nextIndex = new Map<string, number>();
  let current: PlannedObject[] = [];
  let bytes = 0;
  let members = 0;
  const flush = (): void => {
    const first = current[0];
    if (first) {
      const place = `${first.stream}/${first.topic}`;
      const index = nextIndex.get(place) ?? 0;
      nextIndex.set(place, index + 1);
      groups.push({ stream: first.stream, topic: first.topic, gzip: first.gzip, index, objects: current });
    }
    current = [];
    bytes = 0;
    members = 0;
  };
  for (const object of [...objects].sort(manifestOrder)) {
    if (isReencoded(object))
      throw new PlanRejectedError(object.finalKey, 'a re-encoded object cannot be merged');
    const size = object.members.reduce((sum, m) => sum + m.bytes, 0);
    const first = current[0];
    const fits =
      first !== undefined &&
      first.stream === object.stream &&
      first.topic === object.topic &&
      first.gzip === object.gzip &&
      bytes + size <= limits.maxObjectBytes &&
      members + object.members.length <= limits.maxMembers;
    if (!fits) flush();
    current.push(object);
    bytes += size;
    members += object.members.length;
  }
  flush();
  return groups;
}

/** The name of a group's merged object in `source`'s plan. */
export function mergedName(source: MergedSource, group: MergedGroup): MergedObjectName {
  return {
    stream: group.stream,
    topic: group.topic,
    checkpointId: source.checkpointId,
    attempt: source.attempt,
    shard: source.shard,
    index: group.index,
    gzip: group.gzip,
  };
}

/** The key of a group's merged object in `source`'s plan. */
export function mergedKeyOf(source: MergedSource, group: MergedGroup): string {
  return mergedObjectKey(source.pipeline, mergedName(source, group));
}

/**
 * Promote's check of a plan's slices, before anything is written; throws {@link PlanRejectedError}. A sliced object
 * must name a merged key of this pipeline, of its stream, lane and gzip flag, of the plan's checkpoint and attempt (and
 * shard, when given), be concatenated (never re-encoded) and name a candidate; the slices of one key must name the
 * same candidate and tile its bytes exactly, with no gap, overlap or byte past the last, and no two slices may name
 * overlapping offsets of one stream, lane and partition. An object without a slice
 * may not name a merged key (`assertPlannedObject` holds it to its per-partition key).
 */
export function assertMergedSlices(
  pipeline: string,
  objects: readonly PlannedObject[],
  from: { readonly checkpointId: number; readonly attempt: number; readonly shard?: number },
): void {
  const byKey = new Map<string, PlannedObject[]>();
  for (const object of objects) {
    const reject = (detail: string): never => {
      throw new PlanRejectedError(object.finalKey, detail);
    };
    const name = parseMergedObjectKey(pipeline, object.finalKey);
    if (!object.slice) {
      if (name) reject('a merged key for an object that is no slice');
      continue;
    }
    if (
      !name ||
      name.stream !== object.stream ||
      name.topic !== object.topic ||
      name.gzip !== object.gzip ||
      name.checkpointId !== from.checkpointId ||
      name.attempt !== from.attempt ||
      (from.shard !== undefined && name.shard !== from.shard)
    ) {
      reject(
        `not a merged key of ${object.stream} in checkpoint ${from.checkpointId} attempt ${from.attempt}`,
      );
    }
    if (isReencoded(object) || object.format !== undefined) reject('a re-encoded object cannot be a slice');
    if (!object.candidate) reject('a slice without its merged candidate');
    const { start, bytes, sha256 } = object.slice;
    if (!Number.isSafeInteger(start) || start < 0 || !Number.isSafeInteger(bytes) || bytes < 1)
      reject('a slice without a place or size');
    if (!/^[0-9a-f]{64}$/.test(sha256)) reject('a slice without its SHA-256');
    const slices = byKey.get(object.finalKey);
    if (slices) slices.push(object);
    else byKey.set(object.finalKey, [object]);
  }
  for (const [key, slices] of byKey) assertTiling(key, slices);
  assertRangesOnce(objects.filter((object) => object.slice !== undefined));
}

/**
 * No two slices of a plan name overlapping offsets of one stream, lane and partition: under two merged keys one
 * range would be committed twice (with one key a partition, the key itself made that a conflict).
 */
function assertRangesOnce(slices: readonly PlannedObject[]): void {
  const seen = new Map<string, PlannedObject[]>();
  for (const object of slices) {
    const where = `${object.stream}#${object.topic}#${object.partition}`;
    let earlier = seen.get(where);
    if (!earlier) {
      earlier = [];
      seen.set(where, earlier);
    }
    const clash = earlier.find(
      (o) => object.firstOffset <= o.lastOffset && o.firstOffset <= object.lastOffset,
    );
    if (clash) {
      throw new PlanRejectedError(
        object.finalKey,
        `its slice ${object.stream} ${object.topic}/${object.partition} ${object.firstOffset}-${object.lastOffset} overlaps one of ${clash.finalKey}`,
      );
    }
    earlier.push(object);
  }
}

/** The slices of one merged object name one candidate and cover its bytes exactly. */
function assertTiling(key: string, slices: readonly PlannedObject[]): void {
  const reject = (detail: string): never => {
    throw new PlanRejectedError(key, detail);
  };
  const candidate = slices[0]!.candidate!;
  if (slices.some((s) => !sameCandidate(s.candidate!, candidate)))
    reject('its slices name different candidates');
  let end = 0;
  for (const { slice } of [...slices].sort((a, b) => a.slice!.start - b.slice!.start)) {
    if (slice!.start !== end) reject(`its slices leave a gap or overlap at byte ${end}`);
    end += slice!.bytes;
  }
  if (end !== candidate.bytes) reject(`its slices cover ${end} of its candidate's ${candidate.bytes} bytes`);
}

function sameCandidate(a: FinalCandidate, b: FinalCandidate): boolean {
  return a.key === b.key && a.sha256 === b.sha256 && a.etag === b.etag && a.bytes === b.bytes;
}
