/**
 * The Iceberg v2 schema (the JSON form of the spec's "Schemas and Data Types") of an output table, derived from
 * the same source as the Glue table and the Parquet files: the transform's declared columns in declaration order,
 * then the lineage struct `source {topic, partition, offset}` as `shared/sink/parquet.ts` writes it, then any
 * columns that live only in the partition metadata (`partition-spec.ts`: the time folders' `dt` and `hour`).
 *
 * Types follow the Parquet encoder: a `timestamp` column is INT64 TIMESTAMP(MILLIS, UTC), read by Iceberg as
 * `timestamptz` (Iceberg readers accept millisecond Parquet timestamps); a `json` column is its text, `string`.
 * Names keep the case the Parquet files have (readers match a file's columns by name through the table's name
 * mapping, `nameMapping`), and two names equal without case are refused, as the Glue table refuses them: Athena
 * folds names to lower case.
 *
 * Field ids are stable across versions: given the previous schema, a field keeps its id by name (its path, for the
 * lineage struct's fields), and a new one gets an id above the table's `last-column-id`, never a reused one.
 */
import { PipelineError } from '../errors.ts';
import { LINEAGE_COLUMN } from '../sink/parquet.ts';
import type { ColumnDefinition, ColumnType } from '../transforms/api.ts';

export type IcebergPrimitive = 'boolean' | 'int' | 'long' | 'double' | 'string' | 'timestamptz';

export interface IcebergStruct {
  readonly type: 'struct';
  readonly fields: readonly IcebergField[];
}

export type IcebergType = IcebergPrimitive | IcebergStruct;

export interface IcebergField {
  readonly id: number;
  readonly name: string;
  readonly required: boolean;
  readonly type: IcebergType;
  readonly doc?: string;
}

export interface IcebergSchema extends IcebergStruct {
  readonly 'schema-id': number;
}

/** A column set an Iceberg table cannot hold as declared, or a change of a column its readers cannot follow. */
export class IcebergSchemaError extends PipelineError {}

/** The Iceberg type of each column type, as the Parquet encoder writes it. */
export const ICEBERG_TYPES: Readonly<Record<ColumnType, IcebergPrimitive>> = {
  string: 'string',
  int: 'int',
  long: 'long',
  double: 'double',
  boolean: 'boolean',
  timestamp: 'timestamptz',
  json: 'string',
};

/** A field before it has an id: what the table's columns say. */
interface FieldShape {
  readonly name: string;
  readonly required: boolean;
  readonly type: IcebergPrimitive | { readonly fields: readonly FieldShape[] };
  readonly doc?: string;
}

const LINEAGE: FieldShape = {
  name: LINEAGE_COLUMN,
  required: true,
  doc: 'Kafka lineage: topic, partition, offset',
  type: {
    fields: [
      { name: 'topic', required: true, type: 'string' },
      { name: 'partition', required: true, type: 'int' },
      { name: 'offset', required: true, type: 'long' },
    ],
  },
};

/** Widenings Iceberg allows a column's type (spec, "Schema Evolution"). */
const PROMOTIONS: ReadonlySet<string> = new Set(['int>long']);

export interface SchemaOptions {
  /** The table's current schema: its fields keep their ids by name. */
  readonly previous?: IcebergSchema;
  /** The table's `last-column-id`: new fields are numbered above it (default: the previous schema's highest id). */
  readonly lastColumnId?: number;
  /** Default: the previous schema's id + 1, or 0. */
  readonly schemaId?: number;
  /** Optional string columns held only in the partition metadata (`partitionOnlyColumns`), after `source`. */
  readonly partitionColumns?: readonly string[];
}

export interface DerivedSchema {
  readonly schema: IcebergSchema;
  /** The table's `last-column-id` after this schema. */
  readonly lastColumnId: number;
}

function shapes(columns: readonly ColumnDefinition[], partitionColumns: readonly string[]): FieldShape[] {
  const all: FieldShape[] = [
    ...columns.map((column) => ({
      name: column.name,
      required: !column.nullable,
      type: ICEBERG_TYPES[column.type],
    })),
    // `source` is reserved in transform schemas (api.ts): the lineage column is always after the declared ones.
    LINEAGE,
    ...partitionColumns.map((name) => ({ name, required: false, type: 'string' as const })),
  ];
  const seen = new Map<string, string>();
  for (const field of all) {
    const folded = field.name.toLowerCase();
    const other = seen.get(folded);
    if (other !== undefined) {
      throw new IcebergSchemaError(`columns ${other} and ${field.name} are one column in Athena (${folded})`);
    }
    seen.set(folded, field.name);
  }
  return all;
}

/** Every field of `fields` by its path (`source.topic`), nested ones included. */
export function fieldsByPath(fields: readonly IcebergField[], prefix = ''): Map<string, IcebergField> {
  const found = new Map<string, IcebergField>();
  for (const field of fields) {
    const path = `${prefix}${field.name}`;
    found.set(path, field);
    if (typeof field.type !== 'string') {
      for (const [inner, nested] of fieldsByPath(field.type.fields, `${path}.`)) found.set(inner, nested);
    }
  }
  return found;
}

/** The highest field id of `fields`, nested ones included; 0 for none. */
export function highestFieldId(fields: readonly IcebergField[]): number {
  let highest = 0;
  for (const field of fieldsByPath(fields).values()) highest = Math.max(highest, field.id);
  return highest;
}

function checkChange(path: string, before: IcebergField, shape: FieldShape): void {
  const was = typeof before.type === 'string' ? before.type : 'struct';
  const now = typeof shape.type === 'string' ? shape.type : 'struct';
  if (was !== now && !PROMOTIONS.has(`${was}>${now}`)) {
    throw new IcebergSchemaError(
      `column ${path} changes type from ${was} to ${now}, which Iceberg cannot follow`,
    );
  }
  if (!before.required && shape.required) {
    throw new IcebergSchemaError(`column ${path} becomes required: older files may hold nulls in it`);
  }
}

/**
 * The Iceberg schema of the output's columns (see the module comment), with the previous schema's ids kept by
 * name and new ids above `last-column-id`.
 */
export function icebergSchema(
  columns: readonly ColumnDefinition[],
  options: SchemaOptions = {},
): DerivedSchema {
  const previous = options.previous ? fieldsByPath(options.previous.fields) : new Map<string, IcebergField>();
  let nextId =
    Math.max(options.lastColumnId ?? 0, options.previous ? highestFieldId(options.previous.fields) : 0) + 1;
  const assign = (shape: FieldShape, prefix: string): IcebergField => {
    const path = `${prefix}${shape.name}`;
    const before = previous.get(path);
    if (before) checkChange(path, before, shape);
    const id = before?.id ?? nextId++;
    const type: IcebergType =
      typeof shape.type === 'string'
        ? shape.type
        : { type: 'struct', fields: shape.type.fields.map((inner) => assign(inner, `${path}.`)) };
    return { id, name: shape.name, required: shape.required, type, ...(shape.doc ? { doc: shape.doc } : {}) };
  };
  const fields = shapes(columns, options.partitionColumns ?? []).map((shape) => assign(shape, ''));
  const schemaId = options.schemaId ?? (options.previous ? options.previous['schema-id'] + 1 : 0);
  return { schema: { type: 'struct', 'schema-id': schemaId, fields }, lastColumnId: nextId - 1 };
}

/** Whether two schemas have the same fields (ids, names, types, requiredness), whatever their schema ids. */
export function sameFields(a: IcebergStruct, b: IcebergStruct): boolean {
  return (
    a.fields.length === b.fields.length &&
    a.fields.every((field, index) => {
      const other = b.fields[index];
      if (!other || field.id !== other.id || field.name !== other.name || field.required !== other.required) {
        return false;
      }
      if (typeof field.type === 'string' || typeof other.type === 'string') return field.type === other.type;
      return sameFields(field.type, other.type);
    })
  );
}

interface MappedField {
  readonly 'field-id': number;
  readonly names: readonly string[];
  readonly fields?: readonly MappedField[];
}

/**
 * The table's default name mapping (the `schema.name-mapping.default` property): how readers find a field in a
 * data file written without Parquet field ids, as the sink's files are.
 */
export function nameMapping(schema: IcebergStruct): string {
  const map = (fields: readonly IcebergField[]): MappedField[] =>
    fields.map((field) => ({
      'field-id': field.id,
      names: [field.name],
      ...(typeof field.type === 'string' ? {} : { fields: map(field.type.fields) }),
    }));
  return JSON.stringify(map(schema.fields));
}
