/** The principals a pipeline names in its policies: the bucket's administrators, an operator role pinned to its account. */
import { Stack, Token } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
import type { KafkaSource } from './kafka-source.ts';
import { deployingRoleArn } from './security.ts';

/** An IAM principal ARN a bucket policy can name in `aws:PrincipalArn`: a role, a user, or an account's root. */
const PRINCIPAL_ARN = /^arn:aws[a-z-]*:iam::\d{12}:(?:root|(?:role|user)\/[\w+=,.@/-]{1,512})$/;

/**
 * The principals that may change the bucket itself (the `bucketAdminPrincipals` prop): the ARNs given, else the
 * role CloudFormation deploys the stack with. Refused empty or malformed, or left to a default that does not exist:
 * a bucket nobody may administer would fail the stack's own next update.
 */
export function bucketAdminsOf(scope: Construct, given: readonly string[] | undefined): string[] {
  if (given === undefined) {
    const deployer = deployingRoleArn(scope);
    if (deployer === undefined) {
      throw new InvalidSettingError(
        'bucketAdminPrincipals',
        "required: the stack's synthesizer has no CloudFormation execution role; name the principal that deploys the stack",
      );
    }
    return [deployer];
  }
  if (given.length === 0) {
    throw new InvalidSettingError(
      'bucketAdminPrincipals',
      'must name at least the principal that deploys the stack (none could change the bucket, CloudFormation included)',
    );
  }
  const bad = given.find((arn) => !Token.isUnresolved(arn) && !PRINCIPAL_ARN.test(arn));
  if (bad !== undefined) {
    throw new InvalidSettingError(
      'bucketAdminPrincipals',
      `${JSON.stringify(bad)} is not an IAM role, user or root ARN`,
    );
  }
  return [...given];
}

/**
 * `role` with every statement granted through it conditioned on `aws:PrincipalAccount`: the grants apply only to
 * callers of that account, whichever role CloudFormation attaches the policy to.
 */
export function pinnedToAccount(role: iam.IRole, account: string): iam.IPrincipal {
  const addToPrincipalPolicy = (statement: iam.PolicyStatement): iam.AddToPrincipalPolicyResult => {
    statement.addCondition('StringEquals', { 'aws:PrincipalAccount': account });
    return role.addToPrincipalPolicy(statement);
  };
  const principal: iam.IPrincipal = {
    get grantPrincipal() {
      return principal;
    },
    assumeRoleAction: role.assumeRoleAction,
    get policyFragment() {
      return role.policyFragment;
    },
    principalAccount: account,
    addToPrincipalPolicy,
  };
  return principal;
}

/**
 * An operator role as its grants should reach it. CloudFormation attaches a policy to a role by name, in the
 * account it deploys into: a role ARN of another account would silently lend its grants to a same-named role
 * here. Refused when the deploying account is known (the stack's, or for an environment-agnostic stack the MSK
 * cluster's or its VPC connection's, which Lambda requires to be this account); when nothing tells it (a sandbox
 * cluster, self-managed Kafka), every grant is pinned to the ARN's account (`aws:PrincipalAccount`), so a
 * same-named role of another account gets nothing.
 */
export function operatorPrincipal(scope: Construct, source: KafkaSource, role: iam.IRole): iam.IPrincipal {
  const roleAccount = role.env.account;
  if (Token.isUnresolved(roleAccount)) return role;
  const stackAccount = Stack.of(scope).account;
  const [account, whose] = Token.isUnresolved(stackAccount)
    ? sourceAccount(source)
    : [stackAccount, "the stack's"];
  if (account === undefined) return pinnedToAccount(role, roleAccount);
  if (account !== roleAccount) {
    throw new InvalidSettingError(
      'operatorRoles',
      `${role.roleArn} is a role of account ${roleAccount}, but the stack deploys into ${account} (${whose}): its grants would go to a same-named role of ${account}`,
    );
  }
  return role;
}

/** The deploying account as the MSK source tells it: its VPC connection's account, else the cluster's. */
function sourceAccount(source: KafkaSource): [string | undefined, string] {
  if (source.kind !== 'msk') return [undefined, ''];
  const { vpcConnectionArn, clusterArn } = source;
  if (vpcConnectionArn !== undefined && !Token.isUnresolved(vpcConnectionArn)) {
    return [vpcConnectionArn.split(':')[4], "the MSK VPC connection's"];
  }
  if (vpcConnectionArn === undefined && !Token.isUnresolved(clusterArn)) {
    return [clusterArn.split(':')[4], "the MSK cluster's"];
  }
  return [undefined, ''];
}
