/**
 * How the construct's props spell the settings of `config.ts` (`processorTimeout` for `processorTimeoutSeconds`), in
 * a module free of CDK imports: the docs generator and error labels read it without loading aws-cdk-lib.
 */
export type DurationUnit = 'seconds' | 'minutes' | 'days';

/**
 * Each setting of `config.ts` and the prop that carries it (`test/infra/construct-api.test.ts` fails naming a setting
 * added to the schema without a prop here; `pipeline-props.ts`, which indexes its props by these names, fails to compile on a name that is not a prop).
 */
const PROPS = {
  pipelineId: 'pipelineId',
  deliveryGuarantee: 'deliveryGuarantee',
  idempotencyKey: 'idempotencyKey',
  missingIdempotencyKey: 'missingIdempotencyKey',
  claimWrite: 'claimWrite',
  idempotencyScope: 'idempotencyScope',
  idempotencyWindowKeys: 'idempotencyWindowKeys',
  idempotencyTtlSeconds: 'idempotencyTtl',
  gzip: 'gzip',
  maxTransactionItems: 'maxTransactionItems',
  checkpointLeaseSeconds: 'checkpointLease',
  maxFenceJump: 'maxFenceJump',
  orphanGraceSeconds: 'orphanGrace',
  mskClusterArn: 'mskClusterArn',
  mskVpcId: 'mskVpcId',
  sandboxCluster: 'sandboxCluster',
  topic: 'topic',
  consumerGroupId: 'consumerGroupId',
  batchSize: 'batchSize',
  maxBatchingWindowSeconds: 'maxBatchingWindow',
  startingPosition: 'startingPosition',
  startingPositionTimestamp: 'startingPositionTimestamp',
  minimumPollers: 'minimumPollers',
  maximumPollers: 'maximumPollers',
  processorTimeoutSeconds: 'processorTimeout',
  processorMemoryMb: 'processorMemorySize',
  coordinatorStepTimeoutSeconds: 'coordinatorStepTimeout',
  coordinatorWorkflow: 'coordinatorWorkflow',
  checkpointIntervalMinutes: 'checkpointInterval',
  noCommitAlarmIntervals: 'noCommitAlarmIntervals',
  offsetLagAlarmThreshold: 'offsetLagAlarmThreshold',
  alarmEmail: 'alarmEmail',
  removalPolicy: 'removalPolicy',
  deletionProtection: 'deletionProtection',
  pointInTimeRecovery: 'pointInTimeRecovery',
  encryption: 'encryption',
  noncurrentVersionExpirationDays: 'noncurrentVersionExpiration',
  inProgressExpirationDays: 'inProgressExpiration',
  logRetentionDays: 'logRetention',
  transform: 'transform',
  outputFormat: 'outputFormat',
  timePartitioning: 'timePartitioning',
  finalObjects: 'finalObjects',
  timeField: 'timeField',
} as const;

/** A prop that carries a setting. */
export type SettingProp = (typeof PROPS)[keyof typeof PROPS];

export const PROP_OF_SETTING: Readonly<Record<string, SettingProp | undefined>> = PROPS;

/** The settings a `Duration` prop becomes, in the setting's unit. */
export const DURATION_UNITS: Readonly<Record<string, DurationUnit | undefined>> = {
  idempotencyTtlSeconds: 'seconds',
  checkpointLeaseSeconds: 'seconds',
  orphanGraceSeconds: 'seconds',
  maxBatchingWindowSeconds: 'seconds',
  processorTimeoutSeconds: 'seconds',
  coordinatorStepTimeoutSeconds: 'seconds',
  checkpointIntervalMinutes: 'minutes',
  noncurrentVersionExpirationDays: 'days',
  inProgressExpirationDays: 'days',
};

/** How an error names a setting given as a prop: the prop, with the unit its number is in when it is a Duration. */
export function propLabel(setting: string): string {
  const prop = PROP_OF_SETTING[setting] ?? setting;
  const unit = DURATION_UNITS[setting];
  return unit ? `${prop} (${unit})` : prop;
}

/** How a cross-check's message refers to another setting given as a prop. */
export function propName(setting: string): string {
  return PROP_OF_SETTING[setting] ?? setting;
}
