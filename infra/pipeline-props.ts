/**
 * The props of {@link ExactlyOncePipeline} in CDK idiom — `Duration` for times, `RemovalPolicy`, `logs.RetentionDays`,
 * `kms.IKey`, an existing `ITable` / `IBucket` to bring, unions for choices — and their mapping onto the settings
 * of `config.ts`. `parsePipelineConfig` stays the one validator: props are converted to the settings' units here
 * (a `Duration` that is not a whole number of the setting's unit is refused) and validated there, so the CDK
 * context path (`-c processorTimeoutSeconds=300`, strings) and the props path (`processorTimeout:
 * Duration.minutes(5)`) cannot disagree on a rule.
 */
import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import { type DeliveryGuarantee, formatIdempotencyKeySource } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import { type PipelineConfig, parsePipelineConfig } from './config.ts';
import type { IcebergProps } from './iceberg-table.ts';
import type { KafkaSource } from './kafka-source.ts';
import { DURATION_UNITS, PROP_OF_SETTING, propLabel, propName } from './prop-names.ts';
import type { ReplayProps } from './replay.ts';

export type { IcebergProps } from './iceberg-table.ts';
export type { ReplayProps, ReplayStartingPosition } from './replay.ts';

/** A transform of your own: a module (`.ts` or `.js`) exporting a `defineTransform(…)`. */
export interface TransformModule {
  /** The module's path, absolute or relative to the CDK app's working directory. */
  readonly entry: string;
  /** Default `default` (else the module's only export). */
  readonly exportName?: string;
}

/** Where a record's business idempotency key comes from. */
export type IdempotencyKeySetting = `header:${string}` | `json:${string}` | 'transform' | 'none';

/** Where a new consumer group starts reading. */
export type StartingPositionName = 'TRIM_HORIZON' | 'LATEST' | 'AT_TIMESTAMP';

export interface ExactlyOncePipelineProps {
  // ── What to read ───────────────────────────────────────────────────────────────────────────────────────────
  /** The topic to consume. */
  readonly topic: string;
  /**
   * The Kafka cluster to read: MSK (IAM, SASL/SCRAM or mTLS; another account's through a managed VPC connection) or
   * self-managed Apache Kafka. Instead of `mskClusterArn` / `mskVpcId` / `sandboxCluster`, which describe an
   * IAM-authenticated MSK cluster in this account.
   */
  readonly source?: KafkaSource;
  /** The MSK cluster (IAM authentication) to consume from. Required unless `source` or `sandboxCluster` is given. */
  readonly mskClusterArn?: string;
  /**
   * The VPC of `mskClusterArn` (`vpc-…`): the pollers' network-interface permissions are conditioned on it.
   * Required with `mskClusterArn` unless `eventSourceMapping` is false.
   */
  readonly mskVpcId?: string;
  /** Create an MSK Serverless cluster (IAM auth) and its VPC instead of importing one: for a sandbox. Default false. */
  readonly sandboxCluster?: boolean;
  /** The event source mapping's consumer group. Default `eos-<pipelineId>`. Cannot change after creation. */
  readonly consumerGroupId?: string;
  /** Records per invocation, 1–10,000 (the 6 MB payload limit also applies). Default 500. */
  readonly batchSize?: number;
  /**
   * How long the mapping gathers records before invoking, whole seconds, 0–300 s. Default 5 seconds: fewer, fuller
   * batches (each one staged file and one transaction exactly-once), while a record still reaches committed output
   * within one checkpoint interval plus 10 s (measured: docs/benchmark.md, "Latency at the stack's defaults").
   */
  readonly maxBatchingWindow?: Duration;
  /** Where a new consumer group starts. Default `TRIM_HORIZON`. Cannot change after the mapping is created. */
  readonly startingPosition?: lambda.StartingPosition | StartingPositionName;
  /** For `startingPosition: 'AT_TIMESTAMP'`: a `Date`, Unix seconds, or an ISO 8601 time with zone. */
  readonly startingPositionTimestamp?: Date | number | string;
  /** Provisioned mode: at least this many event pollers (1–200). Unset with `maximumPollers`: on-demand pollers. */
  readonly minimumPollers?: number;
  /** Provisioned mode: at most this many event pollers (1–2,000). */
  readonly maximumPollers?: number;

  // ── The pipeline ───────────────────────────────────────────────────────────────────────────────────────────
  /**
   * Names the pipeline in every ledger key, S3 prefix, alarm and the dashboard; pipelines sharing a table and a
   * bucket need distinct ids. Default `orders`.
   */
  readonly pipelineId?: string;
  /** Default `exactly-once`; `at-least-once` and `none` are baselines (see docs/architecture.md). */
  readonly deliveryGuarantee?: DeliveryGuarantee;
  /** `header:<name>`, `json:<field>`, `transform` or `none`. Default `header:idempotency-key`. */
  readonly idempotencyKey?: IdempotencyKeySetting;
  /**
   * What becomes of a record in which the idempotency key source finds nothing: `dead-letter` (with the reason) or
   * `offset-only` (deduplicated by offset only). Counted either way (metric `IdempotencyKeysMissing`). Default
   * `dead-letter`: a key source naming the wrong header or field must not pass silently.
   */
  readonly missingIdempotencyKey?: 'dead-letter' | 'offset-only';
  /** How idempotency claims are written. Default `ahead`. */
  readonly claimWrite?: 'ahead' | 'in-transaction';
  /**
   * Where idempotency keys are remembered: `global` (one claim per key, caught across partitions) or `partition`
   * (a window of recent keys per Kafka partition, in its staging transaction: keyed dedupe at offset-only cost, for
   * keys that never cross partitions, such as the Kafka message key). Default `global`.
   */
  readonly idempotencyScope?: 'global' | 'partition';
  /** `partition` scope: most keys a partition's window remembers (1,000 to 500,000). Default 100,000. */
  readonly idempotencyWindowKeys?: number;
  /** How long a claimed idempotency key blocks duplicates, whole seconds, at least a day. Default 7 days. */
  readonly idempotencyTtl?: Duration;
  /** Gzip staged and final NDJSON objects. Default true. */
  readonly gzip?: boolean;
  /** The format of final objects. Default `ndjson`. */
  readonly outputFormat?: 'ndjson' | 'parquet';
  /** Hive-style time folders of final objects by record time, UTC. Default `none`. */
  readonly timePartitioning?: 'none' | 'day' | 'hour';
  /**
   * NDJSON final objects without time folders: `merged`, a few objects a checkpoint's shard, each partition's
   * range listed by the manifest as a slice of one; `partition`, one object a partition at
   * `topic=<t>/partition=<p>/`, for readers that list those folders. Default `merged` (a checkpoint pays a PUT and
   * a COPY an object, not a partition: docs/benchmark.md).
   */
  readonly finalObjects?: 'merged' | 'partition';
  /**
   * The workflow each scheduled checkpoint runs: `express` (about a fortieth of the Standard bill at one checkpoint
   * a minute; what may need longer than five minutes is handed to a Standard workflow) or `standard` (every
   * checkpoint on the Standard workflow, each transition billed). Default `express`.
   */
  readonly coordinatorWorkflow?: 'express' | 'standard';
  /** The output column holding a row's record time (timestamp or long, ms); default the Kafka timestamp. */
  readonly timeField?: string;
  /** Items per DynamoDB transaction, 8–100. Default 100. */
  readonly maxTransactionItems?: number;
  /** How far above its fence a batch may start before `FenceJumps` is reported (offsets). Default 1,000,000. */
  readonly maxFenceJump?: number;
  /** The transform: a built-in's name (`orders`, `passthrough`) or your module, bundled at synth. Default `orders`. */
  readonly transform?: string | TransformModule;
  /** The processor's handler module (default `functions/processor.ts`, export `handler`); not with a module transform. */
  readonly processorEntry?: string;

  // ── Functions, checkpoints, alarms ─────────────────────────────────────────────────────────────────────────
  /** The processor's timeout, whole seconds, 10–900 s. Default 2 minutes. Must stay below `orphanGrace`. */
  readonly processorTimeout?: Duration;
  /** The processor's memory (MB), 128–10,240. Default 1,024. */
  readonly processorMemorySize?: number;
  /** Each coordinator step's timeout, whole seconds, 10–900 s. Default 5 minutes. */
  readonly coordinatorStepTimeout?: Duration;
  /** How often a checkpoint is taken, whole minutes, 1–1,440. Default 1 minute. */
  readonly checkpointInterval?: Duration;
  /** An in-flight checkpoint older than this is recovered (whole seconds). Default 10 minutes. */
  readonly checkpointLease?: Duration;
  /** Unreferenced staged objects are deleted once older than this (whole seconds). Default 1 hour. */
  readonly orphanGrace?: Duration;
  /** The `NoCommit` alarm fires when staged data has waited this many checkpoint intervals (1–288). Default 3. */
  readonly noCommitAlarmIntervals?: number;
  /** The `OffsetLagHigh` alarm fires when the mapping's `OffsetLag` stays at or above this many records. Default 100,000. */
  readonly offsetLagAlarmThreshold?: number;
  /** Subscribe this address to the alarm topic. */
  readonly alarmEmail?: string;
  /** Every function's log retention. Default `RetentionDays.ONE_MONTH`. */
  readonly logRetention?: logs.RetentionDays;
  /** Add CfnOutputs (table, bucket, state machine, cluster, an `eos status` command line). Default false. */
  readonly outputs?: boolean;
  /**
   * Create the event source mapping from the topic to the processor. Default true. `false` deploys the pipeline
   * without it: to invoke the processor yourself (LocalStack's free edition, which has no MSK; docs/localstack.md)
   * or to attach a mapping of your own to `processor`.
   */
  readonly eventSourceMapping?: boolean;
  /**
   * Create a Glue database and table over the committed output, with partition projection on its time folders,
   * and an Athena workgroup with its own encrypted results bucket (docs/output.md). Needs `outputFormat: 'parquet'`.
   * Default false. With KMS encryption, whoever queries also needs `kms:Decrypt` on the key.
   */
  readonly analyticsTable?: boolean;
  /**
   * Publish each committed checkpoint to an Iceberg table as exactly one snapshot of its Parquet objects (as they
   * are, not copied): a `Publish` step after Commit with a function and role of its own, and with `catalog: 'glue'`
   * a Glue database and table Athena queries (docs/deploy.md). Needs `outputFormat: 'parquet'`.
   *
   * @default none
   */
  readonly iceberg?: IcebergProps;

  // ── Storage and encryption ─────────────────────────────────────────────────────────────────────────────────
  /**
   * An existing ledger table to use instead of creating one (another pipeline's `table`, or one of yours): key `pk`
   * (S), sort key `sk` (S), TTL on `expiresAt`, checked when the table is defined in this app. The pipeline only
   * grants its roles item actions on its own partition keys; the table's settings stay yours.
   */
  readonly table?: dynamodb.ITable;
  /**
   * An existing sink bucket to use instead of creating one (another pipeline's `bucket`, or one of yours). The
   * pipeline writes only under `<pipelineId>/`. When the bucket is an `s3.Bucket` of the same stack, its write
   * boundaries (bucket policy) and lifecycle rules for this pipeline's prefixes are added to it; otherwise they
   * cannot be, synth warns, and `bucketPolicyStatements` lists what to add to the bucket's policy yourself.
   */
  readonly bucket?: s3.IBucket;
  /**
   * Who may change the sink bucket itself: its policy, lifecycle rules, versioning, replication, object lock,
   * default encryption, ownership, ACL and public access block (`BUCKET_ADMIN_ACTIONS`, `security.ts`); the bucket
   * policy denies those to every other principal of the account, so that no over-broad role can lift the write
   * boundaries or expire committed data. IAM principal ARNs (roles, users, or the account's `:root`). Must include
   * the principal CloudFormation deploys the stack with, or the stack's next update of the bucket fails.
   *
   * @default the CloudFormation execution role of the stack's `DefaultStackSynthesizer`
   * (`cdk-<qualifier>-cfn-exec-role-<account>-<region>`); required with any other synthesizer
   */
  readonly bucketAdminPrincipals?: readonly string[];
  /**
   * What happens to what the pipeline creates (table, bucket, key, log groups) when the stack is deleted:
   * `RemovalPolicy.RETAIN` (default) or `RemovalPolicy.DESTROY` (sandboxes). The context spellings `'retain'` and
   * `'destroy'` are accepted too.
   */
  readonly removalPolicy?: RemovalPolicy | 'retain' | 'destroy';
  /** DynamoDB deletion protection on the table the pipeline creates. Default true. Not with `table`. */
  readonly deletionProtection?: boolean;
  /** DynamoDB point-in-time recovery on the table the pipeline creates. Default true. Not with `table`. */
  readonly pointInTimeRecovery?: boolean;
  /**
   * `s3` (SSE-S3, the default) or `kms`: a customer-managed key with rotation, created by the pipeline unless
   * `encryptionKey` is given, for the table and bucket it creates, its log groups and alarm topic.
   */
  readonly encryption?: 'kms' | 's3';
  /** Your customer-managed key instead of a new one (implies `encryption: 'kms'`). */
  readonly encryptionKey?: kms.IKey;
  /** Noncurrent versions of committed objects are deleted after this (whole days). Default 365 days. Not with `bucket`. */
  readonly noncurrentVersionExpiration?: Duration;
  /** Lifecycle backstop on this pipeline's in-progress prefix (whole days). Default 30 days. */
  readonly inProgressExpiration?: Duration;

  // ── Operations ─────────────────────────────────────────────────────────────────────────────────────────────
  /**
   * Roles that may run `eos epoch --start-new`, `eos redrive` and `eos replay` against this pipeline
   * (docs/operations.md): what the processor may do in the ledger (its partition keys, and Query on fences and key
   * windows), stage objects under `_inprogress/` (the bucket policy lets them, as it lets the processor), read the
   * committed output, and write the replay plans (`<pl>#REPLAY`). Never the coordinator's items or prefixes: a role
   * here cannot forge a commit. Default none.
   */
  readonly operatorRoles?: readonly iam.IRole[];
  /**
   * Replay into a new generation (docs/deploy.md, docs/operations.md): a second event source mapping on the same
   * cluster and topic, consumer group `<consumerGroupId>-replay-g<generation>` from `TRIM_HORIZON` (or
   * `AT_TIMESTAMP`), into a second processor built like the processor plus `EOS_REPLAY_GENERATION`, which stages
   * output generation `generation` (the plan `eos replay` wrote for it). It may read the replay plans
   * (`<pl>#REPLAY`), never write them. Needs `deliveryGuarantee: 'exactly-once'`. Remove it (and redeploy) once the
   * switch to the generation is committed. Default none.
   */
  readonly replay?: ReplayProps;
}

type PropName = keyof ExactlyOncePipelineProps;

/** Props that are no setting: objects of the app, validated by the construct itself. */
export const CONSTRUCT_ONLY_PROPS = [
  'source',
  'processorEntry',
  'outputs',
  'eventSourceMapping',
  'analyticsTable',
  'iceberg',
  'table',
  'bucket',
  'bucketAdminPrincipals',
  'encryptionKey',
  'operatorRoles',
  'replay',
] as const satisfies readonly PropName[];

const KNOWN_PROPS = new Set<string>([
  ...Object.values(PROP_OF_SETTING).filter((prop) => prop !== undefined),
  ...CONSTRUCT_ONLY_PROPS,
]);

/**
 * Validates props: unknown props are refused (a JavaScript caller's `processorTimeoutSeconds` would otherwise be
 * ignored), each prop is converted to its setting, and `parsePipelineConfig` checks them all. An error names the
 * prop.
 */
export function configFromProps(props: ExactlyOncePipelineProps): PipelineConfig {
  rejectUnknownProps(props);
  if (props.encryptionKey && props.encryption === 's3') {
    throw new InvalidSettingError('encryptionKey', "cannot be combined with encryption 's3'");
  }
  if (props.table) {
    for (const prop of ['deletionProtection', 'pointInTimeRecovery'] as const) {
      if (props[prop] !== undefined) {
        throw new InvalidSettingError(
          prop,
          'applies to a table the pipeline creates: set it on the table you bring',
        );
      }
    }
  }
  if (props.bucket && props.noncurrentVersionExpiration !== undefined) {
    throw new InvalidSettingError(
      'noncurrentVersionExpiration',
      'is a bucket-wide lifecycle rule of a bucket the pipeline creates: set it on the bucket you bring',
    );
  }
  const input: Record<string, unknown> = {};
  for (const [setting, prop] of Object.entries(PROP_OF_SETTING)) {
    const value = prop === undefined ? undefined : props[prop];
    if (value !== undefined) input[setting] = settingValue(setting, value);
  }
  if (props.encryptionKey) input.encryption = 'kms';
  return parsePipelineConfig(input, propLabel, { sourceGiven: props.source !== undefined, name: propName });
}

function rejectUnknownProps(props: ExactlyOncePipelineProps): void {
  for (const key of Object.keys(props)) {
    if (KNOWN_PROPS.has(key)) continue;
    const renamed = PROP_OF_SETTING[key];
    const near = renamed ?? [...KNOWN_PROPS].find((prop) => prop.toLowerCase() === key.toLowerCase());
    throw new InvalidSettingError(key, `unknown prop${near ? ` (did you mean ${near}?)` : ''}`);
  }
}

function settingValue(setting: string, value: unknown): unknown {
  const unit = DURATION_UNITS[setting];
  if (unit) return durationIn(setting, value, unit);
  if (setting === 'removalPolicy') return removalPolicySetting(value);
  if (setting === 'startingPositionTimestamp' && value instanceof Date)
    return Math.floor(value.getTime() / 1000);
  return value;
}

function durationIn(setting: string, value: unknown, unit: 'seconds' | 'minutes' | 'days'): number {
  const prop = propName(setting);
  if (!(value instanceof Duration)) {
    throw new InvalidSettingError(
      prop,
      `expected a Duration (Duration.${unit}(…)), got ${JSON.stringify(value)}`,
    );
  }
  if (value.isUnresolved()) throw new InvalidSettingError(prop, 'must be known at synth, not a token');
  try {
    if (unit === 'seconds') return value.toSeconds();
    return unit === 'minutes' ? value.toMinutes() : value.toDays();
  } catch {
    // Duration refuses a lossy conversion (90 seconds in minutes): say so in the setting's terms.
    throw new InvalidSettingError(prop, `must be a whole number of ${unit} (got ${value.toHumanString()})`);
  }
}

function removalPolicySetting(value: unknown): 'retain' | 'destroy' {
  if (value === RemovalPolicy.RETAIN || value === 'retain') return 'retain';
  if (value === RemovalPolicy.DESTROY || value === 'destroy') return 'destroy';
  throw new InvalidSettingError(
    'removalPolicy',
    `RemovalPolicy.RETAIN or RemovalPolicy.DESTROY (got ${String(value)}: a bucket has no snapshot)`,
  );
}

/**
 * The props for settings given as CDK context (strings, `-c key=value`): validated here, naming the context key
 * (`-c batchSize`), then turned into props for the settings given, and only those.
 */
export function propsFromSettings(
  input: Record<string, unknown>,
  label: (key: string) => string,
): ExactlyOncePipelineProps {
  const config = parsePipelineConfig(input, label);
  const parsed = config as unknown as Record<string, unknown>;
  const props: Record<string, unknown> = {};
  for (const setting of Object.keys(input)) {
    const prop = PROP_OF_SETTING[setting];
    // A transform stays as written (`./file.ts#export`): the prop takes the same spelling, parsed the same way.
    if (prop)
      props[prop] = setting === 'transform' ? input[setting] : propValue(setting, parsed[setting], config);
  }
  // Built from values parsePipelineConfig accepted, key by key through PROP_OF_SETTING; the construct validates
  // them again.
  return props as unknown as ExactlyOncePipelineProps;
}

/** A validated setting's value as its prop. */
function propValue(setting: string, value: unknown, config: PipelineConfig): unknown {
  const unit = DURATION_UNITS[setting];
  if (unit) return Duration[unit](value as number);
  switch (setting) {
    case 'removalPolicy':
      return removalPolicyOf(config);
    case 'idempotencyKey':
      return formatIdempotencyKeySource(config.idempotencyKey);
    default:
      // The others are their setting's value: numbers, booleans, names (CloudWatch's RetentionDays are the days).
      return value;
  }
}

/** `RemovalPolicy` of a validated configuration. */
export function removalPolicyOf(config: PipelineConfig): RemovalPolicy {
  return config.removalPolicy === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN;
}
