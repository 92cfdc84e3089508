/**
 * `ExactlyOncePipeline`: the whole pipeline as one reusable construct — the MSK event source and processor, the
 * ledger table, the sink bucket, the checkpoint coordinator and its schedule, the monitor, alarms and dashboard.
 *
 * ```ts
 * new ExactlyOncePipeline(stack, 'Orders', { mskClusterArn: 'arn:aws:kafka:…', topic: 'orders' });
 * ```
 * Props are the settings of `config.ts` (validated there: a bad one fails synth naming it). Least privilege
 * throughout: DynamoDB item actions only on the table ARN and only on this pipeline's keys
 * (`dynamodb:LeadingKeys`), S3 object actions only under this pipeline's prefixes, no `s3:List*` on the bucket.
 */
import { fileURLToPath } from 'node:url';
import { CfnOutput, Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { ManagedKafkaEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { Construct } from 'constructs';
import { settingsToEnv } from '../shared/config/settings.ts';
import { finalPrefix, inProgressPrefix } from '../shared/sink/layout.ts';
import { BundledFunction } from './bundled-function.ts';
import { CheckpointCoordinator } from './checkpoint-coordinator.ts';
import {
  type PipelineConfig,
  type PipelineConfigInput,
  parsePipelineConfig,
  pipelineSettingsOf,
} from './config.ts';
import { type FunctionDefaults, functionDefaults, functionLogGroup } from './function-defaults.ts';
import { kafkaConsumerStatements, SandboxKafkaCluster } from './kafka-cluster.ts';
import { createLedgerTable } from './ledger-table.ts';
import { PipelineObservability } from './observability.ts';
import { createSinkBuckets } from './sink-bucket.ts';

export interface ExactlyOncePipelineProps extends PipelineConfigInput {
  /** The processor's handler module (default `functions/processor.ts`, export `handler`). */
  readonly processorEntry?: string;
}

const DEFAULT_PROCESSOR_ENTRY = fileURLToPath(new URL('../functions/processor.ts', import.meta.url));
const MONITOR_ENTRY = fileURLToPath(new URL('../shared/observability/monitor-handler.ts', import.meta.url));

/**
 * DynamoDB actions the processor makes (checked against its calls in `test/infra-iam.test.ts`): the fence read,
 * claims ahead, and the staging transaction's Put and Update items. No Query, Scan or Delete.
 */
export const PROCESSOR_DYNAMODB_ACTIONS = ['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:UpdateItem'];

export class ExactlyOncePipeline extends Construct {
  readonly config: PipelineConfig;
  readonly clusterArn: string;
  readonly sandbox?: SandboxKafkaCluster;
  readonly encryptionKey?: kms.Key;
  readonly table: dynamodb.Table;
  readonly bucket: s3.Bucket;
  readonly accessLogsBucket: s3.Bucket;
  readonly processor: BundledFunction;
  readonly eventSource: ManagedKafkaEventSource;
  readonly coordinator: CheckpointCoordinator;
  readonly monitor: BundledFunction;
  readonly alarmTopic: sns.Topic;
  readonly observability: PipelineObservability;
  /** The `EOS_*` environment every function gets (the settings the Lambdas parse with `settingsFromEnv`). */
  readonly environment: Record<string, string>;

  constructor(scope: Construct, id: string, props: ExactlyOncePipelineProps) {
    super(scope, id);
    const { processorEntry, ...settings } = props;
    const config = parsePipelineConfig({ ...settings });
    this.config = config;
    const removalPolicy = config.removalPolicy === 'destroy' ? RemovalPolicy.DESTROY : RemovalPolicy.RETAIN;

    if (config.sandboxCluster) {
      this.sandbox = new SandboxKafkaCluster(this, 'Sandbox', { clusterName: `eos-${config.pipelineId}` });
      this.clusterArn = this.sandbox.clusterArn;
    } else {
      this.clusterArn = config.mskClusterArn!;
    }

    if (config.encryption === 'kms') {
      this.encryptionKey = new kms.Key(this, 'Key', {
        description: `Exactly-once pipeline ${config.pipelineId}: ledger, sink bucket and alarm topic`,
        enableKeyRotation: true,
        removalPolicy,
      });
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

    this.processor = this.createProcessor(processorEntry ?? DEFAULT_PROCESSOR_ENTRY, removalPolicy);
    this.eventSource = this.attachKafkaSource();
    this.coordinator = new CheckpointCoordinator(this, 'Coordinator', {
      table: this.table,
      bucket: this.bucket,
      environment: this.environment,
      interval: Duration.minutes(config.checkpointIntervalMinutes),
      functionDefaults: this.defaults(
        'CoordinatorLogs',
        Duration.seconds(config.coordinatorStepTimeoutSeconds),
        1024,
        removalPolicy,
      ),
      logRetention: config.logRetentionDays as logs.RetentionDays,
      removalPolicy,
    });
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
    this.outputs();
  }

  private defaults(
    logGroupId: string,
    timeout: Duration,
    memorySize: number,
    removalPolicy: RemovalPolicy,
  ): FunctionDefaults {
    return functionDefaults({
      timeout,
      memorySize,
      logGroup: functionLogGroup(this, logGroupId, this.config.logRetentionDays, removalPolicy),
      environment: {},
    });
  }

  private createProcessor(entry: string, removalPolicy: RemovalPolicy): BundledFunction {
    const config = this.config;
    const defaults = this.defaults(
      'ProcessorLogs',
      Duration.seconds(config.processorTimeoutSeconds),
      config.processorMemoryMb,
      removalPolicy,
    );
    const fn = new BundledFunction(this, 'Processor', {
      ...defaults,
      entry,
      handler: 'handler',
      description: `Stages MSK records of ${config.topic} for pipeline ${config.pipelineId} (${config.deliveryGuarantee})`,
      environment: { ...defaults.environment, ...this.environment },
    });
    this.grantLedger(fn, PROCESSOR_DYNAMODB_ACTIONS);
    // Exactly-once stages under the in-progress prefix only; the weaker guarantees write final objects directly.
    const prefixes = [inProgressPrefix(config.pipelineId)];
    if (config.deliveryGuarantee !== 'exactly-once') prefixes.push(finalPrefix(config.pipelineId));
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'StageObjects',
        actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
        resources: prefixes.map((prefix) => this.bucket.arnForObjects(`${prefix}*`)),
      }),
    );
    this.encryptionKey?.grantEncryptDecrypt(fn);
    return fn;
  }

  private attachKafkaSource(): ManagedKafkaEventSource {
    const config = this.config;
    const source = new ManagedKafkaEventSource({
      clusterArn: this.clusterArn,
      topic: config.topic,
      consumerGroupId: config.consumerGroupId,
      batchSize: config.batchSize,
      maxBatchingWindow: Duration.seconds(config.maxBatchingWindowSeconds),
      startingPosition: lambda.StartingPosition[config.startingPosition],
      // Left at the mapping's defaults on purpose: retry a failing batch until it succeeds (the processor
      // dead-letters poison records itself, P6, so only transient errors fail a batch) and never split it, so no
      // record is skipped and per-partition order holds.
    });
    this.processor.addEventSource(source);
    for (const statement of kafkaConsumerStatements(this.clusterArn, config.topic, config.consumerGroupId)) {
      this.processor.addToRolePolicy(statement);
    }
    return source;
  }

  private createMonitor(removalPolicy: RemovalPolicy): BundledFunction {
    const defaults = this.defaults('MonitorLogs', Duration.seconds(60), 256, removalPolicy);
    const fn = new BundledFunction(this, 'Monitor', {
      ...defaults,
      entry: MONITOR_ENTRY,
      handler: 'handler',
      description: `Emits ledger ages of pipeline ${this.config.pipelineId} for the NoCommit alarm`,
      environment: { ...defaults.environment, ...this.environment },
    });
    this.grantLedger(fn, ['dynamodb:GetItem', 'dynamodb:Query']);
    this.encryptionKey?.grantDecrypt(fn);
    new events.Rule(this, 'MonitorSchedule', {
      description: `Reads the ledger ages of pipeline ${this.config.pipelineId}`,
      schedule: events.Schedule.rate(Duration.minutes(this.config.checkpointIntervalMinutes)),
      targets: [new targets.LambdaFunction(fn, { retryAttempts: 0 })],
    });
    return fn;
  }

  /** Item actions on the table ARN, only for items whose partition key starts with this pipeline's id. */
  private grantLedger(fn: lambda.IFunction, actions: string[]): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'LedgerItems',
        actions,
        resources: [this.table.tableArn],
        conditions: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [`${this.config.pipelineId}#*`] },
        },
      }),
    );
  }

  private createAlarmTopic(): sns.Topic {
    const topic = new sns.Topic(this, 'Alarms', {
      displayName: `Exactly-once pipeline ${this.config.pipelineId} alarms`,
      enforceSSL: true,
      masterKey: this.encryptionKey,
    });
    // A topic policy replaces SNS's default one, and `enforceSSL` writes a topic policy: without this Allow,
    // CloudWatch alarms (not IAM identities of the account) could not publish, and nobody would be notified.
    const stack = Stack.of(this);
    const fromOurAlarms = {
      StringEquals: { 'aws:SourceAccount': stack.account },
      ArnLike: {
        'aws:SourceArn': `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:eos-${this.config.pipelineId}-*`,
      },
    };
    topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AllowPipelineAlarmsToPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [topic.topicArn],
        conditions: fromOurAlarms,
      }),
    );
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

  private outputs(): void {
    const pl = this.config.pipelineId;
    new CfnOutput(this, 'LedgerTableName', { value: this.table.tableName, description: 'The ledger table' });
    new CfnOutput(this, 'BucketName', { value: this.bucket.bucketName, description: 'The sink bucket' });
    new CfnOutput(this, 'StateMachineArn', { value: this.coordinator.stateMachine.stateMachineArn });
    new CfnOutput(this, 'ClusterArn', {
      value: this.clusterArn,
      description: 'The MSK cluster the pipeline reads',
    });
    new CfnOutput(this, 'StatusCommand', {
      description: 'Check the deployed pipeline',
      value: `npx eos status --pipeline ${pl} --table ${this.table.tableName} --cluster-arn ${this.clusterArn}`,
    });
  }
}
