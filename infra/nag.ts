/**
 * cdk-nag (AwsSolutions pack) acknowledgements for an {@link ExactlyOncePipeline}. Each one names the exact
 * finding (rule and, for IAM5, the resource or action) on the exact construct, with the reason it is accepted;
 * nothing is acknowledged stack-wide, so a new finding anywhere fails the nag test. Every reason states a fact the
 * infra tests check (`test/infra/nag.test.ts`, `test/infra/security-iam.test.ts`).
 */
import { type CfnElement, Stack, Validations } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { AwsSolutionsChecks } from 'cdk-nag';
// cdk-nag's own spelling of a resource in a finding id (`<Bucket.Arn>/orders/final/*`), so that the id
// acknowledged here is the one the IAM5 rule reports for any bucket: created, shared or imported.
import { flattenCfnReference } from 'cdk-nag/lib/utils/flatten-cfn-reference.js';
import type { IConstruct } from 'constructs';
import { COORDINATOR_STEPS } from '../shared/coordinator/definition.ts';
import { checkpointWorkPrefix } from '../shared/coordinator/work-objects.ts';
import { STREAMS } from '../shared/ledger/layout.ts';
import {
  finalPrefix,
  finalStreamPrefix,
  inProgressPrefix,
  manifestsPrefix,
  stagedStreamPrefix,
} from '../shared/sink/layout.ts';
import type { ExactlyOncePipeline } from './exactly-once-pipeline.ts';

const REASONS = {
  prefix:
    "S3 object actions scoped to one of this pipeline's prefixes (shared/sink/layout.ts): object keys are unique per attempt and checkpoint, so a key prefix is the narrowest scope IAM can express; the bucket policy denies every other writer of the same prefix.",
  xray: 'X-Ray tracing: xray:PutTraceSegments and xray:PutTelemetryRecords support no resource-level permissions (CDK adds them for active tracing).',
  eniScoped:
    "The event source mapping's pollers create and delete network interfaces with the function's role; those actions are limited to this account and region and, through the ec2:Vpc condition, to the cluster's VPC (required for MSK: mskVpcId, source.vpcId or the sandbox's; a self-managed cluster's network.vpc).",
  eniDescribe:
    'ec2:DescribeNetworkInterfaces, DescribeSecurityGroups, DescribeSubnets and DescribeVpcs support no resource-level permissions; the pollers need them, and they change nothing.',
  stateMachineStar:
    'Step Functions tracing (xray:PutTraceSegments, PutTelemetryRecords, GetSamplingRules/Targets) and vended log delivery (logs:CreateLogDelivery, …) do not support resource-level permissions.',
  glueSchemas:
    "glue:GetSchemaVersion only (read a schema version's definition), on the registries the transform names: a Glue-framed record names its schema version by id, so every schema of the registry is reachable by design.",
  invokeVersions:
    "lambda:InvokeFunction on the coordinator's own step function and its versions/aliases (ARN:*), as grantInvoke generates; no other function is reachable.",
  tableMetadata:
    "S3 object actions of the publish step on its Iceberg table's metadata prefix (<tablePrefix>/metadata/, the iceberg prop): metadata files, manifests and manifest lists are named per version and digest, so a key prefix is the narrowest scope IAM can express; no other role is granted it.",
  operatorPrefix:
    "An operator role (operatorRoles) stages objects under this pipeline's in-progress prefixes and reads its committed output (_manifests/, final/), as eos redrive, epoch and replay do; object keys are unique per attempt and checkpoint, so a key prefix is the narrowest scope IAM can express, and the bucket policy denies operators every write outside the in-progress prefixes.",
} as const;

export function acknowledgeNagFindings(pipeline: ExactlyOncePipeline): void {
  const pl = pipeline.config.pipelineId;
  const stack = Stack.of(pipeline);
  const prefixFinding = (prefix: string) =>
    `AwsSolutions-IAM5[Resource::${flattenCfnReference(stack.resolve(pipeline.bucket.arnForObjects(`${prefix}*`)))}]`;
  const allPrefixes = [
    inProgressPrefix(pl),
    ...STREAMS.map((stream) => stagedStreamPrefix(pl, stream)),
    checkpointWorkPrefix(pl),
    finalPrefix(pl),
    ...STREAMS.map((stream) => finalStreamPrefix(pl, stream)),
    manifestsPrefix(pl),
  ];
  // The replay processor (the `replay` prop) is built like the processor: the same findings, acknowledged alike.
  const processors: lambda.IFunction[] = [
    pipeline.processor,
    ...(pipeline.replay ? [pipeline.replay.processor] : []),
  ];
  const publish = pipeline.coordinator.publishFunction;
  const functions: lambda.IFunction[] = [
    ...processors,
    pipeline.monitor,
    ...COORDINATOR_STEPS.map((step) => pipeline.coordinator.functions[step]),
    ...(publish ? [publish] : []),
  ];

  // The findings are on each function's role (a sibling of the function: BundledFunction creates it first), and
  // only the prefixes a role is actually granted are acknowledged on it.
  const role = (fn: lambda.IFunction): IConstruct => fn.role!;
  for (const fn of functions) {
    acknowledge(role(fn), 'AwsSolutions-IAM5[Resource::*]', REASONS.xray);
    const granted = grantedResources(fn.role);
    for (const prefix of allPrefixes) {
      if (granted.includes(`/${prefix}*"`)) acknowledge(role(fn), prefixFinding(prefix), REASONS.prefix);
    }
  }
  if (publish && pipeline.iceberg) {
    acknowledge(role(publish), prefixFinding(pipeline.iceberg.metadataPrefix), REASONS.tableMetadata);
  }
  // Operator roles (imported by ARN or of the app) carry the grants of grantOperate (`operator-grants.ts`), on the same prefixes.
  for (const operator of pipeline.operatorRoles) {
    const granted = grantedResources(operator);
    for (const prefix of allPrefixes) {
      if (granted.includes(`/${prefix}*"`))
        acknowledge(operator, prefixFinding(prefix), REASONS.operatorPrefix);
    }
  }
  const glue = (resource: string) =>
    `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:${resource}]`;
  const ec2 = (type: string) =>
    `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:${type}/*]`;
  // A self-managed cluster reached over the internet gets no network-interface permissions at all.
  const mapped = [
    ...(pipeline.kafka ? [[pipeline.processor, pipeline.kafka] as const] : []),
    ...(pipeline.replay?.kafka ? [[pipeline.replay.processor, pipeline.replay.kafka] as const] : []),
  ];
  for (const [fn, kafka] of mapped) {
    if (!kafka.networkInterfaces) continue;
    for (const type of ['network-interface', 'subnet', 'security-group']) {
      acknowledge(role(fn), ec2(type), REASONS.eniScoped);
    }
    acknowledge(role(fn), 'AwsSolutions-IAM5[Resource::*]', `${REASONS.xray} ${REASONS.eniDescribe}`);
  }
  // A transform decoding with a Glue registry reads its schema versions: `schema/<registry>/*` (or every registry
  // in the account and region when the transform names none).
  const glueReads = pipeline.glueSchemaReads;
  if (glueReads) {
    const names = glueReads.registryNames;
    const resources = names.length > 0 ? names.map((name) => `schema/${name}/*`) : ['registry/*', 'schema/*'];
    for (const resource of resources) {
      for (const fn of processors) acknowledge(role(fn), glue(resource), REASONS.glueSchemas);
      for (const operator of pipeline.operatorRoles)
        acknowledge(operator, glue(resource), REASONS.glueSchemas);
    }
  }
  // A Kafka secret named without its suffix is granted as `<arn>-??????`: cdk-nag's IAM5 flags `*` only, so
  // there is nothing to acknowledge for it.

  for (const stateMachine of pipeline.coordinator.stateMachines) {
    acknowledge(stateMachine, 'AwsSolutions-IAM5[Resource::*]', REASONS.stateMachineStar);
    for (const fn of [
      ...COORDINATOR_STEPS.map((step) => pipeline.coordinator.functions[step]),
      ...(publish ? [publish] : []),
    ]) {
      acknowledge(
        stateMachine,
        `AwsSolutions-IAM5[Resource::<${logicalId(fn.node.defaultChild as CfnElement)}.Arn>:*]`,
        REASONS.invokeVersions,
      );
    }
  }
}

/** The AwsSolutions findings left unacknowledged in `scope` (what the nag test asserts is empty). */
export function unacknowledgedNagFindings(scope: IConstruct): string[] {
  const report = new AwsSolutionsChecks().validateScope(scope);
  return report.violations.flatMap((violation) =>
    violation.violatingResources.map((resource) => `${violation.ruleName} at ${resource.constructPath}`),
  );
}

/**
 * A role's policy as CDK adds grants to it, resolved to JSON text (to see which prefixes it names): `DefaultPolicy`
 * of a role the app creates, `Policy` of one imported by ARN.
 */
function grantedResources(role: iam.IRole | undefined): string {
  const policy = (role?.node.tryFindChild('DefaultPolicy') ?? role?.node.tryFindChild('Policy')) as
    | iam.Policy
    | undefined;
  return policy && role ? JSON.stringify(Stack.of(role).resolve(policy.document.toJSON())) : '';
}

function acknowledge(scope: IConstruct, id: string, reason: string): void {
  Validations.of(scope).acknowledge({ id, reason });
}

function logicalId(element: CfnElement): string {
  return Stack.of(element).resolve(element.logicalId) as string;
}
