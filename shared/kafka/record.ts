/** The record model, decoded from the MSK event's base64 and byte arrays. */

/** Where a row came from: every output and dead-letter row carries it. */
export interface Lineage {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
}

/** One header exactly as received: its name and its bytes (base64). */
export interface RawHeader {
  readonly name: string;
  readonly value: string;
}

export interface DecodedRecord extends Lineage {
  readonly timestamp: number;
  /** UTF-8 decoded key (ill-formed bytes become U+FFFD), or null when the record has none. */
  readonly key: string | null;
  /** UTF-8 decoded value (ill-formed bytes become U+FFFD), or null for a tombstone. */
  readonly value: string | null;
  /** False when the value's bytes are not well-formed UTF-8 (so `value` is not exactly what was sent). */
  readonly valueIsUtf8: boolean;
  /**
   * Header values as UTF-8 text (ill-formed bytes become U+FFFD; the last value wins for a repeated name), for
   * transforms. Null-prototype. Anything that must tell bytes apart (idempotency keys) uses `rawHeaders`.
   */
  readonly headers: Readonly<Record<string, string>>;
  /** The base64 key and value as received, for dead-letter rows and the record's digest. */
  readonly rawKey: string | null;
  readonly rawValue: string | null;
  /** Every header as received, in order, repeats included. */
  readonly rawHeaders: readonly RawHeader[];
}

/** One partition's records from one event, in offset order. */
export interface PartitionBatch {
  readonly topic: string;
  readonly partition: number;
  readonly records: readonly DecodedRecord[];
}
