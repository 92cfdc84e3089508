/**
 * The ledger's item shapes, as stored (attribute names equal field names; keys are in `layout.ts`).
 */
import type { Stream } from './layout.ts';

/**
 * A partition's fence: the highest offset whose effects are staged (P2). -1 when nothing is staged yet.
 * Advanced only by a staging transaction conditioned on the value the invocation read.
 */
export interface FenceItem {
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
  /** Hex MD5 of the object's bytes (the ETag of a single-part upload without KMS). */
  readonly md5: string;
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
  readonly expiresAt: number;
}

/** Keyed state: numeric fields accumulated with ADD, plus the key's descriptive fields. */
export interface StateItem {
  readonly stateKey: string;
  readonly fields: Record<string, string>;
  readonly totals: Record<string, number>;
}
