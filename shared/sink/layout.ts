/**
 * The bucket's layout, defined once (the local runner, the coordinator, the reader and the CDK stack's IAM
 * scoping all use these prefixes).
 *
 * ```
 * <pl>/_inprogress/<stream>/topic=<t>/partition=<p>/<first>-<last>.<attempt>.ndjson[.gz]  staged (P3)
 *        written by: the processor only (stagedStreamPrefix); deleted by: cleanup and the orphan sweep
 * <pl>/_coordinator/<N>/<attempt>/plan-<shard>-<sha256>.json, promoted-<shard>.json         working objects
 * <pl>/_coordinator/<N>/<attempt>/candidate-<sha256 of its bytes>                           candidates (C3, C5)
 * <pl>/_coordinator/<N>/<attempt>/staged/<the staged key below _inprogress/>                plans without candidates
 *        written by: the coordinator only (checkpointWorkPrefix, candidateKey in work-objects.ts); a candidate
 *        is a final object's bytes, merged by prepare from the staged bytes it verified, which promote copies to
 *        the final key: promote never reads `_inprogress/` (C3). `staged/` holds the verified copies of plans
 *        without candidates, which promote still reads; nothing writes them any more
 * <pl>/_manifests/<N, 12 digits>.json                                                       manifests (C7)
 *        written by: commit only (manifestsPrefix)
 * <pl>/final/<stream>/topic=<t>/partition=<p>/<first>-<last>.<ext>                         final data (C5)
 * <pl>/final/<stream>/dt=<YYYY-MM-DD>[/hour=<HH>]/<t>+<p>+<first>-<last>.<ext>             time-partitioned
 * <pl>/final/<stream>/topic=<t>/checkpoint=<N, 12 digits>/<attempt>-<shard>-<index>.ndjson[.gz]  merged (C5)
 *        written by: promote only (finalPrefix), at the key finalObjectKey derives; <ext> is .ndjson, .ndjson.gz
 *        or .parquet (output stream only); the folders are defined in time-partitions.ts
 * ```
 * A merged final object holds the concatenated NDJSON of several partitions' ranges of one lane in one checkpoint's
 * shard, each listed by the manifest as a slice of it (`ManifestFile.sliceStart`): one object a shard, lane and
 * stream where per-partition objects take one a partition, so a checkpoint writes (and pays for) a few objects, not
 * one per partition. Its key is deterministic in the decided attempt's plan: (stream, lane, checkpoint, attempt,
 * shard, index); the lane stays in the key, where the replay view reads it from the object's path
 * (`replay/current-view.ts`).
 * With time partitioning a Hive-style reader of `final/<stream>/` sees only `dt=`/`hour=` folders and data files;
 * the topic and Kafka partition move into the file name, joined by `+` as Kafka Connect's S3 sink joins them (`+`
 * cannot occur in a topic name, so the split is unambiguous), so the key stays
 * deterministic in (stream, folder, topic, partition, offset range).
 * In epoch N >= 1 of a topic (`ledger/epochs.ts`) `<t>` is the lane `<topic>~<N>`: final keys of a new epoch never
 * collide with the old epoch's.
 * Offsets in keys are zero-padded to 20 digits so that keys sort in offset order. The processor can write nothing
 * outside its two staged stream prefixes, and nothing the coordinator trusts lives there: plans moved out of
 * `_inprogress/` (a processor could rewrite them), final objects are copied from the candidates prepare merged
 * from the bytes it verified (never from the staged keys the processor may rewrite), and manifests moved out of
 * `final/` (so a Hive-style reader of `final/` sees data objects only, and a role that may write final data cannot
 * write a manifest).
 */
import { LANE_PATTERN } from '../ledger/epochs.ts';
import { padCheckpointId, padOffset, type Stream } from '../ledger/layout.ts';
import { parseTimeFolder } from './time-partitions.ts';

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

/** Where one output stream's final objects live (`output` or `deadletter`). */
export function finalStreamPrefix(pipeline: string, stream: Stream): string {
  return `${finalPrefix(pipeline)}${stream}/`;
}

export function manifestsPrefix(pipeline: string): string {
  return `${pipeline}/${MANIFESTS_DIR}/`;
}

export function ndjsonExtension(gzip: boolean): string {
  return gzip ? '.ndjson.gz' : '.ndjson';
}

/** How a final object is encoded: NDJSON plain or gzip, or Parquet (staged objects are always NDJSON). */
export const FINAL_ENCODINGS = ['ndjson', 'ndjson.gz', 'parquet'] as const;
export type FinalEncoding = (typeof FINAL_ENCODINGS)[number];

/** The encoding named by a gzip flag (the NDJSON encodings) or the encoding itself. */
export function encodingOf(encoding: boolean | FinalEncoding): FinalEncoding {
  if (typeof encoding === 'string') return encoding;
  return encoding ? 'ndjson.gz' : 'ndjson';
}

export interface ObjectRange {
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  /** The time folder (`dt=…[/hour=…]`) of a time-partitioned final object; absent otherwise. */
  readonly folder?: string;
}

function offsetRange(range: ObjectRange): string {
  return `${padOffset(range.firstOffset)}-${padOffset(range.lastOffset)}`;
}

function rangePath(range: ObjectRange, withFolder = true): string {
  if (withFolder && range.folder !== undefined) {
    return `${range.stream}/${range.folder}/${range.topic}+${range.partition}+${offsetRange(range)}`;
  }
  return `${range.stream}/topic=${range.topic}/partition=${range.partition}/${offsetRange(range)}`;
}

/** A staged object's key: unique to the attempt, so a retried or zombie attempt never overwrites another's. */
export function stagedObjectKey(
  pipeline: string,
  range: ObjectRange,
  attemptId: string,
  gzip: boolean,
): string {
  return `${inProgressPrefix(pipeline)}${rangePath(range, false)}.${attemptId}${ndjsonExtension(gzip)}`;
}

/**
 * A final object's key: deterministic in (pipeline, stream, time folder, topic, partition, offset range, encoding)
 * (C5). `encoding` is a gzip flag for NDJSON (as before Parquet existed) or a {@link FinalEncoding}.
 */
export function finalObjectKey(
  pipeline: string,
  range: ObjectRange,
  encoding: boolean | FinalEncoding,
): string {
  return `${finalPrefix(pipeline)}${rangePath(range)}.${encodingOf(encoding)}`;
}

/** The parts of a key under the staged or final prefix; `attemptId` only for staged keys. */
export interface ParsedObjectKey extends ObjectRange {
  /** True only for `.ndjson.gz`. */
  readonly gzip: boolean;
  readonly encoding: FinalEncoding;
  readonly attemptId?: string;
}

/** A lane is a topic, or `<topic>~<epoch>` for an epoch >= 1 (`ledger/epochs.ts`). */
const RANGE_PATH = new RegExp(
  `^(output|deadletter)\\/topic=(${LANE_PATTERN})\\/partition=(0|[1-9]\\d{0,9})\\/(\\d{20})-(\\d{20})(?:\\.([A-Za-z0-9._-]+))?\\.ndjson(\\.gz)?$`,
);

function parseRangePath(rest: string): ParsedObjectKey | undefined {
  const match = RANGE_PATH.exec(rest);
  if (!match) return undefined;
  const gzip = match[7] !== undefined;
  const range: ParsedObjectKey = {
    stream: match[1] as Stream,
    topic: match[2]!,
    partition: Number(match[3]),
    firstOffset: Number(match[4]),
    lastOffset: Number(match[5]),
    gzip,
    encoding: encodingOf(gzip),
    ...(match[6] === undefined ? {} : { attemptId: match[6] }),
  };
  return Number.isSafeInteger(range.firstOffset) && Number.isSafeInteger(range.lastOffset)
    ? range
    : undefined;
}

/** Final keys only: Parquet without folders, and every encoding under a time folder. */
const PARQUET_RANGE_PATH = new RegExp(
  `^(output)\\/topic=(${LANE_PATTERN})\\/partition=(0|[1-9]\\d{0,9})\\/(\\d{20})-(\\d{20})\\.parquet$`,
);
const FOLDER_PATH = new RegExp(
  `^(output|deadletter)\\/(dt=[^/]+(?:\\/hour=[^/]+)?)\\/(${LANE_PATTERN})\\+(0|[1-9]\\d{0,9})\\+(\\d{20})-(\\d{20})\\.(ndjson|ndjson\\.gz|parquet)$`,
);

function parseFinalPath(rest: string): ParsedObjectKey | undefined {
  const plain = parseRangePath(rest);
  if (plain) return plain;
  const parquet = PARQUET_RANGE_PATH.exec(rest);
  const folder = parquet ? undefined : FOLDER_PATH.exec(rest);
  if (parquet) {
    return {
      stream: 'output',
      topic: parquet[2]!,
      partition: Number(parquet[3]),
      firstOffset: Number(parquet[4]),
      lastOffset: Number(parquet[5]),
      gzip: false,
      encoding: 'parquet',
    };
  }
  // Dead letters are always NDJSON; a folder must be exactly what time-partitions.ts spells.
  if (!folder || parseTimeFolder(folder[2]!) === undefined) return undefined;
  const encoding = folder[7] as FinalEncoding;
  if (encoding === 'parquet' && folder[1] !== 'output') return undefined;
  return {
    stream: folder[1] as Stream,
    folder: folder[2]!,
    topic: folder[3]!,
    partition: Number(folder[4]),
    firstOffset: Number(folder[5]),
    lastOffset: Number(folder[6]),
    gzip: encoding === 'ndjson.gz',
    encoding,
  };
}

/**
 * The parts of a final data key of this pipeline (exactly what {@link finalObjectKey} writes), else undefined.
 * Round-trips: the key must be re-derivable from the parts, so no second spelling of a range is accepted
 * (`..`, `//`, other padding, an attempt suffix of the at-least-once direct keys, a manifest, a folder spelled
 * otherwise than `time-partitions.ts` spells it, a Parquet dead-letter object, anything else).
 */
export function parseFinalKey(pipeline: string, key: string): ParsedObjectKey | undefined {
  const prefix = finalPrefix(pipeline);
  if (!key.startsWith(prefix)) return undefined;
  const parts = parseFinalPath(key.slice(prefix.length));
  if (!parts || parts.attemptId !== undefined) return undefined;
  if (!Number.isSafeInteger(parts.firstOffset) || !Number.isSafeInteger(parts.lastOffset)) return undefined;
  return finalObjectKey(pipeline, parts, parts.encoding) === key ? parts : undefined;
}

/**
 * The parts of a staged object key of this pipeline (exactly what {@link stagedObjectKey} writes, under
 * {@link stagedStreamPrefix}), else undefined.
 */
export function parseStagedObjectKey(pipeline: string, key: unknown): ParsedObjectKey | undefined {
  const prefix = inProgressPrefix(pipeline);
  // Keys come from processor-written items: anything but a string is no staged key.
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
  return `${finalPrefix(pipeline)}${rangePath(range, false)}.${attemptId}${ndjsonExtension(gzip)}`;
}

/** What a merged final object's key names: the plan it was decided in, and its place there. */
export interface MergedObjectName {
  readonly stream: Stream;
  /** The lane (a topic, or `<topic>~…`) all its slices belong to. */
  readonly topic: string;
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
  /** Its place among the shard's merged objects of the stream, from 0. */
  readonly index: number;
  readonly gzip: boolean;
}

/**
 * The key of a merged final object (C5):
 * `<pl>/final/<stream>/topic=<t>/checkpoint=<N>/<attempt>-<shard>-<index>.ndjson[.gz]`.
 * One attempt of a checkpoint is ever decided, and its plan names each key once, so a key is written with one
 * content only; the attempt in the key keeps that so even if two attempts' plans were ever promoted.
 */
export function mergedObjectKey(pipeline: string, name: MergedObjectName): string {
  const place = `${name.attempt}-${String(name.shard).padStart(2, '0')}-${String(name.index).padStart(4, '0')}`;
  return `${finalPrefix(pipeline)}${name.stream}/topic=${name.topic}/checkpoint=${padCheckpointId(name.checkpointId)}/${place}${ndjsonExtension(name.gzip)}`;
}

// Padding is a floor, not a bound: a shard with more than 9,999 objects of a stream and lane (a vast backlog)
// still has a key that round-trips, so no producer's volume can leave a plan promote refuses.
const MERGED_PATH = new RegExp(
  `^(output|deadletter)\\/topic=(${LANE_PATTERN})\\/checkpoint=(\\d{12})\\/([1-9]\\d{0,14})-(\\d{2,15})-(\\d{4,15})\\.ndjson(\\.gz)?$`,
);

/** The name of a merged final key of this pipeline (exactly what {@link mergedObjectKey} writes), else undefined. */
export function parseMergedObjectKey(pipeline: string, key: string): MergedObjectName | undefined {
  const prefix = finalPrefix(pipeline);
  if (typeof key !== 'string' || !key.startsWith(prefix)) return undefined;
  const match = MERGED_PATH.exec(key.slice(prefix.length));
  if (!match) return undefined;
  const name: MergedObjectName = {
    stream: match[1] as Stream,
    topic: match[2]!,
    checkpointId: Number(match[3]),
    attempt: Number(match[4]),
    shard: Number(match[5]),
    index: Number(match[6]),
    gzip: match[7] !== undefined,
  };
  return name.checkpointId >= 1 && mergedObjectKey(pipeline, name) === key ? name : undefined;
}
