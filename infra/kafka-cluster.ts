/**
 * The MSK side: the cluster (imported by ARN, or an MSK Serverless sandbox with its VPC) and the IAM
 * statements a consumer needs under IAM authentication.
 *
 * `ManagedKafkaEventSource` grants only the control-plane calls (`kafka:DescribeCluster`, …) and the ENI
 * permissions; reading through IAM auth needs the `kafka-cluster:*` data-plane actions too, on the cluster, the
 * topic and the consumer group ARNs, which are derived from the cluster ARN:
 *
 * ```
 * cluster  arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>
 * topic    arn:aws:kafka:<region>:<account>:topic/<name>/<uuid>/<topic>
 * group    arn:aws:kafka:<region>:<account>:group/<name>/<uuid>/<group>
 * ```
 */
import { Aws, Fn, Token } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as msk from 'aws-cdk-lib/aws-msk';
import { Construct } from 'constructs';

/** The port MSK listens on for SASL/IAM clients. */
export const MSK_IAM_PORT = 9098;

/** `cluster/` in a cluster ARN becomes `topic/` or `group/`, and the name is appended (works for tokens too). */
function dataPlaneArn(clusterArn: string, kind: 'topic' | 'group', name: string): string {
  if (!Token.isUnresolved(clusterArn)) return `${clusterArn.replace(':cluster/', `:${kind}/`)}/${name}`;
  const halves = Fn.split(':cluster/', clusterArn, 2);
  return Fn.join('', [Fn.select(0, halves), `:${kind}/`, Fn.select(1, halves), `/${name}`]);
}

export function topicArn(clusterArn: string, topic: string): string {
  return dataPlaneArn(clusterArn, 'topic', topic);
}

export function groupArn(clusterArn: string, group: string): string {
  return dataPlaneArn(clusterArn, 'group', group);
}

/** Least privilege for a Lambda event source mapping reading `topic` as `group` with IAM authentication. */
export function kafkaConsumerStatements(
  clusterArn: string,
  topic: string,
  group: string,
): iam.PolicyStatement[] {
  return [
    new iam.PolicyStatement({
      sid: 'KafkaConnect',
      actions: ['kafka-cluster:Connect', 'kafka-cluster:DescribeClusterDynamicConfiguration'],
      resources: [clusterArn],
    }),
    new iam.PolicyStatement({
      sid: 'KafkaReadTopic',
      actions: ['kafka-cluster:DescribeTopic', 'kafka-cluster:ReadData'],
      resources: [topicArn(clusterArn, topic)],
    }),
    new iam.PolicyStatement({
      sid: 'KafkaConsumerGroup',
      actions: ['kafka-cluster:DescribeGroup', 'kafka-cluster:AlterGroup'],
      resources: [groupArn(clusterArn, group)],
    }),
    // How the mapping finds the brokers: V1 for provisioned clusters, V2 for MSK Serverless.
    new iam.PolicyStatement({
      sid: 'KafkaDescribe',
      actions: ['kafka:DescribeCluster', 'kafka:DescribeClusterV2', 'kafka:GetBootstrapBrokers'],
      resources: [clusterArn],
    }),
  ];
}

/**
 * What `eos replay --from-timestamp` asks of the cluster as an operator (`operatorRoles`): the bootstrap brokers
 * and, under IAM authentication, the topic's offsets at a time (Metadata and ListOffsets: `Connect` on the cluster,
 * `DescribeTopic` on the one topic; no read of data, no group). `sid` keeps statements of several pipelines apart.
 */
export function kafkaOffsetsStatements(
  clusterArn: string,
  topic: string,
  iamAuth: boolean,
  sid: string,
): iam.PolicyStatement[] {
  const bootstrap = new iam.PolicyStatement({
    sid: `OperateKafkaBootstrap${sid}`,
    actions: ['kafka:GetBootstrapBrokers'],
    resources: [clusterArn],
  });
  if (!iamAuth) return [bootstrap];
  return [
    bootstrap,
    new iam.PolicyStatement({
      sid: `OperateKafkaConnect${sid}`,
      actions: ['kafka-cluster:Connect'],
      resources: [clusterArn],
    }),
    new iam.PolicyStatement({
      sid: `OperateKafkaOffsets${sid}`,
      actions: ['kafka-cluster:DescribeTopic'],
      resources: [topicArn(clusterArn, topic)],
    }),
  ];
}

/**
 * The network-interface permissions the MSK event source mapping's pollers use through the function's role
 * (what `AWSLambdaMSKExecutionRole` grants on `*`), scoped as far as IAM allows:
 * - `ec2:CreateNetworkInterface` authorizes the new interface, its subnet and its security groups, and
 *   `ec2:DeleteNetworkInterface` the interface: all three resource types carry the `ec2:Vpc` condition key (the
 *   VPC's ARN), so with the cluster's VPC known both are limited to it; either way to this account and region.
 * - The `ec2:Describe*` actions support no resource-level permissions or resource condition keys: `*` is the only
 *   resource IAM accepts for them, and they read, never change.
 */
export function networkInterfaceStatements(vpcId: string | undefined): iam.PolicyStatement[] {
  const arn = (resource: string) => `arn:${Aws.PARTITION}:ec2:${Aws.REGION}:${Aws.ACCOUNT_ID}:${resource}`;
  return [
    new iam.PolicyStatement({
      sid: 'PollerNetworkInterfaces',
      actions: ['ec2:CreateNetworkInterface', 'ec2:DeleteNetworkInterface'],
      resources: [arn('network-interface/*'), arn('subnet/*'), arn('security-group/*')],
      ...(vpcId ? { conditions: { ArnEquals: { 'ec2:Vpc': arn(`vpc/${vpcId}`) } } } : {}),
    }),
    new iam.PolicyStatement({
      sid: 'PollerNetworkDescribe',
      actions: [
        'ec2:DescribeNetworkInterfaces',
        'ec2:DescribeSecurityGroups',
        'ec2:DescribeSubnets',
        'ec2:DescribeVpcs',
      ],
      resources: ['*'],
    }),
  ];
}

export interface SandboxKafkaClusterProps {
  readonly clusterName: string;
}

/**
 * An MSK Serverless cluster with IAM authentication in a VPC of its own: two private subnets (MSK Serverless
 * needs two AZs) behind one NAT gateway, through which the event source mapping's pollers reach Lambda and STS.
 * For sandboxes: production pipelines import their cluster by ARN.
 */
export class SandboxKafkaCluster extends Construct {
  readonly vpc: ec2.Vpc;
  readonly securityGroup: ec2.SecurityGroup;
  readonly cluster: msk.CfnServerlessCluster;
  readonly clusterArn: string;

  constructor(scope: Construct, id: string, props: SandboxKafkaClusterProps) {
    super(scope, id);
    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: 1,
      subnetConfiguration: [
        { name: 'public', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 22 },
      ],
      flowLogs: {
        rejected: {
          destination: ec2.FlowLogDestination.toCloudWatchLogs(
            new logs.LogGroup(this, 'FlowLogs', { retention: logs.RetentionDays.ONE_MONTH }),
          ),
          trafficType: ec2.FlowLogTrafficType.REJECT,
        },
      },
    });
    this.securityGroup = new ec2.SecurityGroup(this, 'ClusterSecurityGroup', {
      vpc: this.vpc,
      description:
        'MSK Serverless cluster and the event source mapping pollers (which use the cluster security group)',
      allowAllOutbound: true,
    });
    // The mapping's pollers run in the cluster's subnets with the cluster's security group.
    this.securityGroup.addIngressRule(
      this.securityGroup,
      ec2.Port.tcp(MSK_IAM_PORT),
      'Kafka over SASL/IAM from pollers and clients in this group',
    );
    this.cluster = new msk.CfnServerlessCluster(this, 'Cluster', {
      clusterName: props.clusterName,
      clientAuthentication: { sasl: { iam: { enabled: true } } },
      vpcConfigs: [
        {
          subnetIds: this.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnetIds,
          securityGroups: [this.securityGroup.securityGroupId],
        },
      ],
    });
    this.clusterArn = this.cluster.attrArn;
  }
}
