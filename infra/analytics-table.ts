/**
 * `AnalyticsTable`: the committed Parquet output made queryable in Athena right after `cdk deploy` — a Glue database
 * and table over `<pipeline>/final/output/`, and an Athena workgroup with its own results bucket.
 *
 * The table is defined from the same sources as the files it describes, so that they cannot drift apart:
 * - columns: the transform's declared columns (shared/transforms/api.ts), then the lineage struct `source`, typed as
 *   the Parquet encoder writes them (shared/sink/parquet.ts);
 * - partitions: the time folders of shared/sink/time-partitions.ts (`dt`, and `hour` with hourly folders), with
 *   Athena partition projection, so a folder a checkpoint writes is queryable at once: no crawler, no
 *   `MSCK REPAIR`, no partition API call on the write path.
 *
 * Athena lists the table's location instead of reading the manifests: it sees every promoted object, and only
 * those (the bucket policy lets only promote write `final/`), which includes the objects of a checkpoint whose
 * commit is still rolling forward a moment before its manifest appears (docs/output.md). `eos query` is the
 * reader that follows the manifests themselves.
 *
 * The workgroup enforces its configuration (results location, encryption, engine version), so a user cannot
 * send results elsewhere or unencrypted; its results bucket is private, TLS-only, encrypted, access-logged and
 * expires results.
 */
import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as athena from 'aws-cdk-lib/aws-athena';
import * as glue from 'aws-cdk-lib/aws-glue';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import { Construct } from 'constructs';
import type { TimePartitioning } from '../shared/config/settings.ts';
import { PipelineError } from '../shared/errors.ts';
import type { Stream } from '../shared/ledger/layout.ts';
import { analyticsDatabaseName } from '../shared/replay/current-view.ts';
import { finalStreamPrefix } from '../shared/sink/layout.ts';
import { LINEAGE_COLUMN } from '../shared/sink/parquet.ts';
import { partitionProjection, timePartitionKeys } from '../shared/sink/time-partitions.ts';
import type { ColumnDefinition, ColumnType } from '../shared/transforms/api.ts';

/** The stream the table describes: dead letters stay NDJSON, so only the output is Parquet. */
export const ANALYTICS_STREAM: Stream = 'output';

/**
 * The default first day partition projection enumerates. Records filed under an earlier day are in S3 but not
 * seen by projected queries: set `projectionFirstDay` to the day of the oldest record time the topic can hold.
 */
export const DEFAULT_PROJECTION_FIRST_DAY = '2026-01-01';

/** A column set Glue cannot hold as declared (names equal once lower-cased, or a partition key's name). */
export class AnalyticsTableError extends PipelineError {}

export interface AnalyticsTableProps {
  readonly bucket: s3.IBucket;
  readonly pipelineId: string;
  /** The transform's declared columns, in declaration order (`transform.columns`). */
  readonly columns: readonly ColumnDefinition[];
  /** The sink's time folders; `none` gives an unpartitioned table. */
  readonly timePartitioning: TimePartitioning;
  /** yyyy-MM-dd; default {@link DEFAULT_PROJECTION_FIRST_DAY}. */
  readonly projectionFirstDay?: string;
  /** Default `eos_<pipeline id>`, lower-cased, other characters as `_`. */
  readonly databaseName?: string;
  /** Default `output`. */
  readonly tableName?: string;
  /** Default `eos-<pipeline id>`. */
  readonly workgroupName?: string;
  /** Encrypts query results with this key (SSE-KMS); SSE-S3 without it. */
  readonly encryptionKey?: kms.IKey;
  /** Where the results bucket's access logs go; a bucket of the construct's own when absent. */
  readonly accessLogsBucket?: s3.IBucket;
  /** Days query results are kept; default 30. */
  readonly resultsExpirationDays?: number;
  /** Stops a query after this many bytes scanned; no limit by default. */
  readonly bytesScannedCutoffPerQuery?: number;
  /** Default RETAIN. DESTROY also empties the results bucket and deletes the workgroup's saved queries. */
  readonly removalPolicy?: RemovalPolicy;
}

/** The Glue (Hive) type of each column type: what Athena reads the Parquet encoder's columns as. */
export const GLUE_TYPES: Readonly<Record<ColumnType, string>> = {
  string: 'string',
  int: 'int',
  long: 'bigint',
  double: 'double',
  boolean: 'boolean',
  timestamp: 'timestamp',
  json: 'string',
};

/** The lineage struct as the Parquet encoder writes it: topic STRING, partition INT32, offset INT64. */
export const LINEAGE_GLUE_TYPE = 'struct<topic:string,partition:int,offset:bigint>';

export interface GlueColumn {
  readonly name: string;
  readonly type: string;
  readonly comment?: string;
}

/**
 * The table's columns: the declared ones lower-cased (Glue and Athena keep names in lower case and match Parquet
 * columns by name without case), then `source`. Two names equal without case, or a name that is a partition
 * key, would make a column unreadable: refused at synth.
 */
export function glueColumns(
  columns: readonly ColumnDefinition[],
  timePartitioning: TimePartitioning,
): GlueColumn[] {
  const reserved = new Set<string>(
    timePartitioning === 'none' ? [] : timePartitionKeys(timePartitioning).map((key) => key.name),
  );
  const all: GlueColumn[] = [
    ...columns.map((column) => ({ name: column.name, type: GLUE_TYPES[column.type] })),
    // `source` is reserved in transform schemas (api.ts): the lineage column is always the last.
    { name: LINEAGE_COLUMN, type: LINEAGE_GLUE_TYPE, comment: 'Kafka lineage: topic, partition, offset' },
  ];
  const seen = new Map<string, string>();
  for (const column of all) {
    const name = column.name.toLowerCase();
    const other = seen.get(name);
    if (other !== undefined) {
      throw new AnalyticsTableError(`columns ${other} and ${column.name} are one column in Glue (${name})`);
    }
    if (reserved.has(name)) {
      throw new AnalyticsTableError(`column ${column.name} has the name of the time partition key ${name}`);
    }
    seen.set(name, column.name);
  }
  return all.map((column) => ({ ...column, name: column.name.toLowerCase() }));
}

/** `s3://<bucket>/<pipeline>/final/output/`: the table's location (and the projection's template root). */
export function analyticsTableLocation(bucketName: string, pipelineId: string): string {
  return `s3://${bucketName}/${finalStreamPrefix(pipelineId, ANALYTICS_STREAM)}`;
}

const PARQUET = {
  inputFormat: 'org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat',
  outputFormat: 'org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat',
  serde: 'org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe',
} as const;

export class AnalyticsTable extends Construct {
  readonly database: glue.CfnDatabase;
  readonly table: glue.CfnTable;
  readonly workgroup: athena.CfnWorkGroup;
  readonly resultsBucket: s3.Bucket;
  readonly databaseName: string;
  readonly tableName: string;
  readonly workgroupName: string;

  constructor(scope: Construct, id: string, props: AnalyticsTableProps) {
    super(scope, id);
    const stack = Stack.of(this);
    this.databaseName = props.databaseName ?? analyticsDatabaseName(props.pipelineId);
    this.tableName = props.tableName ?? ANALYTICS_STREAM;
    this.workgroupName = props.workgroupName ?? `eos-${props.pipelineId}`;
    const columns = glueColumns(props.columns, props.timePartitioning);
    const location = analyticsTableLocation(props.bucket.bucketName, props.pipelineId);
    const partitioned = props.timePartitioning !== 'none';

    this.database = new glue.CfnDatabase(this, 'Database', {
      catalogId: stack.account,
      databaseInput: {
        name: this.databaseName,
        description: `Committed output of the exactly-once pipeline ${props.pipelineId}`,
      },
    });
    this.table = new glue.CfnTable(this, 'Table', {
      catalogId: stack.account,
      // The database's ref is its name: the table depends on it without an explicit dependency.
      databaseName: this.database.ref,
      tableInput: {
        name: this.tableName,
        description: `Parquet output of pipeline ${props.pipelineId} (committed objects under final/${ANALYTICS_STREAM}/)`,
        tableType: 'EXTERNAL_TABLE',
        parameters: {
          classification: 'parquet',
          EXTERNAL: 'TRUE',
          'parquet.compression': 'SNAPPY',
          ...(props.timePartitioning === 'none'
            ? {}
            : partitionProjection(props.timePartitioning, {
                location,
                firstDay: props.projectionFirstDay ?? DEFAULT_PROJECTION_FIRST_DAY,
              })),
        },
        partitionKeys: partitioned
          ? timePartitionKeys(props.timePartitioning).map(({ name, type, comment }) => ({
              name,
              type,
              comment,
            }))
          : [],
        storageDescriptor: {
          location,
          inputFormat: PARQUET.inputFormat,
          outputFormat: PARQUET.outputFormat,
          serdeInfo: { serializationLibrary: PARQUET.serde, parameters: { 'serialization.format': '1' } },
          columns: columns.map((column) => ({ ...column })),
          storedAsSubDirectories: false,
        },
      },
    });

    this.resultsBucket = this.createResultsBucket(props);
    this.workgroup = new athena.CfnWorkGroup(this, 'Workgroup', {
      name: this.workgroupName,
      description: `Athena queries over the committed output of pipeline ${props.pipelineId}`,
      state: 'ENABLED',
      recursiveDeleteOption: props.removalPolicy === RemovalPolicy.DESTROY,
      workGroupConfiguration: {
        enforceWorkGroupConfiguration: true,
        publishCloudWatchMetricsEnabled: true,
        engineVersion: { selectedEngineVersion: 'Athena engine version 3' },
        ...(props.bytesScannedCutoffPerQuery === undefined
          ? {}
          : { bytesScannedCutoffPerQuery: props.bytesScannedCutoffPerQuery }),
        resultConfiguration: {
          outputLocation: `s3://${this.resultsBucket.bucketName}/`,
          expectedBucketOwner: stack.account,
          encryptionConfiguration: props.encryptionKey
            ? { encryptionOption: 'SSE_KMS', kmsKey: props.encryptionKey.keyArn }
            : { encryptionOption: 'SSE_S3' },
        },
      },
    });
    if (props.removalPolicy !== undefined) this.workgroup.applyRemovalPolicy(props.removalPolicy);
  }

  private createResultsBucket(props: AnalyticsTableProps): s3.Bucket {
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    const common = {
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      minimumTLSVersion: 1.2,
      removalPolicy,
      autoDeleteObjects: removalPolicy === RemovalPolicy.DESTROY,
    } as const;
    const accessLogs =
      props.accessLogsBucket ??
      new s3.Bucket(this, 'ResultsAccessLogs', {
        ...common,
        // Server access logging cannot deliver to an SSE-KMS bucket.
        encryption: s3.BucketEncryption.S3_MANAGED,
        lifecycleRules: [{ id: 'expire-access-logs', expiration: Duration.days(365) }],
      });
    return new s3.Bucket(this, 'Results', {
      ...common,
      ...(props.encryptionKey
        ? { encryption: s3.BucketEncryption.KMS, encryptionKey: props.encryptionKey, bucketKeyEnabled: true }
        : { encryption: s3.BucketEncryption.S3_MANAGED }),
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: 'athena-results/',
      lifecycleRules: [
        {
          id: 'expire-query-results',
          expiration: Duration.days(props.resultsExpirationDays ?? 30),
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
    });
  }
}
