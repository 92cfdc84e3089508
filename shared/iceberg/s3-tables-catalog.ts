/**
 * The AWS S3 Tables catalog: a table in a table bucket, whose current metadata file the service points at and
 * swaps by compare-and-swap on a version token.
 *
 * - `load` is GetTableMetadataLocation: the metadata location and the version token of that state. A table with no
 *   metadata location yet (created empty), or none at all, has no state: undefined.
 * - `commit` writes the metadata JSON to the table's warehouse location first (write-once, named by
 *   {@link catalogMetadataLocation}), then UpdateTableMetadataLocation with the loaded version token. A stale token
 *   is answered with ConflictException (HTTP 409): `conflict`, and the pointer was not moved. A first commit finds
 *   (or creates, CreateTable with format ICEBERG) the table and uses its current token, and is a `conflict` if
 *   another writer gave it metadata first.
 *
 * As in Iceberg's own S3 Tables catalogs (pyiceberg's and the AWS Labs one for iceberg-java): the same three calls
 * with the same fields, the metadata written before the swap, ConflictException the commit-failed answer. Unlike
 * them the swap is not preceded by a second GetTableMetadataLocation: the token loaded with the state is the
 * condition, and the service refuses it once anything has changed the table.
 *
 * An error on the swap after the SDK's own retries leaves the commit's outcome unknown; so does a retry the SDK made
 * after a swap that had landed, which meets the moved token and answers `conflict`. Neither is resolved here: the
 * caller reloads, and a checkpoint's snapshot found in the table is the proof it landed. Errors other than a
 * conflict are one line naming the catalog, the table and the call; transient ones as {@link TransientAwsError}.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import {
  CreateTableCommand,
  GetTableMetadataLocationCommand,
  type S3TablesClient,
  UpdateTableMetadataLocationCommand,
} from '@aws-sdk/client-s3tables';
import { isTransient } from '../aws/classify.ts';
import { PipelineError, TransientAwsError } from '../errors.ts';
import type { Catalog, Committed, TableState } from './catalog.ts';
import {
  catalogMetadataLocation,
  readMetadataJson,
  tableMetadataJson,
  writeMetadataJson,
} from './metadata-json.ts';
import type { TableMetadata } from './table-metadata.ts';

/** Which table: its bucket's ARN, its namespace and its name. */
export interface S3TablesTableId {
  readonly tableBucketARN: string;
  readonly namespace: string;
  readonly name: string;
}

/** A call to S3 Tables failed for a reason other than a conflict or a transient fault. */
export class S3TablesCatalogError extends PipelineError {}

/** The table's pointer as GetTableMetadataLocation answers it. */
interface Pointer {
  readonly versionToken: string;
  readonly metadataLocation: string | undefined;
  readonly warehouseLocation: string;
}

function nameOf(error: unknown): string | undefined {
  return (error as { name?: string } | null)?.name;
}

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

/** The service's answer to a stale version token (or a table created by another writer meanwhile). */
function isConflict(error: unknown): boolean {
  return nameOf(error) === 'ConflictException' || statusOf(error) === 409;
}

function isNotFound(error: unknown): boolean {
  return nameOf(error) === 'NotFoundException' || statusOf(error) === 404;
}

function trimmed(location: string): string {
  return location.replace(/\/+$/, '');
}

export class S3TablesCatalog implements Catalog {
  constructor(
    private readonly tables: S3TablesClient,
    private readonly s3: S3Client,
    readonly table: S3TablesTableId,
  ) {}

  /** `namespace.name` in the bucket, as the errors name the table. */
  get description(): string {
    return `${this.table.namespace}.${this.table.name} in ${this.table.tableBucketARN}`;
  }

  async load(): Promise<TableState | undefined> {
    const pointer = await this.pointer();
    if (pointer?.metadataLocation === undefined) return undefined;
    let metadata: TableMetadata | undefined;
    try {
      metadata = await readMetadataJson(this.s3, pointer.metadataLocation);
    } catch (error) {
      throw this.failure(`read of ${pointer.metadataLocation}`, error);
    }
    if (metadata === undefined) {
      throw new S3TablesCatalogError(
        `S3 Tables catalog: the metadata file ${pointer.metadataLocation} of ${this.description} is missing`,
      );
    }
    return { metadata, location: pointer.metadataLocation, version: pointer.versionToken };
  }

  /**
   * The table's warehouse location (`s3://…--table-s3`), the table created when it does not exist yet: a new
   * table's metadata must be made with this location, the only place the service accepts its metadata files.
   */
  async warehouseLocation(): Promise<string> {
    return (await this.existingPointer()).warehouseLocation;
  }

  async commit(expected: TableState | undefined, next: TableMetadata): Promise<Committed | 'conflict'> {
    let versionToken = expected?.version;
    if (versionToken === undefined) {
      const pointer = await this.existingPointer();
      if (pointer.metadataLocation !== undefined) return 'conflict';
      if (trimmed(next.location) !== trimmed(pointer.warehouseLocation)) {
        throw new S3TablesCatalogError(
          `S3 Tables catalog: a new table's location must be its warehouse location ${pointer.warehouseLocation}, not ${next.location} (${this.description})`,
        );
      }
      versionToken = pointer.versionToken;
    }
    const text = tableMetadataJson(next);
    const location = catalogMetadataLocation(next, expected?.location, text);
    try {
      // `exists`: the key is a digest of the text, so what is there is this very metadata (a retry's).
      await writeMetadataJson(this.s3, location, text);
    } catch (error) {
      throw this.failure(`write of ${location}`, error);
    }
    try {
      const swapped = await this.tables.send(
        new UpdateTableMetadataLocationCommand({ ...this.table, versionToken, metadataLocation: location }),
      );
      if (!swapped.versionToken) throw new Error('the answer has no version token');
      return { metadata: next, location, version: swapped.versionToken };
    } catch (error) {
      if (isConflict(error)) return 'conflict';
      throw this.failure('UpdateTableMetadataLocation', error);
    }
  }

  /** The table's pointer; undefined when the service knows no such table. */
  private async pointer(): Promise<Pointer | undefined> {
    try {
      const answer = await this.tables.send(new GetTableMetadataLocationCommand({ ...this.table }));
      if (!answer.versionToken || !answer.warehouseLocation) {
        throw new Error('the answer has no version token or warehouse location');
      }
      return {
        versionToken: answer.versionToken,
        metadataLocation: answer.metadataLocation || undefined,
        warehouseLocation: answer.warehouseLocation,
      };
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw this.failure('GetTableMetadataLocation', error);
    }
  }

  /** The table's pointer, the table created (without metadata) when there is none. */
  private async existingPointer(): Promise<Pointer> {
    const found = await this.pointer();
    if (found) return found;
    try {
      await this.tables.send(new CreateTableCommand({ ...this.table, format: 'ICEBERG' }));
    } catch (error) {
      // Another writer created it meanwhile: the table is there, which is all this wanted.
      if (!isConflict(error)) throw this.failure('CreateTable', error);
    }
    const created = await this.pointer();
    if (!created) {
      throw new S3TablesCatalogError(`S3 Tables catalog: ${this.description} is not found after CreateTable`);
    }
    return created;
  }

  /** One line naming the catalog, the table and the call; transient faults as {@link TransientAwsError}. */
  private failure(operation: string, error: unknown): Error {
    const call = `S3 Tables ${operation} of ${this.description}`;
    if (isTransient(error)) return new TransientAwsError(call, { cause: error });
    const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return new S3TablesCatalogError(`${call} failed: ${detail.replace(/\s+/g, ' ')}`, { cause: error });
  }
}
