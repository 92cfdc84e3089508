/**
 * The resource side of a pipeline's write boundaries (`security.ts`): who may write each of its prefixes of the
 * sink bucket, who may change the bucket itself, and putting both on the bucket when the stack owns it.
 */
import { Stack } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { IConstruct } from 'constructs';
import type { CoordinatorStep } from '../shared/coordinator/definition.ts';
import { type PipelineParts, warnPipeline } from './pipeline-parts.ts';
import { autoDeleteHandlerRoleArn, sinkBoundaryStatements } from './security.ts';
import { pipelineLifecycleRules } from './sink-bucket.ts';

/** Buckets whose policy already has the bucket-level deny (one per bucket, whichever pipeline added it). */
const BUCKETS_GUARDED = new WeakSet<s3.IBucket>();

/** A pipeline as its bucket's policy names its writers: its processors, coordinator steps and operator roles. */
export interface ProtectedPipeline extends PipelineParts {
  readonly processor: lambda.IFunction;
  readonly replay?: { readonly processor: lambda.IFunction };
  readonly coordinator: { readonly functions: Readonly<Record<CoordinatorStep, lambda.IFunction>> };
  readonly operatorRoles: readonly iam.IRole[];
}

/** Who may write each of this pipeline's prefixes, as deny statements for the bucket's policy. */
export function boundaryStatementsOf(pipeline: ProtectedPipeline): iam.PolicyStatement[] {
  const steps = pipeline.coordinator.functions;
  const role = (fn: lambda.IFunction): iam.IRole => fn.role!;
  const processorWritesFinal = pipeline.config.deliveryGuarantee !== 'exactly-once';
  return sinkBoundaryStatements(pipeline.bucket, {
    pipelineId: pipeline.config.pipelineId,
    manifests: { put: [role(steps.commit)], delete: [] },
    finalData: {
      put: [role(steps.promote), ...(processorWritesFinal ? [role(pipeline.processor)] : [])],
      delete: [],
    },
    coordinatorWork: {
      put: [steps.prepare, steps.promote].map(role),
      delete: [steps.cleanup, steps.abort].map(role),
    },
    staged: {
      put: [
        role(pipeline.processor),
        ...(pipeline.replay ? [role(pipeline.replay.processor)] : []),
        ...pipeline.operatorRoles,
      ],
      delete: [steps.cleanup, steps.abort].map(role),
    },
    exempt: exemptPrincipalsOf(pipeline),
  });
}

/** CDK's auto-delete handler, when the stack destroys the bucket: it empties it and denies writes first. */
export function exemptPrincipalsOf(scope: IConstruct): string[] {
  const handler = autoDeleteHandlerRoleArn(scope);
  return handler ? [handler] : [];
}

/**
 * Puts the pipeline's boundaries and lifecycle rules on the bucket when this stack owns it: the bucket it
 * created, or an `s3.Bucket` of the same stack (another pipeline's). A bucket imported or of another stack cannot
 * be changed from here (CDK would drop the policy statements silently, or tie the stacks in a cycle): synth
 * warns, naming what to add. Whether they are on the bucket.
 */
export function protectBucket(
  pipeline: PipelineParts & {
    readonly bucketPolicyStatements: readonly iam.PolicyStatement[];
    readonly bucketAdminPolicyStatement: iam.PolicyStatement;
  },
  created: boolean,
): boolean {
  const bucket = pipeline.bucket;
  const owned = created || (bucket instanceof s3.Bucket && Stack.of(bucket) === Stack.of(pipeline));
  const pl = pipeline.config.pipelineId;
  const expirationDays = pipeline.config.inProgressExpirationDays;
  if (owned) {
    for (const statement of pipeline.bucketPolicyStatements) bucket.addToResourcePolicy(statement);
    if (!BUCKETS_GUARDED.has(bucket)) {
      bucket.addToResourcePolicy(pipeline.bucketAdminPolicyStatement);
      BUCKETS_GUARDED.add(bucket);
    }
    if (!created && bucket instanceof s3.Bucket) {
      for (const rule of pipelineLifecycleRules(pl, expirationDays)) bucket.addLifecycleRule(rule);
    }
    return true;
  }
  warnPipeline(
    pipeline,
    'BucketNotOwned',
    `bucket ${bucket.node.path} is not this stack's, so pipeline ${pl}'s write boundaries and lifecycle rules are not on it: add the statements of ExactlyOncePipeline.bucketPolicyStatements to its policy (and once per bucket bucketAdminPolicyStatement), and lifecycle rules expiring ${pl}/_inprogress/ and ${pl}/_coordinator/ objects after ${expirationDays} days (docs/deploy.md)`,
  );
  return false;
}
