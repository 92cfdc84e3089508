/**
 * The bucket's layout, defined once (the local runner, the coordinator, the reader and the CDK stack's IAM
 * scoping all use these prefixes).
 *
 * ```
 * <pipeline>/_inprogress/<stream>/topic=<t>/partition=<p>/<first>-<last>.<attempt>.ndjson[.gz]   staged (P3)
 * <pipeline>/final/<stream>/topic=<t>/partition=<p>/<first>-<last>.ndjson[.gz]                  committed (C5)
 * <pipeline>/final/_manifests/<N, 12 digits>.json                                              manifests (C7)
 * ```
 * Offsets in keys are zero-padded to 20 digits so that keys sort in offset order.
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
  return `${finalPrefix(pipeline)}${MANIFESTS_DIR}/`;
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
