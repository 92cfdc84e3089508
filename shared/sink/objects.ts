/**
 * The few S3 object operations the coordinator and the reader need, with error translation: missing objects
 * become `undefined` (or a typed error at the caller), transient failures {@link TransientAwsError}.
 */
import {
  CopyObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadObjectCommand,
  type HeadObjectCommandOutput,
  ListObjectsV2Command,
  type ListObjectsV2CommandOutput,
  PutObjectCommand,
  type S3Client,
} from '@aws-sdk/client-s3';
import { rethrowClassified } from '../aws/classify.ts';
import { TransientAwsError } from '../errors.ts';

function errorName(error: unknown): string | undefined {
  return (error as { name?: string } | null)?.name;
}

function statusOf(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

/**
 * How S3 refused a write-once put or copy (`If-None-Match: *`): `true` when the key already exists (412), so the
 * caller compares or accepts what is there. A 409 `ConditionalRequestConflict` means a concurrent conditional write
 * to the key is in progress and S3 says retry: it is thrown as transient, never taken for "exists" (nothing may be
 * there yet). `false` for any other error.
 */
export function writeOnceRefused(operation: string, error: unknown): boolean {
  if (statusOf(error) === 412 || errorName(error) === 'PreconditionFailed') return true;
  if (statusOf(error) === 409 || errorName(error) === 'ConditionalRequestConflict') {
    throw new TransientAwsError(operation, { cause: error });
  }
  return false;
}

export function isNotFound(error: unknown): boolean {
  const name = errorName(error);
  return name === 'NoSuchKey' || name === 'NotFound' || statusOf(error) === 404;
}

export async function headObject(
  s3: S3Client,
  bucket: string,
  key: string,
): Promise<HeadObjectCommandOutput | undefined> {
  try {
    return await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
  } catch (error) {
    if (isNotFound(error)) return undefined;
    return rethrowClassified('s3:HeadObject', error);
  }
}

/** The object's bytes, or undefined when it does not exist. */
export async function getBytes(s3: S3Client, bucket: string, key: string): Promise<Buffer | undefined> {
  return (await getObject(s3, bucket, key))?.bytes;
}

/** An object's bytes with the ETag S3 served them under (as S3 spells it, quotes included). */
export interface StoredObject {
  readonly bytes: Buffer;
  readonly etag: string;
}

/** The object's bytes and ETag, or undefined when it does not exist. */
export async function getObject(
  s3: S3Client,
  bucket: string,
  key: string,
): Promise<StoredObject | undefined> {
  try {
    const result = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return { bytes: Buffer.from(await result.Body!.transformToByteArray()), etag: result.ETag ?? '' };
  } catch (error) {
    if (isNotFound(error)) return undefined;
    return rethrowClassified('s3:GetObject', error);
  }
}

export interface PutOptions {
  readonly contentType?: string;
  readonly metadata?: Record<string, string>;
  /** Hex MD5 of `body`: S3 rejects the upload if the bytes it received differ. */
  readonly md5?: string;
}

/**
 * Writes `body` under `key` unless an object is already there (`If-None-Match: *`). Returns `created` when this
 * call wrote it, `exists` when S3 answered 412 (the caller compares checksums). Callers still only ever write
 * the same bytes under the same key (C5): a server that ignored the header would overwrite.
 */
export async function putIfAbsent(
  s3: S3Client,
  bucket: string,
  key: string,
  body: Buffer,
  options: PutOptions = {},
): Promise<'created' | 'exists'> {
  return (await putOnce(s3, bucket, key, body, options)) === undefined ? 'exists' : 'created';
}

/**
 * {@link putIfAbsent} that hands back the ETag S3 answered for the object this call wrote (a condition later
 * requests can pin it by), or undefined when S3 answered 412 (the key exists).
 */
export async function putOnce(
  s3: S3Client,
  bucket: string,
  key: string,
  body: Buffer,
  options: PutOptions = {},
): Promise<string | undefined> {
  try {
    const result = await s3.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: key,
        Body: body,
        ContentLength: body.length,
        IfNoneMatch: '*',
        ...(options.md5 ? { ContentMD5: Buffer.from(options.md5, 'hex').toString('base64') } : {}),
        ...(options.contentType ? { ContentType: options.contentType } : {}),
        ...(options.metadata ? { Metadata: options.metadata } : {}),
      }),
    );
    if (!result.ETag) throw new Error(`s3:PutObject of ${key} answered without an ETag`);
    return result.ETag;
  } catch (error) {
    if (writeOnceRefused('s3:PutObject', error)) return undefined;
    return rethrowClassified('s3:PutObject', error);
  }
}

/** What {@link copyPinned} did: copied; refused (412: the destination exists, or the source's ETag is another); no source. */
export type PinnedCopyOutcome = 'copied' | 'refused' | 'source-missing';

/**
 * Copies `sourceKey` to `key` server-side, only if `key` does not exist (`If-None-Match: *`) and only if the source
 * still has the ETag `sourceEtag` (`x-amz-copy-source-if-match`): the bytes copied are exactly the bytes that ETag
 * was served with, and nothing passes through the caller. S3 answers both refusals with the same 412, so the
 * caller tells them apart by reading `key`. Metadata and content type are the source's. The source key is
 * URL-encoded with `encodeURI`, so it must hold no character that needs more (`+`, `=`, `%`, …: S3 would read
 * a `+` as a space, and s3rver decodes the header with `decodeURI`, which leaves `%2B` as it is).
 */
export async function copyPinned(
  s3: S3Client,
  bucket: string,
  copy: { readonly sourceKey: string; readonly sourceEtag: string; readonly key: string },
): Promise<PinnedCopyOutcome> {
  try {
    await s3.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: copy.key,
        CopySource: encodeURI(`${bucket}/${copy.sourceKey}`),
        CopySourceIfMatch: copy.sourceEtag,
        IfNoneMatch: '*',
        MetadataDirective: 'COPY',
      }),
    );
    return 'copied';
  } catch (error) {
    if (writeOnceRefused('s3:CopyObject', error)) return 'refused';
    if (isNotFound(error)) return 'source-missing';
    return rethrowClassified('s3:CopyObject', error);
  }
}

export interface ListedObject {
  readonly key: string;
  readonly lastModified: number;
  readonly size: number;
  /** Lower-case, without quotes. */
  readonly etag: string;
}

/** Every object under `prefix`, page by page (at most `limit` objects). */
export async function* listObjects(
  s3: S3Client,
  bucket: string,
  prefix: string,
  limit = Number.POSITIVE_INFINITY,
  startAfter?: string,
): AsyncGenerator<ListedObject> {
  let token: string | undefined;
  let seen = 0;
  do {
    let page: ListObjectsV2CommandOutput;
    try {
      page = await s3.send(
        new ListObjectsV2Command({
          Bucket: bucket,
          Prefix: prefix,
          ContinuationToken: token,
          MaxKeys: 1000,
          ...(token || !startAfter ? {} : { StartAfter: startAfter }),
        }),
      );
    } catch (error) {
      return rethrowClassified('s3:ListObjectsV2', error);
    }
    for (const object of page.Contents ?? []) {
      if (seen++ >= limit) return;
      yield {
        key: object.Key!,
        lastModified: object.LastModified?.getTime() ?? 0,
        size: object.Size ?? 0,
        etag: (object.ETag ?? '').replaceAll('"', '').toLowerCase(),
      };
    }
    token = page.NextContinuationToken;
  } while (token);
}

/** Deletes keys in batches of 1,000; deleting a missing key is not an error. */
export async function deleteKeys(
  s3: S3Client,
  bucket: string,
  keysToDelete: readonly string[],
): Promise<void> {
  for (let i = 0; i < keysToDelete.length; i += 1000) {
    const batch = keysToDelete.slice(i, i + 1000);
    try {
      const result = await s3.send(
        new DeleteObjectsCommand({
          Bucket: bucket,
          Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true },
        }),
      );
      const failed = result.Errors ?? [];
      if (failed.length > 0) {
        throw new Error(
          `s3:DeleteObjects failed for ${failed.length} keys, e.g. ${failed[0]?.Key}: ${failed[0]?.Code}`,
        );
      }
    } catch (error) {
      rethrowClassified('s3:DeleteObjects', error);
    }
  }
}
