/**
 * The ledger's item shapes, as stored (attribute names equal field names; keys are in `layout.ts`).
 */
import { parseLane } from './epochs.ts';
import type { Stream } from './layout.ts';

/**
 * Which record sits at an offset: the digest of its exact key and value bytes (`recordDigest`, processor) and its
 * Kafka timestamp. Two generations of a recreated topic put different records at the same offsets; a redelivery
 * puts the same record there again (the log stores key, value and timestamp, so they come back unchanged).
 */
export interface RecordFingerprint {
  readonly offset: number;
  readonly digest: string;
  readonly timestamp: number;
}

/**
 * What the fence knows about the records it was moved past, so that a batch starting at or below it can be told
 * from a redelivery (see the processor's module doc). Written by every staging transaction.
 */
export interface FenceIdentity {
  /** The record at `stagedOffset` (the last record of the chunk that moved the fence). */
  readonly fenceRecord: RecordFingerprint;
  /**
   * The first record of the delivered batch whose staging moved the fence last: where the mapping's retry of that
   * batch starts (its committed offset), so no redelivery starts below it.
   */
  readonly batchStart: RecordFingerprint;
  /**
   * The first records of the last {@link RECENT_STARTS} distinct batches staged (oldest first, `batchStart`
   * last): where a mapping that lost the offset commits of several acknowledged batches may restart. A batch
   * starting at one of them with the same fingerprint is a redelivery; with another, another generation. Empty
   * for fences written before the ring existed.
   */
  readonly recentStarts: readonly RecordFingerprint[];
}

/**
 * How many batch starts a fence remembers. Bounded by construction (the processor keeps the last k): packed at
 * about 20 bytes a start (`fence-identity.ts`; 48 in the ring of the release before, `recent-starts.ts`), the ring
 * adds under 200 bytes to the fence item.
 * A rewind deeper than k acknowledged batches is judged without it (rule 4: a false, loud stop).
 */
export const RECENT_STARTS = 8;

/**
 * `starts` with `start` appended (replacing an entry at the same offset), keeping the last `keep` (by default
 * {@link RECENT_STARTS}).
 */
export function withStart(
  starts: readonly RecordFingerprint[],
  start: RecordFingerprint,
  keep = RECENT_STARTS,
): RecordFingerprint[] {
  return [...starts.filter((s) => s.offset !== start.offset), start].slice(-keep);
}

/**
 * A partition's fence: the highest offset whose effects are staged (P2). -1 when nothing is staged yet.
 * Advanced only by a staging transaction conditioned on the value the invocation read. Fences written before the
 * identity existed lack `fenceRecord`/`batchStart`: their identity is unknown and only the distance rule applies.
 */
export interface FenceItem extends Partial<FenceIdentity> {
  readonly topic: string;
  readonly partition: number;
  readonly stagedOffset: number;
  /** Epoch ms of the last staging transaction. */
  readonly updatedAt: number;
}

/**
 * A staged file: one in-progress object holding one chunk's rows of one stream (P3). Written in the same
 * transaction that moves the fence past `lastOffset`, so an entry exists if and only if its object's rows are
 * durable effects. The offset range covers every record of the chunk, including those that produced no row of
 * this stream, so consecutive entries of a stream tile the partition's offsets without gaps or overlaps.
 */
export interface StagedFileEntry {
  readonly pipeline: string;
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  /** The in-progress object's key. */
  readonly key: string;
  /** Rows in the object. */
  readonly recordCount: number;
  /** The object's size in bytes, as stored (after gzip). */
  readonly bytes: number;
  /** Hex SHA-256 of the object's bytes, as stored. */
  readonly sha256: string;
  /**
   * Hex MD5 of the object's bytes (the ETag of a single-part upload without KMS), where the entry was written with
   * it: no reader uses it, and an inline entry leaves it out (`packed-entry.ts`).
   */
  readonly md5?: string;
  readonly gzip: boolean;
  /** Unique per processor attempt; also part of `key`. */
  readonly attemptId: string;
  /** Epoch ms when the staging transaction was built. */
  readonly stagedAt: number;
}

/** An idempotency claim: which record first carried a business key. Expires by TTL (`expiresAt`, epoch s). */
export interface ClaimItem {
  readonly idempotencyKey: string;
  /** `<topic>#<partition>#<offset>` of the claiming record. */
  readonly claimant: string;
  /**
   * The claiming record's digest (exact key and value bytes): a same-key record with another digest is a conflict
   * (dead-lettered), one with the same digest a duplicate (dropped). Claims written before digests lack it.
   */
  readonly digest: string;
  readonly expiresAt: number;
}

/** The claimant of a record's claim ({@link ClaimItem.claimant}): `<lane>#<partition>#<offset>`. */
export function claimantOf(lane: string, partition: number, offset: number): string {
  return `${lane}#${partition}#${offset}`;
}

/** The lane, partition and offset a claimant names (`<lane>#<partition>#<offset>`), or undefined. */
export function parseClaimant(
  claimant: string,
): { lane: string; partition: number; offset: number } | undefined {
  const match = /^([^#]+)#(\d+)#(\d+)$/.exec(claimant);
  if (!match || parseLane(match[1]!) === undefined) return undefined;
  const partition = Number(match[2]);
  const offset = Number(match[3]);
  return Number.isSafeInteger(partition) && Number.isSafeInteger(offset)
    ? { lane: match[1]!, partition, offset }
    : undefined;
}

/** Keyed state: numeric fields accumulated with ADD, plus the key's descriptive fields. */
export interface StateItem {
  readonly stateKey: string;
  readonly fields: Record<string, string>;
  readonly totals: Record<string, number>;
}
