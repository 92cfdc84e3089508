/**
 * The AWS Glue Data Catalog as an Iceberg catalog: a Glue table whose `metadata_location` parameter names the
 * table's current metadata file, replaced by an UpdateTable conditional on the table's `VersionId`.
 *
 * - `load` is GetTable: `Parameters.metadata_location` and the Glue table's `VersionId` as the state's version. No
 *   Glue table (EntityNotFoundException), or one without `metadata_location` yet, has no state: undefined.
 * - `commit` writes the metadata JSON first (write-once, named by {@link catalogMetadataLocation}), then updates the
 *   Glue table with `VersionId` set to the loaded one. Glue refuses a stale `VersionId` with
 *   ConcurrentModificationException: `conflict`. A first commit creates the Glue table (CreateTable), and another
 *   writer's table already there (AlreadyExistsException) is a `conflict` too; a Glue table made without metadata
 *   (by the construct) is updated like any other.
 *
 * Matched from iceberg-java's GlueTableOperations and pyiceberg's glue catalog: the same three requests; their table
 * input (`TableType` EXTERNAL_TABLE; the Glue table's parameters kept, `table_type=ICEBERG`, `metadata_location`,
 * `previous_metadata_location` set; a storage descriptor of the table location and the columns with their
 * `iceberg.field.id`, `.optional`, `.current` parameters and Hive type names; the description kept); `SkipArchive`
 * on by default, as in both, so a commit per checkpoint does not use up Glue's table versions; iceberg-java's check
 * that the Glue table still names the base metadata before the update (no call when loaded with the state).
 *
 * As with S3 Tables, an error on the update after the SDK's retries, or a retry meeting its own landed update,
 * leaves the outcome to the caller's reload. Errors other than a conflict are one line naming the catalog, the
 * table and the call; transient ones as {@link TransientAwsError}.
 */
import {
  type Column,
  CreateTableCommand,
  GetTableCommand,
  type GlueClient,
  type Table,
  type TableInput,
  UpdateTableCommand,
} from '@aws-sdk/client-glue';
import type { S3Client } from '@aws-sdk/client-s3';
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

/** Which Glue table: its database and name, and the catalog (account) when not the caller's own. */
export interface GlueTableId {
  readonly databaseName: string;
  readonly tableName: string;
  readonly catalogId?: string;
}

/** A call to Glue failed for a reason other than a conflict or a transient fault, or the table is not Iceberg's. */
export class GlueCatalogError extends PipelineError {}

const METADATA_LOCATION = 'metadata_location';
const PREVIOUS_METADATA_LOCATION = 'previous_metadata_location';
/** A state whose Glue version is not known: never equal to one Glue gives, so its commit looks the table up. */
const UNKNOWN_VERSION = 'unknown';

const HIVE_TYPES: Readonly<Record<string, string>> = {
  long: 'bigint',
  timestamptz: 'timestamp',
  time: 'string',
  uuid: 'string',
};

/** The Hive type name Glue shows for an Iceberg type (for people and tools browsing Glue; readers use the metadata). */
function hiveType(type: unknown): string {
  if (typeof type === 'string') return type.startsWith('fixed[') ? 'binary' : (HIVE_TYPES[type] ?? type);
  const nested = type as { type?: string; fields?: { name: string; type: unknown }[] } & Record<
    string,
    unknown
  >;
  if (nested.type === 'struct') {
    return `struct<${(nested.fields ?? []).map((field) => `${field.name}:${hiveType(field.type)}`).join(',')}>`;
  }
  if (nested.type === 'list') return `array<${hiveType(nested.element)}>`;
  if (nested.type === 'map') return `map<${hiveType(nested.key)},${hiveType(nested.value)}>`;
  return String(nested.type);
}

/** The current schema's fields, then those only older schemas have, as Glue columns. */
function glueColumns(metadata: TableMetadata): Column[] {
  const isCurrent = (schema: { 'schema-id': number }) =>
    schema['schema-id'] === metadata['current-schema-id'];
  const schemas = [...metadata.schemas].sort((a, b) => Number(isCurrent(b)) - Number(isCurrent(a)));
  const columns = new Map<string, Column>();
  for (const schema of schemas) {
    for (const field of schema.fields) {
      if (columns.has(field.name)) continue;
      columns.set(field.name, {
        Name: field.name,
        Type: hiveType(field.type),
        ...(field.doc ? { Comment: field.doc } : {}),
        Parameters: {
          'iceberg.field.id': String(field.id),
          'iceberg.field.optional': String(!field.required),
          'iceberg.field.current': String(isCurrent(schema)),
        },
      });
    }
  }
  return [...columns.values()];
}

function nameOf(error: unknown): string | undefined {
  return (error as { name?: string } | null)?.name;
}

export class GlueCatalog implements Catalog {
  /** The Glue table as last loaded or committed, for the commit on the state it gave. */
  private known: Table | undefined;

  constructor(
    private readonly glue: GlueClient,
    private readonly s3: S3Client,
    readonly table: GlueTableId,
    private readonly options: { readonly skipArchive?: boolean } = {},
  ) {}

  /** `database.table` (and the catalog id when given), as the errors name the table. */
  get description(): string {
    const { catalogId, databaseName, tableName } = this.table;
    return `${databaseName}.${tableName}${catalogId ? ` in catalog ${catalogId}` : ''}`;
  }

  async load(): Promise<TableState | undefined> {
    const glueTable = await this.glueTable();
    this.known = glueTable;
    const location = glueTable?.Parameters?.[METADATA_LOCATION];
    if (glueTable === undefined || !location) return undefined;
    const tableType = glueTable.Parameters?.table_type;
    if (tableType?.toUpperCase() !== 'ICEBERG') {
      throw new GlueCatalogError(
        `Glue catalog: ${this.description} has table_type ${tableType}, not ICEBERG`,
      );
    }
    let metadata: TableMetadata | undefined;
    try {
      metadata = await readMetadataJson(this.s3, location);
    } catch (error) {
      throw this.failure(`read of ${location}`, error);
    }
    if (!metadata)
      throw new GlueCatalogError(`Glue catalog: ${this.description} names a missing ${location}`);
    return { metadata, location, version: glueTable.VersionId ?? UNKNOWN_VERSION };
  }

  async commit(expected: TableState | undefined, next: TableMetadata): Promise<Committed | 'conflict'> {
    const base = await this.baseTable(expected);
    if (base === 'conflict') return 'conflict';
    if (base !== undefined && !base.VersionId) {
      // Without a version Glue would apply the update whatever happened since: another writer's commit lost.
      throw new GlueCatalogError(`Glue catalog: ${this.description} has no VersionId to update it on`);
    }
    const text = tableMetadataJson(next);
    const location = catalogMetadataLocation(next, expected?.location, text);
    try {
      await writeMetadataJson(this.s3, location, text);
    } catch (error) {
      throw this.failure(`write of ${location}`, error);
    }
    const input = this.tableInput(base, next, location, expected?.location);
    const common = this.database;
    try {
      if (base === undefined) {
        await this.glue.send(new CreateTableCommand({ ...common, TableInput: input }));
      } else {
        await this.glue.send(
          new UpdateTableCommand({
            ...common,
            TableInput: input,
            SkipArchive: this.options.skipArchive ?? true,
            VersionId: base.VersionId,
          }),
        );
      }
    } catch (error) {
      const name = nameOf(error);
      if (name === 'ConcurrentModificationException' || name === 'AlreadyExistsException') return 'conflict';
      throw this.failure(base === undefined ? 'CreateTable' : 'UpdateTable', error);
    }
    return { metadata: next, location, version: await this.versionAfter(location) };
  }

  /**
   * The Glue table `expected` was loaded from, or undefined when a first commit is to create it; `conflict` when
   * the table has moved on from `expected` (another metadata location, or any Glue table for a first commit that
   * has metadata already).
   */
  private async baseTable(expected: TableState | undefined): Promise<Table | undefined | 'conflict'> {
    const known = this.known;
    const fresh =
      expected !== undefined &&
      known?.VersionId === expected.version &&
      known.Parameters?.[METADATA_LOCATION] === expected.location
        ? known
        : await this.glueTable();
    const current = fresh?.Parameters?.[METADATA_LOCATION] || undefined;
    return current === expected?.location ? fresh : 'conflict';
  }

  /** The table input of an update or creation: the Glue table's own fields kept, the Iceberg ones set. */
  private tableInput(
    base: Table | undefined,
    next: TableMetadata,
    location: string,
    previous: string | undefined,
  ): TableInput {
    return {
      Name: this.table.tableName,
      ...(base?.Description ? { Description: base.Description } : {}),
      ...(base?.Owner ? { Owner: base.Owner } : {}),
      TableType: 'EXTERNAL_TABLE',
      Parameters: {
        ...base?.Parameters,
        table_type: 'ICEBERG',
        [METADATA_LOCATION]: location,
        ...(previous ? { [PREVIOUS_METADATA_LOCATION]: previous } : {}),
      },
      StorageDescriptor: { Location: next.location, Columns: glueColumns(next) },
    };
  }

  /**
   * The Glue version of the state this commit made, kept for the next commit on it. The commit is done when this
   * runs: a failure to look, or a table already moved on, leaves the version unknown rather than failing it.
   */
  private async versionAfter(location: string): Promise<string> {
    try {
      const after = await this.glueTable();
      this.known = after;
      const ours = after?.Parameters?.[METADATA_LOCATION] === location;
      return ours && after?.VersionId ? after.VersionId : UNKNOWN_VERSION;
    } catch {
      this.known = undefined;
      return UNKNOWN_VERSION;
    }
  }

  /** The catalog (when given) and the database every request names. */
  private get database(): { CatalogId?: string; DatabaseName: string } {
    const { catalogId, databaseName } = this.table;
    return { ...(catalogId ? { CatalogId: catalogId } : {}), DatabaseName: databaseName };
  }

  /** The Glue table; undefined when Glue has none of that name. */
  private async glueTable(): Promise<Table | undefined> {
    try {
      const answer = await this.glue.send(
        new GetTableCommand({ ...this.database, Name: this.table.tableName }),
      );
      return answer.Table;
    } catch (error) {
      if (nameOf(error) === 'EntityNotFoundException') return undefined;
      throw this.failure('GetTable', error);
    }
  }

  /** One line naming the catalog, the table and the call; transient faults as {@link TransientAwsError}. */
  private failure(operation: string, error: unknown): Error {
    const call = `Glue ${operation} of ${this.description}`;
    if (isTransient(error)) return new TransientAwsError(call, { cause: error });
    const detail = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return new GlueCatalogError(`${call} failed: ${detail.replace(/\s+/g, ' ')}`, { cause: error });
  }
}
