/**
 * The file sink's bucket: versioned (a final object is never changed once visible, C7, and versions make an
 * accidental overwrite or delete recoverable for `noncurrentVersionExpirationDays`, a year by default), TLS-only,
 * no public access, encrypted, access-logged, with a lifecycle rule on the in-progress prefix as a backstop behind
 * the orphan sweep and checkpoint cleanup. Its write boundaries (who may write which prefix) are written by
 * `security.ts` and put on it by `bucket-protection.ts` once the roles exist.
 */
import { Duration, RemovalPolicy } from 'aws-cdk-lib';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { checkpointWorkPrefix } from '../shared/coordinator/work-objects.ts';
import { inProgressPrefix } from '../shared/sink/layout.ts';

/**
 * The lifecycle rules of one pipeline's prefixes, named after it: pipelines sharing a bucket each add their own
 * (`addLifecycleRule`), the bucket-wide rule stays the creator's.
 */
export function pipelineLifecycleRules(
  pipelineId: string,
  inProgressExpirationDays: number,
): s3.LifecycleRule[] {
  return [
    {
      // A backstop only: staged objects are promoted or swept long before this. It must outlast every grace
      // period and lease (checked at synth), or it could delete staged data a checkpoint still needs.
      id: `backstop-expire-in-progress-${pipelineId}`,
      prefix: inProgressPrefix(pipelineId),
      expiration: Duration.days(inProgressExpirationDays),
    },
    {
      // Cleanup deletes every promoted staged object: on a versioned bucket each leaves a noncurrent version.
      // Keep those a few days (enough to recover from a mistake), not the bucket-wide retention.
      id: `expire-noncurrent-in-progress-${pipelineId}`,
      prefix: inProgressPrefix(pipelineId),
      noncurrentVersionExpiration: Duration.days(3),
      expiredObjectDeleteMarker: true,
    },
    {
      // Plans and promotion results: cleanup and abort delete them, this is their backstop (same period as the
      // staged data's, far beyond any lease); each deletion leaves a noncurrent version, kept a few days.
      id: `backstop-expire-coordinator-work-${pipelineId}`,
      prefix: checkpointWorkPrefix(pipelineId),
      expiration: Duration.days(inProgressExpirationDays),
      noncurrentVersionExpiration: Duration.days(3),
    },
  ];
}

export interface SinkBucketOptions {
  readonly pipelineId: string;
  readonly removalPolicy: RemovalPolicy;
  readonly noncurrentVersionExpirationDays: number;
  readonly inProgressExpirationDays: number;
  /** A customer-managed key (SSE-KMS with a bucket key); SSE-S3 without it. */
  readonly encryptionKey?: kms.IKey;
}

export interface SinkBuckets {
  readonly bucket: s3.Bucket;
  readonly accessLogs: s3.Bucket;
}

export function createSinkBuckets(scope: Construct, id: string, options: SinkBucketOptions): SinkBuckets {
  const destroy = options.removalPolicy === RemovalPolicy.DESTROY;
  const common = {
    blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
    enforceSSL: true,
    minimumTLSVersion: 1.2,
    removalPolicy: options.removalPolicy,
    autoDeleteObjects: destroy,
  } as const;
  const accessLogs = new s3.Bucket(scope, `${id}AccessLogs`, {
    ...common,
    // Server access logging cannot deliver to SSE-KMS buckets. Object ownership is left to CDK: it depends on
    // whether the app's feature flags deliver logs by bucket policy or by ACL.
    encryption: s3.BucketEncryption.S3_MANAGED,
    lifecycleRules: [{ id: 'expire-access-logs', expiration: Duration.days(365) }],
  });
  const bucket = new s3.Bucket(scope, id, {
    ...common,
    versioned: true,
    ...(options.encryptionKey
      ? { encryption: s3.BucketEncryption.KMS, encryptionKey: options.encryptionKey, bucketKeyEnabled: true }
      : { encryption: s3.BucketEncryption.S3_MANAGED }),
    objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
    serverAccessLogsBucket: accessLogs,
    serverAccessLogsPrefix: 'sink/',
    lifecycleRules: [
      {
        id: 'expire-noncurrent-versions',
        noncurrentVersionExpiration: Duration.days(options.noncurrentVersionExpirationDays),
        abortIncompleteMultipartUploadAfter: Duration.days(1),
        expiredObjectDeleteMarker: true,
      },
      ...pipelineLifecycleRules(options.pipelineId, options.inProgressExpirationDays),
    ],
  });
  return { bucket, accessLogs };
}
