/**
 * The local S3 server honours `x-amz-copy-source-if-match` on CopyObject as S3 does: the copy happens only if the
 * SOURCE's ETag is the one named (412 PreconditionFailed otherwise, 404 NoSuchKey without a source), and the bytes
 * copied are the bytes of that ETag even when the source is rewritten while the copy runs. Promote relies on it:
 * it copies prepare's candidate to the final key pinned to the ETag prepare's write returned, so what prepare
 * verified is what is published.
 */
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { freshResources, type TestResources } from '../support/aws.ts';

let res: TestResources;
let s3: S3Client;
let next = 0;
const freshKey = (what: string) => `copy-source/${what}-${next++}`;

beforeAll(async () => {
  res = await freshResources('copysrc');
  s3 = res.clients.s3;
});

async function put(key: string, body: string): Promise<string> {
  return (await s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: body }))).ETag!;
}

async function read(key: string): Promise<string | undefined> {
  try {
    const got = await s3.send(new GetObjectCommand({ Bucket: res.bucket, Key: key }));
    return await got.Body!.transformToString();
  } catch (error) {
    if ((error as { name?: string }).name === 'NoSuchKey') return undefined;
    throw error;
  }
}

async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (error) {
    const e = error as { name?: string; $metadata?: { httpStatusCode?: number } };
    return `${e.$metadata?.httpStatusCode} ${e.name}`;
  }
}

function copy(
  source: string,
  target: string,
  conditions: { CopySourceIfMatch?: string; IfNoneMatch?: string },
) {
  return s3.send(
    new CopyObjectCommand({
      Bucket: res.bucket,
      Key: target,
      CopySource: `${res.bucket}/${source}`,
      ...conditions,
    }),
  );
}

describe('CopyObject with x-amz-copy-source-if-match (a condition on the source)', () => {
  it('copies when the source has the ETag named; 412 on another ETag and 404 without a source, writing nothing', async () => {
    const source = freshKey('src');
    const target = freshKey('dst');
    const etag = await put(source, 'first bytes');
    const other = await put(freshKey('other'), 'other bytes');
    expect(await outcome(copy(source, target, { CopySourceIfMatch: other }))).toBe('412 PreconditionFailed');
    expect(await read(target)).toBeUndefined();
    expect(await outcome(copy(source, target, { CopySourceIfMatch: etag }))).toBe('ok');
    expect(await read(target)).toBe('first bytes');
    // The source rewritten: the ETag named is gone, so a second copy (elsewhere) is refused.
    await put(source, 'second bytes');
    const again = freshKey('dst');
    expect(await outcome(copy(source, again, { CopySourceIfMatch: etag }))).toBe('412 PreconditionFailed');
    expect(await read(again)).toBeUndefined();
    await s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: source }));
    expect(await outcome(copy(source, again, { CopySourceIfMatch: etag }))).toBe('404 NoSuchKey');
    expect(await read(again)).toBeUndefined();
  });

  it('accepts the ETag quoted or not, and combines with If-None-Match: * on the destination', async () => {
    const source = freshKey('src');
    const target = freshKey('dst');
    const etag = await put(source, 'candidate bytes');
    expect(etag.startsWith('"')).toBe(true);
    expect(
      await outcome(copy(source, target, { CopySourceIfMatch: etag.replaceAll('"', ''), IfNoneMatch: '*' })),
    ).toBe('ok');
    expect(await read(target)).toBe('candidate bytes');
    await put(source, 'candidate bytes');
    // The source still matches, the destination exists: refused, the destination unchanged.
    expect(await outcome(copy(source, target, { CopySourceIfMatch: etag, IfNoneMatch: '*' }))).toBe(
      '412 PreconditionFailed',
    );
    expect(await read(target)).toBe('candidate bytes');
  });

  it('a copy that passed its condition copies the bytes of that ETag, whatever rewrites of the source race it', async () => {
    const source = freshKey('race-src');
    const original = 'a'.repeat(4 * 1024 * 1024);
    const etag = await put(source, original);
    const targets = Array.from({ length: 16 }, () => freshKey('race-dst'));
    const rewrites = Array.from({ length: 16 }, (_, i) =>
      put(source, String.fromCharCode(98 + (i % 20)).repeat(original.length)),
    );
    const copies = targets.map((target) =>
      outcome(copy(source, target, { CopySourceIfMatch: etag, IfNoneMatch: '*' })),
    );
    const outcomes = await Promise.all(copies);
    await Promise.all(rewrites);
    for (const [i, target] of targets.entries()) {
      const body = await read(target);
      if (outcomes[i] === 'ok')
        expect(body === original, `${target} holds bytes other than the ETag's`).toBe(true);
      else {
        expect(outcomes[i]).toBe('412 PreconditionFailed');
        expect(body).toBeUndefined();
      }
    }
    // The first copy starts before any rewrite is through: at least one copy ran against the pinned bytes.
    expect(outcomes.filter((o) => o === 'ok').length).toBeGreaterThan(0);
  });
});
