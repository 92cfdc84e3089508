/**
 * Merged final objects built by hand for the readers' tests (`shared/sink/entry-bytes.ts`): several partitions'
 * ranges, each its own NDJSON (gzip) stream, concatenated into one object at `mergedObjectKey`, and the manifest
 * entries that list each range as a slice of it (`sliceStart`). Also rewrites a checkpoint a real run committed into
 * that layout, so a reader can be run on merged objects of real rows.
 */
import { createHash } from 'node:crypto';
import { DeleteObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { Stream } from '../../shared/ledger/layout.ts';
import { type MergedObjectName, manifestKey, mergedObjectKey } from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { encodeManifest, ManifestStore } from '../../shared/sink/manifest-store.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes } from '../../shared/sink/objects.ts';

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
  /** The lane its slices belong to, for a layout whose merged keys name one; default `orders`. */
  readonly topic?: string;
};

/** A merged object's key: attempt 1, shard 0, index 0, gzip, lane `orders` unless `name` says otherwise. */
export function mergedKey(pipeline: string, name: MergedName): string {
  const full = { attempt: 1, shard: 0, index: 0, gzip: true, topic: 'orders', ...name };
  return mergedObjectKey(pipeline, full as MergedObjectName);
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

/**
 * Rewrites committed checkpoint `checkpointId` (NDJSON entries only) into merged objects, one per stream and lane
 * (shard 0): each entry's bytes, as committed, become its slice, in manifest order; the per-partition objects are
 * deleted and the manifest rewritten to list the slices. Returns the merged keys.
 */
export async function mergeCommittedCheckpoint(
  s3: S3Client,
  bucket: string,
  pipeline: string,
  checkpointId: number,
): Promise<string[]> {
  const manifest = await new ManifestStore(s3, bucket, pipeline).read(checkpointId);
  if (!manifest) throw new Error(`no manifest ${checkpointId}`);
  const merged = new Map<string, { key: string; bodies: Buffer[]; at: number }>();
  const files: ManifestFile[] = [];
  for (const file of manifest.files) {
    if (file.key.endsWith('.parquet')) throw new Error('merged objects are NDJSON only');
    // One object a stream and lane (a layout whose merged keys name the lane needs that; one that does not takes it).
    const group = `${file.stream} ${file.topic}`;
    let target = merged.get(group);
    if (!target) {
      const gzip = file.key.endsWith('.gz');
      const name = { stream: file.stream, topic: file.topic, checkpointId, index: merged.size, gzip };
      target = { key: mergedKey(pipeline, name), bodies: [], at: 0 };
      merged.set(group, target);
    }
    const body = await getBytes(s3, bucket, file.key);
    if (!body) throw new Error(`${file.key} is missing`);
    files.push({ ...file, key: target.key, sliceStart: target.at });
    target.bodies.push(body);
    target.at += body.length;
    await s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: file.key }));
  }
  for (const { key, bodies } of merged.values()) await putObject(s3, bucket, key, Buffer.concat(bodies));
  await putObject(s3, bucket, manifestKey(pipeline, checkpointId), encodeManifest({ ...manifest, files }));
  return [...merged.values()].map(({ key }) => key);
}
