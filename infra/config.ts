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
import { WORKFLOWS } from '../shared/coordinator/definition.ts';
import { InvalidSettingError } from '../shared/errors.ts';
import { parseTransformRef } from '../shared/transforms/load.ts';
import { MAX_REPLAY_GENERATION, type ReplayProps, replayConfigOf } from './replay.ts';

/** `arn:<partition>:kafka:<region>:<account>:cluster/<name>/<uuid>` (provisioned and serverless alike). */
export const MSK_CLUSTER_ARN =
  /^arn:aws[a-z-]*:kafka:[a-z0-9-]+:\d{12}:cluster\/[A-Za-z0-9-]+\/[A-Za-z0-9-]+$/;
/** Kafka topic names: `[a-zA-Z0-9._-]`, at most 249 characters. */
const TOPIC = /^[a-zA-Z0-9._-]{1,249}$/;
/** Lambda's rule for consumer group ids. */
const CONSUMER_GROUP = /^[a-zA-Z0-9\-/*:_+=.@]{1,200}$/;

const bool = z.union([z.boolean(), z.enum(['true', 'false'])]).transform((v) => v === true || v === 'true');
const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max);

/** A time as whole Unix seconds, given as a number, digits or an ISO 8601 time with its zone (`…Z`, `…+02:00`). */
const unixSeconds = z.union([z.number(), z.string()]).transform((value, ctx) => {
  const seconds =
    typeof value === 'number' || /^\d+$/.test(value)
      ? Number(value)
      : /(Z|[+-]\d\d:\d\d)$/.test(value)
        ? Date.parse(value) / 1000
        : Number.NaN;
  if (!Number.isFinite(seconds) || seconds < 0 || !Number.isInteger(seconds)) {
    ctx.addIssue({ code: 'custom', message: 'an ISO 8601 time with zone (…Z) or whole Unix seconds' });
    return z.NEVER;
  }
  return seconds;
});

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
   * mapping's pollers create ENIs with the function's role) are conditioned on it. Required with `mskClusterArn`
   * when there is a mapping (the construct stops synth without it). The sandbox cluster's VPC is known and used.
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
  maxBatchingWindowSeconds: int(0, 300).default(5),
  /**
   * Where a new consumer group starts: the earliest retained record, only new ones, or the first record at or after
   * `startingPositionTimestamp`. Cannot change after the mapping is created.
   */
  startingPosition: z.enum(['TRIM_HORIZON', 'LATEST', 'AT_TIMESTAMP']).default('TRIM_HORIZON'),
  /**
   * For `AT_TIMESTAMP`: an ISO 8601 time with its zone (`2026-01-31T00:00:00Z`) or Unix seconds; the mapping takes
   * whole seconds.
   */
  startingPositionTimestamp: unixSeconds.optional(),
  /**
   * Provisioned mode: at least this many event pollers stay provisioned for the mapping (1–200). Unset: on-demand
   * pollers. Setting either bound turns provisioned mode on.
   */
  minimumPollers: int(1, 200).optional(),
  /** Provisioned mode: at most this many event pollers (1–2000). */
  maximumPollers: int(1, 2000).optional(),
  /** The processor's timeout (seconds); `orphanGraceSeconds` must exceed it. */
  processorTimeoutSeconds: int(10, 900).default(120),
  processorMemoryMb: int(128, 10_240).default(1024),
  /** The timeout of each coordinator step (seconds); `checkpointLeaseSeconds` must exceed it. */
  coordinatorStepTimeoutSeconds: int(10, 900).default(300),
  /**
   * The workflow the schedule starts: `express` bills a request and its duration a checkpoint, and hands what may
   * need more than five minutes to a Standard one; `standard` bills every state transition.
   */
  coordinatorWorkflow: z.enum(WORKFLOWS).default('express'),
  /** How often the coordinator takes a checkpoint (minutes). */
  checkpointIntervalMinutes: int(1, 1440).default(1),
  /** Alarm when no checkpoint commits for this many intervals. */
  noCommitAlarmIntervals: int(1, 288).default(3),
  /** The `OffsetLagHigh` alarm fires when the mapping's `OffsetLag` stays at or above this many records. */
  offsetLagAlarmThreshold: int(1, 1_000_000_000).default(100_000),
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
  /**
   * The transform: a built-in's name (`orders`, `passthrough`, …) or your own module, `./path/to/file.ts#exportName`
   * in context (`#exportName` defaults to `default`) or `{ entry, exportName }` in props. A module is bundled into the
   * processor at synth; a missing file, a missing export or an unknown name fails synth naming it.
   */
  transform: z
    .union([
      z.string().min(1),
      z.object({ entry: z.string().min(1), exportName: z.string().min(1).optional() }).strict(),
    ])
    .default('orders'),
} as const;

/** The values CloudWatch Logs accepts. */
export const LOG_RETENTION_DAYS = [
  1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
];

/**
 * Settings the construct sets on one function only, from a construct prop, never a deployment setting:
 * `replayGeneration` (`EOS_REPLAY_GENERATION`) is the replay processor's, from the `replay` prop (`replay.ts`);
 * the `iceberg*` settings (`EOS_ICEBERG_*`) are the publish step's, from the `iceberg` prop (`iceberg-table.ts`).
 * Dropped by name, so this module compiles whether or not the settings schema has the key yet.
 */
const PER_FUNCTION_SETTINGS = [
  'replayGeneration',
  'icebergCatalog',
  'icebergTablePrefix',
  'icebergDatabase',
  'icebergTable',
  'icebergTableBucketArn',
  'icebergNamespace',
  'icebergPartitioning',
] as const;
type PerFunctionSetting = (typeof PER_FUNCTION_SETTINGS)[number];

function withoutPerFunctionSettings<T extends object>(shape: T): Omit<T, PerFunctionSetting> {
  const kept = { ...shape } as Record<string, unknown>;
  for (const key of PER_FUNCTION_SETTINGS) delete kept[key];
  return kept as Omit<T, PerFunctionSetting>;
}

/** The stack derives these from its own resources and settings (bucket, table, cluster ARN, topic). */
const pipelineSettingsShape = withoutPerFunctionSettings(
  settingsSchema.omit({
    ledgerTable: true,
    bucket: true,
    eventSourceArn: true,
    bootstrapServers: true,
    topics: true,
    transform: true,
    // Derived from the transform at synth, never given.
    outputColumns: true,
  }).shape,
);

export const pipelineConfigSchema = z.object({ ...pipelineSettingsShape, ...deploymentShape }).strict();

export type PipelineConfigInput = z.input<typeof pipelineConfigSchema>;

/** The transform the processor runs: one of the project's, by name, or an export of the user's module. */
export type TransformChoice =
  | { readonly kind: 'built-in'; readonly name: string }
  | { readonly kind: 'module'; readonly entry: string; readonly exportName: string | undefined };

export type PipelineConfig = Omit<z.output<typeof pipelineConfigSchema>, 'transform'> & {
  readonly consumerGroupId: string;
  readonly transform: TransformChoice;
};

/**
 * `orders` is a built-in's name; `./my-transform.ts`, `src/t.js#payments` (anything with a path separator or a
 * module extension) is a module, with `#exportName` (default: `default`, else the module's only export) — the same
 * rule as `eos local --transform` (`parseTransformRef`).
 */
export function transformChoiceOf(setting: string | { entry: string; exportName?: string }): TransformChoice {
  if (typeof setting !== 'string') {
    return { kind: 'module', entry: setting.entry, exportName: setting.exportName };
  }
  const ref = parseTransformRef(setting);
  return ref.kind === 'builtin'
    ? { kind: 'built-in', name: ref.name }
    : { kind: 'module', entry: ref.path, exportName: ref.exportName };
}

/** Every setting's name, in schema order (for context lookup and the docs' table). */
export const CONFIG_KEYS = Object.keys(pipelineConfigSchema.shape) as (keyof PipelineConfigInput)[];

/**
 * The pipeline settings the Lambdas read from `EOS_*` variables, minus the stack-owned table and bucket and the
 * processor's source checks (the stack sets those from the cluster ARN and topic).
 */
/**
 * Every processor setting the config carries, each key required (its value may be undefined): a setting added to
 * the schema but not passed on here is a compile error, not a prop that silently never reaches the Lambdas.
 */
type PassedSettings = Omit<
  SettingsInput,
  | 'ledgerTable'
  | 'bucket'
  | 'eventSourceArn'
  | 'topics'
  | 'bootstrapServers'
  | 'outputColumns'
  | PerFunctionSetting
>;
// Mapped over `keyof Required<…>` (not homomorphic): every key required, its value possibly undefined.
export type PipelineSettings = { [K in keyof Required<PassedSettings>]: PassedSettings[K] | undefined };

export function pipelineSettingsOf(config: PipelineConfig): PipelineSettings {
  return {
    pipelineId: config.pipelineId,
    deliveryGuarantee: config.deliveryGuarantee,
    idempotencyKey: idempotencyKeyText(config.idempotencyKey),
    missingIdempotencyKey: config.missingIdempotencyKey,
    claimWrite: config.claimWrite,
    idempotencyScope: config.idempotencyScope,
    idempotencyWindowKeys: config.idempotencyWindowKeys,
    idempotencyTtlSeconds: config.idempotencyTtlSeconds,
    gzip: config.gzip,
    // A module's transform is bundled into the processor, which runs it whatever EOS_TRANSFORM says.
    transform: config.transform.kind === 'built-in' ? config.transform.name : undefined,
    maxTransactionItems: config.maxTransactionItems,
    checkpointLeaseSeconds: config.checkpointLeaseSeconds,
    orphanGraceSeconds: config.orphanGraceSeconds,
    maxFenceJump: config.maxFenceJump,
    outputFormat: config.outputFormat,
    timePartitioning: config.timePartitioning,
    finalObjects: config.finalObjects,
    timeField: config.timeField,
  };
}

function idempotencyKeyText(source: PipelineConfig['idempotencyKey']): string {
  if (source.kind === 'none' || source.kind === 'transform') return source.kind;
  return source.kind === 'header' ? `header:${source.name}` : `json:${source.field}`;
}

/**
 * Validates settings from context or props. `label` says how the user spells a setting (for context:
 * `-c key=…`), so that the error names it the way it was written.
 */
export interface ParseOptions {
  /**
   * The construct was given a `source` prop (any kind of Kafka cluster): then `mskClusterArn`, `mskVpcId` and
   * `sandboxCluster` are not used and must not be set.
   */
  readonly sourceGiven?: boolean;
  /**
   * How a cross-check's message refers to another setting (default: its name): the construct's props name some
   * settings differently (`processorTimeout` for `processorTimeoutSeconds`).
   */
  readonly name?: (key: string) => string;
}

export function parsePipelineConfig(
  input: Record<string, unknown>,
  label: (key: string) => string = (key) => key,
  options: ParseOptions = {},
): PipelineConfig {
  const result = pipelineConfigSchema.safeParse(input);
  if (!result.success) throw settingError(result.error, input, label);
  const config = {
    ...result.data,
    consumerGroupId: result.data.consumerGroupId ?? `eos-${result.data.pipelineId}`,
    transform: transformChoiceOf(result.data.transform),
  };
  checkCrossSettings(config, label, options);
  return config;
}

/** The first issue of a failed parse as an {@link InvalidSettingError} naming the setting as `label` spells it. */
function settingError(
  error: z.ZodError,
  input: Record<string, unknown>,
  label: (key: string) => string,
): InvalidSettingError {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    return new InvalidSettingError(issue.keys.map(label).join(', '), 'unknown setting');
  }
  const key = String(issue.path[0] ?? '(settings)');
  const missing = issue.code === 'invalid_type' && input[key] === undefined;
  if (missing) return new InvalidSettingError(label(key), 'required but not set');
  const given = input[key];
  const shown =
    typeof given === 'string' || typeof given === 'number' ? ` (got ${JSON.stringify(given)})` : '';
  return new InvalidSettingError(label(key), `${issue.message}${shown}`);
}

/** The timing rules of the protocol (P3, C1: docs/architecture.md) and the cluster choice. */
function checkCrossSettings(
  config: PipelineConfig,
  label: (key: string) => string,
  options: ParseOptions,
): void {
  const fail = (key: string, message: string): never => {
    throw new InvalidSettingError(label(key), message);
  };
  const name = options.name ?? ((key: string) => key);
  if (options.sourceGiven) {
    for (const key of ['mskClusterArn', 'mskVpcId', 'sandboxCluster'] as const) {
      if (config[key]) fail(key, 'cannot be set together with the source prop: the source names the cluster');
    }
  } else if (!config.mskClusterArn && !config.sandboxCluster) {
    fail(
      'mskClusterArn',
      `required but not set (or set ${name('sandboxCluster')}=true to create an MSK Serverless cluster)`,
    );
  }
  if (config.mskVpcId && config.sandboxCluster) {
    fail(
      'mskVpcId',
      `is the imported cluster's VPC: not used with ${name('sandboxCluster')}=true (the sandbox's VPC is)`,
    );
  }
  if (config.mskClusterArn && config.sandboxCluster) {
    fail(
      'sandboxCluster',
      `cannot be true together with ${name('mskClusterArn')}: import a cluster or create one, not both`,
    );
  }
  if (config.startingPosition === 'AT_TIMESTAMP' && config.startingPositionTimestamp === undefined) {
    fail('startingPositionTimestamp', `required with ${name('startingPosition')} AT_TIMESTAMP`);
  }
  if (config.startingPosition !== 'AT_TIMESTAMP' && config.startingPositionTimestamp !== undefined) {
    fail(
      'startingPositionTimestamp',
      `only used with ${name('startingPosition')} AT_TIMESTAMP (not ${config.startingPosition})`,
    );
  }
  if (
    config.minimumPollers !== undefined &&
    config.maximumPollers !== undefined &&
    config.minimumPollers > config.maximumPollers
  ) {
    fail(
      'minimumPollers',
      `${config.minimumPollers} exceeds ${name('maximumPollers')} (${config.maximumPollers})`,
    );
  }
  // A staged object is an orphan only if no live attempt can still reference it: the grace period must outlast
  // the longest processor invocation (P3).
  if (config.orphanGraceSeconds <= config.processorTimeoutSeconds) {
    fail(
      'orphanGraceSeconds',
      `${config.orphanGraceSeconds}s must exceed ${name('processorTimeoutSeconds')} (${config.processorTimeoutSeconds}s)`,
    );
  }
  // A checkpoint's lease must outlast any single step, or a slow but live step is "recovered" under it (C1). A
  // step lasts at most its Step Functions task timeout, which the coordinator sets to the Lambda timeout + 60 s.
  const longestStep = config.coordinatorStepTimeoutSeconds + STEP_TASK_TIMEOUT_MARGIN_SECONDS;
  if (config.checkpointLeaseSeconds <= longestStep) {
    fail(
      'checkpointLeaseSeconds',
      `${config.checkpointLeaseSeconds}s must exceed the longest coordinator step: ${name('coordinatorStepTimeoutSeconds')} (${config.coordinatorStepTimeoutSeconds}s) + ${STEP_TASK_TIMEOUT_MARGIN_SECONDS}s task margin`,
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

/**
 * The context keys of the construct's `replay` prop (`infra/replay.ts`), for the repository's app: not settings
 * (no prop of their own, no `EOS_*` variable), each a field of `replay`. Without `replayGeneration` there is no
 * replay mapping.
 */
export const REPLAY_CONTEXT_KEYS = [
  'replayGeneration',
  'replayStartingPosition',
  'replayStartingPositionTimestamp',
] as const;
export type ReplayContextKey = (typeof REPLAY_CONTEXT_KEYS)[number];

/** The `replay` field each context key sets. */
export const REPLAY_FIELD_OF_CONTEXT_KEY = {
  replayGeneration: 'generation',
  replayStartingPosition: 'startingPosition',
  replayStartingPositionTimestamp: 'startingPositionTimestamp',
} as const satisfies Record<ReplayContextKey, keyof ReplayProps>;

/** The same words as the prop's error (`replay.ts`). */
const GENERATION_RANGE = `an integer from 1 to ${MAX_REPLAY_GENERATION}`;

const replayContextSchema = z
  .object({
    // Numbers and strings only: `z.coerce` alone would take a JSON `true` for generation 1.
    replayGeneration: z
      .union([z.number(), z.string()], { error: GENERATION_RANGE })
      .pipe(
        z.coerce
          .number<string | number>({ error: GENERATION_RANGE })
          .int(GENERATION_RANGE)
          .min(1, GENERATION_RANGE)
          .max(MAX_REPLAY_GENERATION, GENERATION_RANGE),
      )
      .optional(),
    replayStartingPosition: z.enum(['TRIM_HORIZON', 'AT_TIMESTAMP']).optional(),
    replayStartingPositionTimestamp: unixSeconds.optional(),
  })
  .strict();

/**
 * The `replay` prop from its context keys (`-c replayGeneration=2`, …), validated naming the key as `label`
 * spells it: each key's value, the starting position with its timestamp, then the construct's own checks against
 * the pipeline's validated settings (`replayConfigOf`: exactly-once only, the consumer group's length, a timestamp
 * in milliseconds), their errors renamed from the prop's field to its key. Undefined when no key is given; a
 * starting position without `replayGeneration` is refused rather than ignored.
 */
export function parseReplayContext(
  input: Partial<Record<ReplayContextKey, unknown>>,
  pipeline: Pick<PipelineConfig, 'deliveryGuarantee' | 'consumerGroupId'>,
  label: (key: string) => string = (key) => key,
): ReplayProps | undefined {
  const result = replayContextSchema.safeParse(input);
  if (!result.success) throw settingError(result.error, input, label);
  const {
    replayGeneration: generation,
    replayStartingPosition: startingPosition,
    replayStartingPositionTimestamp: startingPositionTimestamp,
  } = result.data;
  const fail = (key: ReplayContextKey, message: string): never => {
    throw new InvalidSettingError(label(key), message);
  };
  if (generation === undefined) {
    if (startingPosition !== undefined) fail('replayStartingPosition', 'only used with replayGeneration');
    if (startingPositionTimestamp !== undefined) {
      fail('replayStartingPositionTimestamp', 'only used with replayGeneration');
    }
    return undefined;
  }
  if (startingPosition === 'AT_TIMESTAMP' && startingPositionTimestamp === undefined) {
    fail('replayStartingPositionTimestamp', 'required with replayStartingPosition AT_TIMESTAMP');
  }
  if (startingPosition !== 'AT_TIMESTAMP' && startingPositionTimestamp !== undefined) {
    fail(
      'replayStartingPositionTimestamp',
      `only used with replayStartingPosition AT_TIMESTAMP (not ${startingPosition ?? 'TRIM_HORIZON, the default'})`,
    );
  }
  const replay: ReplayProps = {
    generation,
    ...(startingPosition === undefined ? {} : { startingPosition }),
    ...(startingPositionTimestamp === undefined ? {} : { startingPositionTimestamp }),
  };
  try {
    replayConfigOf(replay, pipeline);
  } catch (error) {
    if (!(error instanceof InvalidSettingError)) throw error;
    // `replay.startingPositionTimestamp` is its key's error; `replay` (the prop as a whole) is the generation's.
    const field = error.setting.replace(/^replay\.?/, '');
    const key =
      REPLAY_CONTEXT_KEYS.find((k) => REPLAY_FIELD_OF_CONTEXT_KEY[k] === field) ?? 'replayGeneration';
    throw new InvalidSettingError(
      label(key),
      error.message.slice(`invalid setting ${error.setting}: `.length),
    );
  }
  return replay;
}
