/**
 * The deployable stack: one {@link ExactlyOncePipeline} configured from CDK context (`-c key=value` or
 * `cdk.json`). Environment-agnostic: nothing is looked up in an account at synth, so `cdk synth` runs offline.
 */
import { Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
import { CONFIG_KEYS, type PipelineConfigInput, parsePipelineConfig } from './config.ts';
import { ExactlyOncePipeline, type ExactlyOncePipelineProps } from './exactly-once-pipeline.ts';

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
    const settings = props.pipeline ?? pipelinePropsFromContext(this);
    this.pipeline = new ExactlyOncePipeline(this, 'Pipeline', settings);
  }
}

/** Context keys of the app itself that are not pipeline settings. */
const APP_CONTEXT_KEYS = new Set(['stackName']);

/**
 * Reads every setting of `config.ts` from context and validates it here, so that an error names the setting as
 * the user passes it (`-c topic=…`). A plain camelCase key that is no setting is taken for a typo and rejected
 * (CDK's own keys contain `:`, `/`, `@` or `-`), so `-c batchsize=1000` does not silently deploy the default.
 */
export function pipelinePropsFromContext(scope: Construct): PipelineConfigInput {
  rejectUnknownContext(scope);
  const input: Record<string, unknown> = {};
  for (const key of CONFIG_KEYS) {
    const value = scope.node.tryGetContext(key);
    if (value !== undefined && value !== '') input[key] = value;
  }
  parsePipelineConfig(input, (key) => `-c ${key}`);
  return input as PipelineConfigInput;
}

function rejectUnknownContext(scope: Construct): void {
  const known = new Set<string>(CONFIG_KEYS);
  for (const key of Object.keys(scope.node.getAllContext() as Record<string, unknown>)) {
    if (!/^[a-z][A-Za-z0-9]*$/.test(key) || known.has(key) || APP_CONTEXT_KEYS.has(key)) continue;
    const near = CONFIG_KEYS.find((setting) => setting.toLowerCase() === key.toLowerCase());
    throw new InvalidSettingError(`-c ${key}`, `unknown setting${near ? ` (did you mean ${near}?)` : ''}`);
  }
}
