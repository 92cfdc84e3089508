/**
 * Position delete files as the Iceberg v2 spec has them: `file_path` and `pos` rows sorted by position, the
 * columns carrying the spec's reserved field ids (readers that resolve Parquet columns by id find them), the same
 * bytes for the same input; and their delete manifest says `content` `deletes`, each entry content 1. Read back
 * with hyparquet and the manifest reader (`manifest-entries.ts`).
 */
import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { describe, expect, it } from 'vitest';
import { decodeContainer } from '../../shared/iceberg/avro-container.ts';
import { decodeManifestEntries } from '../../shared/iceberg/manifest-entries.ts';
import { encodeManifest } from '../../shared/iceberg/manifest-file.ts';
import {
  DELETE_FILE_PATH_ID,
  DELETE_POS_ID,
  encodePositionDeletes,
} from '../../shared/iceberg/position-deletes.ts';
import type { IcebergSchema } from '../../shared/iceberg/schema.ts';

const DATA =
  's3://bkt/orders/final/output/dt=2026-03-14/hour=07/orders+0+00000000000000000000-00000000000000000019.parquet';

const buffer = (bytes: Uint8Array) =>
  bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer;

describe('position delete files', () => {
  it('holds file_path and pos rows sorted by position, with the reserved field ids, the same bytes for the same input', async () => {
    const bytes = encodePositionDeletes(DATA, [7, 3, 4]);
    const rows = await parquetReadObjects({ file: buffer(bytes) });
    expect(rows).toEqual([
      { file_path: DATA, pos: 3n },
      { file_path: DATA, pos: 4n },
      { file_path: DATA, pos: 7n },
    ]);
    const schema = parquetMetadata(buffer(bytes)).schema;
    expect(schema.slice(1).map((element) => [element.name, element.field_id])).toEqual([
      ['file_path', DELETE_FILE_PATH_ID],
      ['pos', DELETE_POS_ID],
    ]);
    expect(Buffer.from(encodePositionDeletes(DATA, [3, 4, 7]))).toEqual(Buffer.from(bytes));
    expect(Buffer.from(encodePositionDeletes(DATA, [3, 4]))).not.toEqual(Buffer.from(bytes));
  });

  it('are listed by a delete manifest whose entries are of content 1', () => {
    const schema: IcebergSchema = {
      type: 'struct',
      'schema-id': 0,
      fields: [{ id: 1, name: 'n', required: true, type: 'long' }],
    };
    const spec = { 'spec-id': 0, fields: [] };
    const file = {
      path: 's3://bkt/t/metadata/deletes/1-x.parquet',
      recordCount: 3,
      fileSizeInBytes: 99,
      partition: [],
    };
    const bytes = encodeManifest({ schema, spec, snapshotId: 1n, files: [file] }, true);
    expect(decodeContainer(bytes).metadata.get('content')).toBe('deletes');
    expect(decodeManifestEntries(bytes)).toEqual([
      { status: 1, snapshotId: 1n, content: 1, path: file.path },
    ]);
    const data = encodeManifest({ schema, spec, snapshotId: 1n, files: [file] });
    expect(decodeContainer(data).metadata.get('content')).toBe('data');
    expect(decodeManifestEntries(data)[0]?.content).toBe(0);
  });
});
