/**
 * The coordinator's working objects are stored gzipped: a plan's digest and content-addressed key stay those of its
 * JSON, so the vote, the key and the check on read are unchanged, and a plan or promotion record stored as plain
 * JSON (written before they were compressed) still reads. Against the local S3 server.
 */

import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  encodePlan,
  MAX_WORK_OBJECT_BYTES,
  PlanDigestMismatchError,
  PlanStore,
  PromotionRecordError,
  planDigest,
  type ShardPlan,
  type ShardPromotion,
  sha256Hex,
  workObjectJson,
} from '../../shared/coordinator/promote/plan-store.ts';
import { planKey, promotedKey } from '../../shared/coordinator/work-objects.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('plan-store');
});

const member = (n: number) => ({
  key: `p/_inprogress/orders/0/${String(n).padStart(20, '0')}-a.ndjson.gz`,
  firstOffset: n * 10,
  lastOffset: n * 10 + 9,
  recordCount: 10,
  bytes: 180,
  sha256: sha256Hex(Buffer.from(`member ${n}`)),
});

function planOf(checkpointId: number, members: number): ShardPlan {
  const list = Array.from({ length: members }, (_, n) => member(n));
  return {
    checkpointId,
    attempt: 1,
    shard: 0,
    stagedFiles: members,
    objects: [
      {
        stream: 'output',
        topic: 'orders',
        partition: 0,
        firstOffset: 0,
        lastOffset: members * 10 - 1,
        finalKey: `p/final/orders/0/${checkpointId}.ndjson.gz`,
        gzip: true,
        recordCount: members * 10,
        members: list,
      },
    ],
  };
}

const promotionOf = (checkpointId: number): ShardPromotion => ({
  checkpointId,
  attempt: 1,
  shard: 0,
  files: [
    {
      stream: 'output',
      topic: 'orders',
      partition: 0,
      firstOffset: 0,
      lastOffset: 9,
      key: `p/final/orders/0/${checkpointId}.ndjson.gz`,
      recordCount: 10,
      bytes: 180,
      sha256: sha256Hex(Buffer.from('final')),
    },
  ],
});

function storeFor(pipeline: string): PlanStore {
  return new PlanStore(res.clients.s3, res.bucket, pipeline);
}

async function put(key: string, body: Buffer): Promise<void> {
  await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: body }));
}

describe('plans', () => {
  it('are stored gzipped under the key of their JSON digest, at a fraction of the JSON, and read back whole', async () => {
    const pipeline = uniqueName('plans');
    const plans = storeFor(pipeline);
    const plan = planOf(1, 200);
    const digest = await plans.writePlan(plan);
    expect(digest).toBe(planDigest(plan));
    const stored = await getBytes(res.clients.s3, res.bucket, planKey(pipeline, 1, 1, 0, digest));
    expect(stored?.subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    expect(stored!.length).toBeLessThan(encodePlan(plan).length / 2);
    expect(await plans.readPlan(1, 1, 0, digest)).toEqual(plan);
    // A second write of the same plan (a retried prepare) finds its own bytes and votes the same digest.
    expect(await plans.writePlan(plan)).toBe(digest);
  });

  it('written as plain JSON (before they were compressed) still read, and still vote', async () => {
    const pipeline = uniqueName('plans');
    const plans = storeFor(pipeline);
    const plan = planOf(2, 3);
    const digest = planDigest(plan);
    await put(planKey(pipeline, 2, 1, 0, digest), encodePlan(plan));
    expect(await plans.readPlan(2, 1, 0, digest)).toEqual(plan);
    expect(await plans.writePlan(plan)).toBe(digest);
  });

  it('whose stored bytes inflate to other JSON, or do not inflate, are refused by the digest', async () => {
    const pipeline = uniqueName('plans');
    const plans = storeFor(pipeline);
    const plan = planOf(3, 3);
    const digest = planDigest(plan);
    const key = planKey(pipeline, 3, 1, 0, digest);
    await put(key, gzipSync(encodePlan({ ...plan, stagedFiles: 4 })));
    await expect(plans.readPlan(3, 1, 0, digest)).rejects.toThrow(PlanDigestMismatchError);
    await expect(plans.writePlan(plan)).rejects.toThrow(PlanDigestMismatchError);
    await put(key, Buffer.concat([gzipSync(encodePlan(plan)).subarray(0, 30)]));
    await expect(plans.readPlan(3, 1, 0, digest)).rejects.toThrow(/does not inflate/);
  });
});

describe('promotion records', () => {
  it('are stored gzipped and read back; plain JSON still reads; bytes that do not inflate are malformed', async () => {
    const pipeline = uniqueName('promotions');
    const plans = storeFor(pipeline);
    await plans.writePromotion(promotionOf(1));
    const key = promotedKey(pipeline, 1, 1, 0);
    expect((await getBytes(res.clients.s3, res.bucket, key))?.subarray(0, 2)).toEqual(
      Buffer.from([0x1f, 0x8b]),
    );
    expect(await plans.readPromotion(1, 1, 0)).toEqual(promotionOf(1));
    await put(promotedKey(pipeline, 2, 1, 0), Buffer.from(JSON.stringify(promotionOf(2))));
    expect(await plans.readPromotion(2, 1, 0)).toEqual(promotionOf(2));
    await put(promotedKey(pipeline, 3, 1, 0), Buffer.from([0x1f, 0x8b, 0, 1, 2]));
    await expect(plans.readPromotion(3, 1, 0)).rejects.toThrow(PromotionRecordError);
  });
});

describe('inflating a working object', () => {
  it('stops at the bound rather than inflating a bomb', () => {
    // Concatenated gzip members are one stream: a MiB of zeros, repeated past the bound.
    const mebibyte = gzipSync(Buffer.alloc(1024 * 1024));
    const bomb = Buffer.concat(
      Array.from({ length: MAX_WORK_OBJECT_BYTES / (1024 * 1024) + 1 }, () => mebibyte),
    );
    expect(bomb.length).toBeLessThan(1024 * 1024);
    expect(workObjectJson(bomb)).toBeUndefined();
    const plain = Buffer.from('{"a":1}');
    expect(workObjectJson(plain)).toBe(plain);
  });
});
