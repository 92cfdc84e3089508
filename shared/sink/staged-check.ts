/**
 * Prepare's check of one staged object (C3): it exists, has the recorded size, and has the recorded checksum.
 *
 * Which checksum: HeadObject first. When the ETag is a plain MD5 — 32 hex digits, no `-<parts>` suffix (not a
 * multipart upload) and the object is not encrypted with SSE-KMS/DSSE (whose ETags are not MD5s) — the ETag is
 * compared with the entry's `md5`: one cheap request, correct on real S3 (SSE-S3 or none) and on s3rver. Otherwise
 * the object is read and its SHA-256 compared with the entry's `sha256`. S3's additional checksums are not used:
 * s3rver does not support them. Prepare checks a partition's objects in bulk ({@link verifyStagedObjects}): one
 * listing page gives size and ETag for 1,000 objects, and any object the listing does not clear is checked alone
 * as above, so the verdict is the same as one HeadObject per object.
 */
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../errors.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import { getBytes, headObject, listObjects, mapLimit } from './objects.ts';

export const STAGED_DEFECTS = ['missing', 'size', 'checksum', 'encoding', 'count'] as const;
export type StagedDefect = (typeof STAGED_DEFECTS)[number];

/** A covered staged object failed verification: the checkpoint aborts and names it. */
export class StagedObjectInvalidError extends PipelineError {
  constructor(
    readonly bucket: string,
    readonly key: string,
    readonly defect: StagedDefect,
    detail: string,
  ) {
    super(`staged object s3://${bucket}/${key} is invalid (${defect}): ${detail}`);
  }
}

const PLAIN_MD5_ETAG = /^[0-9a-f]{32}$/;

export type VerifiedBy = 'etag-md5' | 'sha256';

/** Throws {@link StagedObjectInvalidError} naming the object; returns how it was verified. */
export async function verifyStagedObject(
  s3: S3Client,
  bucket: string,
  entry: StagedFileEntry,
): Promise<VerifiedBy> {
  const head = await headObject(s3, bucket, entry.key);
  if (!head) throw new StagedObjectInvalidError(bucket, entry.key, 'missing', 'the object does not exist');
  if (head.ContentLength !== entry.bytes) {
    throw new StagedObjectInvalidError(
      bucket,
      entry.key,
      'size',
      `recorded ${entry.bytes} bytes, found ${head.ContentLength}`,
    );
  }
  const etag = (head.ETag ?? '').replaceAll('"', '').toLowerCase();
  const kms = head.ServerSideEncryption === 'aws:kms' || head.ServerSideEncryption === 'aws:kms:dsse';
  if (PLAIN_MD5_ETAG.test(etag) && !kms) {
    if (etag !== entry.md5) {
      throw new StagedObjectInvalidError(
        bucket,
        entry.key,
        'checksum',
        `recorded MD5 ${entry.md5}, ETag ${etag}`,
      );
    }
    return 'etag-md5';
  }
  const body = await getBytes(s3, bucket, entry.key);
  if (!body)
    throw new StagedObjectInvalidError(
      bucket,
      entry.key,
      'missing',
      'the object disappeared while being read',
    );
  const sha256 = createHash('sha256').update(body).digest('hex');
  if (body.length !== entry.bytes || sha256 !== entry.sha256) {
    throw new StagedObjectInvalidError(
      bucket,
      entry.key,
      'checksum',
      `recorded SHA-256 ${entry.sha256}, found ${sha256}`,
    );
  }
  return 'sha256';
}

/**
 * Verifies many staged objects with one ListObjectsV2 page per 1,000 objects instead of one request each: the
 * listing gives size and ETag. An object whose listed ETag is not its recorded MD5 (or that the listing does not
 * show) is checked again on its own by {@link verifyStagedObject}, because a listing does not say whether an
 * object is SSE-KMS encrypted (ETag not an MD5) — so the result is the same as checking each object alone.
 */
export async function verifyStagedObjects(
  s3: S3Client,
  bucket: string,
  entries: readonly StagedFileEntry[],
  concurrency = 8,
): Promise<void> {
  const byDirectory = new Map<string, StagedFileEntry[]>();
  for (const entry of entries) {
    const directory = entry.key.slice(0, entry.key.lastIndexOf('/') + 1);
    byDirectory.set(directory, [...(byDirectory.get(directory) ?? []), entry]);
  }
  const suspects: StagedFileEntry[] = [];
  for (const [directory, group] of byDirectory) {
    const wanted = new Map(group.map((entry) => [entry.key, entry]));
    const first = [...wanted.keys()].sort()[0]!;
    for await (const listed of listObjects(
      s3,
      bucket,
      directory,
      Number.POSITIVE_INFINITY,
      keyBefore(first),
    )) {
      const entry = wanted.get(listed.key);
      if (!entry) continue;
      wanted.delete(listed.key);
      if (listed.size !== entry.bytes || listed.etag !== entry.md5) suspects.push(entry);
      if (wanted.size === 0) break;
    }
    suspects.push(...wanted.values());
  }
  await mapLimit(suspects, concurrency, (entry) => verifyStagedObject(s3, bucket, entry));
}

/** A key that sorts just before `key`, for ListObjectsV2's StartAfter. */
function keyBefore(key: string): string {
  return key.slice(0, -1);
}

/**
 * Prepare's full check of the covered staged objects (C3, review R2): each object is read and must have the
 * recorded size and SHA-256 (the checksum promote checks, so a yes vote never leads to a promote that cannot
 * finish), decode as NDJSON (gzip per the entry, every gzip byte consumed: trailing bytes would be ignored alone
 * but would swallow the next member once promote concatenates them), end with a newline (concatenation must not
 * join two lines) and hold exactly `recordCount` rows (the count the plan and then the manifest carry, which the
 * committed reader checks). Any failure throws {@link StagedObjectInvalidError} naming the object, before the
 * vote: the attempt aborts with the reason instead of publishing a manifest the reader refuses forever (C7).
 * At most `concurrency` objects are in memory at once.
 */
export async function verifyStagedContents(
  s3: S3Client,
  bucket: string,
  entries: readonly StagedFileEntry[],
  concurrency = 8,
): Promise<void> {
  await mapLimit(entries, concurrency, async (entry) => {
    const body = await getBytes(s3, bucket, entry.key);
    if (!body) throw new StagedObjectInvalidError(bucket, entry.key, 'missing', 'the object does not exist');
    if (body.length !== entry.bytes) {
      throw new StagedObjectInvalidError(
        bucket,
        entry.key,
        'size',
        `recorded ${entry.bytes} bytes, found ${body.length}`,
      );
    }
    const sha256 = createHash('sha256').update(body).digest('hex');
    if (sha256 !== entry.sha256) {
      throw new StagedObjectInvalidError(
        bucket,
        entry.key,
        'checksum',
        `recorded SHA-256 ${entry.sha256}, found ${sha256}`,
      );
    }
    const rows = countNdjsonRows(body, entry.gzip);
    if (typeof rows === 'string') throw new StagedObjectInvalidError(bucket, entry.key, 'encoding', rows);
    if (rows !== entry.recordCount) {
      throw new StagedObjectInvalidError(
        bucket,
        entry.key,
        'count',
        `holds ${rows} rows, its entry says ${entry.recordCount}`,
      );
    }
  });
}

/** The rows of one staged object as the committed reader will count them, or why it cannot be read. */
function countNdjsonRows(body: Buffer, gzip: boolean): number | string {
  let text: string;
  if (gzip) {
    let result: { buffer: Buffer; engine: { bytesWritten: number } };
    try {
      result = gunzipSync(body, { info: true }) as unknown as typeof result;
    } catch (error) {
      return `not gzip: ${error instanceof Error ? error.message : String(error)}`;
    }
    if (result.engine.bytesWritten !== body.length) {
      return `${body.length - result.engine.bytesWritten} bytes follow the gzip data`;
    }
    text = result.buffer.toString('utf8');
  } else {
    text = body.toString('utf8');
  }
  if (text.length > 0 && !text.endsWith('\n')) return 'the last row does not end with a newline';
  let rows = 0;
  for (const line of text.split('\n')) {
    if (line.length === 0) continue;
    try {
      JSON.parse(line);
    } catch {
      return `row ${rows + 1} is not JSON`;
    }
    rows++;
  }
  return rows;
}
