/**
 * The transform API: what a user's transform module imports. A transform is one call to {@link defineTransform}:
 *
 * ```ts
 * import { defineTransform, RejectRecord } from '<this module>';
 *
 * interface Click { userId: string; page: string; at: number }
 *
 * export default defineTransform<Click>({
 *   name: 'clicks',
 *   value: { format: 'json' },               // the default; key defaults to { format: 'string' }
 *   schema: { userId: 'string', page: 'string', at: 'timestamp', referrer: { type: 'string', nullable: true } },
 *   transform({ value }) {
 *     if (value === null) throw new RejectRecord('tombstone');
 *     return {
 *       rows: [{ userId: value.userId, page: value.page, at: value.at, referrer: null }],
 *       state: [{ key: value.userId, fields: { userId: value.userId }, add: { views: 1 } }],
 *     };
 *   },
 * });
 * ```
 *
 * The processor decodes each record's key and value with the declared formats before `transform` sees it; a
 * record whose bytes do not decode is dead-lettered with the decoder's reason. `transform` must be synchronous,
 * pure and deterministic (the same record always gives the same result: a retried batch is then harmless, P5).
 * A thrown error, or a returned `Error`, dead-letters the record with its message (L1): {@link RejectRecord} for
 * intentional rejections (its message is the dead letter's reason as written), anything else as
 * `transform <name> threw <Name>: <message>`. Each output row is checked against `schema`; a row that does not
 * match dead-letters its record with a reason naming the column. The processor adds `source` (topic, partition,
 * offset) to every row.
 *
 * This module imports no AWS SDK and nothing with side effects: it is safe to import from any user module.
 */

import type { FieldFormat } from '../decode/formats.ts';
import { InvalidTransformDefinitionError, PipelineError } from '../errors.ts';
import type { LatestValue } from './types.ts';

export type { FieldFormat, Framing, RegistrySpec } from '../decode/formats.ts';
export type { LatestValue, StateDelta } from './types.ts';

/**
 * One state key's update as a transform returns it: `key`, and any of the operations, each a map of field names
 * (a field takes one operation). `fields` set text; `add` adds integers; `min` and `max` keep the smallest and
 * largest number given; `latest` keeps the value whose time (`at`) is greatest, ties going to a number over a
 * string, the larger number, the greater text as UTF-8 bytes. Applied exactly once with the record.
 */
export interface StateUpdate {
  readonly key: string;
  readonly fields?: Readonly<Record<string, string>>;
  readonly add?: Readonly<Record<string, number>>;
  readonly min?: Readonly<Record<string, number>>;
  readonly max?: Readonly<Record<string, number>>;
  readonly latest?: Readonly<Record<string, LatestValue>>;
}
export { InvalidTransformDefinitionError };

/** Column types of output rows, as JSON values in the NDJSON sink and as the Parquet types noted. */
export const COLUMN_TYPES = ['string', 'int', 'long', 'double', 'boolean', 'timestamp', 'json'] as const;
/**
 * - `string`: a string (Parquet BYTE_ARRAY UTF8)
 * - `int`: an integer in the 32-bit signed range (INT32)
 * - `long`: an integer within ±(2^53 − 1), exact in JSON and JavaScript (INT64)
 * - `double`: a finite number (DOUBLE)
 * - `boolean`: true or false (BOOLEAN)
 * - `timestamp`: milliseconds since the Unix epoch, an integer as `long` (INT64 TIMESTAMP(MILLIS, UTC))
 * - `json`: any JSON value (objects, arrays…), kept as is (BYTE_ARRAY JSON)
 */
export type ColumnType = (typeof COLUMN_TYPES)[number];

/** A column: its type, and whether it may be null or absent (default: not). */
export interface ColumnSpec {
  readonly type: ColumnType;
  readonly nullable?: boolean;
}

/** A column declared as its type alone (`'string'`: required) or as a {@link ColumnSpec}. */
export type Column = ColumnType | ColumnSpec;

/** Output columns by name. `source` is reserved: the processor adds each row's lineage under it. */
export type RowSchema = Readonly<Record<string, Column>>;

/** A column in normal form: what the sink's encoders and table definitions derive their columns from. */
export interface ColumnDefinition {
  readonly name: string;
  readonly type: ColumnType;
  readonly nullable: boolean;
}

/** The JavaScript value of a column type. */
export type ColumnValue<T extends ColumnType> = T extends 'string'
  ? string
  : T extends 'boolean'
    ? boolean
    : T extends 'json'
      ? unknown
      : number;

type TypeOf<C extends Column> = C extends ColumnType ? C : C extends ColumnSpec ? C['type'] : never;
type NullableNames<S extends RowSchema> = {
  [N in keyof S]: S[N] extends { readonly nullable: true } ? N : never;
}[keyof S];
type RequiredNames<S extends RowSchema> = Exclude<keyof S, NullableNames<S>>;

/** The row type a schema declares: required columns must be present; nullable ones may be null or absent. */
export type RowOf<S extends RowSchema> = {
  -readonly [N in RequiredNames<S>]: ColumnValue<TypeOf<S[N]>>;
} & { -readonly [N in NullableNames<S>]?: ColumnValue<TypeOf<S[N]>> | null };

/** What `transform` receives: the record with its key and value decoded by the declared formats. */
export interface TransformInput<V = unknown, K = string> {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  /** The record's Kafka timestamp (milliseconds since the epoch). */
  readonly timestamp: number;
  /** The decoded key; null when the record has none. */
  readonly key: K | null;
  /** The decoded value; null for a tombstone (and, with the `json` format, for the JSON text `null`). */
  readonly value: V | null;
  /** Header values as UTF-8 text (ill-formed bytes become U+FFFD; the last value wins for a repeated name). */
  readonly headers: Readonly<Record<string, string>>;
}

/** What `transform` returns: all fields optional; `{}` means the record is consumed with no effect. */
export interface TransformOutput<Row> {
  /** Output rows, each checked against the schema. */
  readonly rows?: readonly Row[];
  /** Keyed-state updates: per state key, fields set, added, kept smallest, largest or latest ({@link StateUpdate}). */
  readonly state?: readonly StateUpdate[];
  /**
   * The record's business idempotency key, used when the `idempotencyKey` setting is `transform` (ignored
   * otherwise). Absent: the key source found nothing, which dead-letters the record by default (reason
   * `no idempotency key: …`); with `missingIdempotencyKey: offset-only` it is deduplicated by offset only.
   * Counted either way (metric `IdempotencyKeysMissing`).
   */
  readonly idempotencyKey?: string;
}

/** What a user passes to {@link defineTransform}. */
export interface TransformSpec<V, K, S extends RowSchema> {
  /** Names the transform in dead-letter reasons and logs. */
  readonly name: string;
  /** How keys are decoded; default `{ format: 'string' }`. */
  readonly key?: FieldFormat;
  /** How values are decoded; default `{ format: 'json' }`. */
  readonly value?: FieldFormat;
  /** The output rows' columns. */
  readonly schema: S;
  /** One record in, its effects out. Throw (or return) an Error to dead-letter the record. */
  readonly transform: (record: TransformInput<V, K>) => TransformOutput<RowOf<S>> | Error;
}

const DEFINITION = Symbol.for('msk-exactly-once-pipeline.transform-definition');
const REJECTION = Symbol.for('msk-exactly-once-pipeline.reject-record');

/** A transform made by {@link defineTransform}: frozen, with its formats defaulted and schema normalised. */
export interface TransformDefinition<V = unknown, K = string, S extends RowSchema = RowSchema> {
  readonly [DEFINITION]: true;
  readonly name: string;
  readonly key: FieldFormat;
  readonly value: FieldFormat;
  readonly schema: S;
  /** The schema in normal form, in declaration order. */
  readonly columns: readonly ColumnDefinition[];
  readonly transform: (record: TransformInput<V, K>) => TransformOutput<RowOf<S>> | Error;
}

/** A definition whatever its type parameters: what loaders and the processor take. */
export type AnyTransformDefinition = TransformDefinition<never, never, RowSchema>;

/**
 * Thrown (or returned) by a transform to reject a record on purpose: the record becomes one dead-letter row whose
 * reason is this message, exactly. `instanceof` works across copies of this module (a bundled copy and the
 * project's own), so a user module and the processor always agree on what a rejection is.
 */
export class RejectRecord extends PipelineError {
  readonly [REJECTION] = true;
  static override [Symbol.hasInstance](value: unknown): boolean {
    return (
      typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[REJECTION] === true
    );
  }
}

const RESERVED_COLUMNS: ReadonlySet<string> = new Set(['source', '__proto__', 'constructor', 'prototype']);

function normalise(name: string, schema: RowSchema): ColumnDefinition[] {
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new InvalidTransformDefinitionError(name, 'schema must be an object of columns');
  }
  return Object.entries(schema).map(([column, spec]) => {
    if (RESERVED_COLUMNS.has(column) || column === '') {
      throw new InvalidTransformDefinitionError(
        name,
        `column "${column}" is reserved (the processor adds each row's lineage as "source")`,
      );
    }
    const type = typeof spec === 'string' ? spec : spec?.type;
    if (!(COLUMN_TYPES as readonly string[]).includes(type as string)) {
      throw new InvalidTransformDefinitionError(
        name,
        `column "${column}" has type ${JSON.stringify(type)} (known: ${COLUMN_TYPES.join(', ')})`,
      );
    }
    const nullable = typeof spec === 'object' && spec.nullable === true;
    return { name: column, type: type as ColumnType, nullable };
  });
}

/** Declares a transform. Type `value` with the first type argument: `defineTransform<Click>({…})`. */
export function defineTransform<V = unknown, K = string, S extends RowSchema = RowSchema>(
  spec: TransformSpec<V, K, S>,
): TransformDefinition<V, K, S> {
  if (typeof spec?.name !== 'string' || spec.name === '') {
    throw new InvalidTransformDefinitionError(String(spec?.name), 'name must be a non-empty string');
  }
  if (typeof spec.transform !== 'function') {
    throw new InvalidTransformDefinitionError(spec.name, 'transform must be a function');
  }
  const columns = Object.freeze(normalise(spec.name, spec.schema));
  const key: FieldFormat = spec.key ?? { format: 'string' };
  const value: FieldFormat = spec.value ?? { format: 'json' };
  return Object.freeze({
    [DEFINITION]: true as const,
    name: spec.name,
    key,
    value,
    schema: spec.schema,
    columns,
    transform: spec.transform,
  });
}

/** True when `value` was made by {@link defineTransform} (by any copy of this module). */
export function isTransformDefinition(value: unknown): value is AnyTransformDefinition {
  return (
    typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[DEFINITION] === true
  );
}
