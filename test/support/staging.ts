/**
 * Test helpers of the coordinator's tests: stage files directly as the processor does (object first, then the
 * fence move and the staged-file entry, shapes exactly as `shared/ledger/records.ts`), and build coordinator
 * settings. Used where the real processor would be too slow (thousands of files) or too careful (corruption).
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { BatchWriteCommand, DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { expect } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { mapLimit } from '../../shared/concurrency.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { keys, type Stream } from '../../shared/ledger/layout.ts';
import type { FenceItem, StagedFileEntry } from '../../shared/ledger/records.ts';
import { finalPrefix, manifestsPrefix, stagedObjectKey } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import { readCommitted, readManifests } from '../../shared/sink/reader.ts';

export interface FileSpec {
  readonly topic?: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly stream?: Stream;
  /** Rows; default one `{source, n}` row per offset. */
  readonly rows?: readonly Record<string, unknown>[];
}

export function defaultRows(spec: FileSpec): Record<string, unknown>[] {
  const topic = spec.topic ?? 'orders';
  return Array.from({ length: spec.lastOffset - spec.firstOffset + 1 }, (_, i) => ({
    source: { topic, partition: spec.partition, offset: spec.firstOffset + i },
    n: spec.firstOffset + i,
  }));
}

/** Writes one spec's staged object, as the processor does, and returns the entry that names it. */
export async function putStagedObject(
  clients: AwsClients,
  settings: Settings,
  spec: FileSpec,
  attemptId: string,
): Promise<StagedFileEntry> {
  const encoded = encodeNdjson(spec.rows ?? defaultRows(spec), settings.gzip);
  const range = {
    stream: spec.stream ?? 'output',
    topic: spec.topic ?? 'orders',
    partition: spec.partition,
    firstOffset: spec.firstOffset,
    lastOffset: spec.lastOffset,
  };
  const key = stagedObjectKey(settings.pipelineId, range, attemptId, settings.gzip);
  await clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: encoded.body }));
  return {
    pipeline: settings.pipelineId,
    ...range,
    key,
    recordCount: encoded.recordCount,
    bytes: encoded.bytes,
    sha256: encoded.sha256,
    md5: encoded.md5,
    gzip: settings.gzip,
    attemptId,
    stagedAt: Date.now(),
  };
}

/**
 * Stages files and moves each touched partition's fence to the highest staged lastOffset. Writes the objects
 * (concurrently), then the entries in batches (fast: for thousands of files), then the fences.
 */
export async function stageFiles(
  clients: AwsClients,
  settings: Settings,
  specs: readonly FileSpec[],
  attemptId = 'a1',
): Promise<StagedFileEntry[]> {
  const doc = DynamoDBDocumentClient.from(clients.dynamodb);
  const entries = await mapLimit(specs, 16, (spec) => putStagedObject(clients, settings, spec, attemptId));
  for (let i = 0; i < entries.length; i += 25) {
    const batch = entries.slice(i, i + 25);
    await doc.send(
      new BatchWriteCommand({
        RequestItems: {
          [settings.ledgerTable]: batch.map((e) => ({
            PutRequest: {
              Item: { ...keys.staged(e.pipeline, e.topic, e.partition, e.lastOffset, e.stream), ...e },
            },
          })),
        },
      }),
    );
  }
  const fences = new Map<string, FenceItem>();
  for (const e of entries) {
    const id = `${e.topic}#${e.partition}`;
    const current = fences.get(id);
    if (!current || current.stagedOffset < e.lastOffset) {
      fences.set(id, {
        topic: e.topic,
        partition: e.partition,
        stagedOffset: e.lastOffset,
        updatedAt: Date.now(),
      });
    }
  }
  for (const fence of fences.values()) {
    await doc.send(
      new PutCommand({
        TableName: settings.ledgerTable,
        Item: { ...keys.fence(settings.pipelineId, fence.topic, fence.partition), ...fence },
        ConditionExpression: 'attribute_not_exists(stagedOffset) OR stagedOffset < :offset',
        ExpressionAttributeValues: { ':offset': fence.stagedOffset },
      }),
    );
  }
  return entries;
}

/** The committed output as read through the manifests: (partition id, offset) per row, in read order. */
/** The committed output offsets of an `orders` partition, in order. */
export async function committedOffsetsOf(
  clients: AwsClients,
  settings: Settings,
  partition: number,
): Promise<number[]> {
  return (await committedOffsets(clients, settings))
    .filter((row) => row.partition === `orders#${partition}`)
    .map((row) => row.offset)
    .sort((a, b) => a - b);
}

export async function committedOffsets(
  clients: AwsClients,
  settings: Settings,
  stream: Stream = 'output',
): Promise<Array<{ partition: string; offset: number; row: Record<string, unknown> }>> {
  const rows: Array<{ partition: string; offset: number; row: Record<string, unknown> }> = [];
  for await (const record of readCommitted({
    s3: clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream,
  })) {
    const source = record.row.source as { topic: string; partition: number; offset: number };
    rows.push({ partition: `${source.topic}#${source.partition}`, offset: source.offset, row: record.row });
  }
  return rows;
}

/**
 * The end-to-end property (docs/architecture.md) for the sink: the committed output holds exactly `expected` offsets per
 * partition, each once, in offset order; every object under the final prefix is listed by a manifest.
 */
export async function expectExactlyOnce(
  clients: AwsClients,
  settings: Settings,
  expected: Record<string, readonly number[]>,
  stream: Stream = 'output',
): Promise<void> {
  const rows = await committedOffsets(clients, settings, stream);
  const byPartition: Record<string, number[]> = {};
  for (const row of rows) {
    byPartition[row.partition] ??= [];
    byPartition[row.partition]!.push(row.offset);
  }
  const want = Object.fromEntries(
    Object.entries(expected)
      .filter(([, offsets]) => offsets.length > 0)
      .map(([p, offsets]) => [p, [...offsets].sort((a, b) => a - b)]),
  );
  expect(byPartition).toEqual(want);
  const listed = new Set<string>();
  for await (const manifest of readManifests({
    s3: clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    for (const file of manifest.files) listed.add(file.key);
  }
  const unlisted: string[] = [];
  for await (const object of listObjects(clients.s3, settings.bucket, finalPrefix(settings.pipelineId))) {
    if (!object.key.startsWith(manifestsPrefix(settings.pipelineId)) && !listed.has(object.key))
      unlisted.push(object.key);
  }
  expect(unlisted).toEqual([]);
}

/** Offsets [from, from + count) — what `orderRecords(partition, from, count)` produces. */
export function range(from: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => from + i);
}

/**
 * The offsets the manifests' output entries cover, per lane (`orders#0`, `orders~1#0`, … see
 * shared/ledger/epochs.ts), sorted: an entry's range covers every offset of its chunk, rows or not.
 */
export async function committedRangesByLane(
  clients: AwsClients,
  settings: Settings,
): Promise<Record<string, number[]>> {
  const byLane: Record<string, number[]> = {};
  for await (const manifest of readManifests({
    s3: clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    for (const file of manifest.files) {
      if (file.stream !== 'output') continue;
      const lane = `${file.topic}#${file.partition}`;
      byLane[lane] ??= [];
      for (let offset = file.firstOffset; offset <= file.lastOffset; offset++) byLane[lane]!.push(offset);
    }
  }
  for (const offsets of Object.values(byLane)) offsets.sort((a, b) => a - b);
  return byLane;
}
