/**
 * The bucket's layout, defined once (the local runner, the coordinator, the reader and the CDK stack's IAM
 * scoping all use these prefixes).
 *
 * ```
 * <pl>/_inprogress/<stream>/topic=<t>/partition=<p>/<first>-<last>.<attempt>.ndjson[.gz]  staged (P3)
 *        written by: the processor only (stagedStreamPrefix); deleted by: cleanup and the orphan sweep
 * <pl>/_coordinator/<N>/<attempt>/plan-<shard>-<sha256>.json, promoted-<shard>.json         working objects
 * <pl>/_coordinator/<N>/<attempt>/staged/<the staged key below _inprogress/>                verified copies
 *        written by: the coordinator only (checkpointWorkPrefix, stagedCopyKey in work-objects.ts); promote
 *        reads staged data only from these copies, never from `_inprogress/` (issue 17, review R2b-1)
 * <pl>/_manifests/<N, 12 digits>.json                                                       manifests (C7)
 *        written by: commit only (manifestsPrefix)
 * <pl>/final/<stream>/topic=<t>/partition=<p>/<first>-<last>.ndjson[.gz]                    final data (C5)
 *        written by: promote only (finalPrefix), at the key finalObjectKey derives
 * ```
 * Offsets in keys are zero-padded to 20 digits so that keys sort in offset order. The processor can write nothing
 * outside its two staged stream prefixes, and nothing the coordinator trusts lives there: plans moved out of
 * `_inprogress/` (a processor could rewrite them), staged objects are promoted from the copies prepare verified
 * (not from the staged keys the processor may rewrite), and manifests moved out of `final/` (so a Hive-style reader
 * of `final/` sees data objects only, and a role that may write final data cannot write a manifest).
 */
import { padCheckpointId, padOffset, type Stream } from '../ledger/layout.ts';

export const IN_PROGRESS_DIR = '_inprogress';
export const FINAL_DIR = 'final';
export const MANIFESTS_DIR = '_manifests';

export function inProgressPrefix(pipeline: string): string {
  return `${pipeline}/${IN_PROGRESS_DIR}/`;
}

/** Where one output stream's staged objects live: the only S3 prefixes the processor may write (exactly-once). */
export function stagedStreamPrefix(pipeline: string, stream: Stream): string {
  return `${inProgressPrefix(pipeline)}${stream}/`;
}

export function finalPrefix(pipeline: string): string {
  return `${pipeline}/${FINAL_DIR}/`;
}

export function manifestsPrefix(pipeline: string): string {
  return `${pipeline}/${MANIFESTS_DIR}/`;
}

export function ndjsonExtension(gzip: boolean): string {
  return gzip ? '.ndjson.gz' : '.ndjson';
}

export interface ObjectRange {
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
}

function rangePath(range: ObjectRange): string {
  return `${range.stream}/topic=${range.topic}/partition=${range.partition}/${padOffset(range.firstOffset)}-${padOffset(range.lastOffset)}`;
}

/** A staged object's key: unique to the attempt, so a retried or zombie attempt never overwrites another's. */
export function stagedObjectKey(
  pipeline: string,
  range: ObjectRange,
  attemptId: string,
  gzip: boolean,
): string {
  return `${inProgressPrefix(pipeline)}${rangePath(range)}.${attemptId}${ndjsonExtension(gzip)}`;
}

/** A final object's key: deterministic in (pipeline, stream, topic, partition, offset range) (C5). */
export function finalObjectKey(pipeline: string, range: ObjectRange, gzip: boolean): string {
  return `${finalPrefix(pipeline)}${rangePath(range)}${ndjsonExtension(gzip)}`;
}

/** The parts of a key under the staged or final prefix; `attemptId` only for staged keys. */
export interface ParsedObjectKey extends ObjectRange {
  readonly gzip: boolean;
  readonly attemptId?: string;
}

const RANGE_PATH =
  /^(output|deadletter)\/topic=([a-zA-Z0-9._-]+)\/partition=(0|[1-9]\d{0,9})\/(\d{20})-(\d{20})(?:\.([A-Za-z0-9._-]+))?\.ndjson(\.gz)?$/;

function parseRangePath(rest: string): ParsedObjectKey | undefined {
  const match = RANGE_PATH.exec(rest);
  if (!match) return undefined;
  const range: ParsedObjectKey = {
    stream: match[1] as Stream,
    topic: match[2]!,
    partition: Number(match[3]),
    firstOffset: Number(match[4]),
    lastOffset: Number(match[5]),
    gzip: match[7] !== undefined,
    ...(match[6] === undefined ? {} : { attemptId: match[6] }),
  };
  return Number.isSafeInteger(range.firstOffset) && Number.isSafeInteger(range.lastOffset)
    ? range
    : undefined;
}

/**
 * The parts of a final data key of this pipeline (exactly what {@link finalObjectKey} writes), else undefined.
 * Round-trips: the key must be re-derivable from the parts, so no second spelling of a range is accepted
 * (`..`, `//`, other padding, an attempt suffix of the at-least-once direct keys, a manifest, anything else).
 */
export function parseFinalKey(pipeline: string, key: string): ParsedObjectKey | undefined {
  const prefix = finalPrefix(pipeline);
  if (!key.startsWith(prefix)) return undefined;
  const parts = parseRangePath(key.slice(prefix.length));
  if (!parts || parts.attemptId !== undefined) return undefined;
  return finalObjectKey(pipeline, parts, parts.gzip) === key ? parts : undefined;
}

/**
 * The parts of a staged object key of this pipeline (exactly what {@link stagedObjectKey} writes, under
 * {@link stagedStreamPrefix}), else undefined.
 */
export function parseStagedObjectKey(pipeline: string, key: unknown): ParsedObjectKey | undefined {
  const prefix = inProgressPrefix(pipeline);
  // Keys come from processor-written items: anything but a string is no staged key (review R2b-3).
  if (typeof key !== 'string' || !key.startsWith(prefix)) return undefined;
  const parts = parseRangePath(key.slice(prefix.length));
  if (!parts || parts.attemptId === undefined) return undefined;
  return stagedObjectKey(pipeline, parts, parts.attemptId, parts.gzip) === key ? parts : undefined;
}

export function manifestKey(pipeline: string, checkpointId: number): string {
  return `${manifestsPrefix(pipeline)}${padCheckpointId(checkpointId)}.json`;
}

/**
 * At-least-once and none write output straight to final objects, one per attempt: like a naive sink, a retried
 * batch writes its rows again (which is exactly the duplication those guarantees accept).
 */
export function directFinalObjectKey(
  pipeline: string,
  range: ObjectRange,
  attemptId: string,
  gzip: boolean,
): string {
  return `${finalPrefix(pipeline)}${rangePath(range)}.${attemptId}${ndjsonExtension(gzip)}`;
}
