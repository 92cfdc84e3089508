/**
 * The identity side of a pipeline's least privilege, as its functions and operator roles share it: DynamoDB item
 * actions only on the ledger's ARN and only on given item kinds (`dynamodb:LeadingKeys`), the data keys only
 * through their services, S3 reads only of the committed output, a transform's registry reads only where it
 * decodes.
 */
import { ArnFormat, Stack } from 'aws-cdk-lib';
import type * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { IConstruct } from 'constructs';
import { STREAMS } from '../shared/ledger/layout.ts';
import { finalPrefix, manifestsPrefix, stagedStreamPrefix } from '../shared/sink/layout.ts';
import type { PipelineConfig } from './config.ts';
import { grantKeyVia, type KeyAccess, type KeyService } from './security.ts';

/** Item actions on the table ARN, only for items whose partition key matches `leadingKeys`. */
export function grantLedger(
  table: dynamodb.ITable,
  grantee: iam.IGrantable,
  actions: string[],
  leadingKeys: string[],
  sid = 'LedgerItems',
  options: { readonly keyRequired?: boolean } = {},
): void {
  grantee.grantPrincipal.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid,
      actions,
      resources: [table.tableArn],
      conditions: {
        'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': leadingKeys },
        // `ForAllValues` matches a request that carries no key: required where an action may not say its key.
        ...(options.keyRequired ? { Null: { 'dynamodb:LeadingKeys': 'false' } } : {}),
      },
    }),
  );
}

/**
 * The keys of the table and the bucket (the pipeline's own, or those of a table or bucket brought with their
 * key), each usable only through its service; one statement when both use the same key.
 */
export function grantDataKeys(
  stores: { readonly table: dynamodb.ITable; readonly bucket: s3.IBucket },
  grantee: iam.IGrantable,
  services: readonly KeyService[],
  access: KeyAccess,
): void {
  const byKey = new Map<kms.IKey, KeyService[]>();
  const use = (key: kms.IKey | undefined, service: KeyService) => {
    if (key && services.includes(service)) byKey.set(key, [...(byKey.get(key) ?? []), service]);
  };
  use(stores.bucket.encryptionKey, 's3');
  use(stores.table.encryptionKey, 'dynamodb');
  for (const [key, via] of byKey) grantKeyVia(key, grantee, via, access);
}

/**
 * Exactly-once stages each output stream under its in-progress prefix, and nothing else (not the coordinator's
 * work objects, not final data, not manifests); the weaker guarantees write final objects directly.
 */
export function processorObjectPrefixes(
  config: Pick<PipelineConfig, 'pipelineId' | 'deliveryGuarantee'>,
): string[] {
  const pl = config.pipelineId;
  const prefixes = STREAMS.map((stream) => stagedStreamPrefix(pl, stream));
  if (config.deliveryGuarantee !== 'exactly-once') prefixes.push(finalPrefix(pl));
  return prefixes;
}

/**
 * Lets `grantee` read a pipeline's committed output, as `eos read` and `eos verify` do: list and get its
 * manifests and final objects (and decrypt them through S3 under SSE-KMS) — not staged data, not coordinator
 * work, not another pipeline's prefixes of a shared bucket.
 */
export function grantReadCommitted(
  scope: IConstruct,
  bucket: s3.IBucket,
  pipelineId: string,
  grantee: iam.IGrantable,
): iam.Grant {
  return grantPrefixReads(scope, bucket, [manifestsPrefix(pipelineId), finalPrefix(pipelineId)], grantee);
}

/**
 * Lets `grantee` get and list the objects under `prefixes` of `bucket`, and decrypt them through S3 under SSE-KMS:
 * the reads of a reader of committed output or of a table, nothing else of the bucket.
 */
export function grantPrefixReads(
  scope: IConstruct,
  bucket: s3.IBucket,
  prefixes: readonly string[],
  grantee: iam.IGrantable,
): iam.Grant {
  let grant = iam.Grant.addToPrincipal({
    grantee,
    actions: ['s3:GetObject'],
    resourceArns: prefixes.map((prefix) => bucket.arnForObjects(`${prefix}*`)),
  }).combine(
    iam.Grant.addToPrincipal({
      grantee,
      actions: ['s3:ListBucket'],
      resourceArns: [bucket.bucketArn],
      conditions: { StringLike: { 's3:prefix': prefixes.map((prefix) => `${prefix}*`) } },
    }),
  );
  const key = bucket.encryptionKey;
  if (key) {
    const stack = Stack.of(scope);
    grant = grant.combine(
      iam.Grant.addToPrincipal({
        grantee,
        actions: ['kms:Decrypt'],
        resourceArns: [key.keyArn],
        conditions: { StringEquals: { 'kms:ViaService': `s3.${stack.region}.${stack.urlSuffix}` } },
      }),
    );
  }
  return grant;
}

/**
 * What decoding with the transform's registry takes, for whoever decodes records (the processors) or dead letters
 * again (operators): its Glue schema reads, then its credentials.
 */
export function grantTransformReads(
  pipeline: IConstruct & {
    readonly glueSchemaReads?: { readonly registryNames: readonly string[] };
    readonly registrySecretArns: readonly string[];
  },
  grantee: iam.IGrantable,
): void {
  if (pipeline.glueSchemaReads)
    grantGlueSchemaReads(pipeline, grantee, pipeline.glueSchemaReads.registryNames);
  grantRegistrySecretReads(grantee, pipeline.registrySecretArns);
}

/**
 * A transform that decodes with an AWS Glue Schema Registry: the processor reads schema versions
 * (`glue:GetSchemaVersion`, nothing else), in the registries the transform names, else in this account and region.
 */
export function grantGlueSchemaReads(
  scope: IConstruct,
  grantee: iam.IGrantable,
  registryNames: readonly string[],
): void {
  const glueArn = (resource: string) =>
    Stack.of(scope).formatArn({ service: 'glue', resource, arnFormat: ArnFormat.NO_RESOURCE_NAME });
  const resources =
    registryNames.length > 0
      ? registryNames.flatMap((name) => [glueArn(`registry/${name}`), glueArn(`schema/${name}/*`)])
      : [glueArn('registry/*'), glueArn('schema/*')];
  grantee.grantPrincipal.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'ReadGlueSchemaVersions',
      actions: ['glue:GetSchemaVersion'],
      resources,
    }),
  );
}

/**
 * A transform whose Confluent registry names `basicAuthSecret`: `secretsmanager:GetSecretValue` on those secrets
 * only. A secret ARN given without its random suffix matches the secret only as `<arn>-??????`.
 */
export function grantRegistrySecretReads(grantee: iam.IGrantable, secretArns: readonly string[]): void {
  if (secretArns.length === 0) return;
  grantee.grantPrincipal.addToPrincipalPolicy(
    new iam.PolicyStatement({
      sid: 'ReadRegistrySecrets',
      actions: ['secretsmanager:GetSecretValue'],
      resources: secretArns.flatMap((arn) => [arn, `${arn}-??????`]),
    }),
  );
}
