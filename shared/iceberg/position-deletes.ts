/**
 * Iceberg v2 position delete files (spec, "Position Delete Files"): Parquet files of `file_path` and `pos` rows,
 * each naming a row of a data file (its 0-based position in that file) that readers must not show. One file per
 * data file here, its rows sorted by position as the spec requires, and the columns carrying the spec's reserved
 * field ids (2147483546 and 2147483545): readers that resolve Parquet columns by id (Iceberg's Java reader under
 * Athena and Spark) would otherwise assign ids by position and find neither column.
 *
 * Written with hyparquet-writer, as the sink's data files are, uncompressed and with a constant `created_by`: the
 * bytes are a function of the data file's location and the positions, so every attempt of a snapshot writes the
 * same object under the same write-once key (the key holds a digest of the bytes, as the manifests' do).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { putIfAbsent } from '../sink/objects.ts';
import type { DataFile } from './manifest-file.ts';
import { s3ObjectOf } from './metadata-json.ts';

type WriteOptions = Parameters<typeof parquetWriteBuffer>[0];
type SchemaElement = NonNullable<WriteOptions['schema']>[number];

/** The spec's reserved field ids of a position delete file's columns. */
export const DELETE_FILE_PATH_ID = 2147483546;
export const DELETE_POS_ID = 2147483545;

/** Written into every delete file's footer; a constant so that the bytes never depend on the deployed version. */
const CREATED_BY = 'eos position deletes';

const SCHEMA: SchemaElement[] = [
  { name: 'schema', num_children: 2 },
  {
    name: 'file_path',
    repetition_type: 'REQUIRED',
    type: 'BYTE_ARRAY',
    converted_type: 'UTF8',
    logical_type: { type: 'STRING' },
    field_id: DELETE_FILE_PATH_ID,
  },
  { name: 'pos', repetition_type: 'REQUIRED', type: 'INT64', field_id: DELETE_POS_ID },
];

/** The rows of `dataFile` (by position) a snapshot deletes. */
export interface PositionDelete {
  readonly dataFile: DataFile;
  /** 0-based row positions in the data file, ascending, without repeats. */
  readonly positions: readonly number[];
}

/** The Parquet bytes of a position delete file of `positions` in the data file at `dataPath`. */
export function encodePositionDeletes(dataPath: string, positions: readonly number[]): Uint8Array {
  const sorted = [...positions].sort((a, b) => a - b);
  const buffer = parquetWriteBuffer({
    columnData: [
      { name: 'file_path', data: sorted.map(() => dataPath) },
      { name: 'pos', data: sorted.map((position) => BigInt(position)) },
    ],
    schema: SCHEMA,
    codec: 'UNCOMPRESSED',
    statistics: true,
    createdBy: CREATED_BY,
  });
  return new Uint8Array(buffer);
}

/**
 * Writes the delete file of `deletes` once, under `<table>/metadata/deletes/<snapshot>-<digest>.parquet`: under
 * the prefix the publish step already writes the table's manifests to (the one prefix IAM grants it), never
 * under the pipeline's `final/` data. Its description as the delete manifest lists it: same partition as the data
 * file (a position delete applies within its partition).
 */
export async function writePositionDeletes(
  s3: S3Client,
  tableLocation: string,
  snapshotId: bigint,
  deletes: PositionDelete,
): Promise<DataFile> {
  const bytes = Buffer.from(encodePositionDeletes(deletes.dataFile.path, deletes.positions));
  const digest = createHash('sha256').update(bytes).digest('hex').slice(0, 32);
  const location = `${tableLocation}/metadata/deletes/${snapshotId}-${digest}.parquet`;
  const { bucket, key } = s3ObjectOf(location);
  await putIfAbsent(s3, bucket, key, bytes, { contentType: 'application/octet-stream' });
  return {
    path: location,
    recordCount: deletes.positions.length,
    fileSizeInBytes: bytes.length,
    partition: deletes.dataFile.partition,
  };
}
