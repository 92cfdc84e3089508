/**
 * An overwrite refuses, before it writes anything, to delete rows by position of a data file the parent lists
 * under another partition spec than the current one (readers that match position deletes by spec and partition
 * would not apply it, and the rows would stay visible). The store and the S3 client refuse every call: nothing may
 * be written.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import type { ManifestListEntry } from '../../shared/iceberg/manifest-list.ts';
import type { ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { OverwriteManifestError, overwriteManifests } from '../../shared/iceberg/overwrite.ts';
import { createTableMetadata } from '../../shared/iceberg/table-metadata.ts';

const schema = {
  type: 'struct' as const,
  'schema-id': 0,
  fields: [{ id: 1, name: 'n', required: true, type: 'long' as const }],
};
const spec = { 'spec-id': 1, fields: [] };
const metadata = createTableMetadata({
  location: 's3://bkt/t',
  nowMs: 0,
  schema,
  lastColumnId: 1,
  spec,
  lastPartitionId: 999,
});
const untouched: ManifestStore = {
  read: () => Promise.reject(new Error('nothing may be read')),
  write: () => Promise.reject(new Error('nothing may be written')),
};
const dataFile = { path: 's3://bkt/final/a.parquet', recordCount: 3, fileSizeInBytes: 10, partition: [] };
const holder = (specId: number) => ({ partition_spec_id: specId }) as ManifestListEntry;

describe('overwriteManifests', () => {
  it('refuses position deletes of a file listed under another partition spec, writing nothing', async () => {
    const input = {
      s3: { send: () => Promise.reject(new Error('nothing may be written')) } as unknown as S3Client,
      store: untouched,
      metadata,
      schema,
      spec,
      snapshotId: 5n,
      sequenceNumber: 2n,
      inherited: [],
      changes: {
        dataFiles: [],
        removed: [],
        positionDeletes: [{ dataFile, positions: [1] }],
        operation: 'overwrite' as const,
      },
    };
    await expect(
      overwriteManifests({ ...input, live: new Map([[dataFile.path, [holder(0)]]]) }),
    ).rejects.toThrow(
      new OverwriteManifestError(
        `rows of ${dataFile.path} are to be deleted, but the table lists it under partition spec 0, not the current 1: position deletes would not apply to it; nothing is committed`,
      ),
    );
    // Listed under the current spec, it goes on to write (here refused by the store).
    await expect(
      overwriteManifests({ ...input, live: new Map([[dataFile.path, [holder(1)]]]) }),
    ).rejects.toThrow('nothing may be written');
  });
});
