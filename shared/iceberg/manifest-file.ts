/**
 * Iceberg v2 data manifests (spec, "Manifests"): an Avro object container file of `manifest_entry` records, each
 * an ADDED data file (EXISTING ones in a merged manifest: `manifest-merge.ts`), with the `field-id` attributes the
 * spec requires on the Avro schema and the table schema and partition spec in the file's metadata.
 *
 * No npm library writes Iceberg manifests (icebird only creates an empty table; its Avro writer draws a random sync
 * marker and takes no file metadata), so they are written here with avro-js (`avro-container.ts`).
 *
 * An entry's data and file sequence numbers are left null, to be inherited from the manifest list entry (spec,
 * "Sequence Number Inheritance"): the manifest's bytes do not depend on the snapshot it is committed under, so a
 * commit rebased onto a new parent reuses it.
 */
import { encodeContainer } from './avro-container.ts';
import {
  type PartitionSpec,
  type PartitionTuple,
  type PartitionValue,
  partitionResultType,
} from './partition-spec.ts';
import type { IcebergPrimitive, IcebergSchema } from './schema.ts';

/** A data file the manifest adds: a Parquet object of the table. */
export interface DataFile {
  /** Its full location (`s3://<bucket>/<key>`), as readers open it. */
  readonly path: string;
  readonly recordCount: number;
  readonly fileSizeInBytes: number;
  /** Its partition values, in the spec's field order (`dataFilePartition`). */
  readonly partition: PartitionTuple;
}

/** Manifest entry status ADDED (0 EXISTING, 2 DELETED). */
export const ENTRY_ADDED = 1;
/** Data file content DATA (1 position deletes, 2 equality deletes). */
export const CONTENT_DATA = 0;
export const CONTENT_POSITION_DELETES = 1;

/** The Avro type of a partition field's values (the spec's "Avro" type mapping). */
export function avroPartitionType(type: IcebergPrimitive): unknown {
  if (type === 'timestamptz') return { type: 'long', logicalType: 'timestamp-micros', 'adjust-to-utc': true };
  return type;
}

/** An optional map of column id to value, stored as Iceberg stores maps with int keys (an array of records). */
function metricMap(name: string, fieldId: number, keyId: number, valueType: string): object {
  const valueId = keyId + 1;
  return {
    name,
    type: [
      'null',
      {
        type: 'array',
        logicalType: 'map',
        items: {
          type: 'record',
          name: `k${keyId}_v${valueId}`,
          fields: [
            { name: 'key', type: 'int', 'field-id': keyId },
            { name: 'value', type: valueType, 'field-id': valueId },
          ],
        },
      },
    ],
    default: null,
    'field-id': fieldId,
  };
}

/** The `manifest_entry` Avro schema for a table partitioned by `spec`. */
export function manifestEntrySchema(schema: IcebergSchema, spec: PartitionSpec): object {
  const partition = {
    type: 'record',
    name: 'r102',
    fields: spec.fields.map((field) => ({
      name: field.name,
      type: ['null', avroPartitionType(partitionResultType(schema, field))],
      default: null,
      'field-id': field['field-id'],
    })),
  };
  const optional = (name: string, type: unknown, fieldId: number) => ({
    name,
    type: ['null', type],
    default: null,
    'field-id': fieldId,
  });
  const dataFile = {
    type: 'record',
    name: 'r2',
    fields: [
      {
        name: 'content',
        type: 'int',
        'field-id': 134,
        doc: 'Contents of the file: 0=data, 1=position deletes, 2=equality deletes',
      },
      { name: 'file_path', type: 'string', 'field-id': 100, doc: 'Location URI with FS scheme' },
      {
        name: 'file_format',
        type: 'string',
        'field-id': 101,
        doc: 'File format name: avro, orc, or parquet',
      },
      {
        name: 'partition',
        type: partition,
        'field-id': 102,
        doc: 'Partition data tuple, schema based on the partition spec',
      },
      { name: 'record_count', type: 'long', 'field-id': 103, doc: 'Number of records in the file' },
      { name: 'file_size_in_bytes', type: 'long', 'field-id': 104, doc: 'Total file size in bytes' },
      metricMap('column_sizes', 108, 117, 'long'),
      metricMap('value_counts', 109, 119, 'long'),
      metricMap('null_value_counts', 110, 121, 'long'),
      metricMap('nan_value_counts', 137, 138, 'long'),
      metricMap('lower_bounds', 125, 126, 'bytes'),
      metricMap('upper_bounds', 128, 129, 'bytes'),
      optional('key_metadata', 'bytes', 131),
      optional('split_offsets', { type: 'array', items: 'long', 'element-id': 133 }, 132),
      optional('equality_ids', { type: 'array', items: 'int', 'element-id': 136 }, 135),
      optional('sort_order_id', 'int', 140),
    ],
  };
  return {
    type: 'record',
    name: 'manifest_entry',
    fields: [
      { name: 'status', type: 'int', 'field-id': 0 },
      optional('snapshot_id', 'long', 1),
      optional('sequence_number', 'long', 3),
      optional('file_sequence_number', 'long', 4),
      { name: 'data_file', type: dataFile, 'field-id': 2 },
    ],
  };
}

export interface ManifestInput {
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  /** The snapshot that adds the files. */
  readonly snapshotId: bigint;
  readonly files: readonly DataFile[];
}

function partitionRecord(spec: PartitionSpec, tuple: PartitionTuple): Record<string, PartitionValue> {
  if (tuple.length !== spec.fields.length) {
    throw new RangeError(
      `a partition tuple of ${tuple.length} values for a spec of ${spec.fields.length} fields`,
    );
  }
  return Object.fromEntries(spec.fields.map((field, index) => [field.name, tuple[index] ?? null]));
}

/**
 * A `manifest_entry` record as written (longs as bigint; a union's value as it is, null for none): `data_file`'s
 * fields by their names in {@link manifestEntrySchema}, its `partition` a record of the spec's field names.
 */
export interface ManifestEntryRecord {
  readonly status: number;
  readonly snapshot_id: bigint | null;
  readonly sequence_number: bigint | null;
  readonly file_sequence_number: bigint | null;
  readonly data_file: Readonly<Record<string, unknown>>;
}

/**
 * The manifest of `entries` for a table of `schema` partitioned by `spec`, a data manifest or (`deletes`) a delete
 * manifest: same input, same bytes.
 */
export function encodeManifestEntries(
  schema: IcebergSchema,
  spec: PartitionSpec,
  entries: readonly ManifestEntryRecord[],
  content: 'data' | 'deletes' = 'data',
): Buffer {
  return encodeContainer(
    manifestEntrySchema(schema, spec),
    [
      ['schema', JSON.stringify(schema)],
      ['schema-id', String(schema['schema-id'])],
      ['partition-spec', JSON.stringify(spec.fields)],
      ['partition-spec-id', String(spec['spec-id'])],
      ['format-version', '2'],
      ['content', content],
    ],
    entries,
  );
}

/**
 * The manifest of `files`, all ADDED by `snapshotId`: the same input gives the same bytes. With `deletes`, a delete
 * manifest of position delete files (`position-deletes.ts`).
 */
export function encodeManifest(input: ManifestInput, deletes = false): Buffer {
  const entries: ManifestEntryRecord[] = input.files.map((file) => ({
    status: ENTRY_ADDED,
    snapshot_id: input.snapshotId,
    sequence_number: null,
    file_sequence_number: null,
    data_file: {
      content: deletes ? CONTENT_POSITION_DELETES : CONTENT_DATA,
      file_path: file.path,
      file_format: 'PARQUET',
      partition: partitionRecord(input.spec, file.partition),
      record_count: BigInt(file.recordCount),
      file_size_in_bytes: BigInt(file.fileSizeInBytes),
    },
  }));
  return encodeManifestEntries(input.schema, input.spec, entries, deletes ? 'deletes' : 'data');
}
