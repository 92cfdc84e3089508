/**
 * The deployable stack: one {@link ExactlyOncePipeline} configured from CDK context (`-c key=value` or
 * `cdk.json`). Environment-agnostic: nothing is looked up in an account at synth, so `cdk synth` runs offline.
 */
import { Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
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

/**
 * Reads every setting of `config.ts` from context and validates it here, so that an error names the setting as
 * the user passes it (`-c topic=…`).
 */
export function pipelinePropsFromContext(scope: Construct): PipelineConfigInput {
  const input: Record<string, unknown> = {};
  for (const key of CONFIG_KEYS) {
    const value = scope.node.tryGetContext(key);
    if (value !== undefined && value !== '') input[key] = value;
  }
  parsePipelineConfig(input, (key) => `-c ${key}`);
  return input as PipelineConfigInput;
}
