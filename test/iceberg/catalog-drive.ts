/**
 * What the catalog tests need to drive appendCheckpoint through a catalog and read the table back with icebird:
 * a small output table, its Parquet data files on the local S3 server, a checkpoint's append request, and the rows
 * icebird reads at the metadata file a catalog points at (as an engine that asks the catalog reads it).
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { icebergRead } from 'icebird';
import type { CheckpointAppend, IcebergTable } from '../../shared/iceberg/append.ts';
import { tableLayout } from '../../shared/iceberg/append.ts';
import type { TableState } from '../../shared/iceberg/catalog.ts';
import type { DataFile } from '../../shared/iceberg/manifest-file.ts';
import { dataFilePartition } from '../../shared/iceberg/partition-spec.ts';
import { putIfAbsent } from '../../shared/sink/objects.ts';
import { encodeParquet } from '../../shared/sink/parquet.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import type { OutputRow } from '../../shared/transforms/types.ts';
import { uniqueName } from '../support/aws.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'amount', type: 'double', nullable: true },
];

/** An unpartitioned output table at `location`. */
export function outputTable(location: string): IcebergTable {
  return { location, columns: COLUMNS, partitioning: { timePartitioning: 'none' } };
}

/** Rows `o-<first>`…`o-<first + count - 1>` of partition 0. */
export function rows(first: number, count: number): OutputRow[] {
  return Array.from({ length: count }, (_, n) => {
    const offset = first + n;
    return { orderId: `o-${offset}`, amount: offset / 4, source: { topic: 'orders', partition: 0, offset } };
  }) as unknown as OutputRow[];
}

/** Writes the rows as one Parquet object under the table's `data/` and describes it as a data file. */
export async function dataFile(s3: S3Client, table: IcebergTable, fileRows: OutputRow[]): Promise<DataFile> {
  const layout = tableLayout(table);
  const bytes = Buffer.from(encodeParquet(table.columns, fileRows));
  const match = /^s3:\/\/([^/]+)\/(.+)$/.exec(table.location);
  if (!match) throw new Error(`${table.location} is not an s3:// location`);
  const [, bucket, root] = match as unknown as [string, string, string];
  const key = `${root}/data/${uniqueName('part')}.parquet`;
  await putIfAbsent(s3, bucket, key, bytes);
  return {
    path: `s3://${bucket}/${key}`,
    recordCount: fileRows.length,
    fileSizeInBytes: bytes.length,
    partition: dataFilePartition(layout.schema, layout.spec, layout.partitionColumns, { rows: fileRows }),
  };
}

export function checkpoint(table: IcebergTable, checkpointId: number, files: DataFile[]): CheckpointAppend {
  return { table, dataFiles: files, pipelineId: 'orders', checkpointId, lanes: ['orders'] };
}

/** The order ids icebird reads from the metadata file `state` names (needs the local S3 `fetch` stubbed), sorted. */
export async function orderIdsRead(state: TableState): Promise<string[]> {
  const slash = state.location.lastIndexOf('/metadata/');
  const read = await icebergRead({
    tableUrl: state.location.slice(0, slash),
    metadataFileName: state.location.slice(slash + '/metadata/'.length),
  });
  return read.map((row) => String(row.orderId)).sort();
}

export function orderIds(...ranges: [first: number, count: number][]): string[] {
  return ranges.flatMap(([first, count]) => rows(first, count).map((row) => String(row.orderId))).sort();
}
