/**
 * Parquet encoding of output rows: the transform's declared columns, in declaration order, then the
 * lineage struct `source {topic, partition, offset}` last — the same order as an NDJSON row (`{ ...row, source }`).
 *
 * Column types map as docs/transforms.md's "Output rows and column types" table states (a `timestamp` is INT64
 * TIMESTAMP(MILLIS, UTC) with the legacy TIMESTAMP_MILLIS too; a `json` value is its `JSON.stringify` text;
 * `source` is a required group: topic STRING, partition INT32, offset INT64).
 *
 * A nullable column is OPTIONAL, and null or absent is a Parquet null; every other column is REQUIRED. A json
 * column's null is therefore always SQL NULL, never the JSON text `null` (a required json column cannot be null:
 * the processor's row check refuses it).
 *
 * Strings are UTF-8, which cannot hold a lone surrogate: a string that is not well-formed UTF-16 is written with
 * U+FFFD in its place (refusing it would stall the partition on one transform's output, L1). In json text too,
 * strings and keys alike: `JSON.stringify` would escape it (`"\ud800"`), but strict readers refuse that escape
 * and DuckDB then fails the whole file, not just the row.
 *
 * Statistics (min/max per page and row group) are written for every column but json: readers prune row groups and
 * files with them, and byte order of JSON text prunes nothing while a large document would be copied into the
 * footer twice.
 *
 * Deterministic: the same columns and rows give the same bytes (the sink's checksums and idempotent promote rely
 * on it). The writer (hyparquet-writer, pure JavaScript) stamps no time, host or random value; `created_by` is a
 * constant; row groups are cut at a constant row count; JSON text follows the value's own key order. The bytes
 * also depend on the writer's code (its encodings and dictionary choices), so its version is pinned exactly: an
 * upgrade is a deliberate change (one that can re-encode an in-flight checkpoint differently), never a side effect
 * of a lockfile refresh.
 */
import { parquetWriteBuffer } from 'hyparquet-writer';
import { PipelineError } from '../errors.ts';
import type { ColumnDefinition, ColumnType } from '../transforms/api.ts';
import { compileRowCheck } from '../transforms/rows.ts';
import type { OutputRow } from '../transforms/types.ts';

type WriteOptions = Parameters<typeof parquetWriteBuffer>[0];
type SchemaElement = NonNullable<WriteOptions['schema']>[number];
type ColumnSource = WriteOptions['columnData'][number];

/**
 * Rows per row group. A constant, not a setting: the row-group cut is part of the file's bytes, so a setting
 * changed between a checkpoint's first encode and a retried one (a redeploy in between) would give the same
 * checkpoint two different files, and the idempotent promote would see a checksum mismatch. 100,000 rows is
 * where readers work well: DuckDB, Athena/Trino and Spark parallelise and skip by row group (DuckDB's own default
 * is 122,880 rows), so one checkpoint file of a busy partition still splits into several units of work, while a
 * typical file (one partition, one checkpoint) is a single group with one dictionary and one set of statistics
 * per column. The bound is in rows because the writer cuts by rows; the sink's size/row limit bounds the file.
 */
export const PARQUET_ROW_GROUP_ROWS = 100_000;

/** Written into every file's footer; a constant so that the bytes never depend on the deployed version. */
export const PARQUET_CREATED_BY = 'msk-exactly-once-pipeline';

/** The name of the lineage struct column; `source` is reserved in transform schemas for it (api.ts). */
export const LINEAGE_COLUMN = 'source';

/** A row that does not fit the declared columns: the processor's row check should have dead-lettered it first. */
export class ParquetEncodeError extends PipelineError {
  constructor(
    readonly rowIndex: number,
    readonly problem: string,
  ) {
    super(`cannot encode row ${rowIndex} as Parquet: ${problem}`);
  }
}

const ELEMENTS: Readonly<Record<ColumnType, Omit<SchemaElement, 'name' | 'repetition_type'>>> = {
  string: { type: 'BYTE_ARRAY', converted_type: 'UTF8', logical_type: { type: 'STRING' } },
  int: { type: 'INT32' },
  long: { type: 'INT64' },
  double: { type: 'DOUBLE' },
  boolean: { type: 'BOOLEAN' },
  timestamp: {
    type: 'INT64',
    converted_type: 'TIMESTAMP_MILLIS',
    logical_type: { type: 'TIMESTAMP', isAdjustedToUTC: true, unit: 'MILLIS' },
  },
  json: { type: 'BYTE_ARRAY', converted_type: 'JSON', logical_type: { type: 'JSON' } },
};

/** The Parquet schema (flattened, depth-first, as the format stores it) of `columns` plus the lineage struct. */
export function parquetSchema(columns: readonly ColumnDefinition[]): SchemaElement[] {
  return [
    { name: 'schema', num_children: columns.length + 1 },
    ...columns.map(
      (column): SchemaElement => ({
        name: column.name,
        repetition_type: column.nullable ? 'OPTIONAL' : 'REQUIRED',
        ...ELEMENTS[column.type],
      }),
    ),
    { name: LINEAGE_COLUMN, repetition_type: 'REQUIRED', num_children: 3 },
    { name: 'topic', repetition_type: 'REQUIRED', ...ELEMENTS.string },
    { name: 'partition', repetition_type: 'REQUIRED', ...ELEMENTS.int },
    { name: 'offset', repetition_type: 'REQUIRED', ...ELEMENTS.long },
  ];
}

/** A column's values as the writer takes them: INT64 as bigint (exact), json well-formed, null for absent. */
function columnValues(column: ColumnDefinition, rows: readonly OutputRow[]): unknown[] {
  const int64 = column.type === 'long' || column.type === 'timestamp';
  return rows.map((row) => {
    const value = row[column.name];
    if (value === null || value === undefined) return null;
    if (int64) return BigInt(value as number);
    return column.type === 'json' ? wellFormedJson(value) : value;
  });
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const LONE_SURROGATES = new RegExp(LONE_SURROGATE.source, 'g');

function wellFormedText(text: string): string {
  return LONE_SURROGATE.test(text) ? text.replace(LONE_SURROGATES, '\uFFFD') : text;
}

/** A JSON value with every lone surrogate (in strings and keys) replaced by U+FFFD; the same value when none. */
function wellFormedJson(value: unknown): unknown {
  if (typeof value === 'string') return wellFormedText(value);
  if (typeof value !== 'object' || value === null || value instanceof Date) return value;
  if (Array.isArray(value)) {
    const items = value.map(wellFormedJson);
    return items.every((item, index) => item === value[index]) ? value : items;
  }
  let changed = false;
  const entries = Object.entries(value).map(([key, item]) => {
    const [fixedKey, fixedItem] = [wellFormedText(key), wellFormedJson(item)];
    changed ||= fixedKey !== key || fixedItem !== item;
    return [fixedKey, fixedItem] as const;
  });
  return changed ? Object.fromEntries(entries) : value;
}

function lineageValues(rows: readonly OutputRow[]): unknown[] {
  return rows.map(({ source }, index) => {
    if (
      typeof source?.topic !== 'string' ||
      !Number.isInteger(source.partition) ||
      !Number.isSafeInteger(source.offset)
    ) {
      throw new ParquetEncodeError(index, 'its source is not {topic: string, partition: int, offset: long}');
    }
    return { topic: source.topic, partition: source.partition, offset: BigInt(source.offset) };
  });
}

/**
 * Encodes `rows` as one Parquet file (snappy-compressed pages, statistics as above, row groups of
 * {@link PARQUET_ROW_GROUP_ROWS}). Zero rows give a valid file with the schema and no row group.
 * Throws {@link ParquetEncodeError} for a row that does not match `columns` (checked with the processor's own
 * row check, so the two never disagree about what a valid row is).
 */
export function encodeParquet(columns: readonly ColumnDefinition[], rows: readonly OutputRow[]): Uint8Array {
  const check = compileRowCheck(columns);
  rows.forEach(({ source: _source, ...fields }, index) => {
    const problem = check(fields);
    if (problem !== undefined) throw new ParquetEncodeError(index, problem);
  });
  const columnData: ColumnSource[] = [
    ...columns.map((column) => ({
      name: column.name,
      data: columnValues(column, rows),
      statistics: column.type !== 'json',
    })),
    { name: LINEAGE_COLUMN, data: lineageValues(rows) },
  ];
  const buffer = parquetWriteBuffer({
    columnData,
    schema: parquetSchema(columns),
    codec: 'SNAPPY',
    statistics: true,
    rowGroupSize: PARQUET_ROW_GROUP_ROWS,
    createdBy: PARQUET_CREATED_BY,
  });
  return new Uint8Array(buffer);
}
