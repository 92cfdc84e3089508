/**
 * Every kind of Kafka source the construct takes, on the synthesized template: the event source mapping's
 * properties, what the processor's role may do for that source (and nothing more), the source the processor
 * accepts in events, and cdk-nag clean. Secrets, VPCs and security groups are imported by attribute (no lookup).
 */
import { App, Stack } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { beforeAll, describe, expect, it } from 'vitest';
import { parsePipelineConfig } from '../../infra/config.ts';
import { ExactlyOncePipeline, type ExactlyOncePipelineProps } from '../../infra/exactly-once-pipeline.ts';
import { KafkaAuthenticationMethod, type KafkaSource } from '../../infra/kafka-source.ts';
import { acknowledgeNagFindings, unacknowledgedNagFindings } from '../../infra/nag.ts';
import { PIPELINE_FEATURE_FLAGS } from '../../infra/stack.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import {
  actionsOf,
  allStatements,
  CLUSTER_ARN,
  type PolicyStatementJson,
  resourcesOf,
  resourcesOfStatement,
} from '../support/infra.ts';

const THIS_ACCOUNT = '123456789012';
const OTHER_ACCOUNT = '444455556666';
const SECRET_ARN = `arn:aws:secretsmanager:eu-west-1:${THIS_ACCOUNT}:secret:AmazonMSK_orders-AbCdEf`;
const KEY_ARN = `arn:aws:kms:eu-west-1:${THIS_ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab`;
const REMOTE_CLUSTER = `arn:aws:kafka:eu-west-1:${OTHER_ACCOUNT}:cluster/payments/51a2b3c4-0a61-46cc-b0a6-61f9a3d797d5-7`;
const VPC_CONNECTION = `arn:aws:kafka:eu-west-1:${THIS_ACCOUNT}:vpc-connection/${OTHER_ACCOUNT}/payments/51a2b3c4-0a61-46cc-b0a6-61f9a3d797d5-7`;
const VPC_ID = 'vpc-0123456789abcdef0';

interface Built {
  readonly stack: Stack;
  readonly pipeline: ExactlyOncePipeline;
  readonly template: Template;
}

/** A stack in a known account (the cross-account check needs it), the source built inside it. */
function build(source: (stack: Stack) => KafkaSource, props: Partial<ExactlyOncePipelineProps> = {}): Built {
  const app = new App({
    builtinCloudFormationValidation: false,
    context: { ...PIPELINE_FEATURE_FLAGS, 'aws:cdk:bundling-stacks': [] },
  });
  const stack = new Stack(app, 'Test', { env: { account: THIS_ACCOUNT, region: 'eu-west-1' } });
  const pipeline = new ExactlyOncePipeline(stack, 'Pipeline', {
    topic: 'orders',
    source: source(stack),
    ...props,
  });
  acknowledgeNagFindings(pipeline);
  return { stack, pipeline, template: Template.fromStack(stack) };
}

function mappingOf(template: Template): Record<string, unknown> {
  const mappings = Object.values(resourcesOf(template, 'AWS::Lambda::EventSourceMapping'));
  expect(mappings).toHaveLength(1);
  return mappings[0]!.Properties;
}

function processorStatements(built: Built): PolicyStatementJson[] {
  const role = built.stack.getLogicalId(built.pipeline.processor.role!.node.defaultChild as never);
  const policies = resourcesOf(built.template, 'AWS::IAM::Policy');
  const own = Object.entries(policies)
    .filter(([, p]) => JSON.stringify(p.Properties.Roles) === JSON.stringify([{ Ref: role }]))
    .map(([id]) => id);
  return allStatements(built.template).filter((s) => own.includes(s.policy));
}

function bySid(statements: PolicyStatementJson[], sid: string): PolicyStatementJson | undefined {
  return statements.find((s) => s.Sid === sid);
}

function processorEnvironment(built: Built): Record<string, unknown> {
  const id = built.stack.getLogicalId(built.pipeline.processor.node.defaultChild as never);
  const fn = resourcesOf(built.template, 'AWS::Lambda::Function')[id]!;
  return (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
}

const importedSecret = (stack: Stack, id: string, withKey: boolean) =>
  secretsmanager.Secret.fromSecretAttributes(stack, id, {
    secretCompleteArn: SECRET_ARN,
    ...(withKey ? { encryptionKey: kms.Key.fromKeyArn(stack, `${id}Key`, KEY_ARN) } : {}),
  });

describe('MSK with IAM authentication (the source prop)', () => {
  let built: Built;
  beforeAll(() => {
    built = build(() => ({ kind: 'msk', clusterArn: CLUSTER_ARN, vpcId: VPC_ID }));
  });

  it('maps the cluster ARN with no access configuration, and the processor accepts only that ARN', () => {
    const mapping = mappingOf(built.template);
    expect(mapping.EventSourceArn).toBe(CLUSTER_ARN);
    expect(mapping).not.toHaveProperty('SourceAccessConfigurations');
    expect(mapping.AmazonManagedKafkaEventSourceConfig).toEqual({ ConsumerGroupId: 'eos-orders' });
    expect(processorEnvironment(built).EOS_EVENT_SOURCE_ARN).toBe(CLUSTER_ARN);
  });

  it('grants the kafka-cluster actions and no secret', () => {
    const statements = processorStatements(built);
    expect(bySid(statements, 'KafkaConnect')).toBeDefined();
    expect(bySid(statements, 'KafkaReadTopic')).toBeDefined();
    expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('secretsmanager:'))).toEqual([]);
  });

  it('is cdk-nag clean', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });
});

describe('MSK with SASL/SCRAM and a secret under a customer-managed key', () => {
  let built: Built;
  beforeAll(() => {
    built = build((stack) => ({
      kind: 'msk',
      clusterArn: CLUSTER_ARN,
      vpcId: VPC_ID,
      authentication: {
        method: KafkaAuthenticationMethod.SASL_SCRAM_512,
        secret: importedSecret(stack, 'Scram', true),
      },
    }));
  });

  it('passes the secret to the mapping as SASL_SCRAM_512_AUTH', () => {
    expect(mappingOf(built.template).SourceAccessConfigurations).toEqual([
      { Type: 'SASL_SCRAM_512_AUTH', URI: SECRET_ARN },
    ]);
  });

  it('lets the role read that secret only, decrypt with its key only through Secrets Manager, and no kafka-cluster action', () => {
    const statements = processorStatements(built);
    const secret = bySid(statements, 'KafkaSecrets')!;
    expect(actionsOf(secret)).toEqual(['secretsmanager:GetSecretValue']);
    expect(resourcesOfStatement(secret)).toEqual([SECRET_ARN]);
    const key = bySid(statements, 'KafkaSecretsKey')!;
    expect(actionsOf(key)).toEqual(['kms:Decrypt']);
    expect(resourcesOfStatement(key)).toEqual([KEY_ARN]);
    expect(JSON.stringify(key.Condition)).toContain('secretsmanager.');
    expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('kafka-cluster:'))).toEqual([]);
    expect(actionsOf(bySid(statements, 'KafkaDescribe')!)).toContain('kafka:GetBootstrapBrokers');
  });

  it('is cdk-nag clean', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });
});

describe('MSK with mTLS and a secret named without its suffix', () => {
  let built: Built;
  beforeAll(() => {
    built = build((stack) => ({
      kind: 'msk',
      clusterArn: CLUSTER_ARN,
      vpcId: VPC_ID,
      authentication: {
        method: KafkaAuthenticationMethod.MTLS,
        secret: secretsmanager.Secret.fromSecretNameV2(stack, 'Cert', 'orders-client-cert'),
      },
    }));
  });

  it('passes the certificate secret as CLIENT_CERTIFICATE_TLS_AUTH', () => {
    const [config] = mappingOf(built.template).SourceAccessConfigurations as Array<{
      Type: string;
      URI: unknown;
    }>;
    expect(config!.Type).toBe('CLIENT_CERTIFICATE_TLS_AUTH');
    expect(JSON.stringify(config!.URI)).toContain(':secret:orders-client-cert');
  });

  it("grants the secret's ARN with exactly the six-character suffix Secrets Manager adds, and no KMS", () => {
    const statements = processorStatements(built);
    const [resource] = resourcesOfStatement(bySid(statements, 'KafkaSecrets')!);
    expect(JSON.stringify(resource)).toMatch(/:secret:orders-client-cert-\?\?\?\?\?\?"/);
    expect(bySid(statements, 'KafkaSecretsKey')).toBeUndefined();
  });

  it('is cdk-nag clean (IAM5 flags only `*`: the suffix pattern is no finding)', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });
});

describe('MSK in another account, through a managed VPC connection', () => {
  let built: Built;
  beforeAll(() => {
    built = build(() => ({
      kind: 'msk',
      clusterArn: REMOTE_CLUSTER,
      vpcConnectionArn: VPC_CONNECTION,
      vpcId: VPC_ID,
    }));
  });

  it('maps the VPC connection, not the cluster', () => {
    expect(mappingOf(built.template).EventSourceArn).toBe(VPC_CONNECTION);
  });

  it("may describe that VPC connection and read the topic through IAM on the other account's cluster ARNs", () => {
    const statements = processorStatements(built);
    const connection = bySid(statements, 'KafkaVpcConnection')!;
    expect(actionsOf(connection)).toEqual(['kafka:DescribeVpcConnection']);
    expect(resourcesOfStatement(connection)).toEqual([VPC_CONNECTION]);
    expect(resourcesOfStatement(bySid(statements, 'KafkaReadTopic')!)).toEqual([
      `arn:aws:kafka:eu-west-1:${OTHER_ACCOUNT}:topic/payments/51a2b3c4-0a61-46cc-b0a6-61f9a3d797d5-7/orders`,
    ]);
  });

  it("leaves the processor's ARN check off (the events' ARN is not documented) and keeps the topic check", () => {
    const env = processorEnvironment(built);
    expect(env).not.toHaveProperty('EOS_EVENT_SOURCE_ARN');
    expect(env.EOS_TOPICS).toBe('orders');
  });

  it('is cdk-nag clean', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });

  it('fails synth without the VPC connection, or with one of another cluster', () => {
    const without = () => build(() => ({ kind: 'msk', clusterArn: REMOTE_CLUSTER }));
    expect(without).toThrow(InvalidSettingError);
    expect(without).toThrow(
      /source\.vpcConnectionArn: the cluster is in account 444455556666, the stack in 123456789012/,
    );
    const mismatched = () =>
      build(() => ({
        kind: 'msk',
        clusterArn: REMOTE_CLUSTER,
        vpcConnectionArn: VPC_CONNECTION.replace('/payments/', '/orders/'),
      }));
    expect(mismatched).toThrow(
      /names cluster 444455556666\/orders\/.* but clusterArn is 444455556666\/payments\//,
    );
  });
});

describe('self-managed Kafka in a VPC with SASL/SCRAM-256 and a private CA', () => {
  let built: Built;
  beforeAll(() => {
    built = build(
      (stack) => {
        const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
          vpcId: VPC_ID,
          availabilityZones: ['eu-west-1a', 'eu-west-1b'],
          privateSubnetIds: ['subnet-0aaaaaaaaaaaaaaa1', 'subnet-0bbbbbbbbbbbbbbb2'],
        });
        return {
          kind: 'self-managed-kafka',
          bootstrapServers: ['b-1.kafka.internal:9096', 'b-2.kafka.internal:9096'],
          authentication: {
            method: KafkaAuthenticationMethod.SASL_SCRAM_256,
            secret: importedSecret(stack, 'Scram', false),
          },
          rootCaSecret: secretsmanager.Secret.fromSecretAttributes(stack, 'Ca', {
            secretCompleteArn: SECRET_ARN.replace('AmazonMSK_orders-AbCdEf', 'kafka-ca-GhIjKl'),
          }),
          network: {
            vpc,
            securityGroup: ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-0123456789abcdef0'),
          },
        };
      },
      { consumerGroupId: 'orders-eos' },
    );
  });

  it('maps the bootstrap servers with the auth, CA, subnets and security group', () => {
    const mapping = mappingOf(built.template);
    expect(mapping).not.toHaveProperty('EventSourceArn');
    expect(mapping.SelfManagedEventSource).toEqual({
      Endpoints: { KafkaBootstrapServers: ['b-1.kafka.internal:9096', 'b-2.kafka.internal:9096'] },
    });
    expect(mapping.SelfManagedKafkaEventSourceConfig).toEqual({ ConsumerGroupId: 'orders-eos' });
    expect(mapping.SourceAccessConfigurations).toEqual([
      { Type: 'SASL_SCRAM_256_AUTH', URI: SECRET_ARN },
      {
        Type: 'SERVER_ROOT_CA_CERTIFICATE',
        URI: SECRET_ARN.replace('AmazonMSK_orders-AbCdEf', 'kafka-ca-GhIjKl'),
      },
      { Type: 'VPC_SUBNET', URI: 'subnet:subnet-0aaaaaaaaaaaaaaa1' },
      { Type: 'VPC_SUBNET', URI: 'subnet:subnet-0bbbbbbbbbbbbbbb2' },
      { Type: 'VPC_SECURITY_GROUP', URI: 'security_group:sg-0123456789abcdef0' },
    ]);
  });

  it('reads both secrets, creates network interfaces only in that VPC, and has no MSK permission', () => {
    const statements = processorStatements(built);
    expect(resourcesOfStatement(bySid(statements, 'KafkaSecrets')!)).toHaveLength(2);
    const eni = bySid(statements, 'PollerNetworkInterfaces')!;
    expect(JSON.stringify(eni.Condition)).toContain(`vpc/${VPC_ID}`);
    expect(statements.flatMap(actionsOf).filter((a) => /^kafka(-cluster)?:/.test(a))).toEqual([]);
  });

  it('has the processor accept only events of these bootstrap servers (self-managed events carry no ARN)', () => {
    expect(processorEnvironment(built)).not.toHaveProperty('EOS_EVENT_SOURCE_ARN');
    expect(processorEnvironment(built).EOS_BOOTSTRAP_SERVERS).toBe(
      'b-1.kafka.internal:9096,b-2.kafka.internal:9096',
    );
  });

  it('is cdk-nag clean', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });
});

describe('self-managed Kafka on the internet with mTLS', () => {
  let built: Built;
  beforeAll(() => {
    built = build((stack) => ({
      kind: 'self-managed-kafka',
      bootstrapServers: ['pkc-abc12.eu-west-1.aws.confluent.cloud:9092'],
      authentication: {
        method: KafkaAuthenticationMethod.MTLS,
        secret: importedSecret(stack, 'Cert', false),
      },
    }));
  });

  it('has only the certificate in its access configuration and no network-interface permission', () => {
    expect(mappingOf(built.template).SourceAccessConfigurations).toEqual([
      { Type: 'CLIENT_CERTIFICATE_TLS_AUTH', URI: SECRET_ARN },
    ]);
    expect(
      processorStatements(built)
        .flatMap(actionsOf)
        .filter((a) => a.startsWith('ec2:')),
    ).toEqual([]);
  });

  it('is cdk-nag clean', () => {
    expect(unacknowledgedNagFindings(built.stack)).toEqual([]);
  });

  it('rejects a bootstrap server that is not host:port', () => {
    const attempt = () =>
      build((stack) => ({
        kind: 'self-managed-kafka',
        bootstrapServers: ['kafka.example.com'],
        authentication: {
          method: KafkaAuthenticationMethod.MTLS,
          secret: importedSecret(stack, 'Cert', false),
        },
      }));
    expect(attempt).toThrow(
      /invalid setting source\.bootstrapServers: expected host:port \(got "kafka\.example\.com"\)/,
    );
  });
});

describe('starting position and pollers', () => {
  it('starts AT_TIMESTAMP from a Date, in whole seconds, with provisioned pollers', () => {
    const { template } = build(() => ({ kind: 'msk', clusterArn: CLUSTER_ARN, vpcId: VPC_ID }), {
      startingPosition: 'AT_TIMESTAMP',
      startingPositionTimestamp: new Date('2026-01-01T00:00:00.900Z'),
      minimumPollers: 2,
      maximumPollers: 20,
    });
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      StartingPosition: 'AT_TIMESTAMP',
      StartingPositionTimestamp: 1_767_225_600,
      ProvisionedPollerConfig: { MinimumPollers: 2, MaximumPollers: 20 },
    });
  });

  it('reads AT_TIMESTAMP from context as an ISO 8601 time with zone or Unix seconds', () => {
    const base = { mskClusterArn: CLUSTER_ARN, topic: 'orders', startingPosition: 'AT_TIMESTAMP' };
    expect(
      parsePipelineConfig({ ...base, startingPositionTimestamp: '2026-01-01T01:00:00+01:00' }),
    ).toMatchObject({
      startingPositionTimestamp: 1_767_225_600,
    });
    expect(parsePipelineConfig({ ...base, startingPositionTimestamp: '1767225600' })).toMatchObject({
      startingPositionTimestamp: 1_767_225_600,
    });
  });

  it('uses on-demand pollers unless a bound is set', () => {
    const { template } = build(() => ({ kind: 'msk', clusterArn: CLUSTER_ARN, vpcId: VPC_ID }));
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      StartingPosition: 'TRIM_HORIZON',
      ProvisionedPollerConfig: Match.absent(),
    });
  });

  it('refuses the cluster settings next to a source prop', () => {
    const attempt = () =>
      build(() => ({ kind: 'msk', clusterArn: CLUSTER_ARN }), { mskClusterArn: CLUSTER_ARN });
    expect(attempt).toThrow(/invalid setting mskClusterArn: cannot be set together with the source prop/);
  });
});
