/**
 * The catalog port: where a table's current metadata is found and how it is replaced. Every catalog Iceberg
 * writers use (a file catalog in the bucket, AWS S3 Tables, the AWS Glue Data Catalog) swaps the current metadata
 * by compare-and-swap, and that is all a commit needs: `commit` replaces the metadata only if the table is still at
 * the state the caller loaded, else answers `conflict` and the caller reloads and rebases.
 */
import type { TableMetadata } from './table-metadata.ts';

/** A table's current metadata as a catalog holds it. */
export interface TableState {
  readonly metadata: TableMetadata;
  /** Where the metadata file is (`s3://…/metadata/v3.metadata.json`): the next metadata's log names it. */
  readonly location: string;
  /** The catalog's token of this state (a version number, an ETag, a version token), opaque to callers. */
  readonly version: string;
}

/** The state a successful commit made current. */
export type Committed = TableState;

export interface Catalog {
  /** The table's current state; undefined while the table has no metadata yet. */
  load(): Promise<TableState | undefined>;
  /**
   * Makes `next` the table's metadata if its current state is still `expected` (undefined: the table does not
   * exist yet); `conflict` when another writer changed it first, and then nothing was changed.
   */
  commit(expected: TableState | undefined, next: TableMetadata): Promise<Committed | 'conflict'>;
}
