/**
 * A pipeline's own Lambda functions besides the coordinator's steps: the processor behind the event source
 * mapping, a replay's processor (the same bundle, settings and grants, in a generation of its own), and the
 * monitor that reports the ledger's ages on the checkpoint schedule.
 */
import { Duration, type RemovalPolicy } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { settingsToEnv } from '../shared/config/settings.ts';
import { keys } from '../shared/ledger/layout.ts';
import { BundledFunction } from './bundled-function.ts';
import type { PipelineConfig } from './config.ts';
import { type AttachedKafkaSource, attachKafkaSource } from './kafka-source.ts';
import {
  claimLeadingKeys,
  keyWindowLeadingKeys,
  monitorLeadingKeys,
  PROCESSOR_CLAIM_INSERT_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
  PROCESSOR_HEAD_READ_ACTIONS,
  PROCESSOR_KEY_WINDOW_ACTIONS,
  processorLeadingKeys,
  REPLAY_PROCESSOR_PLAN_ACTIONS,
} from './ledger-access.ts';
import { projectModule } from './package-paths.ts';
import {
  grantDataKeys,
  grantLedger,
  grantTransformReads,
  processorObjectPrefixes,
} from './pipeline-grants.ts';
import { type PipelineParts, pipelineFunctionDefaults } from './pipeline-parts.ts';
import { REPLAY_GENERATION_ENV, type ReplayConfig, replayLeadingKeys } from './replay.ts';

const MONITOR_ENTRY = projectModule('../functions/monitor.ts', import.meta.url);

/** A replay into a new generation (the `replay` prop): its settings, its processor and its mapping. */
export interface PipelineReplay extends ReplayConfig {
  /** Built like `processor`, plus `EOS_REPLAY_GENERATION`. */
  readonly processor: BundledFunction;
  /** The replay's mapping (consumer group `consumerGroupId`); absent with `eventSourceMapping: false`. */
  readonly eventSource?: lambda.EventSourceMapping;
  readonly kafka?: AttachedKafkaSource;
}

/**
 * The processor, or with `replay` the replay processor: the same bundle, settings and grants, plus
 * `EOS_REPLAY_GENERATION` and a read of the replay plans.
 */
export function createProcessorFunction(
  pipeline: PipelineParts,
  id: string,
  entry: string,
  removalPolicy: RemovalPolicy,
  replay?: ReplayConfig,
): BundledFunction {
  const { config, table, bucket, source } = pipeline;
  const defaults = pipelineFunctionDefaults(
    pipeline,
    Duration.seconds(config.processorTimeoutSeconds),
    config.processorMemoryMb,
    removalPolicy,
  );
  const fn = new BundledFunction(pipeline, id, {
    ...defaults,
    entry,
    handler: 'handler',
    description: replay
      ? `Replays MSK records of ${config.topic} into generation ${replay.generation} of pipeline ${config.pipelineId}`
      : `Stages MSK records of ${config.topic} for pipeline ${config.pipelineId} (${config.deliveryGuarantee})`,
    environment: {
      ...defaults.environment,
      ...pipeline.environment,
      // The processor rejects events of any other source or topic before any effect.
      ...settingsToEnv({
        ledgerTable: table.tableName,
        bucket: bucket.bucketName,
        eventSourceArn: expectedEventSourceArn(pipeline),
        bootstrapServers:
          source.kind === 'self-managed-kafka' ? source.bootstrapServers.join(',') : undefined,
        topics: [config.topic],
      }),
      ...(replay ? { [REPLAY_GENERATION_ENV]: String(replay.generation) } : {}),
    },
  });
  grantLedger(table, fn, PROCESSOR_DYNAMODB_ACTIONS, processorLeadingKeys(config.pipelineId));
  grantLedger(
    table,
    fn,
    PROCESSOR_HEAD_READ_ACTIONS,
    [keys.checkpointPk(config.pipelineId)],
    'CheckpointHeadRead',
  );
  grantLedger(
    table,
    fn,
    PROCESSOR_CLAIM_INSERT_ACTIONS,
    claimLeadingKeys(config.pipelineId),
    'ClaimInserts',
    { keyRequired: true },
  );
  grantLedger(
    table,
    fn,
    PROCESSOR_KEY_WINDOW_ACTIONS,
    keyWindowLeadingKeys(config.pipelineId),
    'KeyWindowReads',
  );
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      sid: 'StageObjects',
      actions: ['s3:PutObject', 's3:AbortMultipartUpload'],
      resources: processorObjectPrefixes(config).map((prefix) => bucket.arnForObjects(`${prefix}*`)),
    }),
  );
  grantDataKeys(pipeline, fn, ['s3', 'dynamodb'], 'encrypt-decrypt');
  if (replay) {
    grantLedger(
      table,
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
export function attachMapping(
  pipeline: PipelineParts,
  fn: lambda.Function,
  replay?: ReplayConfig,
): AttachedKafkaSource {
  const config: PipelineConfig = pipeline.config;
  return attachKafkaSource(pipeline, fn, pipeline.source, {
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
 * The replay's processor and mapping. The generation is in the construct id: another generation is a new
 * function and a new mapping, never the old mapping's records handed to a processor of the new generation.
 */
export function createReplay(
  pipeline: PipelineParts,
  replay: ReplayConfig,
  entry: string,
  removalPolicy: RemovalPolicy,
  withMapping: boolean,
): PipelineReplay {
  const processor = createProcessorFunction(
    pipeline,
    `ReplayG${replay.generation}Processor`,
    entry,
    removalPolicy,
    replay,
  );
  grantTransformReads(pipeline, processor);
  const kafka = withMapping ? attachMapping(pipeline, processor, replay) : undefined;
  return { ...replay, processor, kafka, eventSource: kafka?.mapping };
}

/**
 * The ARN the processor requires in every event: the MSK cluster's, for a cluster in this account.
 * Self-managed Kafka events carry no ARN, and for a cross-account cluster the events' ARN is not documented (the
 * mapping's is the managed VPC connection's): there the processor checks the topic only.
 */
function expectedEventSourceArn(pipeline: PipelineParts): string | undefined {
  const source = pipeline.source;
  return source.kind === 'msk' && source.vpcConnectionArn === undefined ? source.clusterArn : undefined;
}

/**
 * The monitor and its schedule: the ledger's ages, read on the checkpoint interval, for the NoCommit alarm. With an
 * Iceberg table, `tableEnvironment` (the publish step's table settings) has it report how far the table is behind.
 */
export function createMonitor(
  pipeline: PipelineParts,
  removalPolicy: RemovalPolicy,
  tableEnvironment: Record<string, string> = {},
): BundledFunction {
  const { config } = pipeline;
  const defaults = pipelineFunctionDefaults(pipeline, Duration.seconds(60), 256, removalPolicy);
  const fn = new BundledFunction(pipeline, 'Monitor', {
    ...defaults,
    entry: MONITOR_ENTRY,
    handler: 'handler',
    description: `Emits ledger ages of pipeline ${config.pipelineId} for the NoCommit alarm`,
    environment: { ...defaults.environment, ...pipeline.environment, ...tableEnvironment },
  });
  // Read-only, and only what it reports from: checkpoints and their cuts (the published mark among them), fences
  // and staged-file entries. Never
  // claims (business keys), keyed state, key windows or replay plans.
  grantLedger(
    pipeline.table,
    fn,
    ['dynamodb:GetItem', 'dynamodb:Query'],
    monitorLeadingKeys(config.pipelineId),
  );
  grantDataKeys(pipeline, fn, ['dynamodb'], 'decrypt');
  new events.Rule(pipeline, 'MonitorSchedule', {
    description: `Reads the ledger ages of pipeline ${config.pipelineId}`,
    schedule: events.Schedule.rate(Duration.minutes(config.checkpointIntervalMinutes)),
    targets: [new targets.LambdaFunction(fn, { retryAttempts: 0 })],
  });
  return fn;
}
