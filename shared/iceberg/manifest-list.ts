/**
 * Iceberg v2 manifest lists (spec, "Manifest Lists"): an Avro object container file of `manifest_file` records,
 * one per manifest of a snapshot, with the spec's `field-id` attributes and the snapshot's id, parent and sequence
 * number in the file's metadata. Written with avro-js (no npm library writes them: see `manifest-file.ts`).
 *
 * A snapshot's list names every manifest of the table's state: the new manifest first, then the parent's, read
 * back from the parent's list as they are (`decodeManifestList`).
 */
import { AvroContainerError, decodeContainer, encodeContainer } from './avro-container.ts';
import type { DataFile } from './manifest-file.ts';
import { type PartitionSpec, type PartitionValue, partitionResultType } from './partition-spec.ts';
import type { IcebergPrimitive, IcebergSchema } from './schema.ts';

/** A partition field's summary over a manifest's files. */
export interface FieldSummary {
  readonly contains_null: boolean;
  readonly contains_nan: boolean | null;
  readonly lower_bound: Buffer | null;
  readonly upper_bound: Buffer | null;
}

/** A manifest as its list names it (the spec's `manifest_file` fields, by their Avro names). */
export interface ManifestListEntry {
  readonly manifest_path: string;
  readonly manifest_length: bigint;
  readonly partition_spec_id: number;
  /** 0 data, 1 deletes. */
  readonly content: number;
  readonly sequence_number: bigint;
  readonly min_sequence_number: bigint;
  readonly added_snapshot_id: bigint;
  readonly added_files_count: number;
  readonly existing_files_count: number;
  readonly deleted_files_count: number;
  readonly added_rows_count: bigint;
  readonly existing_rows_count: bigint;
  readonly deleted_rows_count: bigint;
  readonly partitions: readonly FieldSummary[] | null;
  readonly key_metadata: Buffer | null;
}

const optional = (name: string, type: unknown, fieldId: number) => ({
  name,
  type: ['null', type],
  default: null,
  'field-id': fieldId,
});

/** The `manifest_file` Avro schema of the spec (v2). */
export const MANIFEST_FILE_SCHEMA = {
  type: 'record',
  name: 'manifest_file',
  fields: [
    { name: 'manifest_path', type: 'string', 'field-id': 500, doc: 'Location URI with FS scheme' },
    { name: 'manifest_length', type: 'long', 'field-id': 501, doc: 'Total file size in bytes' },
    { name: 'partition_spec_id', type: 'int', 'field-id': 502, doc: 'Spec ID used to write' },
    { name: 'content', type: 'int', 'field-id': 517, doc: 'Contents of the manifest: 0=data, 1=deletes' },
    {
      name: 'sequence_number',
      type: 'long',
      'field-id': 515,
      doc: 'Sequence number when the manifest was added',
    },
    {
      name: 'min_sequence_number',
      type: 'long',
      'field-id': 516,
      doc: 'Lowest sequence number in the manifest',
    },
    { name: 'added_snapshot_id', type: 'long', 'field-id': 503, doc: 'Snapshot ID that added the manifest' },
    { name: 'added_files_count', type: 'int', 'field-id': 504, doc: 'Added entry count' },
    { name: 'existing_files_count', type: 'int', 'field-id': 505, doc: 'Existing entry count' },
    { name: 'deleted_files_count', type: 'int', 'field-id': 506, doc: 'Deleted entry count' },
    { name: 'added_rows_count', type: 'long', 'field-id': 512, doc: 'Added rows count' },
    { name: 'existing_rows_count', type: 'long', 'field-id': 513, doc: 'Existing rows count' },
    { name: 'deleted_rows_count', type: 'long', 'field-id': 514, doc: 'Deleted rows count' },
    optional(
      'partitions',
      {
        type: 'array',
        items: {
          type: 'record',
          name: 'r508',
          fields: [
            { name: 'contains_null', type: 'boolean', 'field-id': 509 },
            optional('contains_nan', 'boolean', 518),
            optional('lower_bound', 'bytes', 510),
            optional('upper_bound', 'bytes', 511),
          ],
        },
        'element-id': 508,
      },
      507,
    ),
    optional('key_metadata', 'bytes', 519),
  ],
} as const;

/** A partition value in the spec's single-value binary form (little-endian numbers, UTF-8 text). */
export function singleValueBytes(type: IcebergPrimitive, value: Exclude<PartitionValue, null>): Buffer {
  switch (type) {
    case 'int': {
      const buf = Buffer.alloc(4);
      buf.writeInt32LE(Number(value));
      return buf;
    }
    case 'long':
    case 'timestamptz': {
      const buf = Buffer.alloc(8);
      buf.writeBigInt64LE(BigInt(value));
      return buf;
    }
    case 'double': {
      const buf = Buffer.alloc(8);
      buf.writeDoubleLE(Number(value));
      return buf;
    }
    case 'boolean':
      return Buffer.from([value ? 1 : 0]);
    case 'string':
      return Buffer.from(String(value), 'utf8');
  }
}

/** Iceberg's order of values of one type: numbers by value, strings by their UTF-8 bytes, false before true. */
function compareValues(a: Exclude<PartitionValue, null>, b: Exclude<PartitionValue, null>): number {
  if (typeof a === 'string' && typeof b === 'string') return Buffer.compare(Buffer.from(a), Buffer.from(b));
  if (typeof a === 'bigint' || typeof b === 'bigint') {
    const [x, y] = [BigInt(a as bigint), BigInt(b as bigint)];
    return x < y ? -1 : x > y ? 1 : 0;
  }
  return Number(a) - Number(b);
}

/** The summaries of each partition field over `files` (bounds of the non-null, non-NaN values). */
export function partitionSummaries(
  schema: IcebergSchema,
  spec: PartitionSpec,
  files: readonly DataFile[],
): FieldSummary[] {
  return spec.fields.map((field, index) => {
    const type = partitionResultType(schema, field);
    const values = files.map((file) => file.partition[index] ?? null);
    const isNan = (value: PartitionValue) => typeof value === 'number' && Number.isNaN(value);
    const present = values.filter(
      (value): value is Exclude<PartitionValue, null> => value !== null && !isNan(value),
    );
    const sorted = [...present].sort(compareValues);
    const [lower, upper] = [sorted[0], sorted[sorted.length - 1]];
    return {
      contains_null: values.includes(null),
      contains_nan: type === 'double' ? values.some(isNan) : null,
      lower_bound: lower === undefined ? null : singleValueBytes(type, lower),
      upper_bound: upper === undefined ? null : singleValueBytes(type, upper),
    };
  });
}

export interface NewManifest {
  readonly path: string;
  readonly length: number;
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  /** The files the manifest adds (`encodeManifest`). */
  readonly files: readonly DataFile[];
  readonly snapshotId: bigint;
  readonly sequenceNumber: bigint;
}

/** The list entry of a manifest of ADDED data files, committed by `snapshotId` at `sequenceNumber`. */
export function addedManifestEntry(manifest: NewManifest): ManifestListEntry {
  return {
    manifest_path: manifest.path,
    manifest_length: BigInt(manifest.length),
    partition_spec_id: manifest.spec['spec-id'],
    content: 0,
    sequence_number: manifest.sequenceNumber,
    min_sequence_number: manifest.sequenceNumber,
    added_snapshot_id: manifest.snapshotId,
    added_files_count: manifest.files.length,
    existing_files_count: 0,
    deleted_files_count: 0,
    added_rows_count: manifest.files.reduce((sum, file) => sum + BigInt(file.recordCount), 0n),
    existing_rows_count: 0n,
    deleted_rows_count: 0n,
    partitions: partitionSummaries(manifest.schema, manifest.spec, manifest.files),
    key_metadata: null,
  };
}

export interface ManifestListInput {
  readonly snapshotId: bigint;
  readonly parentSnapshotId: bigint | undefined;
  readonly sequenceNumber: bigint;
  readonly manifests: readonly ManifestListEntry[];
}

/** The manifest list of a snapshot: the same input gives the same bytes. */
export function encodeManifestList(input: ManifestListInput): Buffer {
  return encodeContainer(
    MANIFEST_FILE_SCHEMA,
    [
      ['snapshot-id', String(input.snapshotId)],
      ['parent-snapshot-id', input.parentSnapshotId === undefined ? 'null' : String(input.parentSnapshotId)],
      ['sequence-number', String(input.sequenceNumber)],
      ['format-version', '2'],
    ],
    input.manifests,
  );
}

/** The manifests a v2 manifest list names, as they are (a field its writer left out takes its default). */
export function decodeManifestList(bytes: Buffer): ManifestListEntry[] {
  const { metadata, records } = decodeContainer(bytes, MANIFEST_FILE_SCHEMA);
  if (metadata.get('format-version') !== '2') {
    throw new AvroContainerError(
      `a manifest list of format version ${metadata.get('format-version')}, not 2`,
    );
  }
  return records as ManifestListEntry[];
}
