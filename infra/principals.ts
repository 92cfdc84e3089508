/** The principals a pipeline names in its policies: the bucket's administrators, an operator role pinned to its account. */
import { Token } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
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
