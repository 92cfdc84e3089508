/**
 * The local S3 server answers conditional writes as S3 does, so the write-once guards of the sink and the
 * coordinator (`If-None-Match: *` on manifests, final objects, plans and copies) run on the server's own answer in
 * every test, not on an emulation in the client.
 *
 * S3's rules (user guide, "conditional writes"): `If-None-Match: *` fails with 412 PreconditionFailed when the key
 * exists; `If-Match: <etag>` fails with 412 when the key's ETag differs and with 404 NoSuchKey when there is no
 * object; both apply to PutObject, CopyObject (to the destination: the `x-amz-copy-source-if-*` headers are the
 * source's) and CompleteMultipartUpload. Of concurrent conditional writes of one key the first to finish wins.
 */
import { request } from 'node:http';
import {
  CompleteMultipartUploadCommand,
  CopyObjectCommand,
  CreateMultipartUploadCommand,
  GetObjectCommand,
  HeadObjectCommand,
  PutObjectCommand,
  type S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { freshResources, type TestResources } from '../support/aws.ts';

let res: TestResources;
let s3: S3Client;
let next = 0;
const freshKey = (what: string) => `cond/${what}-${next++}`;

beforeAll(async () => {
  res = await freshResources('cond');
  s3 = res.clients.s3;
});

async function put(key: string, body: string, conditions: { IfNoneMatch?: string; IfMatch?: string } = {}) {
  const out = await s3.send(
    new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: body, ...conditions }),
  );
  return out.ETag!;
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

/** The refusal's HTTP status and S3 error code, or 'ok' when the call succeeded. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'ok';
  } catch (error) {
    const e = error as { name?: string; $metadata?: { httpStatusCode?: number } };
    return `${e.$metadata?.httpStatusCode} ${e.name}`;
  }
}

function copy(source: string, key: string, conditions: { IfNoneMatch?: string; IfMatch?: string } = {}) {
  return s3.send(
    new CopyObjectCommand({
      Bucket: res.bucket,
      Key: key,
      CopySource: `${res.bucket}/${source}`,
      ...conditions,
    }),
  );
}

async function multipart(
  key: string,
  body: string,
  conditions: { IfNoneMatch?: string; IfMatch?: string } = {},
) {
  const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket: res.bucket, Key: key }));
  const part = await s3.send(
    new UploadPartCommand({ Bucket: res.bucket, Key: key, UploadId, PartNumber: 1, Body: body }),
  );
  return s3.send(
    new CompleteMultipartUploadCommand({
      Bucket: res.bucket,
      Key: key,
      UploadId,
      MultipartUpload: { Parts: [{ PartNumber: 1, ETag: part.ETag }] },
      ...conditions,
    }),
  );
}

describe('PutObject with a condition', () => {
  it('If-None-Match: * writes an absent key and answers 412 on an existing one, leaving it unchanged', async () => {
    const key = freshKey('put-none');
    expect(await outcome(put(key, 'first', { IfNoneMatch: '*' }))).toBe('ok');
    expect(await outcome(put(key, 'second', { IfNoneMatch: '*' }))).toBe('412 PreconditionFailed');
    expect(await read(key)).toBe('first');
  });

  it('If-Match writes over the ETag it names, answers 412 on another ETag and 404 NoSuchKey on no object', async () => {
    const key = freshKey('put-match');
    expect(await outcome(put(key, 'x', { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(
      '404 NoSuchKey',
    );
    expect(await read(key)).toBeUndefined();
    const etag = await put(key, 'first');
    expect(await outcome(put(key, 'second', { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(
      '412 PreconditionFailed',
    );
    expect(await read(key)).toBe('first');
    expect(await outcome(put(key, 'second', { IfMatch: etag }))).toBe('ok');
    expect(await read(key)).toBe('second');
    // The ETag it named is gone: a second writer holding it loses.
    expect(await outcome(put(key, 'third', { IfMatch: etag }))).toBe('412 PreconditionFailed');
    expect(await read(key)).toBe('second');
  });

  it('writes without a condition overwrite as before', async () => {
    const key = freshKey('put-plain');
    await put(key, 'first');
    await put(key, 'second');
    expect(await read(key)).toBe('second');
  });

  it('of concurrent If-None-Match: * writes of one key exactly one succeeds and its bytes stay', async () => {
    const key = freshKey('put-race');
    const bodies = Array.from({ length: 16 }, (_, i) => `writer ${i} `.repeat(20_000));
    const outcomes = await Promise.all(bodies.map((body) => outcome(put(key, body, { IfNoneMatch: '*' }))));
    const winners = outcomes.flatMap((o, i) => (o === 'ok' ? [i] : []));
    expect(winners).toHaveLength(1);
    expect(outcomes.filter((o) => o !== 'ok')).toEqual(Array(15).fill('412 PreconditionFailed'));
    expect(await read(key)).toBe(bodies[winners[0]!]);
  });

  it('an upload cut off mid-body leaves no object behind, so a later If-None-Match: * write succeeds', async () => {
    const key = freshKey('put-cut');
    const url = new URL(`${process.env.AWS_ENDPOINT_URL_S3}/${res.bucket}/${key}`);
    await new Promise<void>((done) => {
      const req = request(url, { method: 'PUT', headers: { 'content-length': '100000' } });
      req.on('error', () => done());
      req.write('x'.repeat(50_000), () => setTimeout(() => req.destroy(), 200));
    });
    // Give the server the moment it needs to see the connection gone.
    await new Promise((r) => setTimeout(r, 300));
    expect(await outcome(s3.send(new HeadObjectCommand({ Bucket: res.bucket, Key: key })))).toBe(
      '404 NotFound',
    );
    expect(await outcome(put(key, 'whole', { IfNoneMatch: '*' }))).toBe('ok');
    expect(await read(key)).toBe('whole');
  });
});

describe('CopyObject with a condition: it applies to the destination', () => {
  it('If-None-Match: * copies onto an absent key and answers 412 on an existing one, leaving it unchanged', async () => {
    const source = freshKey('copy-src');
    const target = freshKey('copy-dst');
    await put(source, 'source bytes');
    expect(await outcome(copy(source, target, { IfNoneMatch: '*' }))).toBe('ok');
    expect(await read(target)).toBe('source bytes');
    await put(source, 'other source bytes');
    expect(await outcome(copy(source, target, { IfNoneMatch: '*' }))).toBe('412 PreconditionFailed');
    expect(await read(target)).toBe('source bytes');
  });

  it('If-Match names the destination ETag: 412 on another, 404 NoSuchKey on no destination', async () => {
    const source = freshKey('copy-src');
    const target = freshKey('copy-dst');
    const sourceEtag = await put(source, 'source bytes');
    expect(await outcome(copy(source, target, { IfMatch: sourceEtag }))).toBe('404 NoSuchKey');
    const targetEtag = await put(target, 'target bytes');
    expect(await outcome(copy(source, target, { IfMatch: sourceEtag }))).toBe('412 PreconditionFailed');
    expect(await read(target)).toBe('target bytes');
    expect(await outcome(copy(source, target, { IfMatch: targetEtag }))).toBe('ok');
    expect(await read(target)).toBe('source bytes');
  });

  it('of concurrent If-None-Match: * copies onto one key exactly one succeeds and its bytes stay', async () => {
    const target = freshKey('copy-race');
    const sources = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        const source = freshKey(`copy-race-src-${i}`);
        await put(source, `source ${i} `.repeat(20_000));
        return source;
      }),
    );
    const outcomes = await Promise.all(
      sources.map((source) => outcome(copy(source, target, { IfNoneMatch: '*' }))),
    );
    const winners = outcomes.flatMap((o, i) => (o === 'ok' ? [i] : []));
    expect(winners).toHaveLength(1);
    expect(outcomes.filter((o) => o !== 'ok')).toEqual(Array(11).fill('412 PreconditionFailed'));
    expect(await read(target)).toBe(await read(sources[winners[0]!]!));
  });
});

describe('CompleteMultipartUpload with a condition', () => {
  it('If-None-Match: * completes onto an absent key and answers 412 on an existing one, leaving it unchanged', async () => {
    const key = freshKey('mpu-none');
    expect(await outcome(multipart(key, 'first', { IfNoneMatch: '*' }))).toBe('ok');
    expect(await read(key)).toBe('first');
    expect(await outcome(multipart(key, 'second', { IfNoneMatch: '*' }))).toBe('412 PreconditionFailed');
    expect(await read(key)).toBe('first');
  });

  it('If-Match: 412 on another ETag, 404 NoSuchKey on no object, written on its own ETag', async () => {
    const key = freshKey('mpu-match');
    expect(await outcome(multipart(key, 'x', { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(
      '404 NoSuchKey',
    );
    const etag = await put(key, 'first');
    expect(await outcome(multipart(key, 'x', { IfMatch: '"0123456789abcdef0123456789abcdef"' }))).toBe(
      '412 PreconditionFailed',
    );
    expect(await read(key)).toBe('first');
    expect(await outcome(multipart(key, 'second', { IfMatch: etag }))).toBe('ok');
    expect(await read(key)).toBe('second');
  });
});
