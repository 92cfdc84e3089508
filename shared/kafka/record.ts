/** The record model, decoded from the MSK event's base64 and byte arrays. */

/** Where a row came from: every output and dead-letter row carries it. */
export interface Lineage {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

export interface DecodedRecord extends Lineage {
  readonly timestamp: number;
  /** UTF-8 decoded key, or null when the record has none. */
  readonly key: string | null;
  /** UTF-8 decoded value, or null for a tombstone. */
  readonly value: string | null;
  /** Header values decoded as UTF-8 (the last value wins for a repeated name). */
  readonly headers: Record<string, string>;
  /** The base64 key and value as received, for dead-letter rows. */
  readonly rawKey: string | null;
  readonly rawValue: string | null;
}

/** One partition's records from one event, in offset order. */
export interface PartitionBatch {
  readonly topic: string;
  readonly partition: number;
  readonly records: readonly DecodedRecord[];
}
