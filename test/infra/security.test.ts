/**
 * The rest of the infrastructure's trust points, on the synthesized stack: logs writable only to each function's
 * own log group (no AWS managed policy on any role), the pollers' network-interface actions conditioned on the
 * cluster's VPC, KMS grants only through S3 and DynamoDB, log groups and the alarm topic CMK-encrypted under
 * `encryption=kms`, X-Ray on every function, and the processor told which event source and topic to accept.
 */
import { Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { ENV_NAMES } from '../../shared/config/settings.ts';
import {
  actionsOf,
  allStatements,
  CLUSTER_ARN,
  type PolicyStatementJson,
  resourcesOf,
  resourcesOfStatement,
  synthesize,
} from '../support/infra.ts';

const base = synthesize();
const kms = synthesize({ encryption: 'kms' });
const functionsOf = (t: typeof base.template) =>
  Object.entries(resourcesOf(t, 'AWS::Lambda::Function')).filter(
    ([, f]) => !JSON.stringify(f.Properties.Handler ?? '').includes('__entrypoint__'),
  );

/** The statements of the default policy of the role a function runs as. */
function statementsOfFunction(t: typeof base.template, fn: { Properties: Record<string, unknown> }) {
  const role = (fn.Properties.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
  return allStatements(t).filter((s) => {
    const policy = resourcesOf(t, 'AWS::IAM::Policy')[s.policy]!;
    return JSON.stringify(policy.Properties.Roles).includes(`"${role}"`);
  });
}

describe('logs', () => {
  it('let each function write only its own log group, and no role carries an AWS managed policy', () => {
    const roles = resourcesOf(base.template, 'AWS::IAM::Role');
    for (const [id, role] of Object.entries(roles)) {
      if (id.startsWith('CustomS3AutoDeleteObjects')) continue;
      expect(role.Properties.ManagedPolicyArns, id).toBeUndefined();
    }
    const functions = functionsOf(base.template);
    expect(functions.length).toBe(9);
    const groups = new Set<string>();
    for (const [id, fn] of functions) {
      const own = (fn.Properties.LoggingConfig as { LogGroup: { Ref: string } }).LogGroup.Ref;
      groups.add(own);
      const logs = statementsOfFunction(base.template, fn).filter((s) =>
        actionsOf(s).some((a) => a.startsWith('logs:')),
      );
      expect(logs.flatMap(actionsOf).sort(), id).toEqual(['logs:CreateLogStream', 'logs:PutLogEvents']);
      expect(logs.flatMap(resourcesOfStatement), id).toEqual([{ 'Fn::GetAtt': [own, 'Arn'] }]);
    }
    expect(groups.size).toBe(9); // one log group per function
  });

  it('are encrypted with the pipeline key under encryption=kms, which CloudWatch Logs may use for this account only', () => {
    const keyId = kms.stack.getLogicalId(kms.stack.pipeline.encryptionKey!.node.defaultChild as never);
    const groups = Object.values(resourcesOf(kms.template, 'AWS::Logs::LogGroup'));
    expect(groups.length).toBe(11); // nine functions and the two state machines
    for (const group of groups) expect(group.Properties.KmsKeyId).toEqual({ 'Fn::GetAtt': [keyId, 'Arn'] });
    kms.template.hasResourceProperties('AWS::KMS::Key', {
      KeyPolicy: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Principal: {
              Service: {
                'Fn::Join': ['', ['logs.', { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }]],
              },
            },
            Condition: {
              ArnLike: {
                'kms:EncryptionContext:aws:logs:arn': {
                  'Fn::Join': ['', Match.arrayWith([':log-group:*'])],
                },
              },
            },
          }),
        ]),
      },
    });
    for (const group of Object.values(resourcesOf(base.template, 'AWS::Logs::LogGroup'))) {
      expect(group.Properties.KmsKeyId).toBeUndefined();
    }
  });
});

describe('KMS', () => {
  it('grants the key only through S3 and DynamoDB (kms:ViaService), never on its own', () => {
    const grants = allStatements(kms.template).filter((s) => actionsOf(s).some((a) => a.startsWith('kms:')));
    expect(grants.length).toBeGreaterThanOrEqual(9);
    for (const grant of grants) {
      const via = JSON.stringify(grant.Condition?.StringEquals?.['kms:ViaService']);
      expect(via, grant.policy).toMatch(/"(s3|dynamodb)\.",\{"Ref":"AWS::Region"\}/);
      expect(actionsOf(grant)).not.toContain('kms:*');
    }
    // The monitor only decrypts what it reads.
    const monitor = kms.stack.getLogicalId(kms.stack.pipeline.monitor.node.defaultChild as never);
    const monitorFn = resourcesOf(kms.template, 'AWS::Lambda::Function')[monitor]!;
    const monitorKms = statementsOfFunction(kms.template, monitorFn).filter((s) =>
      actionsOf(s).some((a) => a.startsWith('kms:')),
    );
    expect(monitorKms.flatMap(actionsOf).sort()).toEqual(['kms:Decrypt', 'kms:DescribeKey']);
  });

  it('encrypts the alarm topic with the pipeline key', () => {
    const keyId = kms.stack.getLogicalId(kms.stack.pipeline.encryptionKey!.node.defaultChild as never);
    kms.template.hasResourceProperties('AWS::SNS::Topic', {
      KmsMasterKeyId: { 'Fn::GetAtt': [keyId, 'Arn'] },
    });
  });
});

describe('the MSK pollers', () => {
  const eni = (t: typeof base.template): PolicyStatementJson & { policy: string } =>
    allStatements(t).find((s) => actionsOf(s).includes('ec2:CreateNetworkInterface'))!;

  it("create and delete network interfaces only in the sandbox cluster's VPC", () => {
    const sandbox = synthesize({ mskClusterArn: undefined, mskVpcId: undefined, sandboxCluster: true });
    const vpcId = sandbox.stack.getLogicalId(sandbox.stack.pipeline.sandbox!.vpc.node.defaultChild as never);
    const statement = eni(sandbox.template);
    expect(actionsOf(statement).sort()).toEqual(['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface']);
    expect(JSON.stringify(statement.Condition?.ArnEquals?.['ec2:Vpc'])).toContain(`{"Ref":"${vpcId}"}`);
    for (const resource of resourcesOfStatement(statement)) expect(JSON.stringify(resource)).not.toBe('"*"');
  });

  it('are conditioned on mskVpcId for an imported cluster (required: test/infra/msk-vpc.test.ts)', () => {
    const withVpc = synthesize({ mskVpcId: 'vpc-0fedcba9876543210' });
    expect(JSON.stringify(eni(withVpc.template).Condition)).toContain(':vpc/vpc-0fedcba9876543210');
  });

  it("are the only use of '*' in a function's role besides X-Ray (the Describe actions support no resource scoping)", () => {
    const star = functionsOf(base.template)
      .flatMap(([, fn]) => statementsOfFunction(base.template, fn))
      .filter((s) => resourcesOfStatement(s).includes('*'));
    const actions = [...new Set(star.flatMap(actionsOf))].sort();
    expect(actions).toEqual([
      'ec2:DescribeNetworkInterfaces',
      'ec2:DescribeSecurityGroups',
      'ec2:DescribeSubnets',
      'ec2:DescribeVpcs',
      'xray:PutTelemetryRecords',
      'xray:PutTraceSegments',
    ]);
  });

  it('are told the event source and topic the processor accepts', () => {
    const processor = base.stack.getLogicalId(base.stack.pipeline.processor.node.defaultChild as never);
    const env = (
      resourcesOf(base.template, 'AWS::Lambda::Function')[processor]!.Properties.Environment as {
        Variables: Record<string, string>;
      }
    ).Variables;
    expect(env[ENV_NAMES.eventSourceArn]).toBe(CLUSTER_ARN);
    expect(env[ENV_NAMES.topics]).toBe('orders');
  });
});

describe('tracing', () => {
  it('is active on every function and the state machine', () => {
    for (const [id, fn] of functionsOf(base.template)) {
      expect(fn.Properties.TracingConfig, id).toEqual({ Mode: 'Active' });
    }
    base.template.hasResourceProperties('AWS::StepFunctions::StateMachine', {
      TracingConfiguration: { Enabled: true },
    });
  });
});
