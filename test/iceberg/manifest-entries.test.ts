/**
 * Reading manifest entries of any writer: this pipeline's manifests, a maintenance manifest of DELETED, EXISTING
 * and delete-file entries with an entry left to inherit its snapshot id, and a v1 manifest (no content field, a
 * required snapshot id, other data file fields) all give status, snapshot, content and path.
 */
import { describe, expect, it } from 'vitest';
import { encodeContainer } from '../../shared/iceberg/avro-container.ts';
import { decodeManifestEntries } from '../../shared/iceberg/manifest-entries.ts';
import { encodeManifest, manifestEntrySchema } from '../../shared/iceberg/manifest-file.ts';
import type { PartitionSpec } from '../../shared/iceberg/partition-spec.ts';
import type { IcebergSchema } from '../../shared/iceberg/schema.ts';

const schema: IcebergSchema = {
  type: 'struct',
  'schema-id': 0,
  fields: [{ id: 1, name: 'n', required: true, type: 'long' }],
};
const spec: PartitionSpec = { 'spec-id': 0, fields: [] };
const SNAPSHOT = 2n ** 62n + 7n;

function entry(status: number, snapshotId: bigint | null, content: number, path: string) {
  return {
    status,
    snapshot_id: snapshotId,
    sequence_number: null,
    file_sequence_number: null,
    data_file: {
      content,
      file_path: path,
      file_format: 'PARQUET',
      partition: {},
      record_count: 1n,
      file_size_in_bytes: 10n,
    },
  };
}

describe('decodeManifestEntries', () => {
  it("reads this pipeline's manifests: each file ADDED by the snapshot", () => {
    const bytes = encodeManifest({
      schema,
      spec,
      snapshotId: SNAPSHOT,
      files: [
        { path: 's3://b/a.parquet', recordCount: 1, fileSizeInBytes: 10, partition: [] },
        { path: 's3://b/b.parquet', recordCount: 2, fileSizeInBytes: 20, partition: [] },
      ],
    });
    expect(decodeManifestEntries(bytes)).toEqual([
      { status: 1, snapshotId: SNAPSHOT, content: 0, path: 's3://b/a.parquet' },
      { status: 1, snapshotId: SNAPSHOT, content: 0, path: 's3://b/b.parquet' },
    ]);
  });

  it('reads DELETED, EXISTING and delete-file entries, and an entry that inherits its snapshot id', () => {
    const bytes = encodeContainer(
      manifestEntrySchema(schema, spec),
      [],
      [
        entry(2, 5n, 0, 's3://b/old.parquet'),
        entry(0, 4n, 0, 's3://b/kept.parquet'),
        entry(1, null, 0, 's3://b/new.parquet'),
        entry(1, 5n, 1, 's3://b/deletes.parquet'),
      ],
    );
    expect(decodeManifestEntries(bytes)).toEqual([
      { status: 2, snapshotId: 5n, content: 0, path: 's3://b/old.parquet' },
      { status: 0, snapshotId: 4n, content: 0, path: 's3://b/kept.parquet' },
      { status: 1, snapshotId: null, content: 0, path: 's3://b/new.parquet' },
      { status: 1, snapshotId: 5n, content: 1, path: 's3://b/deletes.parquet' },
    ]);
  });

  it('reads a v1 manifest: data files only, the snapshot id required', () => {
    const v1 = {
      type: 'record',
      name: 'manifest_entry',
      fields: [
        { name: 'status', type: 'int' },
        { name: 'snapshot_id', type: 'long' },
        {
          name: 'data_file',
          type: {
            type: 'record',
            name: 'r2',
            fields: [
              { name: 'file_path', type: 'string' },
              { name: 'file_format', type: 'string' },
              { name: 'record_count', type: 'long' },
              { name: 'block_size_in_bytes', type: 'long' },
            ],
          },
        },
      ],
    };
    const bytes = encodeContainer(
      v1,
      [],
      [
        {
          status: 1,
          snapshot_id: SNAPSHOT,
          data_file: {
            file_path: 's3a://b/v1.parquet',
            file_format: 'PARQUET',
            record_count: 3n,
            block_size_in_bytes: 64n,
          },
        },
      ],
    );
    expect(decodeManifestEntries(bytes)).toEqual([
      { status: 1, snapshotId: SNAPSHOT, content: 0, path: 's3a://b/v1.parquet' },
    ]);
  });
});
