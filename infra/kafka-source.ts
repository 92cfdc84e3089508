/**
 * Where the processor reads from: an Amazon MSK cluster (IAM, SASL/SCRAM or mTLS; in this account or, through a
 * managed VPC connection, in another) or a self-managed Apache Kafka cluster (bootstrap servers, in a VPC or on the
 * internet; SASL/SCRAM or mTLS). Every kind gets the same processor behind one event source mapping, and the
 * processor's role gets only what that kind's pollers use:
 *
 * | source                          | mapping                                   | role                                                    |
 * | ------------------------------- | ----------------------------------------- | ------------------------------------------------------- |
 * | MSK, IAM                        | cluster ARN                               | `kafka-cluster:*` on cluster, topic, group; describe    |
 * | MSK, SASL/SCRAM-512 or mTLS     | cluster ARN + secret                      | describe the cluster; read that one secret              |
 * | MSK in another account          | the managed VPC connection's ARN          | the above + `kafka:DescribeVpcConnection` on it         |
 * | self-managed, SASL/SCRAM or mTLS| bootstrap servers + secret (+ root CA)    | read those secrets                                      |
 * | self-managed in a VPC           | + `VPC_SUBNET`, `VPC_SECURITY_GROUP`      | + network interfaces in that VPC                        |
 *
 * A secret encrypted with a customer-managed key also gets `kms:Decrypt` on that key, only through Secrets Manager.
 */
import { Aws, type Duration, Stack, Token } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
import { MSK_CLUSTER_ARN } from './config.ts';
import { kafkaConsumerStatements, networkInterfaceStatements } from './kafka-cluster.ts';

/** How the event source mapping's pollers authenticate to the brokers. */
export enum KafkaAuthenticationMethod {
  /** MSK only: IAM access control (`kafka-cluster:*` actions on the execution role). */
  IAM = 'IAM',
  /** SASL/SCRAM with SHA-512: a Secrets Manager secret `{ "username", "password" }`. */
  SASL_SCRAM_512 = 'SASL_SCRAM_512',
  /** Self-managed Kafka only: SASL/SCRAM with SHA-256. */
  SASL_SCRAM_256 = 'SASL_SCRAM_256',
  /** Mutual TLS: a secret with the client certificate chain and private key (PEM). */
  MTLS = 'MTLS',
}

/** A secret-based authentication: the secret Lambda reads to connect. */
interface SecretAuthentication<M extends KafkaAuthenticationMethod> {
  readonly method: M;
  readonly secret: secretsmanager.ISecret;
}

export type MskAuthentication =
  | { readonly method: KafkaAuthenticationMethod.IAM }
  | SecretAuthentication<KafkaAuthenticationMethod.SASL_SCRAM_512 | KafkaAuthenticationMethod.MTLS>;

export type SelfManagedKafkaAuthentication = SecretAuthentication<
  | KafkaAuthenticationMethod.SASL_SCRAM_256
  | KafkaAuthenticationMethod.SASL_SCRAM_512
  | KafkaAuthenticationMethod.MTLS
>;

/** An Amazon MSK cluster (provisioned or serverless). */
export interface MskSource {
  readonly kind: 'msk';
  /** `arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid>`; the account may be another one (see `vpcConnectionArn`). */
  readonly clusterArn: string;
  /** Default IAM. */
  readonly authentication?: MskAuthentication;
  /**
   * For a provisioned cluster in another account: the ARN of the managed VPC connection to it in this account
   * (`arn:aws:kafka:<region>:<this account>:vpc-connection/<cluster account>/<cluster name>/<uuid>`), created after
   * the cluster owner turned on multi-VPC connectivity and allowed this account in the cluster policy. The mapping
   * reads through it. Required when the cluster's account is known to differ from the stack's.
   */
  readonly vpcConnectionArn?: string;
  /**
   * The VPC the pollers' network interfaces are in (the cluster's, or the managed VPC connection's): conditions
   * the network-interface permissions on it. Required with an event source mapping (synth stops without it).
   */
  readonly vpcId?: string;
}

/**
 * Why an MSK source's VPC is required (`mskVpcId`, `source.vpcId`): the pollers' network-interface permissions are
 * conditioned on it, and without it they would reach every subnet of the account.
 */
export const MSK_VPC_REQUIRED =
  "required for an MSK source: the mapping's pollers create and delete network interfaces with the processor's role, and only the cluster's VPC (vpc-…, the ec2:Vpc condition) keeps them out of every other subnet of the account (or deploy without the mapping: eventSourceMapping false)";

/** Whether clients of the cluster authenticate through IAM (the default), rather than with a secret. */
export function usesIamAuth(source: MskSource): boolean {
  return (source.authentication?.method ?? KafkaAuthenticationMethod.IAM) === KafkaAuthenticationMethod.IAM;
}

/** Where the pollers of a self-managed cluster run: in these subnets with this security group. */
export interface KafkaNetwork {
  readonly vpc: ec2.IVpc;
  /** Default: the VPC's private subnets. */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
}

/** A self-managed Apache Kafka cluster (on EC2, on premises, or a Kafka service such as Confluent Cloud). */
export interface SelfManagedKafkaSource {
  readonly kind: 'self-managed-kafka';
  /** `host:port` of one or more brokers. */
  readonly bootstrapServers: readonly string[];
  readonly authentication: SelfManagedKafkaAuthentication;
  /** A secret holding the root CA certificate (PEM) when the brokers' TLS certificates are signed by a private CA. */
  readonly rootCaSecret?: secretsmanager.ISecret;
  /** Brokers in a VPC; omit for brokers Lambda reaches over the internet. */
  readonly network?: KafkaNetwork;
}

export type KafkaSource = MskSource | SelfManagedKafkaSource;

/** The mapping's batching, start and scaling, shared by every kind of source. */
export interface KafkaMappingOptions {
  readonly topic: string;
  readonly consumerGroupId: string;
  readonly batchSize: number;
  readonly maxBatchingWindow: Duration;
  readonly startingPosition: lambda.StartingPosition;
  /** Unix seconds, for `AT_TIMESTAMP` only. */
  readonly startingPositionTimestamp?: number;
  readonly provisionedPollers?: lambda.ProvisionedPollerConfig;
}

export interface AttachedKafkaSource {
  readonly mapping: lambda.EventSourceMapping;
  /**
   * The ARN the processor accepts in an event's `eventSourceArn`, when this source's events are known
   * to carry it: the MSK cluster's in the same account. Undefined for a self-managed cluster (its events carry
   * `bootstrapServers`, no ARN) and for a cross-account cluster (see `docs/deploy.md`).
   */
  readonly eventSourceArn?: string;
  /** The VPC the pollers' network interfaces are conditioned on, if any network permission was granted. */
  readonly networkVpcId?: string;
  /** Whether network-interface permissions were granted (not for a public self-managed cluster). */
  readonly networkInterfaces: boolean;
  /** Secret ARNs (as the policy names them) the role may read. */
  readonly secretResources: readonly string[];
}

/** `<kafka ARN>` parts: account, and for a cluster or VPC connection the cluster's name and uuid. */
const VPC_CONNECTION_ARN =
  /^arn:aws[a-z-]*:kafka:([a-z0-9-]+):(\d{12}):vpc-connection\/(\d{12})\/([A-Za-z0-9-]+)\/([A-Za-z0-9-]+)$/;
const BOOTSTRAP_SERVER =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?:\d{1,5}$/;

/** Checks a source before anything is built; each error names the prop. */
export function validateKafkaSource(source: KafkaSource, stackAccount: string): void {
  if (source.kind === 'msk') {
    if (!Token.isUnresolved(source.clusterArn) && !MSK_CLUSTER_ARN.test(source.clusterArn)) {
      throw new InvalidSettingError(
        'source.clusterArn',
        `expected arn:aws:kafka:<region>:<account>:cluster/<name>/<uuid> (got ${JSON.stringify(source.clusterArn)})`,
      );
    }
    if (
      source.vpcId !== undefined &&
      !Token.isUnresolved(source.vpcId) &&
      !/^vpc-[0-9a-f]{8,17}$/.test(source.vpcId)
    ) {
      throw new InvalidSettingError(
        'source.vpcId',
        `expected a VPC id, vpc-<hex> (got ${JSON.stringify(source.vpcId)})`,
      );
    }
    validateCrossAccount(source, stackAccount);
    return;
  }
  if (source.bootstrapServers.length === 0 || source.bootstrapServers.length > 10) {
    throw new InvalidSettingError('source.bootstrapServers', 'between 1 and 10 host:port entries');
  }
  const bad = source.bootstrapServers.find((server) => !BOOTSTRAP_SERVER.test(server));
  if (bad !== undefined) {
    throw new InvalidSettingError(
      'source.bootstrapServers',
      `expected host:port (got ${JSON.stringify(bad)})`,
    );
  }
}

function validateCrossAccount(source: MskSource, stackAccount: string): void {
  if (Token.isUnresolved(source.clusterArn)) return;
  const clusterAccount = source.clusterArn.split(':')[4]!;
  if (source.vpcConnectionArn === undefined) {
    if (!Token.isUnresolved(stackAccount) && clusterAccount !== stackAccount) {
      throw new InvalidSettingError(
        'source.vpcConnectionArn',
        `the cluster is in account ${clusterAccount}, the stack in ${stackAccount}: Lambda reads a cluster of another account only through a managed VPC connection (multi-VPC private connectivity); set its ARN`,
      );
    }
    return;
  }
  const match = VPC_CONNECTION_ARN.exec(source.vpcConnectionArn);
  if (!match) {
    throw new InvalidSettingError(
      'source.vpcConnectionArn',
      `expected arn:aws:kafka:<region>:<this account>:vpc-connection/<cluster account>/<cluster name>/<uuid> (got ${JSON.stringify(source.vpcConnectionArn)})`,
    );
  }
  const [, , , ownerAccount, name, uuid] = match;
  const [, clusterName, clusterUuid] = source.clusterArn.split(':')[5]!.split('/');
  if (ownerAccount !== clusterAccount || name !== clusterName || uuid !== clusterUuid) {
    throw new InvalidSettingError(
      'source.vpcConnectionArn',
      `names cluster ${ownerAccount}/${name}/${uuid}, but clusterArn is ${clusterAccount}/${clusterName}/${clusterUuid}`,
    );
  }
}

/** The ARN IAM matches a secret by: the full ARN, or the partial one with Secrets Manager's 6-character suffix. */
export function secretPolicyArn(secret: secretsmanager.ISecret): string {
  return secret.secretFullArn ?? `${secret.secretArn}-??????`;
}

function secretsOf(source: KafkaSource): secretsmanager.ISecret[] {
  const secrets: secretsmanager.ISecret[] = [];
  const auth = source.authentication;
  if (auth && auth.method !== KafkaAuthenticationMethod.IAM) secrets.push(auth.secret);
  if (source.kind === 'self-managed-kafka' && source.rootCaSecret) secrets.push(source.rootCaSecret);
  return secrets;
}

const ACCESS_TYPE: Record<
  Exclude<KafkaAuthenticationMethod, KafkaAuthenticationMethod.IAM>,
  lambda.SourceAccessConfigurationType
> = {
  [KafkaAuthenticationMethod.SASL_SCRAM_512]: lambda.SourceAccessConfigurationType.SASL_SCRAM_512_AUTH,
  [KafkaAuthenticationMethod.SASL_SCRAM_256]: lambda.SourceAccessConfigurationType.SASL_SCRAM_256_AUTH,
  [KafkaAuthenticationMethod.MTLS]: lambda.SourceAccessConfigurationType.CLIENT_CERTIFICATE_TLS_AUTH,
};

function accessConfigurations(source: KafkaSource): lambda.SourceAccessConfiguration[] {
  const configurations: lambda.SourceAccessConfiguration[] = [];
  const auth = source.authentication;
  if (auth && auth.method !== KafkaAuthenticationMethod.IAM) {
    configurations.push({ type: ACCESS_TYPE[auth.method], uri: auth.secret.secretArn });
  }
  if (source.kind === 'self-managed-kafka') {
    if (source.rootCaSecret) {
      configurations.push({
        type: lambda.SourceAccessConfigurationType.SERVER_ROOT_CA_CERTIFICATE,
        uri: source.rootCaSecret.secretArn,
      });
    }
    if (source.network) {
      const { subnetIds } = source.network.vpc.selectSubnets(source.network.vpcSubnets);
      for (const subnetId of subnetIds) {
        configurations.push({
          type: lambda.SourceAccessConfigurationType.VPC_SUBNET,
          uri: `subnet:${subnetId}`,
        });
      }
      configurations.push({
        type: lambda.SourceAccessConfigurationType.VPC_SECURITY_GROUP,
        uri: `security_group:${source.network.securityGroup.securityGroupId}`,
      });
    }
  }
  return configurations;
}

/**
 * Creates the event source mapping on `fn` (the mapping itself, not `ManagedKafkaEventSource` or
 * `SelfManagedKafkaEventSource`: those attach managed policies or grant on `*`) and grants its role what the
 * pollers use for this kind of source, scoped.
 */
export function attachKafkaSource(
  scope: Construct,
  fn: lambda.Function,
  source: KafkaSource,
  options: KafkaMappingOptions,
): AttachedKafkaSource {
  validateKafkaSource(source, Stack.of(scope).account);
  const sourceAccessConfigurations = accessConfigurations(source);
  const mapping = fn.addEventSourceMapping('KafkaSource', {
    ...(source.kind === 'msk'
      ? { eventSourceArn: source.vpcConnectionArn ?? source.clusterArn }
      : { kafkaBootstrapServers: [...source.bootstrapServers] }),
    kafkaTopic: options.topic,
    kafkaConsumerGroupId: options.consumerGroupId,
    batchSize: options.batchSize,
    maxBatchingWindow: options.maxBatchingWindow,
    startingPosition: options.startingPosition,
    startingPositionTimestamp: options.startingPositionTimestamp,
    provisionedPollerConfig: options.provisionedPollers,
    ...(sourceAccessConfigurations.length > 0 ? { sourceAccessConfigurations } : {}),
    // Left at the mapping's defaults on purpose: retry a failing batch until it succeeds (the processor
    // dead-letters poison records itself, P6, so only transient errors fail a batch) and never split it, so no
    // record is skipped and per-partition order holds.
  });

  const secrets = secretsOf(source);
  const secretResources = secrets.map(secretPolicyArn);
  if (secrets.length > 0) {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        sid: 'KafkaSecrets',
        actions: ['secretsmanager:GetSecretValue'],
        resources: secretResources,
      }),
    );
    const keys = [
      ...new Set(secrets.flatMap((secret) => (secret.encryptionKey ? [secret.encryptionKey.keyArn] : []))),
    ];
    if (keys.length > 0) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          sid: 'KafkaSecretsKey',
          actions: ['kms:Decrypt'],
          resources: keys,
          conditions: { StringEquals: { 'kms:ViaService': `secretsmanager.${Aws.REGION}.amazonaws.com` } },
        }),
      );
    }
  }

  if (source.kind === 'msk') {
    const iamAuth = usesIamAuth(source);
    const statements = kafkaConsumerStatements(source.clusterArn, options.topic, options.consumerGroupId);
    // Under SASL/SCRAM or mTLS the brokers authorize with Kafka ACLs: only the control-plane describe remains.
    for (const statement of iamAuth ? statements : statements.filter((s) => s.sid === 'KafkaDescribe')) {
      fn.addToRolePolicy(statement);
    }
    if (source.vpcConnectionArn) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          sid: 'KafkaVpcConnection',
          actions: ['kafka:DescribeVpcConnection'],
          resources: [source.vpcConnectionArn],
        }),
      );
    }
    if (!source.vpcId) throw new InvalidSettingError('source.vpcId', MSK_VPC_REQUIRED);
    for (const statement of networkInterfaceStatements(source.vpcId)) fn.addToRolePolicy(statement);
    const sameAccount = source.vpcConnectionArn === undefined;
    return {
      mapping,
      eventSourceArn: sameAccount ? source.clusterArn : undefined,
      networkVpcId: source.vpcId,
      networkInterfaces: true,
      secretResources,
    };
  }

  if (source.network) {
    for (const statement of networkInterfaceStatements(source.network.vpc.vpcId))
      fn.addToRolePolicy(statement);
  }
  return {
    mapping,
    networkVpcId: source.network?.vpc.vpcId,
    networkInterfaces: source.network !== undefined,
    secretResources,
  };
}
