/**
 * Where a pipeline keeps its state: its customer-managed key, its ledger table and its sink bucket, each created
 * or brought (`encryptionKey`, `table`, `bucket` props). Several pipelines may share a table and a bucket, never
 * under one pipeline id.
 */
import type { RemovalPolicy } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { InvalidSettingError } from '../shared/errors.ts';
import { createLedgerTable, LEDGER_TABLE_NEEDS, ledgerLayoutProblems } from './ledger-table.ts';
import { type PipelineParts, warnPipeline } from './pipeline-parts.ts';
import { allowLogsToUseKey } from './security.ts';
import { createSinkBuckets } from './sink-bucket.ts';

/** Which pipelines use each table and bucket: two pipelines of one id would write the same keys. */
const PIPELINES_OF = new WeakMap<object, Set<string>>();

/** What a store is created in and for: the pipeline (still being built), its settings and its key. */
type StoreScope = Construct & Pick<PipelineParts, 'config' | 'encryptionKey'>;

/** The customer-managed key under `encryption: 'kms'`: the one given, else a new one with rotation. */
export function pipelineKey(
  pipeline: StoreScope,
  given: kms.IKey | undefined,
  removalPolicy: RemovalPolicy,
): kms.IKey | undefined {
  const config = pipeline.config;
  if (config.encryption !== 'kms') return undefined;
  const key =
    given ??
    new kms.Key(pipeline, 'Key', {
      description: `Exactly-once pipeline ${config.pipelineId}: ledger, sink bucket, log groups and alarm topic`,
      enableKeyRotation: true,
      removalPolicy,
    });
  if (!allowLogsToUseKey(key)) {
    warnPipeline(
      pipeline,
      'KeyPolicyNotChanged',
      `the policy of key ${key.node.path} is not this stack's: allow CloudWatch Logs (logs.<region>.amazonaws.com) kms:Encrypt*, Decrypt*, ReEncrypt*, GenerateDataKey*, Describe* for this account's log groups, and CloudWatch (cloudwatch.amazonaws.com) kms:Decrypt and GenerateDataKey* for the alarm topic`,
    );
  }
  return key;
}

/** The ledger: created, or the one brought, checked against the ledger's layout where it is known. */
export function ledgerTableOf(
  pipeline: StoreScope,
  given: dynamodb.ITable | undefined,
  removalPolicy: RemovalPolicy,
): dynamodb.ITable {
  if (!given) {
    return claim(
      pipeline,
      createLedgerTable(pipeline, 'Ledger', {
        removalPolicy,
        deletionProtection: pipeline.config.deletionProtection,
        pointInTimeRecovery: pipeline.config.pointInTimeRecovery,
        encryptionKey: pipeline.encryptionKey,
      }),
      'table',
    );
  }
  const problems = ledgerLayoutProblems(given);
  if (problems && problems.length > 0) {
    throw new InvalidSettingError('table', `${problems.join('; ')}; the ledger needs ${LEDGER_TABLE_NEEDS}`);
  }
  return claim(pipeline, given, 'table');
}

/** The sink bucket: the one brought, else a new one with its access-log bucket. */
export function sinkBucketOf(
  pipeline: StoreScope,
  given: s3.IBucket | undefined,
  removalPolicy: RemovalPolicy,
): { readonly bucket: s3.IBucket; readonly accessLogs?: s3.IBucket } {
  if (given) return { bucket: claim(pipeline, given, 'bucket') };
  const config = pipeline.config;
  const buckets = createSinkBuckets(pipeline, 'Sink', {
    pipelineId: config.pipelineId,
    removalPolicy,
    noncurrentVersionExpirationDays: config.noncurrentVersionExpirationDays,
    inProgressExpirationDays: config.inProgressExpirationDays,
    encryptionKey: pipeline.encryptionKey,
  });
  return { bucket: claim(pipeline, buckets.bucket, 'bucket'), accessLogs: buckets.accessLogs };
}

/** Records the pipeline as a user of a table or bucket; a second pipeline of the same id would share its keys. */
function claim<T extends object>(pipeline: StoreScope, resource: T, what: 'table' | 'bucket'): T {
  const ids = PIPELINES_OF.get(resource) ?? new Set<string>();
  const pl = pipeline.config.pipelineId;
  if (ids.has(pl)) {
    throw new InvalidSettingError(
      'pipelineId',
      `"${pl}" already names a pipeline of this ${what}: pipelines sharing a ${what} need distinct ids`,
    );
  }
  PIPELINES_OF.set(resource, ids.add(pl));
  return resource;
}
