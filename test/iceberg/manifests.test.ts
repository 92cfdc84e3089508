/**
 * Manifests and manifest lists as Avro container files: the spec's field ids on the Avro schema, its required
 * fields and file metadata, deterministic bytes, and the same records read back by icebird's own Avro reader.
 */
import type { Duplex } from 'node:stream';
import { avroMetadata, avroRead } from 'icebird';
import { describe, expect, it } from 'vitest';
import { decodeContainer, encodeContainer } from '../../shared/iceberg/avro-container.ts';
import { type DataFile, encodeManifest } from '../../shared/iceberg/manifest-file.ts';
import {
  addedManifestEntry,
  decodeManifestList,
  encodeManifestList,
  type ManifestListEntry,
} from '../../shared/iceberg/manifest-list.ts';
import { partitionOnlyColumns, partitionSpec } from '../../shared/iceberg/partition-spec.ts';
import { icebergSchema } from '../../shared/iceberg/schema.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'region', type: 'string', nullable: true },
];
const SETTINGS = { timePartitioning: 'hour', identityFields: ['region'] } as const;
const partitionColumns = partitionOnlyColumns(COLUMNS, SETTINGS);
const { schema } = icebergSchema(COLUMNS, { partitionColumns });
const { spec } = partitionSpec(schema, COLUMNS, SETTINGS);
const SNAPSHOT = 2n ** 62n + 12_345n; // beyond a double's exact integers
const FILES: DataFile[] = [
  {
    path: 's3://b/t/data/a.parquet',
    recordCount: 3,
    fileSizeInBytes: 900,
    partition: ['2026-03-14', '07', 'eu'],
  },
  {
    path: 's3://b/t/data/b.parquet',
    recordCount: 2,
    fileSizeInBytes: 700,
    partition: ['2026-03-14', '08', null],
  },
];

/** What icebird's Avro reader makes of a container file (a reader nobody here wrote). */
function icebirdRead(bytes: Buffer): {
  metadata: Record<string, unknown>;
  records: Record<string, unknown>[];
} {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const reader = { view, offset: 0 };
  const { metadata, syncMarker } = avroMetadata(reader);
  return { metadata, records: avroRead({ reader, metadata, syncMarker }) };
}

type AvroField = { name: string; type: unknown; 'field-id'?: number };

/** Every field of a record schema by its dotted path, with its field id (nested records and unions walked). */
function fieldIds(schema: unknown, prefix = ''): Record<string, number | undefined> {
  const found: Record<string, number | undefined> = {};
  const inner = (type: unknown): unknown => {
    if (Array.isArray(type)) return type.find((branch) => branch !== 'null');
    return type;
  };
  for (const field of (schema as { fields: AvroField[] }).fields) {
    const path = `${prefix}${field.name}`;
    found[path] = field['field-id'];
    const type = inner(field.type) as { type?: string; fields?: unknown; items?: unknown };
    if (type?.type === 'record') Object.assign(found, fieldIds(type, `${path}.`));
    const items = type?.type === 'array' ? (type.items as { type?: string }) : undefined;
    if (items?.type === 'record') Object.assign(found, fieldIds(items, `${path}[].`));
  }
  return found;
}

describe('Avro container files', () => {
  const SCHEMA = {
    type: 'record',
    name: 'r',
    fields: [
      { name: 'id', type: 'long' },
      { name: 'tag', type: ['null', 'string'] },
    ],
  };

  it('round-trip with bigint longs and plain union values, byte for byte the same for the same input', () => {
    const records = [
      { id: SNAPSHOT, tag: 'x' },
      { id: -1n, tag: null },
    ];
    const bytes = encodeContainer(SCHEMA, [['k', 'v']], records);
    expect(encodeContainer(SCHEMA, [['k', 'v']], records).equals(bytes)).toBe(true);
    const decoded = decodeContainer(bytes);
    expect(decoded.records).toEqual(records);
    expect(decoded.metadata.get('k')).toBe('v');
    expect(decoded.metadata.get('avro.codec')).toBe('null');
    // Another content, another sync marker: the marker is derived from the content.
    const other = encodeContainer(SCHEMA, [['k', 'v']], [{ id: 1n, tag: null }]);
    expect(other.subarray(-16).equals(bytes.subarray(-16))).toBe(false);
    expect(icebirdRead(bytes).records).toEqual([
      { id: SNAPSHOT, tag: 'x' },
      { id: -1n, tag: undefined },
    ]);
  });

  it('reads a deflate file of many blocks written by avro-js itself, resolved to a reader schema', async () => {
    const { createRequire } = await import('node:module');
    const files = createRequire(import.meta.url)('avro-js/lib/files.js') as {
      streams: { BlockEncoder: new (schema: object, opts: object) => Duplex };
    };
    const writer = { type: 'record', name: 'r', fields: [{ name: 'id', type: 'int' }] };
    // Deflated synchronously: with zlib's asynchronous default, blocks finishing out of order on a loaded machine
    // have been written out of order, which is avro-js's concern, not the reader's under test.
    const { deflateRawSync } = await import('node:zlib');
    const encoder = new files.streams.BlockEncoder(writer, {
      codec: 'deflate',
      blockSize: 64,
      codecs: {
        deflate: (buf: Buffer, cb: (error: null, data: Buffer) => void) => cb(null, deflateRawSync(buf)),
      },
    });
    const chunks: Buffer[] = [];
    encoder.on('data', (chunk: Buffer) => chunks.push(chunk));
    const done = new Promise((resolve) => encoder.on('end', resolve));
    for (let id = 0; id < 100; id++) encoder.write({ id });
    encoder.end();
    await done;
    const reader = {
      ...writer,
      fields: [...writer.fields, { name: 'extra', type: ['null', 'long'], default: null }],
    };
    const { records } = decodeContainer(Buffer.concat(chunks), reader);
    expect(records).toEqual(Array.from({ length: 100 }, (_, id) => ({ id, extra: null })));
  });
});

describe('encodeManifest', () => {
  const bytes = encodeManifest({ schema, spec, snapshotId: SNAPSHOT, files: FILES });

  it("carries the spec's field ids on the v2 manifest_entry schema", () => {
    const { schema: avroSchema, metadata } = decodeContainer(bytes);
    expect(fieldIds(avroSchema)).toEqual({
      status: 0,
      snapshot_id: 1,
      sequence_number: 3,
      file_sequence_number: 4,
      data_file: 2,
      'data_file.content': 134,
      'data_file.file_path': 100,
      'data_file.file_format': 101,
      'data_file.partition': 102,
      'data_file.partition.dt': 1000,
      'data_file.partition.hour': 1001,
      'data_file.partition.region': 1002,
      'data_file.record_count': 103,
      'data_file.file_size_in_bytes': 104,
      'data_file.column_sizes': 108,
      'data_file.column_sizes[].key': 117,
      'data_file.column_sizes[].value': 118,
      'data_file.value_counts': 109,
      'data_file.value_counts[].key': 119,
      'data_file.value_counts[].value': 120,
      'data_file.null_value_counts': 110,
      'data_file.null_value_counts[].key': 121,
      'data_file.null_value_counts[].value': 122,
      'data_file.nan_value_counts': 137,
      'data_file.nan_value_counts[].key': 138,
      'data_file.nan_value_counts[].value': 139,
      'data_file.lower_bounds': 125,
      'data_file.lower_bounds[].key': 126,
      'data_file.lower_bounds[].value': 127,
      'data_file.upper_bounds': 128,
      'data_file.upper_bounds[].key': 129,
      'data_file.upper_bounds[].value': 130,
      'data_file.key_metadata': 131,
      'data_file.split_offsets': 132,
      'data_file.equality_ids': 135,
      'data_file.sort_order_id': 140,
    });
    expect(JSON.parse(metadata.get('schema') ?? '')).toEqual(schema);
    expect(JSON.parse(metadata.get('partition-spec') ?? '')).toEqual(spec.fields);
    expect([...metadata.keys()]).toEqual([
      'avro.schema',
      'avro.codec',
      'schema',
      'schema-id',
      'partition-spec',
      'partition-spec-id',
      'format-version',
      'content',
    ]);
    expect(metadata.get('format-version')).toBe('2');
    expect(metadata.get('content')).toBe('data');
  });

  it('holds each file as an ADDED entry with its required fields, sequence numbers inherited', () => {
    const { records } = icebirdRead(bytes);
    expect(records).toHaveLength(2);
    expect(records[0]).toMatchObject({
      status: 1,
      snapshot_id: SNAPSHOT,
      sequence_number: undefined,
      file_sequence_number: undefined,
      data_file: {
        content: 0,
        file_path: 's3://b/t/data/a.parquet',
        file_format: 'PARQUET',
        partition: { dt: '2026-03-14', hour: '07', region: 'eu' },
        record_count: 3n,
        file_size_in_bytes: 900n,
      },
    });
    expect(records[1]).toMatchObject({
      data_file: {
        partition: {
          dt: '2026-03-14',
          hour: '08',
          region: undefined,
        },
      },
    });
    expect(encodeManifest({ schema, spec, snapshotId: SNAPSHOT, files: FILES }).equals(bytes)).toBe(true);
  });

  it('refuses a partition tuple that does not fit the spec', () => {
    expect(() =>
      encodeManifest({ schema, spec, snapshotId: 1n, files: [{ ...FILES[0]!, partition: ['2026-03-14'] }] }),
    ).toThrow(RangeError);
  });
});

describe('manifest lists', () => {
  const added = addedManifestEntry({
    path: 's3://b/t/metadata/m1.avro',
    length: 1234,
    schema,
    spec,
    files: FILES,
    snapshotId: SNAPSHOT,
    sequenceNumber: 7n,
  });

  it('summarise the added files: counts and partition bounds in single-value form', () => {
    expect(added).toMatchObject({
      manifest_length: 1234n,
      partition_spec_id: 0,
      content: 0,
      sequence_number: 7n,
      min_sequence_number: 7n,
      added_snapshot_id: SNAPSHOT,
      added_files_count: 2,
      existing_files_count: 0,
      deleted_files_count: 0,
      added_rows_count: 5n,
    });
    expect(added.partitions).toEqual([
      {
        contains_null: false,
        contains_nan: null,
        lower_bound: Buffer.from('2026-03-14'),
        upper_bound: Buffer.from('2026-03-14'),
      },
      {
        contains_null: false,
        contains_nan: null,
        lower_bound: Buffer.from('07'),
        upper_bound: Buffer.from('08'),
      },
      {
        contains_null: true,
        contains_nan: null,
        lower_bound: Buffer.from('eu'),
        upper_bound: Buffer.from('eu'),
      },
    ]);
  });

  it("carry the spec's field ids and snapshot metadata, and read back as written (by icebird too)", () => {
    const older: ManifestListEntry = {
      ...added,
      manifest_path: 's3://b/t/metadata/m0.avro',
      sequence_number: 6n,
      min_sequence_number: 6n,
      added_snapshot_id: 5n,
      partitions: null,
    };
    const bytes = encodeManifestList({
      snapshotId: SNAPSHOT,
      parentSnapshotId: 5n,
      sequenceNumber: 7n,
      manifests: [added, older],
    });
    expect(decodeManifestList(bytes)).toEqual([added, older]);
    const { schema: avroSchema, metadata } = decodeContainer(bytes);
    expect(fieldIds(avroSchema)).toEqual({
      manifest_path: 500,
      manifest_length: 501,
      partition_spec_id: 502,
      content: 517,
      sequence_number: 515,
      min_sequence_number: 516,
      added_snapshot_id: 503,
      added_files_count: 504,
      existing_files_count: 505,
      deleted_files_count: 506,
      added_rows_count: 512,
      existing_rows_count: 513,
      deleted_rows_count: 514,
      partitions: 507,
      'partitions[].contains_null': 509,
      'partitions[].contains_nan': 518,
      'partitions[].lower_bound': 510,
      'partitions[].upper_bound': 511,
      key_metadata: 519,
    });
    expect(Object.fromEntries([...metadata].filter(([key]) => !key.startsWith('avro.')))).toEqual({
      'snapshot-id': String(SNAPSHOT),
      'parent-snapshot-id': '5',
      'sequence-number': '7',
      'format-version': '2',
    });
    const read = icebirdRead(bytes).records;
    expect(
      read.map((entry) => [entry.manifest_path, entry.sequence_number, entry.added_snapshot_id]),
    ).toEqual([
      ['s3://b/t/metadata/m1.avro', 7n, SNAPSHOT],
      ['s3://b/t/metadata/m0.avro', 6n, 5n],
    ]);
    const first = encodeManifestList({
      snapshotId: 1n,
      parentSnapshotId: undefined,
      sequenceNumber: 1n,
      manifests: [added],
    });
    expect(decodeContainer(first).metadata.get('parent-snapshot-id')).toBe('null');
  });
});
