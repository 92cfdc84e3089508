/**
 * The deployment's settings: one schema for CDK context (`-c key=value`, `cdk.json`) and construct props, with
 * documented defaults and cross-checks that keep the protocol's timing sound. A missing or malformed setting
 * fails synth with an {@link InvalidSettingError} that names it.
 *
 * Pipeline settings (`pipelineId`, `deliveryGuarantee`, …) are the ones of `shared/config/settings.ts`, validated by
 * the same schema the Lambdas use at run time; the table and bucket names are the stack's own and are not
 * settings here.
 */
import { z } from 'zod';
import { type SettingsInput, settingsSchema } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';

/** `arn:<partition>:kafka:<region>:<account>:cluster/<name>/<uuid>` (provisioned and serverless alike). */
export const MSK_CLUSTER_ARN =
  /^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:cluster\/[A-Za-z0-9-]+\/[A-Za-z0-9-]+$/;
/** Kafka topic names: `[a-zA-Z0-9._-]`, at most 249 characters. */
const TOPIC = /^[a-zA-Z0-9._-]{1,249}$/;
/** Lambda's rule for consumer group ids. */
const CONSUMER_GROUP = /^[a-zA-Z0-9\-/*:_+=.@]{1,200}$/;

const bool = z.union([z.boolean(), z.enum(['true', 'false'])]).transform((v) => v === true || v === 'true');
const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

const DAY_S = 86_400;
/** `infra/checkpoint-coordinator.ts` gives each Lambda task the function's timeout plus this much. */
export const STEP_TASK_TIMEOUT_MARGIN_SECONDS = 60;

/** Deployment-only settings (the pipeline's own settings are merged in from `settingsSchema`). */
const deploymentShape = {
  /** The existing MSK cluster to consume from (the normal case). Required unless `sandboxCluster` is true. */
  mskClusterArn: z
    .string()
    .regex(MSK_CLUSTER_ARN, 'expected arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>')
    .optional(),
  /**
   * The VPC of the imported cluster (`vpc-…`): the processor's network-interface permissions (the event source
   * mapping's pollers create ENIs with the function's role) are conditioned on it. Without it they are scoped to
   * the account and region only, and synth warns. The sandbox cluster's VPC is known and used.
   */
  mskVpcId: z
    .string()
    .regex(/^vpc-[0-9a-f]{8,17}$/, 'expected a VPC id, vpc-<hex>')
    .optional(),
  /** Create an MSK Serverless cluster (IAM auth) and its VPC instead of importing one: for a sandbox. */
  sandboxCluster: bool.default(false),
  /** The topic to consume. */
  topic: z.string().regex(TOPIC, 'Kafka topic names use [a-zA-Z0-9._-], at most 249 characters'),
  /** The event source mapping's consumer group; defaults to `eos-<pipelineId>`. Cannot change after creation. */
  consumerGroupId: z.string().regex(CONSUMER_GROUP, 'at most 200 of [a-zA-Z0-9-/*:_+=.@]').optional(),
  /** Records per invocation (Lambda allows up to 10,000, bounded by the 6 MB payload). */
  batchSize: int(1, 10_000).default(500),
  /** How long the mapping gathers records before invoking (seconds, 0–300). */
  maxBatchingWindowSeconds: int(0, 300).default(1),
  /** Where a new consumer group starts: the earliest retained record, or only new ones. */
  startingPosition: z.enum(['TRIM_HORIZON', 'LATEST']).default('TRIM_HORIZON'),
  /** The processor's timeout (seconds); `orphanGraceSeconds` must exceed it. */
  processorTimeoutSeconds: int(10, 900).default(120),
  processorMemoryMb: int(128, 10_240).default(1024),
  /** The timeout of each coordinator step (seconds); `checkpointLeaseSeconds` must exceed it. */
  coordinatorStepTimeoutSeconds: int(10, 900).default(300),
  /** How often the coordinator takes a checkpoint (minutes). */
  checkpointIntervalMinutes: int(1, 1440).default(1),
  /** Alarm when no checkpoint commits for this many intervals. */
  noCommitAlarmIntervals: int(1, 288).default(3),
  /** Where alarm notifications go (an SNS email subscription), if anywhere. */
  alarmEmail: z.email().optional(),
  /** `retain` keeps the table and bucket when the stack is deleted; `destroy` removes them (sandboxes). */
  removalPolicy: z.enum(['retain', 'destroy']).default('retain'),
  /** DynamoDB deletion protection on the ledger table. */
  deletionProtection: bool.default(true),
  /** DynamoDB point-in-time recovery on the ledger table. */
  pointInTimeRecovery: bool.default(true),
  /** `s3` (SSE-S3) or `kms` (a customer-managed key with rotation, also used by the table). */
  encryption: z.enum(['s3', 'kms']).default('s3'),
  /**
   * Noncurrent versions of committed objects (final data, manifests) are deleted after this many days. The bucket
   * policy already denies overwriting or deleting them to every principal but the step that writes them; the
   * versions are the second line (recovery from a mistake by a principal allowed to change the policy), so the
   * default keeps them a year. Staged and coordinator work objects keep theirs 3 days whatever this says.
   */
  noncurrentVersionExpirationDays: int(1, 3650).default(365),
  /** Backstop: in-progress objects older than this are deleted by a lifecycle rule (days). */
  inProgressExpirationDays: int(1, 3650).default(30),
  /** CloudWatch Logs retention of every function's log group (days). */
  logRetentionDays: z.coerce
    .number()
    .int()
    .refine((d) => LOG_RETENTION_DAYS.includes(d), `one of ${'1, 3, 5, 7, 14, 30, 60, 90, …, 3653'}`)
    .default(30),
} as const;

/** The values CloudWatch Logs accepts. */
export const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];

/** The stack derives these from its own resources and settings (bucket, table, cluster ARN, topic). */
const pipelineSettingsShape = settingsSchema.omit({
  ledgerTable: true,
  bucket: true,
  eventSourceArn: true,
  topics: true,
}).shape;

export const pipelineConfigSchema = z.object({ ...pipelineSettingsShape, ...deploymentShape }).strict();

export type PipelineConfigInput = z.input<typeof pipelineConfigSchema>;
export type PipelineConfig = z.output<typeof pipelineConfigSchema> & { readonly consumerGroupId: string };

/** Every setting's name, in schema order (for context lookup and the docs' table). */
export const CONFIG_KEYS = Object.keys(pipelineConfigSchema.shape) as (keyof PipelineConfigInput)[];

/**
 * The pipeline settings the Lambdas read from `EOS_*` variables, minus the stack-owned table and bucket and the
 * processor's source checks (the stack sets those from the cluster ARN and topic).
 */
export function pipelineSettingsOf(
  config: PipelineConfig,
): Omit<SettingsInput, 'ledgerTable' | 'bucket' | 'eventSourceArn' | 'topics'> {
  return {
    pipelineId: config.pipelineId,
    deliveryGuarantee: config.deliveryGuarantee,
    idempotencyKey: idempotencyKeyText(config.idempotencyKey),
    claimWrite: config.claimWrite,
    idempotencyTtlSeconds: config.idempotencyTtlSeconds,
    gzip: config.gzip,
    transform: config.transform,
    maxTransactionItems: config.maxTransactionItems,
    checkpointLeaseSeconds: config.checkpointLeaseSeconds,
    orphanGraceSeconds: config.orphanGraceSeconds,
    maxFenceJump: config.maxFenceJump,
  };
}

function idempotencyKeyText(source: PipelineConfig['idempotencyKey']): string {
  if (source.kind === 'none') return 'none';
  return source.kind === 'header' ? `header:${source.name}` : `json:${source.field}`;
}

/**
 * Validates settings from context or props. `label` says how the user spells a setting (for context:
 * `-c key=…`), so that the error names it the way it was written.
 */
export function parsePipelineConfig(
  input: Record<string, unknown>,
  label: (key: string) => string = (key) => key,
): PipelineConfig {
  const result = pipelineConfigSchema.safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    if (issue.code === 'unrecognized_keys') {
      throw new InvalidSettingError(issue.keys.map(label).join(', '), 'unknown setting');
    }
    const key = String(issue.path[0] ?? '(settings)');
    const missing = issue.code === 'invalid_type' && input[key] === undefined;
    if (missing) throw new InvalidSettingError(label(key), 'required but not set');
    const given = input[key];
    const shown =
      typeof given === 'string' || typeof given === 'number' ? ` (got ${JSON.stringify(given)})` : '';
    throw new InvalidSettingError(label(key), `${issue.message}${shown}`);
  }
  const config = {
    ...result.data,
    consumerGroupId: result.data.consumerGroupId ?? `eos-${result.data.pipelineId}`,
  };
  checkCrossSettings(config, label);
  return config;
}

/** The timing rules of the protocol (DESIGN P3, C1) and the cluster choice. */
function checkCrossSettings(config: PipelineConfig, label: (key: string) => string): void {
  const fail = (key: string, message: string): never => {
    throw new InvalidSettingError(label(key), message);
  };
  if (!config.mskClusterArn && !config.sandboxCluster) {
    fail(
      'mskClusterArn',
      'required but not set (or set sandboxCluster=true to create an MSK Serverless cluster)',
    );
  }
  if (config.mskVpcId && config.sandboxCluster) {
    fail(
      'mskVpcId',
      "is the imported cluster's VPC: not used with sandboxCluster=true (the sandbox's VPC is)",
    );
  }
  if (config.mskClusterArn && config.sandboxCluster) {
    fail(
      'sandboxCluster',
      'cannot be true together with mskClusterArn: import a cluster or create one, not both',
    );
  }
  // A staged object is an orphan only if no live attempt can still reference it: the grace period must outlast
  // the longest processor invocation (P3).
  if (config.orphanGraceSeconds <= config.processorTimeoutSeconds) {
    fail(
      'orphanGraceSeconds',
      `${config.orphanGraceSeconds}s must exceed processorTimeoutSeconds (${config.processorTimeoutSeconds}s)`,
    );
  }
  // A checkpoint's lease must outlast any single step, or a slow but live step is "recovered" under it (C1). A
  // step lasts at most its Step Functions task timeout, which the coordinator sets to the Lambda timeout + 60 s.
  const longestStep = config.coordinatorStepTimeoutSeconds + STEP_TASK_TIMEOUT_MARGIN_SECONDS;
  if (config.checkpointLeaseSeconds <= longestStep) {
    fail(
      'checkpointLeaseSeconds',
      `${config.checkpointLeaseSeconds}s must exceed the longest coordinator step: coordinatorStepTimeoutSeconds (${config.coordinatorStepTimeoutSeconds}s) + ${STEP_TASK_TIMEOUT_MARGIN_SECONDS}s task margin`,
    );
  }
  // The lifecycle rule is a backstop behind the orphan sweep and checkpoint recovery, never ahead of them.
  const backstop = config.inProgressExpirationDays * DAY_S;
  const longest = Math.max(
    config.orphanGraceSeconds,
    config.checkpointLeaseSeconds,
    config.checkpointIntervalMinutes * 60 * config.noCommitAlarmIntervals,
  );
  if (backstop <= 2 * longest) {
    fail(
      'inProgressExpirationDays',
      `${config.inProgressExpirationDays} day(s) must exceed twice the longest grace period or lease (${longest}s)`,
    );
  }
}
