/**
 * `ExactlyOncePipeline`: the whole pipeline as one reusable construct — the MSK event source and processor, the
 * ledger table, the sink bucket, the checkpoint coordinator and its schedule, the monitor, alarms and dashboard.
 *
 * ```ts
 * new ExactlyOncePipeline(stack, 'Orders', { mskClusterArn: 'arn:aws:kafka:…', topic: 'orders' });
 * ```
 * Props are the settings of `config.ts` (validated there: a bad one fails synth naming it). Least privilege
 * throughout, on both sides: each role has DynamoDB item actions only on the table ARN and only on the item kinds
 * its component writes (`dynamodb:LeadingKeys`), S3 object actions only under the prefixes its step writes, logs
 * only into its own log group, KMS only through S3 and DynamoDB (`kms:ViaService`); the bucket policy denies
 * writes to manifests, final data, coordinator work and staged data to every principal but their writers
 * (`security.ts`).
 */
import { fileURLToPath } from 'node:url';
import { ArnFormat, CfnOutput, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { Construct } from 'constructs';
import { settingsToEnv } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import { keys, STREAMS } from '../shared/ledger/layout.ts';
import { finalPrefix, stagedStreamPrefix } from '../shared/sink/layout.ts';
import { BundledFunction } from './bundled-function.ts';
import { CheckpointCoordinator } from './checkpoint-coordinator.ts';
import {
  type PipelineConfig,
  type PipelineConfigInput,
  parsePipelineConfig,
  pipelineSettingsOf,
} from './config.ts';
import { type FunctionDefaults, functionDefaults } from './function-defaults.ts';
import { SandboxKafkaCluster } from './kafka-cluster.ts';
import { type AttachedKafkaSource, attachKafkaSource, type KafkaSource } from './kafka-source.ts';
import { createLedgerTable } from './ledger-table.ts';
import { PipelineObservability } from './observability.ts';
import { allowLogsToUseKey, autoDeleteHandlerRoleArn, grantKeyVia, protectSinkBucket } from './security.ts';
import { createSinkBuckets } from './sink-bucket.ts';
import { DEFAULT_PROCESSOR_ENTRY, resolveTransform, writeProcessorEntry } from './transform-entry.ts';

/** A transform of your own: a module (`.ts` or `.js`) exporting a `defineTransform(…)`. */
export interface TransformModule {
  /** The module's path, absolute or relative to the CDK app's working directory. */
  readonly entry: string;
  /** Default `default` (else the module's only export). */
  readonly exportName?: string;
}

export interface ExactlyOncePipelineProps
  extends Omit<PipelineConfigInput, 'transform' | 'startingPositionTimestamp'> {
  /**
   * The transform: a built-in's name (`orders`, `passthrough`) or your module, bundled into the processor at synth.
   * Default `orders`.
   */
  readonly transform?: string | TransformModule;
  /** For `startingPosition: 'AT_TIMESTAMP'`: a `Date`, Unix seconds, or an ISO 8601 time with zone. */
  readonly startingPositionTimestamp?: Date | number | string;
  /**
   * The Kafka cluster to read: MSK (IAM, SASL/SCRAM or mTLS; another account's through a managed VPC connection) or
   * self-managed Apache Kafka. Instead of the `mskClusterArn`/`mskVpcId`/`sandboxCluster` settings, which describe
   * an IAM-authenticated MSK cluster in this account.
   */
  readonly source?: KafkaSource;
  /** The processor's handler module (default `functions/processor.ts`, export `handler`); not with a module transform. */
  readonly processorEntry?: string;
}
const MONITOR_ENTRY = fileURLToPath(new URL('../shared/observability/monitor-handler.ts', import.meta.url));

/**
 * DynamoDB actions the processor makes (checked against its calls in `test/infra-iam.test.ts`): the fence read,
 * claims ahead, and the staging transaction's Put and Update items. No Query, Scan or Delete.
 */
export const PROCESSOR_DYNAMODB_ACTIONS = ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'];

/**
 * The partition keys the processor may touch: its fences, staged-file entries, claims and keyed state — never
 * the checkpoint head, checkpoint records or cut pages (`<pl>#CHECKPOINT…`), which only the coordinator writes.
 */
export function processorLeadingKeys(pipeline: string): string[] {
  return [
    keys.fencePk(pipeline),
    `${pipeline}#STAGED#*`,
    `${pipeline}#CLAIM#*`,
    `${keys.statePrefix(pipeline)}*`,
  ];
}

export class ExactlyOncePipeline extends Construct {
  readonly config: PipelineConfig;
  /** The MSK cluster's ARN; undefined for a self-managed Kafka source. */
  readonly clusterArn?: string;
  /** What the pipeline reads. */
  readonly source: KafkaSource;
  readonly sandbox?: SandboxKafkaCluster;
  readonly encryptionKey?: kms.Key;
  readonly table: dynamodb.Table;
  readonly bucket: s3.Bucket;
  readonly accessLogsBucket: s3.Bucket;
  readonly processor: BundledFunction;
  readonly eventSource: lambda.EventSourceMapping;
  /** The mapping and what the processor's role was granted for it. */
  readonly kafka: AttachedKafkaSource;
  readonly coordinator: CheckpointCoordinator;
  readonly monitor: BundledFunction;
  readonly alarmTopic: sns.Topic;
  readonly observability: PipelineObservability;
  /** The `EOS_*` environment every function gets (the settings the Lambdas parse with `settingsFromEnv`). */
  readonly environment: Record<string, string>;
  /** Set when the transform decodes with a Glue registry: the registries its processor may read (empty: any). */
  readonly glueSchemaReads?: { readonly registryNames: readonly string[] };

  constructor(scope: Construct, id: string, props: ExactlyOncePipelineProps) {
    super(scope, id);
    const { processorEntry, source, startingPositionTimestamp, ...settings } = props;
    const config = parsePipelineConfig(
      {
        ...settings,
        startingPositionTimestamp:
          startingPositionTimestamp instanceof Date
            ? Math.floor(startingPositionTimestamp.getTime() / 1000)
            : startingPositionTimestamp,
      },
      undefined,
      { sourceGiven: source !== undefined },
    );
    this.config = config;
    const removalPolicy = config.removalPolicy === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN;
    // Before any resource: a bad transform setting fails synth here, never a cold start.
    const transformModule = resolveTransform(config.transform);
    if (transformModule && processorEntry) {
      throw new InvalidSettingError('processorEntry', 'cannot be combined with a module transform');
    }

    if (source) {
      this.source = source;
    } else if (config.sandboxCluster) {
      this.sandbox = new SandboxKafkaCluster(this, 'Sandbox', { clusterName: `eos-${config.pipelineId}` });
      this.source = { kind: 'msk', clusterArn: this.sandbox.clusterArn, vpcId: this.sandbox.vpc.vpcId };
    } else {
      this.source = { kind: 'msk', clusterArn: config.mskClusterArn!, vpcId: config.mskVpcId };
    }
    this.clusterArn = this.source.kind === 'msk' ? this.source.clusterArn : undefined;

    if (config.encryption === 'kms') {
      this.encryptionKey = new kms.Key(this, 'Key', {
        description: `Exactly-once pipeline ${config.pipelineId}: ledger, sink bucket, log groups and alarm topic`,
        enableKeyRotation: true,
        removalPolicy,
      });
      allowLogsToUseKey(this.encryptionKey);
    }
    this.table = createLedgerTable(this, 'Ledger', {
      removalPolicy,
      deletionProtection: config.deletionProtection,
      pointInTimeRecovery: config.pointInTimeRecovery,
      encryptionKey: this.encryptionKey,
    });
    const buckets = createSinkBuckets(this, 'Sink', {
      pipelineId: config.pipelineId,
      removalPolicy,
      noncurrentVersionExpirationDays: config.noncurrentVersionExpirationDays,
      inProgressExpirationDays: config.inProgressExpirationDays,
      encryptionKey: this.encryptionKey,
    });
    this.bucket = buckets.bucket;
    this.accessLogsBucket = buckets.accessLogs;
    this.environment = settingsToEnv({
      ...pipelineSettingsOf(config),
      ledgerTable: this.table.tableName,
      bucket: this.bucket.bucketName,
    });

    const entry = transformModule
      ? writeProcessorEntry(transformModule)
      : (processorEntry ?? DEFAULT_PROCESSOR_ENTRY);
    this.processor = this.createProcessor(entry, removalPolicy);
    if (transformModule?.usesGlueRegistry) {
      this.glueSchemaReads = { registryNames: transformModule.glueRegistryNames };
      this.grantGlueSchemaReads(transformModule.glueRegistryNames);
    }
    this.kafka = attachKafkaSource(this, this.processor, this.source, {
      topic: config.topic,
      consumerGroupId: config.consumerGroupId,
      batchSize: config.batchSize,
      maxBatchingWindow: Duration.seconds(config.maxBatchingWindowSeconds),
      startingPosition: lambda.StartingPosition[config.startingPosition],
      startingPositionTimestamp: config.startingPositionTimestamp,
      provisionedPollers:
        config.minimumPollers === undefined && config.maximumPollers === undefined
          ? undefined
          : { minimumPollers: config.minimumPollers, maximumPollers: config.maximumPollers },
    });
    this.eventSource = this.kafka.mapping;
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
    this.protectBucket();
    this.monitor = this.createMonitor(removalPolicy);
    this.alarmTopic = this.createAlarmTopic();
    this.observability = new PipelineObservability(this, 'Observability', {
      pipelineId: config.pipelineId,
      processor: this.processor,
      stateMachine: this.coordinator.stateMachine,
      monitor: this.monitor,
      checkpointInterval: Duration.minutes(config.checkpointIntervalMinutes),
      noCommitIntervals: config.noCommitAlarmIntervals,
      alarmTopic: this.alarmTopic,
    });
    this.allowAlarmsToPublish();
    this.outputs();
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
  private grantGlueSchemaReads(registryNames: readonly string[]): void {
    const glueArn = (resource: string) =>
      Stack.of(this).formatArn({ service: 'glue', resource, arnFormat: ArnFormat.NO_RESOURCE_NAME });
    const resources =
      registryNames.length > 0
        ? registryNames.flatMap((name) => [glueArn(`registry/${name}`), glueArn(`schema/${name}/*`)])
        : [glueArn('registry/*'), glueArn('schema/*')];
    this.processor.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'ReadGlueSchemaVersions',
        actions: ['glue:GetSchemaVersion'],
        resources,
      }),
    );
  }

  private createProcessor(entry: string, removalPolicy: RemovalPolicy): BundledFunction {
    const config = this.config;
    const defaults = this.defaults(
      Duration.seconds(config.processorTimeoutSeconds),
      config.processorMemoryMb,
      removalPolicy,
    );
    const fn = new BundledFunction(this, 'Processor', {
      ...defaults,
      entry,
      handler: 'handler',
      description: `Stages MSK records of ${config.topic} for pipeline ${config.pipelineId} (${config.deliveryGuarantee})`,
      environment: {
        ...defaults.environment,
        ...this.environment,
        // The processor rejects events of any other source or topic before any effect (issue 17).
        ...settingsToEnv({
          ledgerTable: this.table.tableName,
          bucket: this.bucket.bucketName,
          eventSourceArn: this.expectedEventSourceArn(),
          bootstrapServers:
            this.source.kind === 'self-managed-kafka' ? this.source.bootstrapServers.join(',') : undefined,
          topics: [config.topic],
        }),
      },
    });
    this.grantLedger(fn, PROCESSOR_DYNAMODB_ACTIONS, processorLeadingKeys(config.pipelineId));
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'StageObjects',
        actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
        resources: this.processorObjectPrefixes().map((prefix) => this.bucket.arnForObjects(`${prefix}*`)),
      }),
    );
    if (this.encryptionKey) grantKeyVia(this.encryptionKey, fn, ['s3', 'dynamodb'], 'encrypt-decrypt');
    return fn;
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

  /** The resource side of the same boundaries (`security.ts`). */
  private protectBucket(): void {
    const steps = this.coordinator.functions;
    const role = (fn: lambda.IFunction): iam.IRole => fn.role!;
    const processorWritesFinal = this.config.deliveryGuarantee !== 'exactly-once';
    const exempt = autoDeleteHandlerRoleArn(this);
    protectSinkBucket(this.bucket, {
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
      staged: { put: [role(this.processor)], delete: [steps.cleanup, steps.abort].map(role) },
      exempt: exempt ? [exempt] : [],
    });
  }

  /**
   * The ARN the processor requires in every event (issue 17): the MSK cluster's, for a cluster in this account.
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
    // Read-only: the monitor reports ages from every item kind of the pipeline and writes nothing.
    this.grantLedger(fn, ['dynamodb:GetItem', 'dynamodb:Query'], [`${this.config.pipelineId}#*`]);
    if (this.encryptionKey) grantKeyVia(this.encryptionKey, fn, ['dynamodb'], 'decrypt');
    new events.Rule(this, 'MonitorSchedule', {
      description: `Reads the ledger ages of pipeline ${this.config.pipelineId}`,
      schedule: events.Schedule.rate(Duration.minutes(this.config.checkpointIntervalMinutes)),
      targets: [new targets.LambdaFunction(fn, { retryAttempts: 0 })],
    });
    return fn;
  }

  /** Item actions on the table ARN, only for items whose partition key matches `leadingKeys`. */
  private grantLedger(fn: lambda.IFunction, actions: string[], leadingKeys: string[]): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'LedgerItems',
        actions,
        resources: [this.table.tableArn],
        conditions: { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': leadingKeys } },
      }),
    );
  }

  private createAlarmTopic(): sns.Topic {
    const topic = new sns.Topic(this, 'Alarms', {
      displayName: `Exactly-once pipeline ${this.config.pipelineId} alarms`,
      enforceSSL: true,
      masterKey: this.encryptionKey,
    });
    const stack = Stack.of(this);
    if (this.encryptionKey) {
      // CloudWatch publishes to the encrypted topic with its own principal.
      this.encryptionKey.addToResourcePolicy(
        new iam.PolicyStatement({
          principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
          actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
          resources: ['*'],
          conditions: { StringEquals: { 'aws:SourceAccount': stack.account } },
        }),
      );
    }
    if (this.config.alarmEmail)
      topic.addSubscription(new subscriptions.EmailSubscription(this.config.alarmEmail));
    return topic;
  }

  /**
   * A topic policy replaces SNS's default one, and `enforceSSL` writes a topic policy: without this Allow,
   * CloudWatch alarms (not IAM identities of the account) could not publish, and nobody would be notified. It
   * names this pipeline's alarms one by one: a wildcard `eos-orders-*` would also match pipeline `orders-eu`'s.
   */
  private allowAlarmsToPublish(): void {
    const stack = Stack.of(this);
    this.alarmTopic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AllowPipelineAlarmsToPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [this.alarmTopic.topicArn],
        conditions: {
          StringEquals: { 'aws:SourceAccount': stack.account },
          // ARNs built from the names (known at synth), so the policy does not wait on the alarms.
          ArnEquals: {
            'aws:SourceArn': this.observability.alarmNames.map(
              (name) => `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:${name}`,
            ),
          },
        },
      }),
    );
  }

  private outputs(): void {
    const pl = this.config.pipelineId;
    new CfnOutput(this, 'LedgerTableName', { value: this.table.tableName, description: 'The ledger table' });
    new CfnOutput(this, 'BucketName', { value: this.bucket.bucketName, description: 'The sink bucket' });
    new CfnOutput(this, 'StateMachineArn', { value: this.coordinator.stateMachine.stateMachineArn });
    const clusterOption = this.clusterArn ? ` --cluster-arn ${this.clusterArn}` : '';
    if (this.clusterArn) {
      new CfnOutput(this, 'ClusterArn', {
        value: this.clusterArn,
        description: 'The MSK cluster the pipeline reads',
      });
    }
    new CfnOutput(this, 'StatusCommand', {
      description: 'Check the deployed pipeline',
      value: `npx eos status --pipeline ${pl} --table ${this.table.tableName}${clusterOption}`,
    });
  }
}
