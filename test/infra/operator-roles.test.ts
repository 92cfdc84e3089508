/**
 * The documented operator path (`-c operatorRoleArns=…`, the `operatorRoles` prop) synthesizes with cdk-nag clean,
 * and an operator role can only ever be a role of the deploying account: a role ARN of another account is refused
 * at synth wherever that account is known, and where it is not (an environment-agnostic stack with a sandbox
 * cluster) every operator grant is pinned to the ARN's account, so a same-named role of the deploying account
 * gets nothing.
 */
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { acknowledgeNagFindings, unacknowledgedNagFindings } from '../../infra/nag.ts';
import { ExactlyOncePipelineStack } from '../../infra/stack.ts';
import { resolveIntrinsics } from '../support/asl.ts';
import { evaluate, type PolicyStatement, type roleStatements } from '../support/iam.ts';
import { CLUSTER_ARN, testApp } from '../support/infra.ts';
import { appSynthesizer } from '../support/synth-app.ts';

type TemplateJson = Parameters<typeof roleStatements>[0];

const VPC = 'vpc-0123456789abcdef0';
const ACCOUNT = CLUSTER_ARN.split(':')[4]!;
const OPS = `arn:aws:iam::${ACCOUNT}:role/ops`;
const ONCALL = `arn:aws:iam::${ACCOUNT}:role/team/oncall`;
const FOREIGN = 'arn:aws:iam::210987654321:role/ops';
const CONTEXT = { mskClusterArn: CLUSTER_ARN, mskVpcId: VPC, topic: 'orders' };

const { synth: synthApp } = appSynthesizer('eos-synth-operators-');

describe('operator roles', () => {
  it('synthesize through the app with cdk-nag clean (-c operatorRoleArns)', () => {
    const result = synthApp({ ...CONTEXT, operatorRoleArns: `${OPS},${ONCALL}` });
    expect(result.stderr).not.toMatch(/AwsSolutions-/);
    expect(result.status).toBe(0);
  });

  it.each([
    ['exactly-once', {}],
    ['at-least-once, with a customer-managed key', { deliveryGuarantee: 'at-least-once', encryption: 'kms' }],
  ])('leave no cdk-nag finding unacknowledged (%s)', (_name, extra) => {
    const app = testApp({ ...CONTEXT, ...extra, operatorRoleArns: `${OPS},${ONCALL}` });
    const stack = new ExactlyOncePipelineStack(app, 'Operators');
    acknowledgeNagFindings(stack.pipeline);
    expect(unacknowledgedNagFindings(stack)).toEqual([]);
  });
});

/** Every statement of the policies CDK attaches to the role of this name. */
function statementsOfRole(template: TemplateJson, roleName: string): PolicyStatement[] {
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy')
    .filter((r) => JSON.stringify(r.Properties!.Roles) === JSON.stringify([roleName]))
    .flatMap((r) => (r.Properties!.PolicyDocument as { Statement: PolicyStatement[] }).Statement);
}

describe('an operator role of another account', () => {
  it('is refused when the stack is environment-agnostic but its account is the MSK cluster’s', () => {
    const app = testApp({ ...CONTEXT, operatorRoleArns: FOREIGN });
    expect(() => new ExactlyOncePipelineStack(app, 'Foreign')).toThrow(
      /operatorRoles: arn:aws:iam::210987654321:role\/ops is a role of account 210987654321.*123456789012/,
    );
  });

  it('gets grants pinned to its own account when nothing tells the deploying account (a sandbox cluster)', () => {
    const app = testApp({ sandboxCluster: 'true', topic: 'orders', operatorRoleArns: FOREIGN });
    const stack = new ExactlyOncePipelineStack(app, 'Sandbox');
    const template = Template.fromStack(stack).toJSON() as TemplateJson;
    const statements = statementsOfRole(template, 'ops');
    expect(statements.length).toBeGreaterThan(5);
    for (const statement of statements) {
      expect(statement.Condition?.StringEquals?.['aws:PrincipalAccount'], JSON.stringify(statement)).toBe(
        '210987654321',
      );
    }
    // CloudFormation attaches the policy by name, to the "ops" role of whatever account it deploys into: that
    // role gets nothing; the role the ARN names gets its grants.
    const bucketId = stack.getLogicalId(stack.pipeline.bucket.node.defaultChild as never);
    const bucketArn = String(resolveIntrinsics({ 'Fn::GetAtt': [bucketId, 'Arn'] }, template));
    const read = (principal: string, account: string) =>
      evaluate(template, statements, [], {
        principal,
        action: 's3:GetObject',
        resource: `${bucketArn}/orders/final/output/x.ndjson.gz`,
        context: { 'aws:PrincipalAccount': account },
      });
    expect(read('arn:aws:iam::123456789012:role/ops', '123456789012')).toBe('implicit-deny');
    expect(read(FOREIGN, '210987654321')).toBe('allow');
  });
});
