/**
 * The pipeline's Iceberg table (the construct's `iceberg` prop): each committed checkpoint becomes one snapshot of
 * it, appended by the coordinator's publish step (`shared/coordinator/publish/`), whose data files are the committed
 * Parquet objects where they are in the sink bucket.
 *
 * - `glue`: a Glue database and an Iceberg table in it, created without metadata; the publish step's first commit
 *   gives it its metadata (`metadata_location`), and every later one swaps it by a conditional UpdateTable. Athena
 *   queries it as `"<database>"."<table>"`. The table's definition here never changes with the pipeline's settings
 *   (no columns: the publish step writes them), so a redeploy never rewrites the table the catalog keeps.
 * - `file`: nothing to create: the table's metadata lives under its prefix of the sink bucket.
 * - `s3tables`: refused. A table of a table bucket keeps its files in the bucket's own storage (the service accepts
 *   metadata only under the table's warehouse location, and readers and maintenance reach a table's files through the
 *   table bucket); the committed objects are in the sink bucket and are not copied (docs/deploy.md).
 *
 * What the publish step may do is decided here too ({@link IcebergPublishTable.catalogStatements}), and granted to
 * its role alone by the coordinator construct.
 */
import { RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as glue from 'aws-cdk-lib/aws-glue';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';
import {
  ICEBERG_PARTITIONINGS,
  type SettingsInput,
  settingsSchema,
  settingsToEnv,
} from '../shared/config/settings.ts';
import { checkpointWorkPrefix } from '../shared/coordinator/work-objects.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import { analyticsDatabaseName } from '../shared/replay/current-view.ts';
import { finalPrefix, finalStreamPrefix, inProgressPrefix, manifestsPrefix } from '../shared/sink/layout.ts';
import { grantPrefixReads } from './pipeline-grants.ts';

/** The `iceberg` prop: the table each committed checkpoint is published to as one snapshot. */
export interface IcebergProps {
  /**
   * Where the table's current metadata is kept: `glue` (a Glue table the construct creates; Athena queries it) or
   * `file` (in the sink bucket only, for readers that take a table location). `s3tables` is refused: a table
   * bucket's table cannot take the sink bucket's objects as its data files (docs/deploy.md).
   */
  readonly catalog: 'glue' | 'file' | 's3tables';
  /**
   * `glue`: the Glue database the construct creates for the table.
   *
   * @default `eos_<pipelineId>_iceberg` (lower-cased, other characters as `_`)
   */
  readonly databaseName?: string;
  /**
   * `glue`: the table's name.
   *
   * @default `output`
   */
  readonly tableName?: string;
  /**
   * The table's key prefix in the sink bucket: its metadata is written under `<tablePrefix>/metadata/`. Not inside
   * the pipeline's own prefixes (`_manifests/`, `final/`, `_coordinator/`, `_inprogress/`).
   *
   * @default `<pipelineId>/iceberg/output`
   */
  readonly tablePrefix?: string;
  /**
   * `time-folders`: identity partitions on the output's time folders (`dt`, and `hour` with hourly folders);
   * `none`: unpartitioned.
   *
   * @default `time-folders`
   */
  readonly partitioning?: 'time-folders' | 'none';
}

/** The validated prop: every default filled in. */
export interface IcebergConfig {
  readonly catalog: 'glue' | 'file';
  readonly tablePrefix: string;
  readonly partitioning: 'time-folders' | 'none';
  /** `glue` only. */
  readonly glue?: { readonly databaseName: string; readonly tableName: string };
}

const FIELDS = ['catalog', 'databaseName', 'tableName', 'tablePrefix', 'partitioning'] as const;
const GLUE_ONLY = ['databaseName', 'tableName'] as const;

/** The Glue database of the table when none is named. */
export function defaultIcebergDatabaseName(pipelineId: string): string {
  return `${analyticsDatabaseName(pipelineId)}_iceberg`;
}

/** The pipeline's prefixes the publish step must not write into (the bucket policy's boundaries, C7). */
function protectedPrefixes(pipelineId: string): string[] {
  return [
    manifestsPrefix(pipelineId),
    finalPrefix(pipelineId),
    checkpointWorkPrefix(pipelineId),
    inProgressPrefix(pipelineId),
  ];
}

/** A setting's error as the prop's field (`iceberg.tableName`). */
function checked<T>(field: string, key: keyof SettingsInput, value: unknown): T {
  const result = settingsSchema.shape[key as keyof typeof settingsSchema.shape].safeParse(value);
  if (!result.success) throw new InvalidSettingError(`iceberg.${field}`, result.error.issues[0]!.message);
  return result.data as T;
}

/**
 * Validates the `iceberg` prop against the pipeline's settings; undefined without it. Every error is one line
 * naming the field.
 */
export function icebergConfigOf(
  props: IcebergProps | undefined,
  pipeline: {
    readonly pipelineId: string;
    readonly outputFormat: string;
    readonly deliveryGuarantee: string;
  },
): IcebergConfig | undefined {
  if (props === undefined) return undefined;
  const unknown = Object.keys(props).find((key) => !(FIELDS as readonly string[]).includes(key));
  if (unknown !== undefined) throw new InvalidSettingError(`iceberg.${unknown}`, 'unknown field');
  if (props.catalog === 's3tables') {
    throw new InvalidSettingError(
      'iceberg.catalog',
      "s3tables cannot be deployed: a table bucket's table keeps its data files in the table bucket, and the committed Parquet objects stay in the sink bucket (not copied); use 'glue'",
    );
  }
  if (props.catalog !== 'glue' && props.catalog !== 'file') {
    throw new InvalidSettingError(
      'iceberg.catalog',
      `'glue' or 'file' (got ${JSON.stringify(props.catalog)})`,
    );
  }
  if (pipeline.deliveryGuarantee !== 'exactly-once') {
    throw new InvalidSettingError(
      'iceberg',
      `needs deliveryGuarantee 'exactly-once' (got '${pipeline.deliveryGuarantee}'): each snapshot is a committed checkpoint, and the weaker guarantees commit none`,
    );
  }
  if (pipeline.outputFormat !== 'parquet') {
    throw new InvalidSettingError(
      'iceberg',
      "needs outputFormat 'parquet': the table's data files are the committed Parquet objects",
    );
  }
  const field = props.catalog === 'file' ? GLUE_ONLY.find((key) => props[key] !== undefined) : undefined;
  if (field !== undefined) throw new InvalidSettingError(`iceberg.${field}`, "only used with catalog 'glue'");
  const tablePrefix = checked<string>(
    'tablePrefix',
    'icebergTablePrefix',
    props.tablePrefix ?? `${pipeline.pipelineId}/iceberg/output`,
  );
  const inside = protectedPrefixes(pipeline.pipelineId).find((prefix) =>
    `${tablePrefix}/`.startsWith(prefix),
  );
  if (
    inside !== undefined ||
    protectedPrefixes(pipeline.pipelineId).some((p) => p.startsWith(`${tablePrefix}/`))
  ) {
    throw new InvalidSettingError(
      'iceberg.tablePrefix',
      `must not overlap the pipeline's own prefixes (${protectedPrefixes(pipeline.pipelineId).join(', ')})`,
    );
  }
  const partitioning = props.partitioning ?? 'time-folders';
  if (!ICEBERG_PARTITIONINGS.includes(partitioning)) {
    throw new InvalidSettingError(
      'iceberg.partitioning',
      `'time-folders' or 'none' (got ${String(partitioning)})`,
    );
  }
  if (props.catalog === 'file') return { catalog: 'file', tablePrefix, partitioning };
  return {
    catalog: 'glue',
    tablePrefix,
    partitioning,
    glue: {
      databaseName: checked(
        'databaseName',
        'icebergDatabase',
        props.databaseName ?? defaultIcebergDatabaseName(pipeline.pipelineId),
      ),
      tableName: checked('tableName', 'icebergTable', props.tableName ?? 'output'),
    },
  };
}

export interface IcebergPublishTableProps {
  readonly config: IcebergConfig;
  readonly bucket: s3.IBucket;
  readonly pipelineId: string;
  /** What happens to the Glue database and table when the stack is deleted (the pipeline's removal policy). */
  readonly removalPolicy?: RemovalPolicy;
}

export class IcebergPublishTable extends Construct {
  readonly config: IcebergConfig;
  private readonly bucket: s3.IBucket;
  /** `s3://<bucket>/<tablePrefix>`: the table's location; its metadata is under `metadata/`. */
  readonly location: string;
  /** The Glue database and table (`glue` only). */
  readonly database?: glue.CfnDatabase;
  readonly table?: glue.CfnTable;

  constructor(scope: Construct, id: string, props: IcebergPublishTableProps) {
    super(scope, id);
    this.config = props.config;
    this.bucket = props.bucket;
    this.location = `s3://${props.bucket.bucketName}/${props.config.tablePrefix}`;
    const names = props.config.glue;
    if (!names) return;
    const account = Stack.of(this).account;
    this.database = new glue.CfnDatabase(this, 'Database', {
      catalogId: account,
      databaseInput: {
        name: names.databaseName,
        description: `Iceberg table of the exactly-once pipeline ${props.pipelineId}`,
      },
    });
    // No columns and no metadata: the publish step's commits write both (`shared/iceberg/glue-catalog.ts`), and a
    // definition that never changes is never rewritten by a later deploy.
    this.table = new glue.CfnTable(this, 'Table', {
      catalogId: account,
      databaseName: this.database.ref,
      tableInput: {
        name: names.tableName,
        description: `Committed output of pipeline ${props.pipelineId}: one Iceberg snapshot per committed checkpoint`,
        tableType: 'EXTERNAL_TABLE',
        parameters: { table_type: 'ICEBERG' },
        storageDescriptor: { location: this.location },
      },
    });
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    this.database.applyRemovalPolicy(removalPolicy);
    this.table.applyRemovalPolicy(removalPolicy);
  }

  /** What the stack output names: the Glue `database.table`, else the table's location. */
  get outputValue(): { readonly table: string; readonly glue: boolean } {
    const names = this.config.glue;
    return names
      ? { table: `${names.databaseName}.${names.tableName}`, glue: true }
      : { table: this.location, glue: false };
  }

  /** `<tablePrefix>/metadata/`: everything the publish step writes (metadata files, manifests, manifest lists). */
  get metadataPrefix(): string {
    return `${this.config.tablePrefix}/metadata/`;
  }

  /** The publish function's `EOS_ICEBERG_*` variables. */
  get environment(): Record<string, string> {
    const { config } = this;
    const settings: Partial<SettingsInput> = {
      icebergCatalog: config.catalog,
      icebergTablePrefix: config.tablePrefix,
      icebergPartitioning: config.partitioning,
      ...(config.glue
        ? { icebergDatabase: config.glue.databaseName, icebergTable: config.glue.tableName }
        : {}),
    };
    return settingsToEnv(settings as SettingsInput);
  }

  /**
   * Lets `grantee` read the table as Athena, Spark or Trino do: the table's files under `<tablePrefix>/` (metadata,
   * and whatever maintenance writes there) and the data files it names under `<pl>/final/output/` (`s3:GetObject`,
   * `s3:ListBucket` on those prefixes), decrypted through S3 under SSE-KMS, and for `glue` the catalog reads of this
   * table (`glue:GetDatabase`, `glue:GetTable`). Never a write: only the publish step commits to the table.
   */
  grantRead(grantee: iam.IGrantable, pipelineId: string): iam.Grant {
    const prefixes = [`${this.config.tablePrefix}/`, finalStreamPrefix(pipelineId, 'output')];
    let grant = grantPrefixReads(this, this.bucket, prefixes, grantee);
    const names = this.config.glue;
    if (names) {
      grant = grant.combine(
        iam.Grant.addToPrincipal({
          grantee,
          actions: ['glue:GetDatabase', 'glue:GetTable'],
          resourceArns: this.glueArns(names),
        }),
      );
    }
    return grant;
  }

  /** The catalog, database and table ARNs Glue authorises a table's calls on. */
  private glueArns(names: { readonly databaseName: string; readonly tableName: string }): string[] {
    const stack = Stack.of(this);
    return [
      stack.formatArn({ service: 'glue', resource: 'catalog' }),
      stack.formatArn({ service: 'glue', resource: 'database', resourceName: names.databaseName }),
      stack.formatArn({
        service: 'glue',
        resource: 'table',
        resourceName: `${names.databaseName}/${names.tableName}`,
      }),
    ];
  }

  /**
   * What the publish step does to the catalog, on this table alone: the Glue table read, updated on its version,
   * and created by a first commit that finds none (Glue authorises each on the catalog, the database and the table).
   */
  catalogStatements(): iam.PolicyStatement[] {
    const names = this.config.glue;
    if (!names) return [];
    return [
      new iam.PolicyStatement({
        actions: ['glue:GetTable', 'glue:UpdateTable', 'glue:CreateTable'],
        resources: this.glueArns(names),
      }),
    ];
  }
}
