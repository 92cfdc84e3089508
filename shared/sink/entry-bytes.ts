/**
 * A manifest entry's bytes (C7): the whole final object, or, for a slice of a merged final object
 * (`ManifestFile.sliceStart`, keys by `mergedObjectKey` in `layout.ts`), bytes [sliceStart, sliceStart + bytes) of
 * it. A reader of one entry reads a slice with one ranged GetObject (`Range: bytes=a-b`) and gets exactly its
 * length or an error ({@link readEntryBytes}); a reader of many entries (`eos verify`, `eos query`) reads each
 * merged object once and cuts its slices locally ({@link groupByObject}, {@link cutSlice}, {@link splitSlices}).
 *
 * What a slice entry must be before anything is read ({@link sliceEntryProblem}): its key a merged key of this
 * pipeline, of the entry's stream and lane, naming the checkpoint of the manifest that
 * lists it (all of a merged object's slices are listed by that one manifest); `sliceStart` a non-negative integer, `bytes` a positive one; NDJSON.
 * Whether the slices tile their object (no gap, no overlap, nothing past the last) is checked where the whole
 * object is read: {@link tilingProblems}. A whole entry's key is checked by its reader as before (`parseFinalKey`),
 * and its size and SHA-256 too: for a whole object this module only fetches.
 */
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { rethrowClassified } from '../aws/classify.ts';
import { PipelineError } from '../errors.ts';
import { parseMergedObjectKey } from './layout.ts';
import type { ManifestFile } from './manifest.ts';
import { getBytes, isNotFound } from './objects.ts';

/** Bytes [start, end) of an object. */
export interface ByteSpan {
  readonly start: number;
  readonly end: number;
}

/** A slice entry's bytes could not be read as listed: the object is shorter than the slice, or the slice malformed. */
export class EntryBytesError extends PipelineError {
  constructor(
    readonly key: string,
    readonly detail: string,
  ) {
    super(`committed file ${key} ${detail}`);
  }
}

/** True when the entry is a slice of a merged object, not a whole object. */
export function isSlice(file: ManifestFile): boolean {
  return file.sliceStart !== undefined;
}

/** What is wrong with a slice entry's own numbers (start, length, format), else undefined. */
function sliceShapeProblem(file: ManifestFile): string | undefined {
  const { sliceStart, bytes } = file;
  if (!Number.isSafeInteger(sliceStart) || (sliceStart as number) < 0) {
    return `is listed as a slice starting at ${JSON.stringify(sliceStart)}, not a byte position`;
  }
  if (!Number.isSafeInteger(bytes) || bytes < 1 || !Number.isSafeInteger((sliceStart as number) + bytes)) {
    return `is listed as a slice of ${JSON.stringify(bytes)} bytes at ${sliceStart}`;
  }
  if (file.format !== undefined && file.format !== 'ndjson') {
    return `is listed as a ${file.format} slice: merged objects are NDJSON only`;
  }
  return undefined;
}

/**
 * The bytes a slice entry names in its object; undefined for a whole-object entry. Throws {@link EntryBytesError}
 * when the slice's start or length is not a byte position and a positive length.
 */
export function sliceSpan(file: ManifestFile): ByteSpan | undefined {
  if (!isSlice(file)) return undefined;
  const problem = sliceShapeProblem(file);
  if (problem !== undefined) throw new EntryBytesError(String(file.key), problem);
  const start = file.sliceStart as number;
  return { start, end: start + file.bytes };
}

/** Why a slice entry's key is not where it may point (see the module comment); undefined when it is. */
export function sliceKeyProblem(
  pipeline: string,
  checkpointId: number,
  file: ManifestFile,
): string | undefined {
  const name = parseMergedObjectKey(pipeline, String(file.key));
  if (name === undefined)
    return `is listed as a slice but is not the final data key of a merged object of pipeline ${pipeline}`;
  if (name.stream !== file.stream)
    return `is a merged ${name.stream} object, listed as a ${file.stream} slice`;
  // A merged object holds one lane's slices: the one its key names (`topic=<lane>/`).
  if (name.topic !== file.topic) {
    return `is a merged object of lane ${name.topic}, listed as a slice of ${file.topic}`;
  }
  if (name.checkpointId !== checkpointId) {
    return `is a merged object of checkpoint ${name.checkpointId}, listed as a slice by checkpoint ${checkpointId}'s manifest`;
  }
  return undefined;
}

/**
 * Why a slice entry listed by checkpoint `checkpointId`'s manifest may not be read: its key (see
 * {@link sliceKeyProblem}) or its numbers; undefined when it may. Only for slices.
 */
export function sliceEntryProblem(
  pipeline: string,
  checkpointId: number,
  file: ManifestFile,
): string | undefined {
  return sliceKeyProblem(pipeline, checkpointId, file) ?? sliceShapeProblem(file);
}

/** Where an entry's bytes are read from: whole objects, and (optionally) byte ranges of them. */
export interface EntryByteSource {
  /** The object's bytes, or undefined when there is no such object. */
  whole(key: string): Promise<Uint8Array | undefined>;
  /**
   * Bytes [span.start, span.end) of the object, or fewer when it ends before `span.end` (none when it ends before
   * `span.start`); undefined when there is no such object. Absent: the whole object is read and cut.
   */
  range?(key: string, span: ByteSpan): Promise<Uint8Array | undefined>;
}

const CONTENT_RANGE = /^bytes (\d+)-(\d+)\/(\d+|\*)$/;

/**
 * Bytes [span.start, span.end) of an object with ONE ranged GetObject (`Range: bytes=<start>-<end - 1>`): fewer
 * when the object ends first (none when it ends before `span.start`: S3's 416), undefined when there is no such
 * object. A server that answers with more than was asked (the whole object, 200; or a wider range) is cut to the
 * span locally, by the Content-Range it names; one that answers another range is an error.
 */
export async function getRange(
  s3: S3Client,
  bucket: string,
  key: string,
  span: ByteSpan,
): Promise<Buffer | undefined> {
  if (span.end <= span.start) return Buffer.alloc(0);
  let body: Buffer;
  let contentRange: string | undefined;
  try {
    const result = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: key, Range: `bytes=${span.start}-${span.end - 1}` }),
    );
    body = Buffer.from(await result.Body!.transformToByteArray());
    contentRange = result.ContentRange;
  } catch (error) {
    if (isNotFound(error)) return undefined;
    const status = (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
    if (status === 416 || (error as { name?: string } | null)?.name === 'InvalidRange')
      return Buffer.alloc(0);
    return rethrowClassified('s3:GetObject', error);
  }
  // No Content-Range: the server sent the whole object.
  const served = contentRange === undefined ? undefined : CONTENT_RANGE.exec(contentRange);
  if (contentRange !== undefined && !served) {
    throw new Error(`s3:GetObject of ${key} answered Content-Range ${contentRange}`);
  }
  const first = served ? Number(served[1]) : 0;
  if (first > span.start || (served && Number(served[2]) - first + 1 !== body.length)) {
    throw new Error(
      `s3:GetObject of ${key} for bytes ${span.start}-${span.end - 1} answered ${contentRange ?? 'the whole object'} with ${body.length} bytes`,
    );
  }
  return first === span.start && body.length <= span.end - span.start
    ? body
    : body.subarray(span.start - first, span.end - first);
}

/** An {@link EntryByteSource} over a bucket: whole objects by GetObject, slices by one ranged GetObject. */
export function bucketByteSource(s3: S3Client, bucket: string): EntryByteSource {
  return {
    whole: (key) => getBytes(s3, bucket, key),
    range: (key, span) => getRange(s3, bucket, key, span),
  };
}

/**
 * The bytes of `[span.start, span.end)` of `body`, checked to be all there: {@link EntryBytesError} when the object
 * ends first.
 */
export function cutSlice(key: string, body: Uint8Array, span: ByteSpan): Buffer {
  if (body.length < span.end) {
    throw new EntryBytesError(
      key,
      `holds ${body.length} bytes, too few for its slice ${span.start}-${span.end - 1} (${span.end - span.start} bytes)`,
    );
  }
  return Buffer.from(body.buffer, body.byteOffset + span.start, span.end - span.start);
}

/**
 * One manifest entry's bytes: the whole object's, or its slice's, read with one ranged request when the source has
 * them (else the whole object, cut). Undefined when the object does not exist. A slice is checked to be exactly
 * its listed length ({@link EntryBytesError} otherwise, and for a malformed slice); a whole object is returned as
 * it is, for the caller to check against the entry's size and SHA-256, as it checks a slice's SHA-256.
 */
export async function readEntryBytes(
  source: EntryByteSource,
  file: ManifestFile,
): Promise<Buffer | undefined> {
  const span = sliceSpan(file);
  if (span === undefined) {
    const body = await source.whole(file.key);
    return body === undefined ? undefined : Buffer.from(body.buffer, body.byteOffset, body.length);
  }
  if (source.range === undefined) {
    const body = await source.whole(file.key);
    return body === undefined ? undefined : cutSlice(file.key, body, span);
  }
  const body = await source.range(file.key, span);
  if (body === undefined) return undefined;
  if (body.length !== span.end - span.start) {
    throw new EntryBytesError(
      file.key,
      `ends before its slice ${span.start}-${span.end - 1}: ${body.length} of its ${file.bytes} bytes are there`,
    );
  }
  return Buffer.from(body.buffer, body.byteOffset, body.length);
}

/** Entries grouped by the object they read: one group per whole entry, one per merged object (its slices). */
export interface ObjectGroup<T> {
  readonly key: string;
  /** Slices of a merged object (each with its span, ordered by start), or one whole entry. */
  readonly merged: boolean;
  readonly items: readonly { readonly item: T; readonly span?: ByteSpan }[];
}

/**
 * Groups items (each with a manifest entry) by the object to read, so a merged object is read once for all of its
 * slices: whole entries stay one group each, in input order; a merged object's group sits where its first slice
 * was, its slices sorted by start (then input order). Items whose slice is malformed must be left out first
 * ({@link sliceEntryProblem}): {@link sliceSpan} throws on them.
 */
export function groupByObject<T>(items: readonly T[], entryOf: (item: T) => ManifestFile): ObjectGroup<T>[] {
  const groups: ObjectGroup<T>[] = [];
  const merged = new Map<string, { item: T; span?: ByteSpan }[]>();
  for (const item of items) {
    const file = entryOf(item);
    const span = sliceSpan(file);
    if (span === undefined) {
      groups.push({ key: file.key, merged: false, items: [{ item }] });
      continue;
    }
    let slices = merged.get(file.key);
    if (slices === undefined) {
      slices = [];
      merged.set(file.key, slices);
      groups.push({ key: file.key, merged: true, items: slices });
    }
    slices.push({ item, span });
  }
  for (const slices of merged.values()) slices.sort((a, b) => a.span!.start - b.span!.start);
  return groups;
}

/** How a merged object's slices fail to tile it: a gap, an overlap, bytes past the last slice, a short object. */
export interface TilingProblem {
  readonly kind: 'gap' | 'overlap' | 'trailing' | 'short';
  readonly message: string;
}

/**
 * Whether `spans` (sorted by start) tile an object of `size` bytes exactly: from 0, each starting where the
 * previous ended, the last ending at the object's end (so the object's size is the sum of the slices').
 */
export function tilingProblems(spans: readonly ByteSpan[], size: number): TilingProblem[] {
  const problems: TilingProblem[] = [];
  let covered = 0;
  for (const span of spans) {
    if (span.start > covered) {
      problems.push({ kind: 'gap', message: `bytes ${covered}-${span.start - 1} lie in no slice` });
    } else if (span.start < covered) {
      problems.push({
        kind: 'overlap',
        message: `bytes ${span.start}-${Math.min(covered, span.end) - 1} lie in two slices`,
      });
    }
    covered = Math.max(covered, span.end);
  }
  if (size > covered) {
    problems.push({ kind: 'trailing', message: `bytes ${covered}-${size - 1} lie past the last slice` });
  } else if (size < covered) {
    problems.push({ kind: 'short', message: `holds ${size} bytes, its slices list ${covered}` });
  }
  return problems;
}

/**
 * Cuts a stream of a merged object into its slices as it passes, without holding the object: `write(index,
 * chunk)` gets the bytes of `spans[index]` in order (spans sorted by start, not overlapping). Returns how many bytes
 * the stream held, so the caller can tell a short object (a span not filled) or trailing bytes.
 */
export async function splitSlices(
  body: AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
  spans: readonly ByteSpan[],
  write: (index: number, chunk: Buffer) => Promise<void>,
): Promise<number> {
  let position = 0;
  let index = 0;
  for await (const raw of body) {
    const chunk = Buffer.from(raw.buffer, raw.byteOffset, raw.length);
    const chunkEnd = position + chunk.length;
    while (index < spans.length && spans[index]!.start < chunkEnd) {
      const span = spans[index]!;
      const from = Math.max(span.start, position);
      const to = Math.min(span.end, chunkEnd);
      if (to > from) await write(index, chunk.subarray(from - position, to - position));
      if (span.end > chunkEnd) break;
      index++;
    }
    position = chunkEnd;
  }
  return position;
}
