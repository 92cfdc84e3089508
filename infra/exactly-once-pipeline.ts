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
 *
 * Built here in order from its parts: the stores (`pipeline-stores.ts`), the processor, replay and monitor
 * (`pipeline-functions.ts`), their grants (`pipeline-grants.ts`), the bucket's protection (`bucket-protection.ts`)
 * and the operator roles' grants (`operator-grants.ts`).
 */

import { Duration, type RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sns from 'aws-cdk-lib/aws-sns';
import { Construct } from 'constructs';
import { settingsToEnv } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import {
  METRIC,
  METRICS_NAMESPACE,
  type MetricName,
  metricDimensionsMap,
} from '../shared/observability/names.ts';
import { allowAlarmsToPublish, createAlarmTopic } from './alarm-topic.ts';
import { AnalyticsTable } from './analytics-table.ts';
import { boundaryStatementsOf, exemptPrincipalsOf, protectBucket } from './bucket-protection.ts';
import type { BundledFunction } from './bundled-function.ts';
import { CheckpointCoordinator } from './checkpoint-coordinator.ts';
import { type PipelineConfig, pipelineSettingsOf } from './config.ts';
import { IcebergPublishTable, icebergConfigOf } from './iceberg-table.ts';
import { SandboxKafkaCluster } from './kafka-cluster.ts';
import {
  type AttachedKafkaSource,
  type KafkaSource,
  MSK_VPC_REQUIRED,
  validateKafkaSource,
} from './kafka-source.ts';
import { PipelineObservability } from './observability.ts';
import { grantOperators } from './operator-grants.ts';
import {
  attachMapping,
  createMonitor,
  createProcessorFunction,
  createReplay,
  type PipelineReplay,
} from './pipeline-functions.ts';
import { grantReadCommitted, grantTransformReads, processorObjectPrefixes } from './pipeline-grants.ts';
import { addPipelineOutputs } from './pipeline-outputs.ts';
import { type PipelineParts, pipelineFunctionDefaults } from './pipeline-parts.ts';
import { configFromProps, type ExactlyOncePipelineProps, removalPolicyOf } from './pipeline-props.ts';
import { ledgerTableOf, pipelineKey, sinkBucketOf } from './pipeline-stores.ts';
import { bucketAdminsOf } from './principals.ts';
import { replayConfigOf } from './replay.ts';
import { bucketAdminStatement } from './security.ts';
import {
  DEFAULT_PROCESSOR_ENTRY,
  type ResolvedTransformModule,
  resolveTransform,
  transformColumns,
  writeProcessorEntry,
} from './transform-entry.ts';

export {
  claimLeadingKeys,
  keyWindowLeadingKeys,
  monitorLeadingKeys,
  OPERATOR_REPLAY_PLAN_ACTIONS,
  PROCESSOR_CLAIM_INSERT_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
  PROCESSOR_KEY_WINDOW_ACTIONS,
  processorLeadingKeys,
  REPLAY_PROCESSOR_PLAN_ACTIONS,
} from './ledger-access.ts';
export type { PipelineReplay } from './pipeline-functions.ts';
export type {
  ExactlyOncePipelineProps,
  IcebergProps,
  IdempotencyKeySetting,
  ReplayProps,
  ReplayStartingPosition,
  StartingPositionName,
  TransformModule,
} from './pipeline-props.ts';
export { replayLeadingKeys } from './replay.ts';

export class ExactlyOncePipeline extends Construct implements PipelineParts {
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
  /** The Iceberg table each committed checkpoint is published to, with the `iceberg` prop. */
  readonly iceberg?: IcebergPublishTable;
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
    this.config = configFromProps(props);
    const config = this.config;
    const replay = replayConfigOf(props.replay, config);
    const iceberg = icebergConfigOf(props.iceberg, config);
    const removalPolicy = removalPolicyOf(config);
    const bucketAdmins = bucketAdminsOf(this, props.bucketAdminPrincipals);
    const transformModule = this.transformModule(props);
    ({ sandbox: this.sandbox, source: this.source } = this.connectSource(props));
    this.clusterArn = this.source.kind === 'msk' ? this.source.clusterArn : undefined;

    this.encryptionKey = pipelineKey(this, props.encryptionKey, removalPolicy);
    this.table = ledgerTableOf(this, props.table, removalPolicy);
    const sink = sinkBucketOf(this, props.bucket, removalPolicy);
    this.bucket = sink.bucket;
    this.accessLogsBucket = sink.accessLogs;
    this.environment = this.functionEnvironment(transformModule);

    const entry = transformModule
      ? writeProcessorEntry(transformModule)
      : (props.processorEntry ?? DEFAULT_PROCESSOR_ENTRY);
    this.glueSchemaReads = transformModule?.usesGlueRegistry
      ? { registryNames: transformModule.glueRegistryNames }
      : undefined;
    this.registrySecretArns = transformModule?.registrySecretArns ?? [];
    this.processor = createProcessorFunction(this, 'Processor', entry, removalPolicy);
    grantTransformReads(this, this.processor);
    const withMapping = props.eventSourceMapping !== false;
    this.kafka = withMapping ? attachMapping(this, this.processor) : undefined;
    this.eventSource = this.kafka?.mapping;
    this.replay = replay && createReplay(this, replay, entry, removalPolicy, withMapping);
    this.iceberg =
      iceberg &&
      new IcebergPublishTable(this, 'Iceberg', {
        config: iceberg,
        bucket: this.bucket,
        pipelineId: config.pipelineId,
        removalPolicy,
      });
    this.coordinator = this.createCoordinator(removalPolicy);

    this.operatorRoles = [...(props.operatorRoles ?? [])];
    this.bucketPolicyStatements = boundaryStatementsOf(this);
    this.bucketAdminPolicyStatement = bucketAdminStatement(
      this.bucket,
      bucketAdmins,
      exemptPrincipalsOf(this),
    );
    this.bucketPolicyAdded = protectBucket(this, props.bucket === undefined);
    this.monitor = createMonitor(this, removalPolicy, this.iceberg?.environment);
    ({ alarmTopic: this.alarmTopic, observability: this.observability } = this.createAlarms());
    this.analytics = props.analyticsTable
      ? this.createAnalyticsTable(config, transformModule, removalPolicy)
      : undefined;
    if (props.outputs) this.outputs();
    grantOperators(this, this.operatorRoles);
  }

  /**
   * Lets `grantee` read this pipeline's committed output, as `eos read` and `eos verify` do: list and get its
   * manifests and final objects (and decrypt them through S3 under SSE-KMS) — not staged data, not coordinator
   * work, not another pipeline's prefixes of a shared bucket.
   */
  grantReadCommitted(grantee: iam.IGrantable): iam.Grant {
    return grantReadCommitted(this, this.bucket, this.config.pipelineId, grantee);
  }

  /**
   * Lets `grantee` read the Iceberg table (the `iceberg` prop) as a query engine does: its files under the table
   * prefix, the committed Parquet objects it names, and for `glue` the catalog reads of the table
   * (`IcebergPublishTable.grantRead`). Fails synth without the prop.
   */
  grantReadTable(grantee: iam.IGrantable): iam.Grant {
    if (!this.iceberg) throw new InvalidSettingError('iceberg', 'grantReadTable needs the iceberg prop');
    return this.iceberg.grantRead(grantee, this.config.pipelineId);
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

  /**
   * Exactly-once stages each output stream under its in-progress prefix, and nothing else (not the coordinator's
   * work objects, not final data, not manifests); the weaker guarantees write final objects directly.
   */
  processorObjectPrefixes(): string[] {
    return processorObjectPrefixes(this.config);
  }

  /** Before any resource: a bad transform setting fails synth here, never a cold start. */
  private transformModule(props: ExactlyOncePipelineProps): ResolvedTransformModule | undefined {
    const transformModule = resolveTransform(this.config.transform);
    if (transformModule && props.processorEntry) {
      throw new InvalidSettingError('processorEntry', 'cannot be combined with a module transform');
    }
    return transformModule;
  }

  /**
   * What the pipeline reads: the `source` prop, else the sandbox cluster it creates, else `mskClusterArn`. The
   * source's own checks first: a cross-account cluster without its VPC connection is the clearer error.
   */
  private connectSource(props: ExactlyOncePipelineProps): {
    readonly sandbox?: SandboxKafkaCluster;
    readonly source: KafkaSource;
  } {
    const config = this.config;
    const sandbox =
      !props.source && config.sandboxCluster
        ? new SandboxKafkaCluster(this, 'Sandbox', { clusterName: `eos-${config.pipelineId}` })
        : undefined;
    const source = props.source ?? sourceOf(config, sandbox);
    validateKafkaSource(source, Stack.of(this).account);
    if (props.eventSourceMapping !== false && source.kind === 'msk' && !source.vpcId) {
      throw new InvalidSettingError(props.source ? 'source.vpcId' : 'mskVpcId', MSK_VPC_REQUIRED);
    }
    return { sandbox, source };
  }

  /** The `EOS_*` environment of every function: the settings, the table, the bucket, and Parquet's columns. */
  private functionEnvironment(transformModule: ResolvedTransformModule | undefined): Record<string, string> {
    const config = this.config;
    return settingsToEnv({
      ...pipelineSettingsOf(config),
      ledgerTable: this.table.tableName,
      bucket: this.bucket.bucketName,
      // Only Parquet needs them (its schema); NDJSON functions keep a smaller environment.
      outputColumns:
        config.outputFormat === 'parquet'
          ? [...transformColumns(config.transform, transformModule)]
          : undefined,
    });
  }

  private createCoordinator(removalPolicy: RemovalPolicy): CheckpointCoordinator {
    const config = this.config;
    return new CheckpointCoordinator(this, 'Coordinator', {
      table: this.table,
      bucket: this.bucket,
      environment: this.environment,
      interval: Duration.minutes(config.checkpointIntervalMinutes),
      workflow: config.coordinatorWorkflow,
      // The weaker guarantees write final objects directly: a checkpoint would have nothing to commit.
      scheduled: config.deliveryGuarantee === 'exactly-once',
      functionDefaults: pipelineFunctionDefaults(
        this,
        Duration.seconds(config.coordinatorStepTimeoutSeconds),
        1024,
        removalPolicy,
      ),
      logRetention: config.logRetentionDays as logs.RetentionDays,
      removalPolicy,
      encryptionKey: this.encryptionKey,
      ...(this.iceberg
        ? {
            publish: {
              environment: this.iceberg.environment,
              metadataPrefix: this.iceberg.metadataPrefix,
              catalogStatements: this.iceberg.catalogStatements(),
            },
          }
        : {}),
    });
  }

  /** The alarm topic, then the alarms and dashboard that publish to it. */
  private createAlarms(): { readonly alarmTopic: sns.Topic; readonly observability: PipelineObservability } {
    const config = this.config;
    const alarmTopic = createAlarmTopic(this, {
      pipelineId: config.pipelineId,
      encryptionKey: this.encryptionKey,
      alarmEmail: config.alarmEmail,
    });
    const observability = new PipelineObservability(this, 'Observability', {
      pipelineId: config.pipelineId,
      processor: this.processor,
      processorLogGroup: this.processor.logGroupOwn,
      publishes: this.iceberg !== undefined,
      replayProcessor: this.replay && {
        function: this.replay.processor,
        generation: this.replay.generation,
      },
      stateMachine: this.coordinator.stateMachine,
      ...(this.coordinator.expressStateMachine
        ? { expressStateMachine: this.coordinator.expressStateMachine }
        : {}),
      monitor: this.monitor,
      checkpointInterval: Duration.minutes(config.checkpointIntervalMinutes),
      noCommitIntervals: config.noCommitAlarmIntervals,
      offsetLagThreshold: config.offsetLagAlarmThreshold,
      alarmTopic,
    });
    allowAlarmsToPublish(alarmTopic, observability.alarmNames);
    return { alarmTopic, observability };
  }

  /** Opt-in (`outputs: true`; the repository's stack sets it): what an operator needs after a deploy. */
  private outputs(): void {
    addPipelineOutputs(this, {
      pipelineId: this.config.pipelineId,
      tableName: this.table.tableName,
      processorFunctionName: this.processor.functionName,
      bucketName: this.bucket.bucketName,
      stateMachineArn: this.coordinator.stateMachine.stateMachineArn,
      expressStateMachineArn: this.coordinator.expressStateMachine?.stateMachineArn,
      clusterArn: this.clusterArn,
      ...(this.analytics ? { analytics: this.analytics } : {}),
      ...(this.iceberg ? { iceberg: this.iceberg.outputValue } : {}),
    });
  }

  /** The Glue table over `final/output/` (Parquet only: its columns are the transform's). */
  private createAnalyticsTable(
    config: PipelineConfig,
    transformModule: ResolvedTransformModule | undefined,
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
