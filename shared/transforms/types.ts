/**
 * The internal transform interface the processor evaluates: a decoded record in, zero or more output rows (and
 * keyed-state deltas) out, or a typed poison failure. Transforms are pure and deterministic: the same record always
 * gives the same result, which is what makes a retried batch harmless (P5) and a poison record safe to
 * dead-letter (P6).
 *
 * Users do not implement this: they write a definition with `defineTransform` (`api.ts`), which `adapter.ts`
 * turns into a {@link Transform} (decoding first, rows checked against the declared schema).
 */
import type { FieldFormat } from '../decode/formats.ts';
import type { DecodedRecord, Lineage, RawHeader } from '../kafka/record.ts';

/** A value with its time: of the values a `latest` field is given, the one with the greatest time is kept. */
export interface LatestValue {
  readonly value: string | number;
  /** A non-negative integer: epoch milliseconds, or any number that grows with the value's age. */
  readonly at: number;
}

export interface StateDelta {
  /** Identifies the state entry, e.g. `cust-007#USD` (`#` is fine: the ledger key's prefix is fixed). */
  readonly key: string;
  /** Descriptive fields stored with the entry (set, not accumulated). */
  readonly fields: Record<string, string>;
  /** Numeric fields added to the entry. */
  readonly add: Record<string, number>;
  /** Numeric fields that keep the smallest value they were given. */
  readonly min?: Record<string, number>;
  /** Numeric fields that keep the largest value they were given. */
  readonly max?: Record<string, number>;
  /** Fields that keep the value with the greatest time ({@link LatestValue}; ties: see `state-order.ts`). */
  readonly latest?: Record<string, LatestValue>;
}

export type TransformResult =
  | {
      readonly kind: 'ok';
      readonly rows: readonly Record<string, unknown>[];
      readonly state: readonly StateDelta[];
      /** The record's decoded JSON value, where `json:<field>` key sources read the business idempotency key. */
      readonly body?: Record<string, unknown>;
      /** The business idempotency key the transform chose, for the `transform` key source. */
      readonly idempotencyKey?: string;
    }
  | { readonly kind: 'poison'; readonly error: string };

/**
 * A transform. `apply` should return `poison` for a record it rejects; if it throws instead, or returns something
 * that is not a {@link TransformResult}, the record is dead-lettered with that error (L1): a transform's bug
 * never stalls a partition, and an exception is never retried (transforms do no I/O, so nothing is transient).
 */
export interface Transform {
  readonly name: string;
  /**
   * How values are decoded before `apply` (absent: the transform reads the record's text itself). `json:<field>`
   * key sources need `json`: only a JSON value has fields read from its exact text.
   */
  readonly valueFormat?: FieldFormat['format'];
  /**
   * Resolves what the batch's records need before any `apply` (registry schemas), once per batch. Throws only for
   * transient failures, so the batch is retried; anything about one record shows in its `apply` result instead.
   */
  prepare?(records: readonly DecodedRecord[]): Promise<void>;
  apply(record: DecodedRecord): TransformResult;
}

/** An output row as written to the sink: the transform's row plus its lineage. */
export type OutputRow = { readonly source: Lineage } & Record<string, unknown>;

/** A dead-letter row (P6): the record as received, and why it was rejected. */
export interface DeadLetterRow {
  readonly source: Lineage;
  readonly error: string;
  readonly raw: {
    readonly key: string | null;
    readonly value: string | null;
    /** Every header as received (name, base64 bytes), in order. */
    readonly headers: readonly RawHeader[];
    /** The record's Kafka timestamp (epoch ms); absent in dead letters written before redrive existed. */
    readonly timestamp?: number;
  };
}
