import { createHash } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.ts';
import type { Stream } from '../../shared/ledger/layout.ts';
import { finalObjectKey, finalPrefix, manifestKey } from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { formatVerifyResult, type ProblemKind, readFinalRows, verifySink } from '../../shared/sink/verify.ts';
import { freshResources, uniqueName } from '../support/aws.ts';

let clients: AwsClients;
let bucket: string;

beforeAll(async () => {
  ({ clients, bucket } = await freshResources('verify'));
});

const put = (key: string, body: Buffer | string) =>
  clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));

/** Writes one final object and returns its manifest entry. */
async function finalFile(
  pipeline: string,
  stream: Stream,
  partition: number,
  offsets: number[],
  range?: [number, number],
  lane = 'orders',
) {
  const [firstOffset, lastOffset] = range ?? [offsets[0]!, offsets[offsets.length - 1]!];
  const rows = offsets.map((offset) => ({
    source: { topic: 'orders', partition, offset },
    orderId: `o${offset}`,
  }));
  const body = gzipSync(Buffer.from(rows.map((r) => `${JSON.stringify(r)}\n`).join('')));
  const key = finalObjectKey(pipeline, { stream, topic: lane, partition, firstOffset, lastOffset }, true);
  await put(key, body);
  const file: ManifestFile = {
    key,
    stream,
    topic: lane,
    partition,
    firstOffset,
    lastOffset,
    recordCount: rows.length,
    bytes: body.length,
    sha256: createHash('sha256').update(body).digest('hex'),
  };
  return file;
}

async function writeManifest(
  pipeline: string,
  id: number,
  files: ManifestFile[],
  cut: Record<string, number>,
  previousCut: Record<string, number>,
  previous = id - 1,
) {
  const manifest: Manifest = {
    version: 1,
    pipeline,
    checkpointId: id,
    previousCheckpointId: previous,
    cut,
    previousCut,
    committedAt: '2026-11-29T10:00:00.000Z',
    files,
  };
  await put(manifestKey(pipeline, id), JSON.stringify(manifest));
}

/** Two checkpoints over two partitions, output and dead-letter streams. */
async function healthyPipeline() {
  const pipeline = uniqueName('pl');
  const f1 = await finalFile(pipeline, 'output', 0, [0, 1, 3]);
  const f2 = await finalFile(pipeline, 'deadletter', 0, [2], [0, 3]);
  const f3 = await finalFile(pipeline, 'output', 1, [0, 1]);
  await writeManifest(pipeline, 1, [f2, f1, f3], { 'orders#0': 3, 'orders#1': 1 }, {});
  const f4 = await finalFile(pipeline, 'output', 0, [4, 5]);
  await writeManifest(pipeline, 2, [f4], { 'orders#0': 5, 'orders#1': 1 }, { 'orders#0': 3, 'orders#1': 1 });
  return { pipeline, prefix: finalPrefix(pipeline), files: [f1, f2, f3, f4] };
}

const kinds = (problems: readonly { kind: ProblemKind }[]) =>
  [...new Set(problems.map((p) => p.kind))].sort();

describe('eos verify', () => {
  it('passes a healthy layout and counts what it read', async () => {
    const { prefix } = await healthyPipeline();
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(result.problems).toEqual([]);
    expect(result).toMatchObject({
      ok: true,
      manifests: 2,
      files: 4,
      rows: { output: 7, deadletter: 1 },
      unlistedObjects: 0,
    });
    expect(formatVerifyResult(result)).toMatch(
      /^OK: 2 manifests, 4 final objects, 7 output rows, 1 dead-letter rows/,
    );
    const rows = await readFinalRows({ s3: clients.s3, bucket, prefix: prefix.slice(0, -1) });
    expect(rows).toHaveLength(8);
  });

  it('fails an empty prefix, so that a mistyped prefix never passes', async () => {
    const result = await verifySink({ s3: clients.s3, bucket, prefix: finalPrefix(uniqueName('empty')) });
    expect(result.ok).toBe(false);
    expect(kinds(result.problems)).toEqual(['no-manifests']);
  });

  it('finds a gap in the manifest log and a broken chain', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    await clients.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: manifestKey(pipeline, 1) }));
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(result.ok).toBe(false);
    // Manifest 2 now starts where nothing ended: the skipped offsets show as a cut mismatch too.
    expect(kinds(result.problems)).toEqual([
      'cut-mismatch',
      'manifest-chain',
      'manifest-gap',
      'unlisted-object',
    ]);
    expect(formatVerifyResult(result)).toMatch(/FAILED: .*\n {2}- \[manifest-gap\] manifest 1 is missing/);
  });

  it('finds a cut that drops a partition (its later offsets would be skipped silently)', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    await writeManifest(pipeline, 3, [], { 'orders#0': 5 }, { 'orders#0': 5, 'orders#1': 1 });
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['cut-mismatch']);
    expect(formatVerifyResult(result)).toMatch(/manifest 3 drops orders#1 from its cut/);
  });

  it('finds an object listed twice and a lineage committed twice', async () => {
    const { pipeline, prefix, files } = await healthyPipeline();
    await writeManifest(
      pipeline,
      3,
      [files[0]!],
      { 'orders#0': 5, 'orders#1': 1 },
      { 'orders#0': 5, 'orders#1': 1 },
    );
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toContain('listed-twice');
    expect(kinds(result.problems)).toContain('lineage-twice');
  });

  it('finds the same record in two different files (a duplicate that slipped through)', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    const again = await finalFile(pipeline, 'output', 1, [1, 2], [1, 2]);
    await writeManifest(
      pipeline,
      3,
      [again],
      { 'orders#0': 5, 'orders#1': 2 },
      { 'orders#0': 5, 'orders#1': 1 },
    );
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['lineage-twice', 'offset-order', 'outside-range']);
  });

  it('checks lanes: an epoch and a redrive round pass; a record output by two redrive rounds is found', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    // Epoch 1 reuses offsets 0..1; redrive round 1 outputs the dead letter at offset 2 of partition 0.
    const epoch = await finalFile(pipeline, 'output', 0, [0, 1], undefined, 'orders~1');
    const redriven = await finalFile(pipeline, 'output', 0, [2], undefined, 'orders~r1');
    const cut2 = { 'orders#0': 5, 'orders#1': 1 };
    await writeManifest(pipeline, 3, [epoch, redriven], { ...cut2, 'orders~1#0': 1, 'orders~r1#0': 2 }, cut2);
    const healthy = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(healthy.problems).toEqual([]);
    const twice = await finalFile(pipeline, 'output', 0, [2], undefined, 'orders~r2');
    const cut3 = { ...cut2, 'orders~1#0': 1, 'orders~r1#0': 2 };
    await writeManifest(pipeline, 4, [twice], { ...cut3, 'orders~r2#0': 2 }, cut3);
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(result.problems.map((p) => p.message)).toEqual([
      `orders#0#2 is output in orders~r1 (${redriven.key}) too`,
    ]);
  });

  it('finds a file whose range starts at or below its partition previous cut, even when its rows are new', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    // Rows 6..7 are new, but the file claims 0..7: its range overlaps offsets manifest 1 and 2 already list.
    const overlapping = await finalFile(pipeline, 'output', 0, [6, 7], [0, 7]);
    await writeManifest(
      pipeline,
      3,
      [overlapping],
      { 'orders#0': 7, 'orders#1': 1 },
      { 'orders#0': 5, 'orders#1': 1 },
    );
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['outside-range']);
    expect(formatVerifyResult(result)).toMatch(/offsets 0-7 lie outside checkpoint 3's cut \(5, 7\]/);
  });

  it('finds offsets out of commit order and files outside their checkpoint cut', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    const late = await finalFile(pipeline, 'output', 1, [7, 6], [6, 7]);
    await writeManifest(
      pipeline,
      3,
      [late],
      { 'orders#0': 5, 'orders#1': 6 },
      { 'orders#0': 5, 'orders#1': 1 },
    );
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['offset-order', 'outside-range']);
  });

  it('finds unlisted, missing and altered objects', async () => {
    const { prefix, files } = await healthyPipeline();
    await put(
      `${prefix}output/topic=orders/partition=0/stray.ndjson`,
      '{"source":{"topic":"orders","partition":0,"offset":9}}\n',
    );
    await clients.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: files[2]!.key }));
    await put(files[3]!.key, gzipSync('{"source":{"topic":"orders","partition":0,"offset":4}}\n'));
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['missing-object', 'object-mismatch', 'unlisted-object']);
    expect(result.problems.find((p) => p.kind === 'unlisted-object')?.key).toMatch(/stray\.ndjson$/);
    expect(result.unlistedObjects).toBe(1);
  });

  it('reports a manifest that is not JSON, and a cut that does not continue the previous one', async () => {
    const { pipeline, prefix } = await healthyPipeline();
    await writeManifest(pipeline, 3, [], { 'orders#0': 4, 'orders#1': 1 }, { 'orders#0': 2, 'orders#1': 1 });
    await put(manifestKey(pipeline, 4), '{not json');
    const result = await verifySink({ s3: clients.s3, bucket, prefix });
    expect(kinds(result.problems)).toEqual(['cut-mismatch', 'manifest-unreadable']);
  });
});
