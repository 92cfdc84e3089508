/**
 * The deployable stack: one {@link ExactlyOncePipeline} configured from CDK context (`-c key=value` or
 * `cdk.json`): its settings, the construct's boolean props, and its `replay` prop (`-c replayGeneration=N`, …).
 * Environment-agnostic: nothing is looked up in an account at synth, so `cdk synth` runs offline.
 */
import { Stack, type StackProps, Token } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
import { CONFIG_KEYS, parsePipelineConfig, parseReplayContext, REPLAY_CONTEXT_KEYS } from './config.ts';
import { ExactlyOncePipeline } from './exactly-once-pipeline.ts';
import { ICEBERG_CONTEXT_KEYS, icebergContextError, icebergFieldsFromContext } from './iceberg-context.ts';
import { type IcebergProps, icebergConfigOf } from './iceberg-table.ts';
import { MSK_VPC_REQUIRED } from './kafka-source.ts';
import { type ExactlyOncePipelineProps, propsFromSettings } from './pipeline-props.ts';

/**
 * Feature flags the app sets (put them in your own app's context too): server access logs are delivered by
 * bucket policy rather than the deprecated LogDeliveryWrite ACL.
 */
export const PIPELINE_FEATURE_FLAGS = { '@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy': true } as const;

export interface ExactlyOncePipelineStackProps extends StackProps {
  /** Settings; when absent they are read from CDK context. */
  readonly pipeline?: ExactlyOncePipelineProps;
}

export class ExactlyOncePipelineStack extends Stack {
  readonly pipeline: ExactlyOncePipeline;

  constructor(scope: Construct, id: string, props: ExactlyOncePipelineStackProps = {}) {
    super(scope, id, props);
    const settings = props.pipeline ?? {
      ...pipelinePropsFromContext(this),
      ...constructContext(this),
      ...replayContext(this),
      ...icebergContext(this),
      ...operatorContext(this),
    };
    if (!props.pipeline) requireMskVpcFromContext(settings);
    // The stack is what `cdk deploy` shows: its outputs are on unless the props say otherwise.
    this.pipeline = new ExactlyOncePipeline(this, 'Pipeline', { outputs: true, ...settings });
  }
}

/** An MSK cluster's VPC, named as the user passes it (`-c mskVpcId`) rather than as the construct's prop. */
function requireMskVpcFromContext(settings: ExactlyOncePipelineProps): void {
  if (settings.mskClusterArn && !settings.mskVpcId && settings.eventSourceMapping !== false) {
    throw new InvalidSettingError('-c mskVpcId', MSK_VPC_REQUIRED);
  }
}

/** Construct props (no settings) the stack also takes from context: `-c analyticsTable=true`. */
const CONSTRUCT_CONTEXT_KEYS = ['eventSourceMapping', 'analyticsTable'] as const;

/** Context keys of the app itself that are not pipeline settings. */
const APP_CONTEXT_KEYS = new Set<string>([
  'stackName',
  'operatorRoleArns',
  ...CONSTRUCT_CONTEXT_KEYS,
  ...REPLAY_CONTEXT_KEYS,
  ...ICEBERG_CONTEXT_KEYS,
]);

/** An IAM role's ARN (any partition, a path allowed). */
const ROLE_ARN = /^arn:aws[a-z-]*:iam::\d{12}:role\/[\w+=,.@/-]{1,512}$/;

/**
 * The `operatorRoles` prop from `-c operatorRoleArns=arn:aws:iam::…:role/ops,…` (comma-separated, or a JSON list in
 * `cdk.json`): the roles get what `eos epoch --start-new`, `eos redrive` and `eos replay` need. Roles of this
 * stack's account only: CDK cannot attach a policy to another account's role, and would say nothing.
 */
export function operatorContext(scope: Construct): Pick<ExactlyOncePipelineProps, 'operatorRoles'> {
  const value: unknown = scope.node.tryGetContext('operatorRoleArns');
  if (value === undefined || value === '') return {};
  const list = Array.isArray(value) ? value : typeof value === 'string' ? value.split(',') : undefined;
  if (list === undefined || list.some((arn) => typeof arn !== 'string')) {
    throw new InvalidSettingError('-c operatorRoleArns', 'expected role ARNs, comma-separated');
  }
  const arns = (list as string[]).map((arn) => arn.trim()).filter((arn) => arn !== '');
  const stack = Stack.of(scope);
  const roles = arns.map((arn, index) => {
    if (!ROLE_ARN.test(arn)) {
      throw new InvalidSettingError('-c operatorRoleArns', `${JSON.stringify(arn)} is not an IAM role ARN`);
    }
    const account = arn.split(':')[4];
    if (!Token.isUnresolved(stack.account) && account !== stack.account) {
      throw new InvalidSettingError(
        '-c operatorRoleArns',
        `${arn} is a role of account ${account}, not of the stack's ${stack.account}: grants cannot reach it`,
      );
    }
    return iam.Role.fromRoleArn(scope, `OperatorRole${index}`, arn);
  });
  return roles.length === 0 ? {} : { operatorRoles: roles };
}

/** How an error names a context key: as the user passes it. */
const contextLabel = (key: string) => `-c ${key}`;

/** The context values given (an empty `-c key=` counts as not given). */
function givenContext<K extends string>(scope: Construct, keys: readonly K[]): Partial<Record<K, unknown>> {
  const input: Partial<Record<K, unknown>> = {};
  for (const key of keys) {
    const value: unknown = scope.node.tryGetContext(key);
    if (value !== undefined && value !== '') input[key] = value;
  }
  return input;
}

/** The construct's boolean props given as context (`true`/`false`, as `-c` gives them, or JSON booleans). */
function constructContext(
  scope: Construct,
): Partial<Pick<ExactlyOncePipelineProps, (typeof CONSTRUCT_CONTEXT_KEYS)[number]>> {
  const props: Partial<Record<(typeof CONSTRUCT_CONTEXT_KEYS)[number], boolean>> = {};
  for (const key of CONSTRUCT_CONTEXT_KEYS) {
    const value: unknown = scope.node.tryGetContext(key);
    if (value === undefined || value === '') continue;
    if (value === true || value === 'true') props[key] = true;
    else if (value === false || value === 'false') props[key] = false;
    else throw new InvalidSettingError(`-c ${key}`, `expected true or false, got ${JSON.stringify(value)}`);
  }
  return props;
}

/**
 * Reads every setting of `config.ts` from context and validates it here, so that an error names the setting as
 * the user passes it (`-c topic=…`), then returns the construct's props for the settings given (`-c
 * processorTimeoutSeconds=300` becomes `processorTimeout: Duration.seconds(300)`). A plain camelCase key that is
 * no setting is taken for a typo and rejected (CDK's own keys contain `:`, `/`, `@` or `-`), so
 * `-c batchsize=1000` does not silently deploy the default.
 */
export function pipelinePropsFromContext(scope: Construct): ExactlyOncePipelineProps {
  rejectUnknownContext(scope);
  return propsFromSettings(givenContext(scope, CONFIG_KEYS), contextLabel);
}

/**
 * The `replay` prop from `-c replayGeneration=N` (and `-c replayStartingPosition=TRIM_HORIZON|AT_TIMESTAMP`,
 * `-c replayStartingPositionTimestamp=…`): validated naming the key, against the pipeline's settings from context
 * (exactly-once only, the replay's consumer group derived from `consumerGroupId`). No key, no replay mapping.
 */
export function replayContext(scope: Construct): Pick<ExactlyOncePipelineProps, 'replay'> {
  const input = givenContext(scope, REPLAY_CONTEXT_KEYS);
  if (Object.keys(input).length === 0) return {};
  const pipeline = parsePipelineConfig(givenContext(scope, CONFIG_KEYS), contextLabel);
  const replay = parseReplayContext(input, pipeline, contextLabel);
  return replay ? { replay } : {};
}

/**
 * The `iceberg` prop from `-c icebergCatalog=glue` (and `-c icebergDatabase`, `icebergTable`, `icebergTablePrefix`,
 * `icebergPartitioning`): validated as the construct validates it, against the pipeline's settings from context,
 * each error naming the key. No key, no table.
 */
export function icebergContext(scope: Construct): Pick<ExactlyOncePipelineProps, 'iceberg'> {
  const fields = icebergFieldsFromContext(givenContext(scope, ICEBERG_CONTEXT_KEYS), contextLabel);
  if (fields === undefined) return {};
  // The construct's own check, on the same props it will get: its errors named by the keys that set them.
  const iceberg = fields as unknown as IcebergProps;
  const pipeline = parsePipelineConfig(givenContext(scope, CONFIG_KEYS), contextLabel);
  try {
    icebergConfigOf(iceberg, pipeline);
  } catch (error) {
    if (error instanceof InvalidSettingError) throw icebergContextError(error, contextLabel);
    throw error;
  }
  return { iceberg };
}

function rejectUnknownContext(scope: Construct): void {
  const known = [...CONFIG_KEYS, ...APP_CONTEXT_KEYS];
  for (const key of Object.keys(scope.node.getAllContext() as Record<string, unknown>)) {
    if (!/^[a-z][A-Za-z0-9]*$/.test(key) || known.includes(key)) continue;
    const near = known.find((setting) => setting.toLowerCase() === key.toLowerCase());
    throw new InvalidSettingError(`-c ${key}`, `unknown setting${near ? ` (did you mean ${near}?)` : ''}`);
  }
}
