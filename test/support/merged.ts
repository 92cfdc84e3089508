/**
 * Merged final objects built by hand for the readers' tests (`shared/sink/entry-bytes.ts`): several partitions'
 * ranges, each its own NDJSON (gzip) stream, concatenated into one object at `mergedObjectKey`, and the manifest
 * entries that list each range as a slice of it (`sliceStart`).
 */
import { createHash } from 'node:crypto';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { Stream } from '../../shared/ledger/layout.ts';
import { type MergedObjectName, manifestKey, mergedObjectKey } from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { encodeManifest } from '../../shared/sink/manifest-store.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';

/** One range of a merged object: a partition's rows at `offsets` (the row's lineage names `orders` by default). */
export interface SlicePart {
  readonly partition: number;
  readonly offsets: readonly number[];
  /** The entry's range; default the first and last offset. */
  readonly range?: readonly [number, number];
  /** Extra fields of every row. */
  readonly extra?: Record<string, unknown>;
}

export interface MergedObject {
  readonly key: string;
  readonly body: Buffer;
  /** One slice entry per part, in part order. */
  readonly entries: ManifestFile[];
}

export const sha256Of = (body: Uint8Array): string => createHash('sha256').update(body).digest('hex');

/** The rows of a part: `{ source: { topic, partition, offset }, orderId, ...extra }`. */
export function partRows(part: SlicePart, lane = 'orders'): Record<string, unknown>[] {
  const lineageTopic = lane.split('~')[0]!;
  return part.offsets.map((offset) => ({
    source: { topic: lineageTopic, partition: part.partition, offset },
    orderId: `o${part.partition}-${offset}`,
    ...part.extra,
  }));
}

/** What names a merged object here: its stream and checkpoint, the rest defaulted (attempt 1, shard 0, …). */
export type MergedName = Partial<MergedObjectName> & {
  readonly stream: Stream;
  readonly checkpointId: number;
  /** The lane its slices belong to (the key names it); default `orders`. */
  readonly topic?: string;
};

/** A merged object's key: attempt 1, shard 0, index 0, gzip, lane `orders` unless `name` says otherwise. */
export function mergedKey(pipeline: string, name: MergedName): string {
  return mergedObjectKey(pipeline, { attempt: 1, shard: 0, index: 0, gzip: true, topic: 'orders', ...name });
}

/** Builds (does not write) a merged object of `parts` (all of one lane: `name.topic`) and its slice entries. */
export function buildMerged(pipeline: string, name: MergedName, parts: readonly SlicePart[]): MergedObject {
  const full = { gzip: true, topic: 'orders', ...name };
  const key = mergedKey(pipeline, full);
  const bodies: Buffer[] = [];
  const entries: ManifestFile[] = [];
  let at = 0;
  for (const part of parts) {
    const encoded = encodeNdjson(partRows(part, full.topic), full.gzip);
    const [firstOffset, lastOffset] = part.range ?? [part.offsets[0]!, part.offsets.at(-1)!];
    entries.push({
      key,
      stream: full.stream,
      topic: full.topic,
      partition: part.partition,
      firstOffset,
      lastOffset,
      recordCount: encoded.recordCount,
      bytes: encoded.bytes,
      sha256: encoded.sha256,
      sliceStart: at,
    });
    bodies.push(encoded.body);
    at += encoded.bytes;
  }
  return { key, body: Buffer.concat(bodies), entries };
}

export async function putObject(s3: S3Client, bucket: string, key: string, body: Buffer | string) {
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
}

/** Writes manifest `checkpointId` (canonical bytes, `encodeManifest`), overwriting any. */
export async function putManifest(
  s3: S3Client,
  bucket: string,
  pipeline: string,
  checkpointId: number,
  files: readonly ManifestFile[],
  cut: Record<string, number>,
  previousCut: Record<string, number>,
): Promise<Manifest> {
  const manifest: Manifest = {
    version: 1,
    pipeline,
    checkpointId,
    previousCheckpointId: checkpointId - 1,
    cut,
    previousCut,
    committedAt: '2026-12-06T10:00:00.000Z',
    files,
  };
  await putObject(s3, bucket, manifestKey(pipeline, checkpointId), encodeManifest(manifest));
  return manifest;
}
