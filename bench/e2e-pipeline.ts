/**
 * A fresh pipeline for each run (its own table, bucket and id), and what it left in the bucket, read back with
 * clients of their own so that the reads are not counted as the run's.
 */
import { LOCAL_SETTING_DEFAULTS } from '../cli/local-defaults.ts';
import { createBucket, createLedgerTable } from '../local/provision.ts';
import type { CountedCall } from '../shared/aws/call-counter.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { type DeliveryGuarantee, parseSettings, type Settings } from '../shared/config/settings.ts';
import { finalPrefix, parseStagedObjectKey } from '../shared/sink/layout.ts';
import type { Manifest } from '../shared/sink/manifest.ts';
import { readManifests } from '../shared/sink/reader.ts';
import { listKeys } from '../shared/sink/verify.ts';

/** The objects a run left: final objects in the bucket, and staged objects the processors wrote. */
export interface FinalObjects {
  finalObjects: number;
  stagedObjects: number;
}

let seq = 0;

/** A fresh table, bucket and pipeline id. */
export async function freshPipeline(
  mode: DeliveryGuarantee,
  idempotencyKey: string,
  tag: string,
): Promise<Settings> {
  const n = ++seq;
  const name = `bench-e2e-${process.pid}-${n}`;
  const clients = createAwsClients();
  try {
    await Promise.all([createLedgerTable(clients.dynamodb, name), createBucket(clients.s3, name)]);
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
  return parseSettings({
    ledgerTable: name,
    bucket: name,
    pipelineId: `e2e-${tag}-${mode === 'exactly-once' ? 'eo' : 'alo'}-${n}`,
    deliveryGuarantee: mode,
    idempotencyKey: mode === 'exactly-once' ? idempotencyKey : 'none',
    checkpointLeaseSeconds: LOCAL_SETTING_DEFAULTS.checkpointLeaseSeconds,
  });
}

/** The committed manifests of a pipeline, in checkpoint order (read with clients of their own: not counted). */
export async function manifestsOf(bucket: string, pipeline: string): Promise<Manifest[]> {
  const clients = createAwsClients();
  const manifests: Manifest[] = [];
  try {
    for await (const manifest of readManifests({ s3: clients.s3, bucket, pipeline }))
      manifests.push(manifest);
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
  return manifests.sort((a, b) => a.checkpointId - b.checkpointId);
}

/** The final objects in the bucket once a run ended (listed with clients of their own: not counted), and the staged
 * objects its processors wrote. */
export async function finalObjectsOf(
  bucket: string,
  pipeline: string,
  processor: readonly CountedCall[],
): Promise<FinalObjects> {
  const staged = processor.filter(
    (call) => call.direction === 'written' && parseStagedObjectKey(pipeline, call.key) !== undefined,
  );
  const clients = createAwsClients();
  try {
    const finals = await listKeys(clients.s3, bucket, finalPrefix(pipeline));
    return { finalObjects: finals.length, stagedObjects: new Set(staged.map((c) => c.key)).size };
  } finally {
    clients.dynamodb.destroy();
    clients.s3.destroy();
  }
}
