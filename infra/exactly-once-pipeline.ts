/**
 * `ExactlyOncePipeline`: the whole pipeline as one reusable construct — the MSK event source and processor, the
 * ledger table, the sink bucket, the checkpoint coordinator and its schedule, the monitor, alarms and dashboard.
 *
 * ```ts
 * new ExactlyOncePipeline(stack, 'Orders', { mskClusterArn: 'arn:aws:kafka:…', topic: 'orders' });
 * ```
 * Props (`pipeline-props.ts`) are in CDK idiom and map onto the settings of `config.ts`, validated there: a bad one
 * fails synth naming the prop. Several pipelines can share one table and one bucket (pass one's `table` and `bucket`
 * to the next): each pipeline's roles reach only its own ledger keys and prefixes. Least privilege
 * throughout, on both sides: each role has DynamoDB item actions only on the table ARN and only on the item kinds
 * its component writes (`dynamodb:LeadingKeys`), S3 object actions only under the prefixes its step writes, logs
 * only into its own log group, KMS only through S3 and DynamoDB (`kms:ViaService`); the bucket policy denies
 * writes to manifests, final data, coordinator work and staged data to every principal but their writers
 * (`security.ts`). `grantReadCommitted` and the `metric…` methods give other constructs what they need of a pipeline.
 */

import { Annotations, ArnFormat, Duration, type RemovalPolicy, Stack, Token } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { settingsToEnv } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import { fenceLeadingKeys } from '../shared/ledger/fences.ts';
import { STREAMS } from '../shared/ledger/layout.ts';
import {
  METRIC,
  METRICS_NAMESPACE,
  type MetricName,
  metricDimensionsMap,
} from '../shared/observability/names.ts';
import { finalPrefix, manifestsPrefix, stagedStreamPrefix } from '../shared/sink/layout.ts';
import { allowAlarmsToPublish, createAlarmTopic } from './alarm-topic.ts';
import { AnalyticsTable } from './analytics-table.ts';
import { BundledFunction } from './bundled-function.ts';
import { CheckpointCoordinator } from './checkpoint-coordinator.ts';
import { type PipelineConfig, pipelineSettingsOf } from './config.ts';
import { type FunctionDefaults, functionDefaults } from './function-defaults.ts';
import { kafkaOffsetsStatements, SandboxKafkaCluster } from './kafka-cluster.ts';
import {
  type AttachedKafkaSource,
  attachKafkaSource,
  type KafkaSource,
  MSK_VPC_REQUIRED,
  usesIamAuth,
  validateKafkaSource,
} from './kafka-source.ts';
import {
  keyWindowLeadingKeys,
  monitorLeadingKeys,
  OPERATOR_REPLAY_PLAN_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
  PROCESSOR_KEY_WINDOW_ACTIONS,
  processorLeadingKeys,
  REPLAY_PROCESSOR_PLAN_ACTIONS,
} from './ledger-access.ts';
import { createLedgerTable, LEDGER_TABLE_NEEDS, ledgerLayoutProblems } from './ledger-table.ts';
import { PipelineObservability } from './observability.ts';
import { projectModule } from './package-paths.ts';
import { addPipelineOutputs } from './pipeline-outputs.ts';
import { configFromProps, type ExactlyOncePipelineProps, removalPolicyOf } from './pipeline-props.ts';
import { bucketAdminsOf, pinnedToAccount } from './principals.ts';
import { REPLAY_GENERATION_ENV, type ReplayConfig, replayConfigOf, replayLeadingKeys } from './replay.ts';
import {
  allowLogsToUseKey,
  autoDeleteHandlerRoleArn,
  bucketAdminStatement,
  grantKeyVia,
  type KeyAccess,
  type KeyService,
  sidOfPipeline,
  sinkBoundaryStatements,
} from './security.ts';
import { createSinkBuckets, pipelineLifecycleRules } from './sink-bucket.ts';
import {
  DEFAULT_PROCESSOR_ENTRY,
  resolveTransform,
  transformColumns,
  writeProcessorEntry,
} from './transform-entry.ts';

export {
  keyWindowLeadingKeys,
  monitorLeadingKeys,
  OPERATOR_REPLAY_PLAN_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
  PROCESSOR_KEY_WINDOW_ACTIONS,
  processorLeadingKeys,
  REPLAY_PROCESSOR_PLAN_ACTIONS,
} from './ledger-access.ts';
export type {
  ExactlyOncePipelineProps,
  IdempotencyKeySetting,
  ReplayProps,
  ReplayStartingPosition,
  StartingPositionName,
  TransformModule,
} from './pipeline-props.ts';
export { replayLeadingKeys } from './replay.ts';

const MONITOR_ENTRY = projectModule('../functions/monitor.ts', import.meta.url);

/** A replay into a new generation (the `replay` prop): its settings, its processor and its mapping. */
export interface PipelineReplay extends ReplayConfig {
  /** Built like `processor`, plus `EOS_REPLAY_GENERATION`. */
  readonly processor: BundledFunction;
  /** The replay's mapping (consumer group `consumerGroupId`); absent with `eventSourceMapping: false`. */
  readonly eventSource?: lambda.EventSourceMapping;
  readonly kafka?: AttachedKafkaSource;
}

/** Which pipelines use each table and bucket: two pipelines of one id would write the same keys. */
const PIPELINES_OF = new WeakMap<object, Set<string>>();
/** Buckets whose policy already has the bucket-level deny (one per bucket, whichever pipeline added it). */
const BUCKETS_GUARDED = new WeakSet<s3.IBucket>();

export class ExactlyOncePipeline extends Construct {
  readonly config: PipelineConfig;
  /** The MSK cluster's ARN; undefined for a self-managed Kafka source. */
  readonly clusterArn?: string;
  /** What the pipeline reads. */
  readonly source: KafkaSource;
  readonly sandbox?: SandboxKafkaCluster;
  /** The pipeline's customer-managed key (created, or the `encryptionKey` prop) under `encryption: 'kms'`. */
  readonly encryptionKey?: kms.IKey;
  /** The ledger: created, or the `table` prop. */
  readonly table: dynamodb.ITable;
  /** The sink bucket: created, or the `bucket` prop. */
  readonly bucket: s3.IBucket;
  /** The sink bucket's access-log bucket, when the pipeline created the sink bucket. */
  readonly accessLogsBucket?: s3.IBucket;
  /**
   * This pipeline's write boundaries on the sink bucket (deny statements, `security.ts`). Added to the bucket's
   * policy when this stack owns the bucket (`bucketPolicyAdded`); otherwise add them to its policy yourself.
   */
  readonly bucketPolicyStatements: readonly iam.PolicyStatement[];
  /** The roles that may run `eos epoch --start-new` and `eos redrive` (the `operatorRoles` prop). */
  readonly operatorRoles: readonly iam.IRole[];
  /**
   * The bucket-level deny (`security.ts`): changes to the bucket's policy, lifecycle, versioning, … by anyone but
   * `bucketAdminPrincipals`. On the bucket when `bucketPolicyAdded`; otherwise add it to the bucket's policy
   * yourself (once per bucket).
   */
  readonly bucketAdminPolicyStatement: iam.PolicyStatement;
  /** Whether `bucketPolicyStatements` and this pipeline's lifecycle rules are on the bucket. */
  readonly bucketPolicyAdded: boolean;
  readonly processor: BundledFunction;
  /** The event source mapping; absent with `eventSourceMapping: false`. */
  readonly eventSource?: lambda.EventSourceMapping;
  /** The mapping and what the processor's role was granted for it. */
  readonly kafka?: AttachedKafkaSource;
  /** The Glue table and Athena workgroup over the output, with `analyticsTable: true`. */
  readonly analytics?: AnalyticsTable;
  /** The replay into a new generation, with the `replay` prop. */
  readonly replay?: PipelineReplay;
  readonly coordinator: CheckpointCoordinator;
  readonly monitor: BundledFunction;
  readonly alarmTopic: sns.Topic;
  readonly observability: PipelineObservability;
  /** The `EOS_*` environment every function gets (the settings the Lambdas parse with `settingsFromEnv`). */
  readonly environment: Record<string, string>;
  /** Set when the transform decodes with a Glue registry: the registries its processor may read (empty: any). */
  readonly glueSchemaReads?: { readonly registryNames: readonly string[] };
  /** The Secrets Manager secrets holding the transform's registry credentials (`basicAuthSecret`); empty: none. */
  readonly registrySecretArns: readonly string[];

  constructor(scope: Construct, id: string, props: ExactlyOncePipelineProps) {
    super(scope, id);
    const { processorEntry, source } = props;
    const config = configFromProps(props);
    this.config = config;
    const replay = replayConfigOf(props.replay, config);
    const removalPolicy = removalPolicyOf(config);
    const bucketAdmins = bucketAdminsOf(this, props.bucketAdminPrincipals);
    // Before any resource: a bad transform setting fails synth here, never a cold start.
    const transformModule = resolveTransform(config.transform);
    if (transformModule && processorEntry) {
      throw new InvalidSettingError('processorEntry', 'cannot be combined with a module transform');
    }

    this.sandbox =
      !source && config.sandboxCluster
        ? new SandboxKafkaCluster(this, 'Sandbox', { clusterName: `eos-${config.pipelineId}` })
        : undefined;
    this.source = source ?? sourceOf(config, this.sandbox);
    this.clusterArn = this.source.kind === 'msk' ? this.source.clusterArn : undefined;
    // The source's own checks first: a cross-account cluster without its VPC connection is the clearer error.
    validateKafkaSource(this.source, Stack.of(this).account);
    if (props.eventSourceMapping !== false && this.source.kind === 'msk' && !this.source.vpcId) {
      throw new InvalidSettingError(source ? 'source.vpcId' : 'mskVpcId', MSK_VPC_REQUIRED);
    }

    this.encryptionKey = this.pipelineKey(props.encryptionKey, removalPolicy);
    this.table = this.ledgerTable(props.table, removalPolicy);
    if (props.bucket) {
      this.bucket = this.claim(props.bucket, 'bucket');
    } else {
      const buckets = createSinkBuckets(this, 'Sink', {
        pipelineId: config.pipelineId,
        removalPolicy,
        noncurrentVersionExpirationDays: config.noncurrentVersionExpirationDays,
        inProgressExpirationDays: config.inProgressExpirationDays,
        encryptionKey: this.encryptionKey,
      });
      this.bucket = this.claim(buckets.bucket, 'bucket');
      this.accessLogsBucket = buckets.accessLogs;
    }
    this.environment = settingsToEnv({
      ...pipelineSettingsOf(config),
      ledgerTable: this.table.tableName,
      bucket: this.bucket.bucketName,
      // Only Parquet needs them (its schema); NDJSON functions keep a smaller environment.
      outputColumns:
        config.outputFormat === 'parquet'
          ? [...transformColumns(config.transform, transformModule)]
          : undefined,
    });

    const entry = transformModule
      ? writeProcessorEntry(transformModule)
      : (processorEntry ?? DEFAULT_PROCESSOR_ENTRY);
    this.processor = this.createProcessor('Processor', entry, removalPolicy);
    if (transformModule?.usesGlueRegistry) {
      this.glueSchemaReads = { registryNames: transformModule.glueRegistryNames };
      this.grantGlueSchemaReads(this.processor, transformModule.glueRegistryNames);
    }
    this.registrySecretArns = transformModule?.registrySecretArns ?? [];
    this.grantRegistrySecretReads(this.processor);
    if (props.eventSourceMapping !== false) {
      this.kafka = this.attachMapping(this.processor, config);
      this.eventSource = this.kafka.mapping;
    }
    if (replay) {
      this.replay = this.createReplay(replay, entry, removalPolicy, props.eventSourceMapping !== false);
    }
    this.coordinator = new CheckpointCoordinator(this, 'Coordinator', {
      table: this.table,
      bucket: this.bucket,
      environment: this.environment,
      interval: Duration.minutes(config.checkpointIntervalMinutes),
      functionDefaults: this.defaults(
        Duration.seconds(config.coordinatorStepTimeoutSeconds),
        1024,
        removalPolicy,
      ),
      logRetention: config.logRetentionDays as logs.RetentionDays,
      removalPolicy,
      encryptionKey: this.encryptionKey,
    });
    this.operatorRoles = [...(props.operatorRoles ?? [])];
    this.bucketPolicyStatements = this.boundaryStatements();
    this.bucketAdminPolicyStatement = bucketAdminStatement(
      this.bucket,
      bucketAdmins,
      this.exemptPrincipals(),
    );
    this.bucketPolicyAdded = this.protectBucket(props.bucket === undefined);
    this.monitor = this.createMonitor(removalPolicy);
    this.alarmTopic = createAlarmTopic(this, {
      pipelineId: config.pipelineId,
      encryptionKey: this.encryptionKey,
      alarmEmail: config.alarmEmail,
    });
    this.observability = this.createObservability(config);
    allowAlarmsToPublish(this.alarmTopic, this.observability.alarmNames);
    if (props.analyticsTable)
      this.analytics = this.createAnalyticsTable(config, transformModule, removalPolicy);
    if (props.outputs) this.outputs();
    for (const operator of this.operatorRoles) this.grantOperate(this.operatorPrincipal(operator));
  }

  /**
   * What `eos epoch --start-new`, `eos redrive` and `eos replay` need (the `operatorRoles` prop): the processor's ledger items
   * (and Query on fences and key windows: redrive reads every fence and the windows of partition scope), staging
   * under the in-progress prefixes (the bucket policy lets `operatorRoles` write there), the committed output, the
   * data keys, the replay plans (`eos replay` writes a plan before its replay mapping is deployed, and requests
   * the switch on it), and on an MSK source the topic's offsets at a time (`eos replay --from-timestamp`:
   * `kafkaOffsetsStatements`). Nothing of the coordinator's.
   */
  private grantOperate(role: iam.IPrincipal): void {
    const pl = this.config.pipelineId;
    const sid = sidOfPipeline(pl);
    this.grantLedger(
      role,
      [...PROCESSOR_DYNAMODB_ACTIONS],
      processorLeadingKeys(pl),
      `OperateLedgerItems${sid}`,
    );
    this.grantLedger(
      role,
      ['dynamodb:Query'],
      [...fenceLeadingKeys(pl), ...keyWindowLeadingKeys(pl)],
      `OperateLedgerQueries${sid}`,
    );
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: `OperateStageObjects${sid}`,
        actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
        resources: this.processorObjectPrefixes().map((prefix) => this.bucket.arnForObjects(`${prefix}*`)),
      }),
    );
    this.grantReadCommitted(role);
    this.grantDataKeys(role, ['s3', 'dynamodb'], 'encrypt-decrypt');
    // `eos redrive` decodes dead letters again as the processor does: the same schema reads and credentials.
    const grantee: iam.IGrantable = { grantPrincipal: role };
    if (this.glueSchemaReads) this.grantGlueSchemaReads(grantee, this.glueSchemaReads.registryNames);
    this.grantRegistrySecretReads(grantee);
    this.grantLedger(
      role,
      [...OPERATOR_REPLAY_PLAN_ACTIONS],
      replayLeadingKeys(pl),
      `OperateReplayPlans${sid}`,
    );
    if (this.source.kind === 'msk') {
      const { clusterArn } = this.source;
      const iamAuth = usesIamAuth(this.source);
      for (const statement of kafkaOffsetsStatements(clusterArn, this.config.topic, iamAuth, sid)) {
        role.addToPrincipalPolicy(statement);
      }
    }
  }

  /**
   * An operator role as its grants should reach it. CloudFormation attaches a policy to a role by name, in the
   * account it deploys into: a role ARN of another account would silently lend its grants to a same-named role
   * here. Refused when the deploying account is known (the stack's, or for an environment-agnostic stack the MSK
   * cluster's or its VPC connection's, which Lambda requires to be this account); when nothing tells it (a sandbox
   * cluster, self-managed Kafka), every grant is pinned to the ARN's account (`aws:PrincipalAccount`), so a
   * same-named role of another account gets nothing.
   */
  private operatorPrincipal(role: iam.IRole): iam.IPrincipal {
    const roleAccount = role.env.account;
    if (Token.isUnresolved(roleAccount)) return role;
    const stackAccount = Stack.of(this).account;
    const [account, whose] = Token.isUnresolved(stackAccount)
      ? this.sourceAccount()
      : [stackAccount, "the stack's"];
    if (account === undefined) return pinnedToAccount(role, roleAccount);
    if (account !== roleAccount) {
      throw new InvalidSettingError(
        'operatorRoles',
        `${role.roleArn} is a role of account ${roleAccount}, but the stack deploys into ${account} (${whose}): its grants would go to a same-named role of ${account}`,
      );
    }
    return role;
  }

  /** The deploying account as the MSK source tells it: its VPC connection's account, else the cluster's. */
  private sourceAccount(): [string | undefined, string] {
    if (this.source.kind !== 'msk') return [undefined, ''];
    const { vpcConnectionArn, clusterArn } = this.source;
    if (vpcConnectionArn !== undefined && !Token.isUnresolved(vpcConnectionArn)) {
      return [vpcConnectionArn.split(':')[4], "the MSK VPC connection's"];
    }
    if (vpcConnectionArn === undefined && !Token.isUnresolved(clusterArn)) {
      return [clusterArn.split(':')[4], "the MSK cluster's"];
    }
    return [undefined, ''];
  }

  /**
   * Lets `grantee` read this pipeline's committed output, as `eos read` and `eos verify` do: list and get its
   * manifests and final objects (and decrypt them through S3 under SSE-KMS) — not staged data, not coordinator
   * work, not another pipeline's prefixes of a shared bucket.
   */
  grantReadCommitted(grantee: iam.IGrantable): iam.Grant {
    const prefixes = [manifestsPrefix(this.config.pipelineId), finalPrefix(this.config.pipelineId)];
    let grant = iam.Grant.addToPrincipal({
      grantee,
      actions: ['s3:GetObject'],
      resourceArns: prefixes.map((prefix) => this.bucket.arnForObjects(`${prefix}*`)),
    }).combine(
      iam.Grant.addToPrincipal({
        grantee,
        actions: ['s3:ListBucket'],
        resourceArns: [this.bucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': prefixes.map((prefix) => `${prefix}*`) } },
      }),
    );
    const key = this.bucket.encryptionKey;
    if (key) {
      const stack = Stack.of(this);
      grant = grant.combine(
        iam.Grant.addToPrincipal({
          grantee,
          actions: ['kms:Decrypt'],
          resourceArns: [key.keyArn],
          conditions: { StringEquals: { 'kms:ViaService': `s3.${stack.region}.${stack.urlSuffix}` } },
        }),
      );
    }
    return grant;
  }

  /**
   * One of this pipeline's metrics (`shared/observability/names.ts`), with the dimensions the handlers emit it
   * with. Default statistic Sum, period 5 minutes.
   */
  metric(metricName: MetricName, props: cloudwatch.MetricOptions = {}): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: metricDimensionsMap(this.config.pipelineId),
      statistic: 'Sum',
      period: Duration.minutes(5),
      ...props,
    });
  }

  /** Records whose effects a staging transaction made durable (P1). Sum over 5 minutes. */
  metricRecordsStaged(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.recordsStaged, props);
  }

  /** Records the transform rejected, written to the dead-letter stream (P6). Sum over 5 minutes. */
  metricDeadLettered(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.deadLettered, props);
  }

  /** Checkpoints committed. Sum over 5 minutes. */
  metricCheckpointsCommitted(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.checkpointsCommitted, props);
  }

  /** Checkpoints aborted (their staged data waits for the next one, C6). Sum over 5 minutes. */
  metricCheckpointsAborted(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.checkpointsAborted, props);
  }

  /** Seconds since the last committed checkpoint (the monitor's report): how stale readers' data is. Maximum. */
  metricLastCommitAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.lastCommitAge, { statistic: 'Maximum', ...props });
  }

  /** Age of the oldest staged file no committed checkpoint covers yet, seconds (the NoCommit alarm's). Maximum. */
  metricOldestUncommittedAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.oldestUncommittedStagedAge, { statistic: 'Maximum', ...props });
  }

  /** From a checkpoint's begin to its COMMITTED or ABORTED write, milliseconds. p90. */
  metricCheckpointDuration(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metric(METRIC.checkpointDuration, { statistic: 'p90', ...props });
  }

  /** The customer-managed key under `encryption: 'kms'`: the one given, else a new one with rotation. */
  private pipelineKey(given: kms.IKey | undefined, removalPolicy: RemovalPolicy): kms.IKey | undefined {
    if (this.config.encryption !== 'kms') return undefined;
    const key =
      given ??
      new kms.Key(this, 'Key', {
        description: `Exactly-once pipeline ${this.config.pipelineId}: ledger, sink bucket, log groups and alarm topic`,
        enableKeyRotation: true,
        removalPolicy,
      });
    if (!allowLogsToUseKey(key)) {
      this.warn(
        'KeyPolicyNotChanged',
        `the policy of key ${key.node.path} is not this stack's: allow CloudWatch Logs (logs.<region>.amazonaws.com) kms:Encrypt*, Decrypt*, ReEncrypt*, GenerateDataKey*, Describe* for this account's log groups, and CloudWatch (cloudwatch.amazonaws.com) kms:Decrypt and GenerateDataKey* for the alarm topic`,
      );
    }
    return key;
  }

  /** The ledger: created, or the one brought, checked against the ledger's layout where it is known. */
  private ledgerTable(given: dynamodb.ITable | undefined, removalPolicy: RemovalPolicy): dynamodb.ITable {
    if (!given) {
      return this.claim(
        createLedgerTable(this, 'Ledger', {
          removalPolicy,
          deletionProtection: this.config.deletionProtection,
          pointInTimeRecovery: this.config.pointInTimeRecovery,
          encryptionKey: this.encryptionKey,
        }),
        'table',
      );
    }
    const problems = ledgerLayoutProblems(given);
    if (problems && problems.length > 0) {
      throw new InvalidSettingError(
        'table',
        `${problems.join('; ')}; the ledger needs ${LEDGER_TABLE_NEEDS}`,
      );
    }
    return this.claim(given, 'table');
  }

  /** Records this pipeline as a user of a table or bucket; a second pipeline of the same id would share its keys. */
  private claim<T extends object>(resource: T, what: 'table' | 'bucket'): T {
    const ids = PIPELINES_OF.get(resource) ?? new Set<string>();
    const pl = this.config.pipelineId;
    if (ids.has(pl)) {
      throw new InvalidSettingError(
        'pipelineId',
        `"${pl}" already names a pipeline of this ${what}: pipelines sharing a ${what} need distinct ids`,
      );
    }
    PIPELINES_OF.set(resource, ids.add(pl));
    return resource;
  }

  private warn(id: string, message: string): void {
    Annotations.of(this).addWarningV2(`exactly-once-pipeline:${id}`, message);
  }

  private defaults(timeout: Duration, memorySize: number, removalPolicy: RemovalPolicy): FunctionDefaults {
    return functionDefaults({
      timeout,
      memorySize,
      logRetention: this.config.logRetentionDays as logs.RetentionDays,
      removalPolicy,
      logEncryptionKey: this.encryptionKey,
      environment: {},
    });
  }

  /**
   * A transform that decodes with an AWS Glue Schema Registry: the processor reads schema versions
   * (`glue:GetSchemaVersion`, nothing else), in the registries the transform names, else in this account and region.
   */
  private grantGlueSchemaReads(grantee: iam.IGrantable, registryNames: readonly string[]): void {
    const glueArn = (resource: string) =>
      Stack.of(this).formatArn({ service: 'glue', resource, arnFormat: ArnFormat.NO_RESOURCE_NAME });
    const resources =
      registryNames.length > 0
        ? registryNames.flatMap((name) => [glueArn(`registry/${name}`), glueArn(`schema/${name}/*`)])
        : [glueArn('registry/*'), glueArn('schema/*')];
    grantee.grantPrincipal.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'ReadGlueSchemaVersions',
        actions: ['glue:GetSchemaVersion'],
        resources,
      }),
    );
  }

  /**
   * A transform whose Confluent registry names `basicAuthSecret`: `secretsmanager:GetSecretValue` on those secrets
   * only. A secret ARN given without its random suffix matches the secret only as `<arn>-??????`.
   */
  private grantRegistrySecretReads(grantee: iam.IGrantable): void {
    if (this.registrySecretArns.length === 0) return;
    grantee.grantPrincipal.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'ReadRegistrySecrets',
        actions: ['secretsmanager:GetSecretValue'],
        resources: this.registrySecretArns.flatMap((arn) => [arn, `${arn}-??????`]),
      }),
    );
  }

  /**
   * The processor, or with `replay` the replay processor: the same bundle, settings and grants, plus
   * `EOS_REPLAY_GENERATION` and a read of the replay plans.
   */
  private createProcessor(
    id: string,
    entry: string,
    removalPolicy: RemovalPolicy,
    replay?: ReplayConfig,
  ): BundledFunction {
    const config = this.config;
    const defaults = this.defaults(
      Duration.seconds(config.processorTimeoutSeconds),
      config.processorMemoryMb,
      removalPolicy,
    );
    const fn = new BundledFunction(this, id, {
      ...defaults,
      entry,
      handler: 'handler',
      description: replay
        ? `Replays MSK records of ${config.topic} into generation ${replay.generation} of pipeline ${config.pipelineId}`
        : `Stages MSK records of ${config.topic} for pipeline ${config.pipelineId} (${config.deliveryGuarantee})`,
      environment: {
        ...defaults.environment,
        ...this.environment,
        // The processor rejects events of any other source or topic before any effect.
        ...settingsToEnv({
          ledgerTable: this.table.tableName,
          bucket: this.bucket.bucketName,
          eventSourceArn: this.expectedEventSourceArn(),
          bootstrapServers:
            this.source.kind === 'self-managed-kafka' ? this.source.bootstrapServers.join(',') : undefined,
          topics: [config.topic],
        }),
        ...(replay ? { [REPLAY_GENERATION_ENV]: String(replay.generation) } : {}),
      },
    });
    this.grantLedger(fn, PROCESSOR_DYNAMODB_ACTIONS, processorLeadingKeys(config.pipelineId));
    this.grantLedger(
      fn,
      PROCESSOR_KEY_WINDOW_ACTIONS,
      keyWindowLeadingKeys(config.pipelineId),
      'KeyWindowReads',
    );
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'StageObjects',
        actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
        resources: this.processorObjectPrefixes().map((prefix) => this.bucket.arnForObjects(`${prefix}*`)),
      }),
    );
    this.grantDataKeys(fn, ['s3', 'dynamodb'], 'encrypt-decrypt');
    if (replay) {
      this.grantLedger(
        fn,
        REPLAY_PROCESSOR_PLAN_ACTIONS,
        replayLeadingKeys(config.pipelineId),
        'ReplayPlanReads',
      );
    }
    return fn;
  }

  /**
   * The event source mapping into `fn`: the pipeline's consumer group and starting position, or a replay's (its
   * own group, so its starting position applies).
   */
  private attachMapping(fn: lambda.Function, config: PipelineConfig, replay?: ReplayConfig) {
    return attachKafkaSource(this, fn, this.source, {
      topic: config.topic,
      consumerGroupId: replay?.consumerGroupId ?? config.consumerGroupId,
      batchSize: config.batchSize,
      maxBatchingWindow: Duration.seconds(config.maxBatchingWindowSeconds),
      startingPosition: lambda.StartingPosition[replay?.startingPosition ?? config.startingPosition],
      startingPositionTimestamp: replay ? replay.startingPositionTimestamp : config.startingPositionTimestamp,
      provisionedPollers:
        config.minimumPollers === undefined && config.maximumPollers === undefined
          ? undefined
          : { minimumPollers: config.minimumPollers, maximumPollers: config.maximumPollers },
    });
  }

  /**
   * Exactly-once stages each output stream under its in-progress prefix, and nothing else (not the coordinator's
   * work objects, not final data, not manifests); the weaker guarantees write final objects directly.
   */
  processorObjectPrefixes(): string[] {
    const pl = this.config.pipelineId;
    const prefixes = STREAMS.map((stream) => stagedStreamPrefix(pl, stream));
    if (this.config.deliveryGuarantee !== 'exactly-once') prefixes.push(finalPrefix(pl));
    return prefixes;
  }

  /**
   * The keys of the table and the bucket (the pipeline's own, or those of a table or bucket brought with their
   * key), each usable only through its service; one statement when both use the same key.
   */
  private grantDataKeys(grantee: iam.IGrantable, services: readonly KeyService[], access: KeyAccess): void {
    const byKey = new Map<kms.IKey, KeyService[]>();
    const use = (key: kms.IKey | undefined, service: KeyService) => {
      if (key && services.includes(service)) byKey.set(key, [...(byKey.get(key) ?? []), service]);
    };
    use(this.bucket.encryptionKey, 's3');
    use(this.table.encryptionKey, 'dynamodb');
    for (const [key, via] of byKey) grantKeyVia(key, grantee, via, access);
  }

  /** The resource side of the same boundaries (`security.ts`): who may write each of this pipeline's prefixes. */
  private boundaryStatements(): iam.PolicyStatement[] {
    const steps = this.coordinator.functions;
    const role = (fn: lambda.IFunction): iam.IRole => fn.role!;
    const processorWritesFinal = this.config.deliveryGuarantee !== 'exactly-once';
    return sinkBoundaryStatements(this.bucket, {
      pipelineId: this.config.pipelineId,
      manifests: { put: [role(steps.commit)], delete: [] },
      finalData: {
        put: [role(steps.promote), ...(processorWritesFinal ? [role(this.processor)] : [])],
        delete: [],
      },
      coordinatorWork: {
        put: [steps.prepare, steps.promote].map(role),
        delete: [steps.cleanup, steps.abort].map(role),
      },
      staged: {
        put: [
          role(this.processor),
          ...(this.replay ? [role(this.replay.processor)] : []),
          ...this.operatorRoles,
        ],
        delete: [steps.cleanup, steps.abort].map(role),
      },
      exempt: this.exemptPrincipals(),
    });
  }

  /** CDK's auto-delete handler, when the stack destroys the bucket: it empties it and denies writes first. */
  private exemptPrincipals(): string[] {
    const handler = autoDeleteHandlerRoleArn(this);
    return handler ? [handler] : [];
  }

  /**
   * Puts this pipeline's boundaries and lifecycle rules on the bucket when this stack owns it: the bucket it
   * created, or an `s3.Bucket` of the same stack (another pipeline's). A bucket imported or of another stack cannot
   * be changed from here (CDK would drop the policy statements silently, or tie the stacks in a cycle): synth
   * warns, naming what to add.
   */
  private protectBucket(created: boolean): boolean {
    const bucket = this.bucket;
    const owned = created || (bucket instanceof s3.Bucket && Stack.of(bucket) === Stack.of(this));
    const pl = this.config.pipelineId;
    if (owned) {
      for (const statement of this.bucketPolicyStatements) bucket.addToResourcePolicy(statement);
      if (!BUCKETS_GUARDED.has(bucket)) {
        bucket.addToResourcePolicy(this.bucketAdminPolicyStatement);
        BUCKETS_GUARDED.add(bucket);
      }
      if (!created && bucket instanceof s3.Bucket) {
        for (const rule of pipelineLifecycleRules(pl, this.config.inProgressExpirationDays)) {
          bucket.addLifecycleRule(rule);
        }
      }
      return true;
    }
    this.warn(
      'BucketNotOwned',
      `bucket ${bucket.node.path} is not this stack's, so pipeline ${pl}'s write boundaries and lifecycle rules are not on it: add the statements of ExactlyOncePipeline.bucketPolicyStatements to its policy (and once per bucket bucketAdminPolicyStatement), and lifecycle rules expiring ${pl}/_inprogress/ and ${pl}/_coordinator/ objects after ${this.config.inProgressExpirationDays} days (docs/deploy.md)`,
    );
    return false;
  }

  /**
   * The ARN the processor requires in every event: the MSK cluster's, for a cluster in this account.
   * Self-managed Kafka events carry no ARN, and for a cross-account cluster the events' ARN is not documented (the
   * mapping's is the managed VPC connection's): there the processor checks the topic only.
   */
  private expectedEventSourceArn(): string | undefined {
    const source = this.source;
    return source.kind === 'msk' && source.vpcConnectionArn === undefined ? source.clusterArn : undefined;
  }

  private createMonitor(removalPolicy: RemovalPolicy): BundledFunction {
    const defaults = this.defaults(Duration.seconds(60), 256, removalPolicy);
    const fn = new BundledFunction(this, 'Monitor', {
      ...defaults,
      entry: MONITOR_ENTRY,
      handler: 'handler',
      description: `Emits ledger ages of pipeline ${this.config.pipelineId} for the NoCommit alarm`,
      environment: { ...defaults.environment, ...this.environment },
    });
    // Read-only, and only what it reports from: checkpoints and their cuts, fences and staged-file entries. Never
    // claims (business keys), keyed state, key windows or replay plans.
    this.grantLedger(fn, ['dynamodb:GetItem', 'dynamodb:Query'], monitorLeadingKeys(this.config.pipelineId));
    this.grantDataKeys(fn, ['dynamodb'], 'decrypt');
    new events.Rule(this, 'MonitorSchedule', {
      description: `Reads the ledger ages of pipeline ${this.config.pipelineId}`,
      schedule: events.Schedule.rate(Duration.minutes(this.config.checkpointIntervalMinutes)),
      targets: [new targets.LambdaFunction(fn, { retryAttempts: 0 })],
    });
    return fn;
  }

  /** Item actions on the table ARN, only for items whose partition key matches `leadingKeys`. */
  private grantLedger(
    grantee: iam.IGrantable,
    actions: string[],
    leadingKeys: string[],
    sid = 'LedgerItems',
  ): void {
    grantee.grantPrincipal.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid,
        actions,
        resources: [this.table.tableArn],
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': leadingKeys } },
      }),
    );
  }

  /**
   * The replay's processor and mapping. The generation is in the construct id: another generation is a new
   * function and a new mapping, never the old mapping's records handed to a processor of the new generation.
   */
  private createReplay(
    replay: ReplayConfig,
    entry: string,
    removalPolicy: RemovalPolicy,
    withMapping: boolean,
  ): PipelineReplay {
    const processor = this.createProcessor(
      `ReplayG${replay.generation}Processor`,
      entry,
      removalPolicy,
      replay,
    );
    if (this.glueSchemaReads) this.grantGlueSchemaReads(processor, this.glueSchemaReads.registryNames);
    this.grantRegistrySecretReads(processor);
    const kafka = withMapping ? this.attachMapping(processor, this.config, replay) : undefined;
    return { ...replay, processor, kafka, eventSource: kafka?.mapping };
  }

  private createObservability(config: PipelineConfig): PipelineObservability {
    return new PipelineObservability(this, 'Observability', {
      pipelineId: config.pipelineId,
      processor: this.processor,
      processorLogGroup: this.processor.logGroupOwn,
      replayProcessor: this.replay && {
        function: this.replay.processor,
        generation: this.replay.generation,
      },
      stateMachine: this.coordinator.stateMachine,
      monitor: this.monitor,
      checkpointInterval: Duration.minutes(config.checkpointIntervalMinutes),
      noCommitIntervals: config.noCommitAlarmIntervals,
      offsetLagThreshold: config.offsetLagAlarmThreshold,
      alarmTopic: this.alarmTopic,
    });
  }

  /** Opt-in (`outputs: true`; the repository's stack sets it): what an operator needs after a deploy. */
  private outputs(): void {
    addPipelineOutputs(this, {
      pipelineId: this.config.pipelineId,
      tableName: this.table.tableName,
      processorFunctionName: this.processor.functionName,
      bucketName: this.bucket.bucketName,
      stateMachineArn: this.coordinator.stateMachine.stateMachineArn,
      clusterArn: this.clusterArn,
      ...(this.analytics ? { analytics: this.analytics } : {}),
    });
  }

  /** The Glue table over `final/output/` (Parquet only: its columns are the transform's). */
  private createAnalyticsTable(
    config: PipelineConfig,
    transformModule: ReturnType<typeof resolveTransform>,
    removalPolicy: RemovalPolicy,
  ): AnalyticsTable {
    if (config.outputFormat !== 'parquet') {
      throw new InvalidSettingError(
        'analyticsTable',
        "needs outputFormat 'parquet' (the table reads Parquet; NDJSON output has no schema to declare)",
      );
    }
    return new AnalyticsTable(this, 'Analytics', {
      bucket: this.bucket,
      pipelineId: config.pipelineId,
      columns: transformColumns(config.transform, transformModule),
      timePartitioning: config.timePartitioning,
      encryptionKey: this.encryptionKey,
      accessLogsBucket: this.accessLogsBucket,
      removalPolicy,
    });
  }
}

/** The MSK source when no `source` prop is given: the sandbox cluster, else `mskClusterArn` and `mskVpcId`. */
function sourceOf(config: PipelineConfig, sandbox: SandboxKafkaCluster | undefined): KafkaSource {
  return sandbox
    ? { kind: 'msk', clusterArn: sandbox.clusterArn, vpcId: sandbox.vpc.vpcId }
    : { kind: 'msk', clusterArn: config.mskClusterArn!, vpcId: config.mskVpcId };
}
