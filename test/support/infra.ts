/**
 * Synthesizes the pipeline stack for the infra tests: bundling skipped and the built-in CloudFormation validation
 * off (both stay on in `npm run synth`), so one synth takes ~2 s.
 */
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import type { ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { acknowledgeNagFindings } from '../../infra/nag.ts';
import { ExactlyOncePipelineStack, PIPELINE_FEATURE_FLAGS } from '../../infra/stack.ts';

export const CLUSTER_ARN =
  'arn:aws:kafka:eu-west-1:123456789012:cluster/demo/1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d-2';

/** The cluster's VPC: an MSK source needs it (the pollers' network interfaces are conditioned on it). */
export const VPC_ID = 'vpc-0123456789abcdef0';

export const BASE_PROPS: ExactlyOncePipelineProps = {
  mskClusterArn: CLUSTER_ARN,
  mskVpcId: VPC_ID,
  topic: 'orders',
};

export function testApp(context: Record<string, unknown> = {}): App {
  return new App({
    builtinCloudFormationValidation: false,
    context: { ...PIPELINE_FEATURE_FLAGS, 'aws:cdk:bundling-stacks': [], ...context },
  });
}

export interface Synthesized {
  readonly stack: ExactlyOncePipelineStack;
  readonly template: Template;
}

export function synthesize(
  props: Partial<ExactlyOncePipelineProps> = {},
  options: { nag?: boolean } = {},
): Synthesized {
  const stack = new ExactlyOncePipelineStack(testApp(), 'Test', { pipeline: { ...BASE_PROPS, ...props } });
  if (options.nag) acknowledgeNagFindings(stack.pipeline);
  return { stack, template: Template.fromStack(stack) };
}

/** The CloudFormation resources of one type, by logical id. */
export function resourcesOf(
  template: Template,
  type: string,
): Record<string, { Properties: Record<string, unknown>; [key: string]: unknown }> {
  return template.findResources(type) as Record<string, { Properties: Record<string, unknown> }>;
}

export interface PolicyStatementJson {
  readonly Sid?: string;
  readonly Effect: string;
  readonly Action: string | string[];
  readonly Resource: unknown;
  readonly Condition?: Record<string, Record<string, unknown>>;
}

/** Every statement of every IAM policy in the template, with the policy's logical id. */
export function allStatements(template: Template): Array<PolicyStatementJson & { policy: string }> {
  const statements: Array<PolicyStatementJson & { policy: string }> = [];
  for (const [id, policy] of Object.entries(resourcesOf(template, 'AWS::IAM::Policy'))) {
    const document = policy.Properties.PolicyDocument as { Statement: PolicyStatementJson[] };
    for (const statement of document.Statement) statements.push({ ...statement, policy: id });
  }
  return statements;
}

export function actionsOf(statement: PolicyStatementJson): string[] {
  return Array.isArray(statement.Action) ? statement.Action : [statement.Action];
}

export function resourcesOfStatement(statement: PolicyStatementJson): unknown[] {
  return Array.isArray(statement.Resource) ? statement.Resource : [statement.Resource];
}
