/**
 * The CDK app (`cdk synth`, `cdk deploy`): `npx cdk deploy -c mskClusterArn=arn:aws:kafka:… -c topic=orders`.
 * Every setting is a context key (see docs/configuration.md), your own transform too:
 * `-c transform=./src/my-transform.ts#myTransform`. The stack name is `-c stackName=…` (default
 * `ExactlyOncePipeline-<pipelineId>`). `-c replayGeneration=N` (with `-c replayStartingPosition=AT_TIMESTAMP`
 * and `-c replayStartingPositionTimestamp=…` if not from the beginning) adds the replay mapping of generation N
 * (the construct's `replay` prop, docs/deploy.md); `-c operatorRoleArns=arn:…,arn:…` sets `operatorRoles`. cdk-nag's
 * AwsSolutions checks run on every synth.
 */
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { DEFAULT_PIPELINE_ID } from '../shared/config/settings.ts';
import {
  InvalidSettingError,
  NotATransformError,
  TransformExportMissingError,
  TransformModuleNotFoundError,
  UnknownTransformError,
} from '../shared/errors.ts';
import { acknowledgeNagFindings } from './nag.ts';
import { ExactlyOncePipelineStack, PIPELINE_FEATURE_FLAGS } from './stack.ts';

const app = new App({ context: { ...PIPELINE_FEATURE_FLAGS } });
try {
  const pipelineId = String(app.node.tryGetContext('pipelineId') ?? DEFAULT_PIPELINE_ID);
  const stackName = String(app.node.tryGetContext('stackName') ?? `ExactlyOncePipeline-${pipelineId}`);
  const stack = new ExactlyOncePipelineStack(app, stackName, {
    description: `Exactly-once pipeline ${pipelineId}: Amazon MSK to S3 via Lambda, DynamoDB and Step Functions`,
  });
  acknowledgeNagFindings(stack.pipeline);
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app, { verbose: true }));
} catch (error) {
  const settingErrors = [
    InvalidSettingError,
    UnknownTransformError,
    TransformModuleNotFoundError,
    TransformExportMissingError,
    NotATransformError,
  ];
  if (!(error instanceof Error) || !settingErrors.some((type) => error instanceof type)) throw error;
  // A plain message, not a stack trace: the user only needs to know which setting to fix.
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
}
app.synth();
