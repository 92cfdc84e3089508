/**
 * The resource side of least privilege: the sink bucket's policy enforces the same write boundaries as the
 * roles' identity policies, so that an over-broad role elsewhere in the account (an `s3:*` admin tool, a data
 * team's job) cannot overwrite or delete what readers trust (C7), and KMS use is tied to the services that need it.
 *
 * | prefix (shared/sink)  | who may put objects                      | who may delete objects             |
 * |-----------------------|------------------------------------------|------------------------------------|
 * | `<pl>/_manifests/`    | commit, write-once                       | nobody                             |
 * | `<pl>/final/`         | promote, write-once (and the processor   | nobody                             |
 * |                       | under at-least-once / none)              |                                    |
 * | `<pl>/_coordinator/`  | prepare, promote (plans, promotion       | cleanup, abort                     |
 * |                       | records, prepare's candidates, which     |                                    |
 * |                       | promote copies into final/)              |                                    |
 * | `<pl>/_inprogress/`   | the processor                            | cleanup, abort                     |
 *
 * Every other principal of the account is denied (puts, ACLs, tags, deletes of objects and versions). Pipelines
 * sharing a bucket each add their own statements, for their own prefixes, with Sids that name the pipeline.
 *
 * Write-once: a put under `_manifests/` or `final/` without `If-None-Match: *` is denied to everyone, its writer
 * included, so not even the commit or promote role can replace a committed object. A CopyObject there is held to
 * the same rule (S3's conditional copies carry the header's condition key), so promote's copy of a candidate sends
 * it; a multipart upload is refused (its CreateMultipartUpload and UploadPart carry no such header). Commit writes
 * manifests with single PutObjects.
 *
 * The bucket itself: the changes that would undo all of this (its policy, lifecycle rules that could expire
 * committed objects, versioning, replication, object lock, default encryption, ownership, ACL, public access
 * block) are denied to every principal but the bucket's administrators: the role CloudFormation deploys the stack
 * with, or the `bucketAdminPrincipals` named instead. Added once per bucket, by the pipeline that owns it.
 *
 * Trade-offs, deliberately: lifecycle rules are not subject to bucket policies (the in-progress backstop and
 * noncurrent-version expiry keep working); with `removalPolicy=destroy` CDK's auto-delete-objects role is exempt
 * everywhere, with `retain` (the default) nobody is, so deleting committed data takes removing this policy first;
 * the account's root user can change a bucket policy whatever it says: the last way back in.
 */
import { DefaultStackSynthesizer, Fn, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { IConstruct } from 'constructs';
import { checkpointWorkPrefix } from '../shared/coordinator/work-objects.ts';
import { finalPrefix, inProgressPrefix, manifestsPrefix } from '../shared/sink/layout.ts';

/** Object-level writes that create or change an object: data, ACLs, tags, replicas, restores. */
export const OBJECT_PUT_ACTIONS = [
  's3:PutObject',
  's3:PutObjectAcl',
  's3:PutObjectVersionAcl',
  's3:PutObjectTagging',
  's3:PutObjectVersionTagging',
  's3:ReplicateObject',
  's3:RestoreObject',
] as const;

/** Object-level deletes: of the current object (a delete marker), of a version, of tags, of replicas. */
export const OBJECT_DELETE_ACTIONS = [
  's3:DeleteObject',
  's3:DeleteObjectVersion',
  's3:DeleteObjectTagging',
  's3:DeleteObjectVersionTagging',
  's3:ReplicateDelete',
] as const;

/**
 * Bucket-level changes that could undo the boundaries or lose committed data: the policy itself, lifecycle rules
 * (which could expire `_manifests/` and `final/`), versioning (suspended, an overwrite loses the old bytes),
 * replication, object lock, default encryption (a foreign key makes new objects unreadable), object ownership and
 * ACLs, and the public access block.
 */
export const BUCKET_ADMIN_ACTIONS = [
  's3:PutBucketPolicy',
  's3:DeleteBucketPolicy',
  's3:PutLifecycleConfiguration',
  's3:PutBucketVersioning',
  's3:PutReplicationConfiguration',
  's3:PutBucketObjectLockConfiguration',
  's3:PutEncryptionConfiguration',
  's3:PutBucketOwnershipControls',
  's3:PutBucketAcl',
  's3:PutBucketPublicAccessBlock',
] as const;

/** Who may put and who may delete objects under one prefix; every other principal is denied. */
export interface PrefixWriters {
  readonly put: readonly iam.IRole[];
  readonly delete: readonly iam.IRole[];
}

export interface SinkWriters {
  readonly pipelineId: string;
  /** Manifests: put by commit, deleted by nobody. */
  readonly manifests: PrefixWriters;
  /** Final data: put by promote (and the processor under the weaker guarantees), deleted by nobody. */
  readonly finalData: PrefixWriters;
  /**
   * The coordinator's plans, promotion results and candidates (what promote copies into final/, so the processor
   * must never write here): put by prepare and promote, deleted by cleanup and abort.
   */
  readonly coordinatorWork: PrefixWriters;
  /** Staged objects: put by the processor, deleted by cleanup and abort. */
  readonly staged: PrefixWriters;
  /** Exempt from every boundary (CDK's auto-delete handler when the bucket is destroyed with the stack). */
  readonly exempt: readonly string[];
}

/**
 * Denied to every principal but `arns`: a condition on `aws:PrincipalArn`, or none at all when nobody is exempt (a
 * negated condition over an empty list is not a documented way to say "nobody").
 */
function exceptPrincipals(arns: readonly string[]): Record<string, unknown> | undefined {
  return arns.length === 0 ? undefined : { ArnNotEquals: { 'aws:PrincipalArn': [...arns] } };
}

/**
 * The pipeline id as a Sid may spell it (`[A-Za-z0-9]`): ids are lower-case, so an upper-case `DASH` for each `-`
 * keeps two pipelines' Sids apart (`a-1` and `a1` must not both become `A1`).
 */
export function sidOfPipeline(pipelineId: string): string {
  return pipelineId.replaceAll('-', 'DASH');
}

/**
 * The deny statements, two per protected prefix (puts, deletes): each `Sid` names its boundary and the pipeline
 * (`OnlyWritersPutManifestsOforders`), unique in a bucket policy that several pipelines share.
 */
export function sinkBoundaryStatements(bucket: s3.IBucket, writers: SinkWriters): iam.PolicyStatement[] {
  const pl = writers.pipelineId;
  const deny = (sid: string, actions: readonly string[], prefix: string, roles: readonly iam.IRole[]) =>
    new iam.PolicyStatement({
      sid: `${sid}Of${sidOfPipeline(pl)}`,
      effect: iam.Effect.DENY,
      principals: [new iam.AnyPrincipal()],
      actions: [...actions],
      resources: [bucket.arnForObjects(`${prefix}*`)],
      // For an assumed-role session aws:PrincipalArn is the role's ARN. A principal without one (a service
      // acting on its own) has no such key, and a negated operator then matches: it is denied too.
      conditions: exceptPrincipals([...roles.map((r) => r.roleArn), ...writers.exempt]),
    });
  const boundary = (name: string, prefix: string, roles: PrefixWriters) => [
    deny(`OnlyWritersPut${name}`, OBJECT_PUT_ACTIONS, prefix, roles.put),
    deny(`OnlyWritersDelete${name}`, OBJECT_DELETE_ACTIONS, prefix, roles.delete),
  ];
  return [
    ...boundary('Manifests', manifestsPrefix(pl), writers.manifests),
    ...boundary('FinalData', finalPrefix(pl), writers.finalData),
    ...boundary('CoordinatorWork', checkpointWorkPrefix(pl), writers.coordinatorWork),
    ...boundary('Staged', inProgressPrefix(pl), writers.staged),
    writeOnce(bucket, manifestsPrefix(pl), `WriteOnceManifestsOf${sidOfPipeline(pl)}`, []),
    writeOnce(bucket, finalPrefix(pl), `WriteOnceFinalDataOf${sidOfPipeline(pl)}`, []),
  ];
}

/**
 * A put under `prefix` without `If-None-Match: *` is denied (C7 at the IAM layer). `s3:if-none-match` is present
 * only on a PutObject or CompleteMultipartUpload that sends the header; when it is absent the negated operator
 * matches, so an overwrite, a copy and a multipart part are all denied.
 */
function writeOnce(
  bucket: s3.IBucket,
  prefix: string,
  sid: string,
  exempt: readonly string[],
): iam.PolicyStatement {
  return new iam.PolicyStatement({
    sid,
    effect: iam.Effect.DENY,
    principals: [new iam.AnyPrincipal()],
    actions: ['s3:PutObject'],
    resources: [bucket.arnForObjects(`${prefix}*`)],
    conditions: {
      StringNotEquals: { 's3:if-none-match': '*' },
      ...exceptPrincipals(exempt),
    },
  });
}

/**
 * The bucket-level deny: {@link BUCKET_ADMIN_ACTIONS} to every principal but `admins` (and `exempt`). `admins` must
 * name the principal that deploys the stack, or its next update of the bucket fails.
 */
export function bucketAdminStatement(
  bucket: s3.IBucket,
  admins: readonly string[],
  exempt: readonly string[] = [],
): iam.PolicyStatement {
  return new iam.PolicyStatement({
    sid: 'OnlyAdminsChangeTheBucket',
    effect: iam.Effect.DENY,
    principals: [new iam.AnyPrincipal()],
    actions: [...BUCKET_ADMIN_ACTIONS],
    resources: [bucket.bucketArn],
    conditions: exceptPrincipals([...admins, ...exempt]),
  });
}

/**
 * The role CloudFormation deploys `scope`'s stack with: the execution role of CDK's default synthesizer
 * (`cdk-<qualifier>-cfn-exec-role-<account>-<region>`, as bootstrapped). Undefined for a synthesizer without one
 * (CloudFormation then acts with the deploying user's own credentials, which the stack cannot know).
 */
export function deployingRoleArn(scope: IConstruct): string | undefined {
  const synthesizer = Stack.of(scope).synthesizer;
  if (!(synthesizer instanceof DefaultStackSynthesizer)) return undefined;
  // An environment-agnostic stack's ARN keeps the CLI's placeholders (`${AWS::AccountId}`, …): Fn::Sub fills them
  // in at deploy time.
  return Fn.sub(synthesizer.cloudFormationExecutionRoleArn);
}

/** The role ARN of CDK's auto-delete-objects handler in `scope`'s stack, if the stack has one. */
export function autoDeleteHandlerRoleArn(scope: IConstruct): string | undefined {
  const provider = Stack.of(scope).node.tryFindChild('Custom::S3AutoDeleteObjectsCustomResourceProvider') as
    | { roleArn?: string }
    | undefined;
  return provider?.roleArn;
}

export type KeyService = 's3' | 'dynamodb';
export type KeyAccess = 'decrypt' | 'encrypt-decrypt';

const KEY_ACTIONS: Record<KeyAccess, string[]> = {
  decrypt: ['kms:Decrypt', 'kms:DescribeKey'],
  // S3 (SSE-KMS with a bucket key) and DynamoDB request paths: no ReEncrypt, no wildcard action.
  'encrypt-decrypt': ['kms:Decrypt', 'kms:DescribeKey', 'kms:Encrypt', 'kms:GenerateDataKey'],
};

/**
 * A grant of the pipeline's key usable only through the named services (`kms:ViaService`): the role can have S3
 * or DynamoDB decrypt for it, never call KMS directly with the key.
 */
export function grantKeyVia(
  key: kms.IKey,
  grantee: iam.IGrantable,
  services: readonly KeyService[],
  access: KeyAccess,
): void {
  const stack = Stack.of(key);
  grantee.grantPrincipal.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: `PipelineKeyVia${services.map((s) => s[0]!.toUpperCase() + s.slice(1)).join('')}`,
      actions: KEY_ACTIONS[access],
      resources: [key.keyArn],
      conditions: {
        StringEquals: {
          'kms:ViaService': services.map((service) => `${service}.${stack.region}.${stack.urlSuffix}`),
        },
      },
    }),
  );
}

/**
 * Lets CloudWatch Logs encrypt this account's log groups in this region with the key (the key policy statement
 * AWS documents for CMK-encrypted log groups; the log group names are not known before the groups exist).
 */
export function allowLogsToUseKey(key: kms.IKey): boolean {
  const stack = Stack.of(key);
  return key.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'CloudWatchLogsOfThisAccount',
      principals: [new iam.ServicePrincipal(`logs.${stack.region}.${stack.urlSuffix}`)],
      actions: ['kms:Encrypt*', 'kms:Decrypt*', 'kms:ReEncrypt*', 'kms:GenerateDataKey*', 'kms:Describe*'],
      resources: ['*'],
      conditions: {
        ArnLike: {
          'kms:EncryptionContext:aws:logs:arn': `arn:${stack.partition}:logs:${stack.region}:${stack.account}:log-group:*`,
        },
      },
    }),
  ).statementAdded;
}
