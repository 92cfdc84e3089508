/**
 * The MSK cluster's state and client authentication modes, from the control plane (`DescribeClusterV2`), with the
 * warnings `eos status` shows. The pipeline's Lambda reads the cluster with IAM authentication; a cluster without
 * it either cannot be read by the mapping as deployed or admits clients the pipeline's IAM policy cannot fence.
 */
import { type Cluster, DescribeClusterV2Command, type KafkaClient } from '@aws-sdk/client-kafka';

export interface AuthenticationModes {
  readonly iam: boolean;
  readonly scram: boolean;
  readonly tls: boolean;
  readonly unauthenticated: boolean;
}

export interface ClusterStatus {
  readonly arn: string;
  readonly name?: string;
  readonly type: 'PROVISIONED' | 'SERVERLESS' | 'UNKNOWN';
  /** ACTIVE, CREATING, UPDATING, HEALING, MAINTENANCE, FAILED, … */
  readonly state: string;
  readonly authentication: AuthenticationModes;
  readonly warnings: readonly string[];
}

export async function readClusterStatus(kafka: KafkaClient, clusterArn: string): Promise<ClusterStatus> {
  const response = await kafka.send(new DescribeClusterV2Command({ ClusterArn: clusterArn }));
  const info = response.ClusterInfo ?? {};
  const authentication = authenticationOf(info);
  const state = info.State ?? 'UNKNOWN';
  return {
    arn: info.ClusterArn ?? clusterArn,
    name: info.ClusterName,
    type:
      info.ClusterType === 'PROVISIONED' || info.ClusterType === 'SERVERLESS' ? info.ClusterType : 'UNKNOWN',
    state,
    authentication,
    warnings: warningsFor(state, authentication, info),
  };
}

/** Serverless clusters support IAM only; provisioned ones any mix. */
export function authenticationOf(info: Cluster): AuthenticationModes {
  if (info.Serverless) {
    return {
      iam: info.Serverless.ClientAuthentication?.Sasl?.Iam?.Enabled === true,
      scram: false,
      tls: false,
      unauthenticated: false,
    };
  }
  const auth = info.Provisioned?.ClientAuthentication;
  return {
    iam: auth?.Sasl?.Iam?.Enabled === true,
    scram: auth?.Sasl?.Scram?.Enabled === true,
    tls: auth?.Tls?.Enabled === true,
    // A provisioned cluster without any client authentication block accepts unauthenticated clients.
    unauthenticated: auth === undefined || auth.Unauthenticated?.Enabled === true,
  };
}

function warningsFor(state: string, auth: AuthenticationModes, info: Cluster): string[] {
  const warnings: string[] = [];
  if (!auth.iam) {
    warnings.push(
      'IAM authentication is off: the pipeline authenticates with IAM (kafka-cluster:* permissions), so its event source mapping cannot read this cluster as deployed',
    );
  }
  if (auth.unauthenticated) {
    warnings.push('unauthenticated access is on: any client in the network can read and write the topic');
  }
  if (state !== 'ACTIVE') {
    const detail = info.StateInfo?.Message ? ` (${info.StateInfo.Message})` : '';
    warnings.push(`cluster state is ${state}${detail}: the event source mapping may not be polling`);
  }
  return warnings;
}
