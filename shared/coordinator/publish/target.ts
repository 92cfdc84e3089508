/**
 * Where a pipeline's committed checkpoints are published: an Iceberg table (its location, columns and
 * partitioning) behind a catalog, and the table property that names the last checkpoint published into it.
 */
import type { TimePartitioning } from '../../config/settings.ts';
import type { IcebergTable } from '../../iceberg/append.ts';
import type { Catalog } from '../../iceberg/catalog.ts';
import type { ColumnDefinition } from '../../transforms/api.ts';

export interface PublishTarget {
  readonly catalog: Catalog;
  readonly table: IcebergTable;
}

/** How the table is partitioned: by the output's time folders (`dt`, `hour`), or not at all. */
export type TablePartitioning = 'time-folders' | 'none';

export interface TableOptions {
  /** `s3://<bucket>/<table root>`, no trailing slash. */
  readonly location: string;
  /** The transform's columns (`outputColumns`). */
  readonly columns: readonly ColumnDefinition[];
  /** The output's time partitioning (`timePartitioning`): the folders the table is partitioned by. */
  readonly timePartitioning: TimePartitioning;
  /** Default `time-folders`. */
  readonly partitioning?: TablePartitioning;
  readonly properties?: Readonly<Record<string, string>>;
}

/**
 * The table a pipeline publishes to. No time field is given to the partitioning on purpose: the table is
 * partitioned by the folders the final objects are in (see `data-files.ts`), never by a transform of a column.
 */
export function publishedTable(options: TableOptions): IcebergTable {
  const byFolders = (options.partitioning ?? 'time-folders') === 'time-folders';
  return {
    location: options.location,
    columns: options.columns,
    partitioning: { timePartitioning: byFolders ? options.timePartitioning : 'none' },
    ...(options.properties ? { properties: options.properties } : {}),
  };
}

/**
 * The table property naming the last checkpoint of `pipeline` in the table: set in the same metadata swap as each
 * append, and kept when maintenance expires the snapshots whose summaries name the checkpoints.
 */
export function publishedCheckpointProperty(pipeline: string): string {
  return `eos.${pipeline}.published-checkpoint`;
}
