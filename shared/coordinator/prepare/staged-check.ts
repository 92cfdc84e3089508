/**
 * Prepare's check of the staged objects it covers (C3): {@link verifyStagedContents} copies every object under the
 * coordinator's prefix, reads the copy and checks what promote (which reads the same copy) and the manifest rely
 * on. The ETag is not used: it is an MD5 only without SSE-KMS/DSSE and
 * multipart, and promote checks the SHA-256 — a check on another checksum could vote for an object promote then
 * refuses forever. S3's additional checksums are not used: s3rver does not support them.
 */
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { getBytes } from '../../sink/objects.ts';
import { copyStagedObject } from './staged-copy.ts';

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

/** Where prepare copies each covered staged object before verifying it (`stagedCopyKey` in `work-objects.ts`). */
export type CopyKeyOf = (entry: StagedFileEntry) => string;

/**
 * Prepare's full check of the covered staged objects (C3), made on a copy:
 * each object is first copied server-side to `copyKeyOf(entry)` under the coordinator's prefix
 * (`staged-copy.ts`), then the COPY is read and must have the recorded size and SHA-256 (the checksum promote
 * checks when it reads the same copy, so a yes vote never leads to a promote that cannot finish), decode as NDJSON
 * (gzip per the entry, every gzip byte consumed: trailing bytes would be ignored alone but would swallow the next
 * member once promote concatenates them), end with a newline (concatenation must not join two lines) and hold
 * exactly `recordCount` rows (the count the plan and then the manifest carry, which the committed reader checks).
 * Any failure throws {@link StagedObjectInvalidError} naming the staged object, before the vote: the attempt
 * aborts with the reason instead of publishing a manifest the reader refuses forever (C7). The staged object
 * itself is never read here: a processor may rewrite it at any time, its copy it cannot.
 * At most `concurrency` objects are in memory at once.
 */
export async function verifyStagedContents(
  s3: S3Client,
  bucket: string,
  entries: readonly StagedFileEntry[],
  copyKeyOf: CopyKeyOf,
  concurrency = 8,
  /**
   * Called with each copy once it passed every check (prepare takes its census of rows per time folder here); a
   * string it throws (or an Error's message) fails the object as an `encoding` defect, before the vote.
   */
  inspect?: (entry: StagedFileEntry, body: Buffer, text: string) => void,
): Promise<void> {
  await mapLimit(entries, concurrency, async (entry) => {
    const copyKey = copyKeyOf(entry);
    const copied = await copyStagedObject(s3, bucket, entry.key, copyKey);
    // 'copied' or 'exists' (a copy made by an earlier run of this attempt): either way the copy is what is checked.
    // So is a copy found after 'source-missing': S3 may answer 404 for the source before it evaluates
    // If-None-Match on the copy, and an earlier run's copy of a staged object deleted since then is as good as any;
    // verification below decides, not the state of the staged key.
    const body = await getBytes(s3, bucket, copyKey);
    if (!body) {
      const detail =
        copied === 'source-missing' ? 'the object does not exist' : `its copy ${copyKey} does not exist`;
      throw new StagedObjectInvalidError(bucket, entry.key, 'missing', detail);
    }
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
    const decoded = countNdjsonRows(body, entry.gzip);
    if (typeof decoded === 'string')
      throw new StagedObjectInvalidError(bucket, entry.key, 'encoding', decoded);
    const { rows, text } = decoded;
    if (rows !== entry.recordCount) {
      throw new StagedObjectInvalidError(
        bucket,
        entry.key,
        'count',
        `holds ${rows} rows, its entry says ${entry.recordCount}`,
      );
    }
    try {
      inspect?.(entry, body, text);
    } catch (error) {
      const detail = error instanceof Error ? error.message : String(error);
      throw new StagedObjectInvalidError(bucket, entry.key, 'encoding', detail);
    }
  });
}

/** The rows of one staged object as the committed reader will count them, or why it cannot be read. */
function countNdjsonRows(body: Buffer, gzip: boolean): { rows: number; text: string } | string {
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
  return { rows, text };
}
