/**
 * The table's partition spec, from the time partitioning setting and optional identity fields, and the partition
 * tuple of a data file.
 *
 * Time partitioning has two forms, chosen by where the record time is (`shared/sink/record-time.ts`):
 * - the `timeField` column, when it is a `timestamp` column: Iceberg's own `day` / `hour` transform of that column
 *   (hidden partitioning: a reader filtering on the column prunes files). A data file's tuple is then a function of
 *   its rows, and a file whose rows span two days (or hours) cannot be one data file: the tuple is refused, as is a
 *   file whose folder is not its rows' (the sink files a row whose time lies far from its staging under the
 *   staging time's folder, and Iceberg readers would prune it away from a query for its own time);
 * - otherwise (the Kafka timestamp, which no column of the table holds, or a `long` column, which Iceberg's time
 *   transforms do not take): the time folders themselves, as the Glue table has them: `dt` (and `hour`) are string
 *   columns held only in the partition metadata, with `identity` transforms, their values read from the file's
 *   folder. Iceberg readers return an identity partition's value for a field the data file does not hold (spec,
 *   "Column Projection"), which is how tables migrated from Hive folders are read.
 *
 * Partition field ids start at 1000 and stay with their (source, transform) across specs; new ones are numbered
 * above the table's `last-partition-id`.
 */
import type { TimePartitioning } from '../config/settings.ts';
import { PipelineError } from '../errors.ts';
import { parseTimeFolder, type TimeGranularity, timePartitionKeys } from '../sink/time-partitions.ts';
import type { ColumnDefinition } from '../transforms/api.ts';
import type { IcebergField, IcebergPrimitive, IcebergSchema } from './schema.ts';

export type PartitionTransform = 'identity' | 'day' | 'hour';

export interface PartitionField {
  readonly 'source-id': number;
  readonly 'field-id': number;
  readonly name: string;
  readonly transform: PartitionTransform;
}

export interface PartitionSpec {
  readonly 'spec-id': number;
  readonly fields: readonly PartitionField[];
}

/** How the table is partitioned: the sink's setting, its time column, and any identity fields. */
export interface PartitionSettings {
  readonly timePartitioning: TimePartitioning;
  /** The output column holding the record time (`EOS_TIME_FIELD`); the Kafka timestamp without it. */
  readonly timeField?: string;
  /** Top-level columns whose values partition the table as they are. */
  readonly identityFields?: readonly string[];
}

/** A partition value as the manifests hold it: `int` as number, `long` and `timestamptz` as bigint. */
export type PartitionValue = string | number | bigint | boolean | null;

/** A data file's partition values, in the spec's field order. */
export type PartitionTuple = readonly PartitionValue[];

/** A partitioning the table cannot have, or a data file that is not one partition. */
export class IcebergPartitionError extends PipelineError {}

/** The first partition field id (the spec's convention: ids below it are column ids in v1 tables). */
export const FIRST_PARTITION_FIELD_ID = 1000;

function timeColumn(columns: readonly ColumnDefinition[], settings: PartitionSettings): string | undefined {
  if (settings.timePartitioning === 'none' || settings.timeField === undefined) return undefined;
  const column = columns.find((candidate) => candidate.name === settings.timeField);
  return column?.type === 'timestamp' ? column.name : undefined;
}

/**
 * The columns held only in the partition metadata: the time folders' keys (`dt`, `hour`) when the record time is
 * no `timestamp` column, else none. Give them to `icebergSchema` as `partitionColumns`.
 */
export function partitionOnlyColumns(
  columns: readonly ColumnDefinition[],
  settings: PartitionSettings,
): string[] {
  if (settings.timePartitioning === 'none' || timeColumn(columns, settings) !== undefined) return [];
  return timePartitionKeys(settings.timePartitioning).map((key) => key.name);
}

interface WantedField {
  readonly source: IcebergField;
  readonly name: string;
  readonly transform: PartitionTransform;
}

function topLevel(schema: IcebergSchema, name: string, why: string): IcebergField {
  const field = schema.fields.find((candidate) => candidate.name === name);
  if (!field || typeof field.type !== 'string') {
    throw new IcebergPartitionError(`${why} ${name} is not a top-level column of the table's schema`);
  }
  return field;
}

function wantedFields(
  schema: IcebergSchema,
  columns: readonly ColumnDefinition[],
  settings: PartitionSettings,
): WantedField[] {
  const wanted: WantedField[] = [];
  if (settings.timePartitioning !== 'none') {
    const granularity: TimeGranularity = settings.timePartitioning;
    const column = timeColumn(columns, settings);
    if (column !== undefined) {
      const source = topLevel(schema, column, 'time field');
      wanted.push({ source, name: `${column}_${granularity}`, transform: granularity });
    } else {
      for (const key of partitionOnlyColumns(columns, settings)) {
        wanted.push({ source: topLevel(schema, key, 'time folder key'), name: key, transform: 'identity' });
      }
    }
  }
  for (const name of settings.identityFields ?? []) {
    wanted.push({ source: topLevel(schema, name, 'identity field'), name, transform: 'identity' });
  }
  const names = new Set<string>();
  for (const field of wanted) {
    if (names.has(field.name))
      throw new IcebergPartitionError(`partition field ${field.name} is named twice`);
    names.add(field.name);
  }
  return wanted;
}

export interface SpecOptions {
  /** The table's current spec: a field with the same source and transform keeps its field id. */
  readonly previous?: PartitionSpec;
  /** The table's `last-partition-id` (default 999: no partition field yet). */
  readonly lastPartitionId?: number;
  /** Default: the previous spec's id + 1, or 0. */
  readonly specId?: number;
}

export interface DerivedSpec {
  readonly spec: PartitionSpec;
  readonly lastPartitionId: number;
}

/** The partition spec of a table of `schema` (built from `columns`) partitioned as `settings` says. */
export function partitionSpec(
  schema: IcebergSchema,
  columns: readonly ColumnDefinition[],
  settings: PartitionSettings,
  options: SpecOptions = {},
): DerivedSpec {
  const kept = new Map(
    (options.previous?.fields ?? []).map((field) => [`${field['source-id']}:${field.transform}`, field]),
  );
  let last = Math.max(
    options.lastPartitionId ?? FIRST_PARTITION_FIELD_ID - 1,
    ...(options.previous?.fields ?? []).map((field) => field['field-id']),
  );
  const fields = wantedFields(schema, columns, settings).map((field): PartitionField => {
    const before = kept.get(`${field.source.id}:${field.transform}`);
    return {
      'source-id': field.source.id,
      'field-id': before?.['field-id'] ?? ++last,
      name: field.name,
      transform: field.transform,
    };
  });
  const specId = options.specId ?? (options.previous ? options.previous['spec-id'] + 1 : 0);
  return { spec: { 'spec-id': specId, fields }, lastPartitionId: last };
}

/** Whether two specs partition alike (same fields in the same order), whatever their spec ids. */
export function sameSpecFields(a: PartitionSpec, b: PartitionSpec): boolean {
  return (
    a.fields.length === b.fields.length &&
    a.fields.every((field, index) => {
      const other = b.fields[index];
      return (
        other !== undefined &&
        field['source-id'] === other['source-id'] &&
        field['field-id'] === other['field-id'] &&
        field.name === other.name &&
        field.transform === other.transform
      );
    })
  );
}

function sourceOf(schema: IcebergSchema, field: PartitionField): IcebergField & { type: IcebergPrimitive } {
  const source = schema.fields.find((candidate) => candidate.id === field['source-id']);
  if (!source || typeof source.type !== 'string') {
    throw new IcebergPartitionError(`partition field ${field.name} has no primitive source column`);
  }
  return source as IcebergField & { type: IcebergPrimitive };
}

/** The type of a partition field's values: `int` for the time transforms, the source column's for identity. */
export function partitionResultType(schema: IcebergSchema, field: PartitionField): IcebergPrimitive {
  return field.transform === 'identity' ? sourceOf(schema, field).type : 'int';
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

type Row = Readonly<Record<string, unknown>>;

/** The value of an identity partition of a row's column, as the manifests hold it (timestamps in microseconds). */
function identityValue(type: IcebergPrimitive, value: unknown, column: string): PartitionValue {
  if (value === null || value === undefined) return null;
  if (type === 'long' || type === 'timestamptz') {
    if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
      throw new IcebergPartitionError(`column ${column} holds ${String(value)}, not an integer`);
    }
    return type === 'long' ? BigInt(value) : BigInt(value) * 1000n;
  }
  if (typeof value === 'object') throw new IcebergPartitionError(`column ${column} holds an object`);
  return value as PartitionValue;
}

function timeValue(transform: 'day' | 'hour', value: unknown, column: string): PartitionValue {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw new IcebergPartitionError(
      `column ${column} holds ${String(value)}, not milliseconds since the epoch`,
    );
  }
  return Math.floor(value / (transform === 'day' ? DAY_MS : HOUR_MS));
}

/** A folder's values for the partition-only columns: `dt` = `yyyy-MM-dd`, `hour` = `HH`. */
function folderValues(folder: string | undefined): Map<string, string> {
  const parsed = folder === undefined ? undefined : parseTimeFolder(folder);
  if (folder === undefined || parsed === undefined) {
    throw new IcebergPartitionError(
      `a data file of a time-foldered table needs its time folder (got ${folder})`,
    );
  }
  return new Map(folder.split('/').map((part) => part.split('=') as [string, string]));
}

/** What a data file's partition is computed from: its rows, and its time folder when it has one. */
export interface DataFileValues {
  readonly rows: readonly Row[];
  readonly folder?: string;
}

/**
 * The partition tuple of a data file (see the module comment): values of the partition-only columns from its
 * folder, the others from its rows, all of which must give the same tuple. `partitionColumns` are the table's
 * partition-only columns (`partitionOnlyColumns`).
 */
export function dataFilePartition(
  schema: IcebergSchema,
  spec: PartitionSpec,
  partitionColumns: readonly string[],
  file: DataFileValues,
): PartitionTuple {
  if (spec.fields.length === 0) return [];
  const folder = spec.fields.some((field) => partitionColumns.includes(sourceOf(schema, field).name))
    ? folderValues(file.folder)
    : undefined;
  const ofRow = (row: Row): PartitionValue[] =>
    spec.fields.map((field) => {
      const source = sourceOf(schema, field);
      if (folder && partitionColumns.includes(source.name)) return folder.get(source.name) ?? null;
      if (field.transform === 'identity') return identityValue(source.type, row[source.name], source.name);
      return timeValue(field.transform, row[source.name], source.name);
    });
  const [first, ...rest] = file.rows;
  if (first === undefined) throw new IcebergPartitionError('a data file without rows has no partition');
  const tuple = ofRow(first);
  const key = JSON.stringify(tuple, bigintText);
  for (const row of rest) {
    const other = ofRow(row);
    if (JSON.stringify(other, bigintText) !== key) {
      throw new IcebergPartitionError(
        `the rows of one data file are in two partitions (${key} and ${JSON.stringify(other, bigintText)})`,
      );
    }
  }
  checkFolderAgrees(spec, tuple, file.folder);
  return tuple;
}

function bigintText(_key: string, value: unknown): unknown {
  return typeof value === 'bigint' ? `${value}n` : value;
}

/** A time-transform tuple must name the file's folder: else its rows were filed by another time than theirs. */
function checkFolderAgrees(spec: PartitionSpec, tuple: PartitionTuple, folder: string | undefined): void {
  if (folder === undefined) return;
  const parsed = parseTimeFolder(folder);
  spec.fields.forEach((field, index) => {
    if (field.transform === 'identity' || parsed === undefined) return;
    const unit = field.transform === 'day' ? DAY_MS : HOUR_MS;
    const value = tuple[index];
    const overlaps =
      typeof value === 'number' && value * unit <= parsed.endMs && (value + 1) * unit > parsed.startMs;
    if (!overlaps) {
      throw new IcebergPartitionError(
        `the rows of the data file in ${folder} have ${field.name} ${String(value)}, outside the folder`,
      );
    }
  });
}
