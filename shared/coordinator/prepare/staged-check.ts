/**
 * Prepare's check of the staged objects it covers (C3): {@link verifyStagedObject} reads an object and checks what
 * the candidates prepare merges from those same bytes (`candidates.ts`), and the manifest, rely on.
 * The ETag is not used: it is an MD5 only without SSE-KMS/DSSE and multipart, and a check on another checksum than
 * the recorded SHA-256 could pass bytes the entry does not describe. S3's additional checksums are not used:
 * s3rver does not support them.
 */
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { getBytes } from '../../sink/objects.ts';

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

/**
 * Prepare's full check of the covered staged objects (C3): each object must have the recorded size and SHA-256,
 * decode as NDJSON (gzip per the entry, every gzip byte consumed: trailing bytes would be ignored alone but would
 * swallow the next member once concatenated), end with a newline (concatenation must not join two lines) and hold
 * exactly `recordCount` rows (the count the plan and then the manifest carry, which the committed reader checks).
 * Any failure throws {@link StagedObjectInvalidError} naming the staged object, before the vote: the attempt aborts
 * with the reason instead of publishing a manifest the reader refuses forever (C7).
 *
 * Prepare merges its candidates only from bytes that passed this check, in the same read: a processor may rewrite
 * its staged object at any time, but a rewrite before a read fails the check (the SHA-256 is the entry's), and one
 * after the candidate is written changes nothing that is published. At most `concurrency` objects are read at once.
 */
export async function verifyStagedContents(
  s3: S3Client,
  bucket: string,
  entries: readonly StagedFileEntry[],
  concurrency = 8,
  inspect?: InspectStaged,
): Promise<void> {
  await mapLimit(entries, concurrency, async (entry) => {
    await verifyStagedObject(s3, bucket, entry, inspect);
  });
}

/**
 * Called with an object once it passed every check (prepare takes its census of rows per time folder here); a
 * string it throws (or an Error's message) fails the object as an `encoding` defect, before the vote.
 */
export type InspectStaged = (entry: StagedFileEntry, body: Buffer, text: string) => void;

/**
 * One covered staged object read and checked as {@link verifyStagedContents} says, then `inspect`ed: its bytes,
 * and their text (decompressed), once they passed; else {@link StagedObjectInvalidError}.
 */
export async function verifyStagedObject(
  s3: S3Client,
  bucket: string,
  entry: StagedFileEntry,
  inspect?: InspectStaged,
): Promise<{ body: Buffer; text: string }> {
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
  const decoded = countNdjsonRows(body, entry.gzip);
  if (typeof decoded === 'string') throw new StagedObjectInvalidError(bucket, entry.key, 'encoding', decoded);
  if (decoded.rows !== entry.recordCount) {
    throw new StagedObjectInvalidError(
      bucket,
      entry.key,
      'count',
      `holds ${decoded.rows} rows, its entry says ${entry.recordCount}`,
    );
  }
  try {
    inspect?.(entry, body, decoded.text);
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new StagedObjectInvalidError(bucket, entry.key, 'encoding', detail);
  }
  return { body, text: decoded.text };
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
