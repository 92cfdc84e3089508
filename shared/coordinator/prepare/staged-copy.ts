/**
 * Prepare's server-side copy of a covered staged object into the coordinator's prefix.
 *
 * Why a copy: the processor's role may put objects under its staged prefix (it must, to stage), so after prepare
 * verified a staged object and the checkpoint was decided, a compromised processor could still rewrite it; promote
 * would then read other bytes and the decided checkpoint (roll-forward only, C4) would stall forever. The copy
 * lives under `<pl>/_coordinator/<N>/<attempt>/staged/` (`stagedCopyKey` in `work-objects.ts`), which no
 * processor can write (its identity policy does not reach it, and the bucket policy denies every principal but
 * prepare and promote). Prepare verifies the COPY (`staged-check.ts`), and promote reads only the copy: what is
 * verified is what is promoted, whatever happens to the staged key afterwards.
 *
 * Why no `CopySourceIfMatch`: the check that matters is made on the copy's own bytes after the copy (full read,
 * size, SHA-256 against the ledger entry, NDJSON rows), so no precondition is needed between a read of the source
 * and the copy — there is no such read. An overwrite of the source before or during the copy yields a copy that
 * fails verification (the attempt aborts, no decision on bad bytes); one after it changes nothing. This also holds
 * where an ETag is no content hash (SSE-KMS, multipart) and on s3rver, which ignores `x-amz-copy-source-if-match`.
 *
 * Write-once: the copy is made with `If-None-Match: *`, so on S3 a verified copy can never be replaced by a later
 * copy of the same attempt (a retried or zombie prepare that copies after the processor rewrote the source gets
 * 412 and verifies the existing copy instead). The local S3 server answers the same 412 (local/s3-server.cjs), so
 * the tests race copies against rewrites on the real guard.
 *
 * Cost: one CopyObject per covered staged object and attempt (a PUT-class request; the bytes stay inside S3, none
 * pass through Lambda) and the copy's storage until cleanup; prepare then reads the copy instead of the staged
 * object, so GETs are unchanged. A single CopyObject copies up to 5 GB, far above any staged object (one
 * processor batch): a larger one fails the copy and the attempt aborts with the reason.
 */
import { CopyObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { rethrowClassified } from '../../aws/classify.ts';
import { isNotFound, writeOnceRefused } from '../../sink/objects.ts';

/** What a copy did: made it, found a copy there already (412), or found no source object. */
export type CopyOutcome = 'copied' | 'exists' | 'source-missing';

/**
 * Copies `sourceKey` to `copyKey` in `bucket`, server-side, unless `copyKey` exists. The copy source is
 * URL-encoded with `encodeURI`: staged keys hold only `[A-Za-z0-9._=/-]`, which it leaves as they are (s3rver
 * decodes the header with `decodeURI`, which would not turn `%2F` back into `/`).
 */
export async function copyStagedObject(
  s3: S3Client,
  bucket: string,
  sourceKey: string,
  copyKey: string,
): Promise<CopyOutcome> {
  try {
    await s3.send(
      new CopyObjectCommand({
        Bucket: bucket,
        Key: copyKey,
        CopySource: encodeURI(`${bucket}/${sourceKey}`),
        IfNoneMatch: '*',
        MetadataDirective: 'COPY',
      }),
    );
    return 'copied';
  } catch (error) {
    if (writeOnceRefused('s3:CopyObject', error)) return 'exists';
    if (isNotFound(error)) return 'source-missing';
    return rethrowClassified('s3:CopyObject', error);
  }
}
