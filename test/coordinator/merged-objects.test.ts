/**
 * Merged final objects (C5, `shared/coordinator/promote/merged-plan.ts`): where nothing is re-encoded, a shard's
 * partitions share a few final objects of one stream and lane, each listed by the manifest as slices (one per
 * partition range, with its own bytes, SHA-256 and rows). Against DynamoDB Local and s3rver, through the
 * coordinator's steps; the plan checks promote applies are also tested on forged plans, without AWS.
 */
import { gunzipSync } from 'node:zlib';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { PlannedObject, PromotionLimits } from '../../shared/coordinator/promote/final-plan.ts';
import { assertMergedSlices, mergedGroups } from '../../shared/coordinator/promote/merged-plan.ts';
import { PlanRejectedError } from '../../shared/coordinator/promote/object-bytes.ts';
import {
  finalObjectKey,
  finalPrefix,
  manifestKey,
  mergedObjectKey,
  parseMergedObjectKey,
} from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish } from '../support/checkpoint-steps.ts';
import { expectExactlyOnce, type FileSpec, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('merged');
});

function setup(options: { finalObjects?: 'merged' | 'partition'; limits?: Partial<PromotionLimits> } = {}) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('merged'),
    ...(options.finalObjects ? { finalObjects: options.finalObjects } : {}),
  });
  const core = createCoordinator({
    settings,
    clients: res.clients,
    ...(options.limits ? { promotionLimits: options.limits } : {}),
  });
  return { settings, core };
}

async function runCheckpoint(s: ReturnType<typeof setup>) {
  const begun = await s.core.begin({ execution: 'e1' });
  const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await s.core.prepare({ ...ref, shard });
  await finish(s.core, ref, begun.shards);
  return { ref, shards: begun.shards };
}

async function finalKeys(settings: Settings): Promise<string[]> {
  const keys: string[] = [];
  for await (const o of listObjects(res.clients.s3, settings.bucket, finalPrefix(settings.pipelineId)))
    keys.push(o.key);
  return keys.sort();
}

async function manifestOf(settings: Settings, id: number): Promise<Manifest> {
  const bytes = await getBytes(res.clients.s3, settings.bucket, manifestKey(settings.pipelineId, id));
  return JSON.parse(bytes!.toString('utf8')) as Manifest;
}

/** Bytes [start, start + length) of an object, by one ranged GET as a reader would take them. */
async function ranged(settings: Settings, key: string, start: number, length: number): Promise<Buffer> {
  const out = await res.clients.s3.send(
    new GetObjectCommand({
      Bucket: settings.bucket,
      Key: key,
      Range: `bytes=${start}-${start + length - 1}`,
    }),
  );
  return Buffer.from(await out.Body!.transformToByteArray());
}

const sha256 = async (bytes: Buffer) =>
  (await import('node:crypto')).createHash('sha256').update(bytes).digest('hex');

describe('merged final objects', () => {
  it("a shard's partitions share one object a stream: the manifest lists each range as a slice, which alone holds its range's rows", async () => {
    const s = setup();
    const specs: FileSpec[] = [];
    for (let partition = 0; partition < 6; partition++) {
      specs.push({ partition, firstOffset: 0, lastOffset: 4 }, { partition, firstOffset: 5, lastOffset: 9 });
    }
    specs.push({
      partition: 1,
      firstOffset: 0,
      lastOffset: 9,
      stream: 'deadletter',
      rows: [{ source: { topic: 'orders', partition: 1, offset: 3 }, error: 'bad' }],
    });
    await stageFiles(res.clients, s.settings, specs);
    const { shards } = await runCheckpoint(s);
    expect(shards).toEqual([0]);
    const place = { topic: 'orders', checkpointId: 1, attempt: 1, shard: 0, index: 0, gzip: true };
    const pl = s.settings.pipelineId;
    expect(await finalKeys(s.settings)).toEqual(
      [
        mergedObjectKey(pl, { ...place, stream: 'deadletter' }),
        mergedObjectKey(pl, { ...place, stream: 'output' }),
      ].sort(),
    );
    const manifest = await manifestOf(s.settings, 1);
    const output = manifest.files.filter((f) => f.stream === 'output');
    expect(output.map((f) => [f.partition, f.firstOffset, f.lastOffset, f.recordCount])).toEqual(
      range(0, 6).map((p) => [p, 0, 9, 10]),
    );
    // The slices tile the object in manifest order, and each is a whole gzip stream of its partition's rows.
    let start = 0;
    for (const file of output) {
      expect(file.sliceStart).toBe(start);
      const bytes = await ranged(s.settings, file.key, file.sliceStart!, file.bytes);
      expect(await sha256(bytes)).toBe(file.sha256);
      const rows = gunzipSync(bytes)
        .toString('utf8')
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as { source: { partition: number; offset: number } });
      expect(rows.map((r) => [r.source.partition, r.source.offset])).toEqual(
        range(0, 10).map((o) => [file.partition, o]),
      );
      start += file.bytes;
    }
    const whole = await getBytes(res.clients.s3, s.settings.bucket, output[0]!.key);
    expect(whole!.length).toBe(start);
    const deadletter = manifest.files.filter((f) => f.stream === 'deadletter');
    expect(deadletter.map((f) => [f.partition, f.recordCount, f.sliceStart])).toEqual([[1, 1, 0]]);
    await expectExactlyOnce(
      res.clients,
      s.settings,
      Object.fromEntries(range(0, 6).map((p) => [`orders#${p}`, range(0, 10)])),
    );
  });

  it('the promotion limits cut merged objects, each partition object whole, packed in manifest order', async () => {
    const s = setup({ limits: { maxMembers: 4 } });
    const specs: FileSpec[] = [];
    for (let partition = 0; partition < 5; partition++) {
      for (let file = 0; file < 2; file++)
        specs.push({ partition, firstOffset: file * 5, lastOffset: file * 5 + 4 });
    }
    await stageFiles(res.clients, s.settings, specs);
    await runCheckpoint(s);
    const manifest = await manifestOf(s.settings, 1);
    // Two files a partition, four members an object: partitions 0+1, 2+3, then 4 alone.
    const byKey = new Map<string, number[]>();
    for (const f of manifest.files) byKey.set(f.key, [...(byKey.get(f.key) ?? []), f.partition]);
    expect([...byKey.values()]).toEqual([[0, 1], [2, 3], [4]]);
    expect([...byKey.keys()].map((k) => parseMergedObjectKey(s.settings.pipelineId, k)?.index)).toEqual([
      0, 1, 2,
    ]);
    await expectExactlyOnce(
      res.clients,
      s.settings,
      Object.fromEntries(range(0, 5).map((p) => [`orders#${p}`, range(0, 10)])),
    );
  });

  it('lanes never share a merged object: each key names its lane, where the replay view reads it', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { topic: 'orders~g1', partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    await runCheckpoint(s);
    const keys = await finalKeys(s.settings);
    expect(keys.map((k) => parseMergedObjectKey(s.settings.pipelineId, k)?.topic)).toEqual([
      'orders',
      'orders~g1',
    ]);
    expect(keys.every((k) => /\/topic=orders(~g1)?\/checkpoint=000000000001\//.test(k))).toBe(true);
  });

  it('finalObjects partition keeps one object a partition at its range key, no slices', async () => {
    const s = setup({ finalObjects: 'partition' });
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    await runCheckpoint(s);
    const pl = s.settings.pipelineId;
    const range0 = { stream: 'output' as const, topic: 'orders', firstOffset: 0, lastOffset: 4 };
    expect(await finalKeys(s.settings)).toEqual([
      finalObjectKey(pl, { ...range0, partition: 0 }, true),
      finalObjectKey(pl, { ...range0, partition: 1 }, true),
    ]);
    const manifest = await manifestOf(s.settings, 1);
    expect(manifest.files.map((f) => f.sliceStart)).toEqual([undefined, undefined]);
  });
});

describe("promote's check of a plan's slices", () => {
  const pipeline = 'pl';
  const from = { checkpointId: 7, attempt: 2, shard: 1 };
  const name = { stream: 'output' as const, topic: 'orders', ...from, index: 0, gzip: true };
  const key = mergedObjectKey(pipeline, name);
  const candidate = { key: 'pl/_coordinator/c', sha256: 'a'.repeat(64), etag: '"e"', bytes: 30 };
  const slice = (partition: number, start: number, bytes: number): PlannedObject => ({
    stream: 'output',
    topic: 'orders',
    partition,
    firstOffset: 0,
    lastOffset: 4,
    finalKey: key,
    gzip: true,
    recordCount: 5,
    members: [],
    candidate,
    slice: { start, bytes, sha256: 'b'.repeat(64) },
  });
  const refused = (objects: PlannedObject[], detail: RegExp) => {
    expect(() => assertMergedSlices(pipeline, objects, from)).toThrow(PlanRejectedError);
    expect(() => assertMergedSlices(pipeline, objects, from)).toThrow(detail);
  };

  it('accepts slices that tile their candidate exactly, in any order', () => {
    expect(() => assertMergedSlices(pipeline, [slice(1, 10, 20), slice(0, 0, 10)], from)).not.toThrow();
  });

  it('refuses a gap, an overlap, bytes past the last slice, and slices naming different candidates', () => {
    refused([slice(0, 0, 10), slice(1, 11, 19)], /gap or overlap at byte 10/);
    refused([slice(0, 0, 10), slice(1, 9, 21)], /gap or overlap at byte 10/);
    refused([slice(0, 0, 10), slice(1, 10, 10)], /cover 20 of its candidate's 30 bytes/);
    refused(
      [slice(0, 0, 10), { ...slice(1, 10, 20), candidate: { ...candidate, etag: '"other"' } }],
      /different candidates/,
    );
  });

  it('refuses a key of another checkpoint, attempt, shard, lane or stream, and a slice with no candidate', () => {
    for (const other of [
      { ...name, checkpointId: 8 },
      { ...name, attempt: 1 },
      { ...name, shard: 0 },
      { ...name, topic: 'clicks' },
      { ...name, stream: 'deadletter' as const },
    ]) {
      refused([{ ...slice(0, 0, 30), finalKey: mergedObjectKey(pipeline, other) }], /not a merged key/);
    }
    const { candidate: _c, ...bare } = slice(0, 0, 30);
    refused([bare], /without its merged candidate/);
  });

  it('refuses one partition range named by slices of two merged objects (it would be committed twice)', () => {
    const second = mergedObjectKey(pipeline, { ...name, index: 1 });
    const other = { ...candidate, key: 'pl/_coordinator/d', sha256: 'c'.repeat(64) };
    const twice = { ...slice(0, 0, 30), finalKey: second, candidate: other };
    refused([slice(0, 0, 30), twice], /overlaps one of/);
    refused([slice(0, 0, 30), { ...twice, firstOffset: 4, lastOffset: 9 }], /overlaps one of/);
    expect(() =>
      assertMergedSlices(pipeline, [slice(0, 0, 30), { ...twice, firstOffset: 5, lastOffset: 9 }], from),
    ).not.toThrow();
  });

  it('refuses a merged key on an object that is no slice, and a re-encoded slice', () => {
    const { slice: _s, ...whole } = slice(0, 0, 30);
    refused([whole], /no slice/);
    refused([{ ...slice(0, 0, 30), format: 'parquet' }], /re-encoded/);
  });

  it('packs by stream, lane and gzip flag, and never splits a partition object', () => {
    const object = (topic: string, partition: number, bytes: number, stream = 'output' as const) => ({
      ...slice(partition, 0, bytes),
      topic,
      stream,
      members: [
        { key: `k${topic}${partition}`, firstOffset: 0, lastOffset: 4, recordCount: 5, bytes, sha256: '' },
      ],
    });
    const groups = mergedGroups(
      [object('orders', 1, 60), object('clicks', 0, 10), object('orders', 0, 50), object('orders', 2, 200)],
      { maxObjectBytes: 100, maxMembers: 10 },
    );
    expect(groups.map((g) => [g.topic, g.index, g.objects.map((o) => o.partition)])).toEqual([
      ['clicks', 0, [0]],
      ['orders', 0, [0]],
      ['orders', 1, [1]],
      ['orders', 2, [2]],
    ]);
  });
});

describe('merged object keys', () => {
  it('round-trip past their padding (index 10,000 and beyond, shards past 99, attempts in the millions): a vast backlog never makes a key promote refuses', () => {
    const name = {
      stream: 'output' as const,
      topic: 'orders~1',
      checkpointId: 42,
      attempt: 1_000_000,
      shard: 123,
      index: 10_000,
      gzip: true,
    };
    const key = mergedObjectKey('pl', name);
    expect(key).toBe('pl/final/output/topic=orders~1/checkpoint=000000000042/1000000-123-10000.ndjson.gz');
    expect(parseMergedObjectKey('pl', key)).toEqual(name);
    // Another spelling of the same name is no key of it.
    expect(parseMergedObjectKey('pl', key.replace('-10000.', '-010000.'))).toBeUndefined();
    expect(parseMergedObjectKey('pl', key.replace('-123-', '-0123-'))).toBeUndefined();
    expect(parseMergedObjectKey('other', key)).toBeUndefined();
  });
});
