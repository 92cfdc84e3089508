/**
 * cdk-nag (AwsSolutions pack) acknowledgements for an {@link ExactlyOncePipeline}. Each one names the exact
 * finding (rule and, for IAM5, the resource or action) on the exact construct, with the reason it is accepted;
 * nothing is acknowledged stack-wide, so a new finding anywhere fails the nag test.
 */
import { type CfnElement, Stack, Validations } from 'aws-cdk-lib';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { COORDINATOR_STEPS } from '../shared/coordinator/definition.ts';
import { finalPrefix, inProgressPrefix, manifestsPrefix } from '../shared/sink/layout.ts';
import { checkpointWorkPrefix } from '../shared/sink/work-objects.ts';
import type { ExactlyOncePipeline } from './exactly-once-pipeline.ts';

const BASIC_EXECUTION_ROLE =
  'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]';
const MSK_EXECUTION_ROLE =
  'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaMSKExecutionRole]';

const REASONS = {
  basicExecution:
    'The AWS managed basic execution policy only lets the function create log streams and put log events; its log group is its own, created by this stack with a retention.',
  mskExecution:
    'Attached by ManagedKafkaEventSource itself: the ENI (ec2:*NetworkInterface*) and kafka:Describe*/GetBootstrapBrokers permissions the MSK event source pollers need, kept current by AWS. Topic and group data-plane access is granted separately, scoped to their ARNs.',
  prefix:
    "S3 object actions scoped to one of this pipeline's prefixes (shared/sink/layout.ts): object keys are unique per attempt and checkpoint, so a key prefix is the narrowest scope IAM can express.",
  kmsWildcards:
    "KMS grant of the pipeline's own customer-managed key (the only resource): GenerateDataKey* and ReEncrypt* are the action families S3 and DynamoDB use for envelope encryption.",
  stateMachineStar:
    'Step Functions tracing (xray:PutTraceSegments, PutTelemetryRecords, GetSamplingRules/Targets) and vended log delivery (logs:CreateLogDelivery, …) do not support resource-level permissions.',
  invokeVersions:
    "lambda:InvokeFunction on the coordinator's own step function and its versions/aliases (ARN:*), as grantInvoke generates; no other function is reachable.",
} as const;

export function acknowledgeNagFindings(pipeline: ExactlyOncePipeline): void {
  const pl = pipeline.config.pipelineId;
  const bucketArn = `<${logicalId(pipeline.bucket.node.defaultChild as CfnElement)}.Arn>`;
  const prefixFinding = (prefix: string) => `AwsSolutions-IAM5[Resource::${bucketArn}/${prefix}*]`;
  const allPrefixes = [inProgressPrefix(pl), checkpointWorkPrefix(pl), finalPrefix(pl), manifestsPrefix(pl)];
  const functions: lambda.IFunction[] = [
    pipeline.processor,
    pipeline.monitor,
    ...COORDINATOR_STEPS.map((step) => pipeline.coordinator.functions[step]),
  ];

  for (const fn of functions) {
    acknowledge(fn, BASIC_EXECUTION_ROLE, REASONS.basicExecution);
    for (const prefix of allPrefixes) acknowledge(fn, prefixFinding(prefix), REASONS.prefix);
    if (pipeline.encryptionKey) {
      acknowledge(fn, 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', REASONS.kmsWildcards);
      acknowledge(fn, 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', REASONS.kmsWildcards);
    }
  }
  acknowledge(pipeline.processor, MSK_EXECUTION_ROLE, REASONS.mskExecution);

  const stateMachine = pipeline.coordinator.stateMachine;
  acknowledge(stateMachine, 'AwsSolutions-IAM5[Resource::*]', REASONS.stateMachineStar);
  for (const step of COORDINATOR_STEPS) {
    const fn = pipeline.coordinator.functions[step];
    acknowledge(
      stateMachine,
      `AwsSolutions-IAM5[Resource::<${logicalId(fn.node.defaultChild as CfnElement)}.Arn>:*]`,
      REASONS.invokeVersions,
    );
  }
}

/** The AwsSolutions findings left unacknowledged in `scope` (what the nag test asserts is empty). */
export function unacknowledgedNagFindings(scope: IConstruct): string[] {
  const report = new AwsSolutionsChecks().validateScope(scope);
  return report.violations.flatMap((violation) =>
    violation.violatingResources.map((resource) => `${violation.ruleName} at ${resource.constructPath}`),
  );
}

function acknowledge(scope: IConstruct, id: string, reason: string): void {
  Validations.of(scope).acknowledge({ id, reason });
}

function logicalId(element: CfnElement): string {
  return Stack.of(element).resolve(element.logicalId) as string;
}
