/**
 * The committed reader: the records of every committed checkpoint, in manifest order (C7) — manifest 1, 2, 3, …
 * and within a manifest its files in order (stream, topic, partition, first offset), each file's rows in order.
 * Per partition that is offset order (with time folders, per partition and folder: a late record's file sorts by
 * its range like any other; NDJSON and Parquet objects read alike, `parquet-read.ts`). Only files a manifest lists
 * are read, and each is checked against the manifest's size and SHA-256, so what this yields is exactly the
 * committed output, each record once. A listed key must be a final data key of this pipeline that names exactly
 * the entry's stream, partition and range (`parseFinalKey`): a manifest entry pointing anywhere else (another
 * manifest, a staged object, another pipeline) is refused before it is read.
 *
 * A slice entry (`sliceStart`: part of a merged final object, `entry-bytes.ts`) is read alone, with one ranged
 * GetObject of its bytes, checked like a whole object (size, SHA-256, rows). Its key must instead be a merged key of
 * this pipeline, of the entry's stream, naming the checkpoint of the manifest that lists it; before anything is
 * read, the whole log's slices of one object must come from that one manifest, start at byte 0 and follow each
 * other without gap or overlap, and no key may be listed both whole and as slices (an overlap would yield its rows
 * twice). Whether the last slice ends at the object's end is `eos verify`'s to check (it reads whole objects).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../errors.ts';
import type { Stream } from '../ledger/layout.ts';
import {
  type ByteSpan,
  bucketByteSource,
  EntryBytesError,
  isSlice,
  readEntryBytes,
  sliceEntryProblem,
  sliceSpan,
} from './entry-bytes.ts';
import { GenerationView, rowOffset } from './generations.ts';
import { parseFinalKey } from './layout.ts';
import type { Manifest, ManifestFile } from './manifest.ts';
import { ManifestStore } from './manifest-store.ts';
import { ndjsonLines } from './ndjson.ts';
import { decodeParquetRows } from './parquet-read.ts';

/**
 * Where committed objects are read from, when not from a bucket through `s3`: a copy of one (an `eos local
 * --export` folder). Its manifests must be checked gap-free and chained as `ManifestStore` checks a bucket's.
 */
export interface CommittedObjects {
  manifests(): AsyncIterable<Manifest>;
  /** The bytes of a key a manifest lists, or undefined when there is no such object. */
  bytes(key: string): Promise<Uint8Array | undefined>;
  /**
   * Bytes [span.start, span.end) of such a key (fewer when it ends first), or undefined when there is no such
   * object: how a slice of a merged object is read. Absent: the whole object is read and the slice cut from it.
   */
  range?(key: string, span: ByteSpan): Promise<Uint8Array | undefined>;
}

export interface ReadCommittedOptions {
  /** The bucket to read, through `s3`; or `objects` instead. */
  readonly s3?: S3Client;
  readonly bucket?: string;
  readonly objects?: CommittedObjects;
  readonly pipeline: string;
  /** Which stream's records; default `output`. */
  readonly stream?: Stream;
}

function objectsOf(options: Omit<ReadCommittedOptions, 'stream'>): CommittedObjects {
  if (options.objects) return options.objects;
  const { s3, bucket, pipeline } = options;
  if (!s3 || bucket === undefined) throw new TypeError('readCommitted needs s3 and bucket, or objects');
  const source = bucketByteSource(s3, bucket);
  return {
    manifests: () => new ManifestStore(s3, bucket, pipeline).all(),
    bytes: source.whole,
    range: source.range!,
  };
}

/** A committed record and where it sits in the log. */
export interface CommittedRecord {
  readonly checkpointId: number;
  readonly file: ManifestFile;
  readonly row: Record<string, unknown>;
}

/** A file a manifest lists is missing or not what the manifest says. */
export class CommittedFileError extends PipelineError {
  constructor(
    readonly key: string,
    detail: string,
  ) {
    super(`committed file ${key} ${detail}`);
  }
}

/** Throws unless `file.key` is the final data key of this pipeline for exactly the entry's stream, partition, range. */
export function assertFinalDataKey(pipeline: string, file: ManifestFile): void {
  const parts = parseFinalKey(pipeline, file.key);
  const same =
    parts !== undefined &&
    parts.stream === file.stream &&
    parts.topic === file.topic &&
    parts.partition === file.partition &&
    parts.firstOffset === file.firstOffset &&
    parts.lastOffset === file.lastOffset;
  if (!same) {
    throw new CommittedFileError(
      file.key,
      `is listed by a manifest but is not the final data key of ${file.stream} ${file.topic}/${file.partition} ${file.firstOffset}-${file.lastOffset} in pipeline ${pipeline}`,
    );
  }
}

/**
 * Throws unless `file`, listed by checkpoint `checkpointId`'s manifest, may be read: a whole entry's key the final
 * data key of its stream, partition and range ({@link assertFinalDataKey}); a slice's a merged key of this pipeline
 * and the entry's stream naming that checkpoint, with a byte position and a positive length (`entry-bytes.ts`).
 */
export function assertCommittedKey(pipeline: string, checkpointId: number, file: ManifestFile): void {
  if (!isSlice(file)) {
    assertFinalDataKey(pipeline, file);
    return;
  }
  const problem = sliceEntryProblem(pipeline, checkpointId, file);
  if (problem !== undefined) throw new CommittedFileError(String(file.key), problem);
}

/**
 * Checks the whole log's listings before any object is read (see the module comment): each key listed once whole,
 * or as slices by one manifest that follow each other from byte 0 without gap or overlap. Keys are checked too.
 */
export class ListingCheck {
  /** Every key listed so far, with the checkpoint that listed it. */
  private readonly keys = new Map<string, number>();
  /**
   * The offset ranges slices listed so far, by stream, lane and partition: a merged object is never re-encoded nor
   * in a time folder, so one range of a partition is in one slice only (two keys listing it would yield it twice).
   */
  private readonly sliceRanges = new Map<string, Array<readonly [number, number, string]>>();

  constructor(private readonly pipeline: string) {}

  add(manifest: Manifest): void {
    const slices = new Map<string, ByteSpan[]>();
    for (const file of manifest.files) {
      assertCommittedKey(this.pipeline, manifest.checkpointId, file);
      const span = sliceSpan(file);
      if (span !== undefined) this.addSliceRange(file);
      const own = slices.get(file.key);
      if (span !== undefined && own !== undefined) {
        own.push(span);
        continue;
      }
      // A file listed twice would be read twice: refuse it rather than yield duplicates (C7).
      if (this.keys.has(file.key))
        throw new CommittedFileError(file.key, 'is listed twice in the manifest log');
      this.keys.set(file.key, manifest.checkpointId);
      if (span !== undefined) slices.set(file.key, [span]);
    }
    this.tile(slices);
  }

  private addSliceRange(file: ManifestFile): void {
    const where = `${file.stream}#${file.topic}#${file.partition}`;
    const ranges = this.sliceRanges.get(where) ?? [];
    const overlapping = ranges.find(([first, last]) => file.firstOffset <= last && first <= file.lastOffset);
    if (overlapping) {
      throw new CommittedFileError(
        file.key,
        `lists ${file.stream} ${file.topic}/${file.partition} ${file.firstOffset}-${file.lastOffset}, which a slice of ${overlapping[2]} lists too: its rows would be read twice`,
      );
    }
    ranges.push([file.firstOffset, file.lastOffset, file.key]);
    this.sliceRanges.set(where, ranges);
  }

  /** The slices one manifest lists of each merged object follow each other from byte 0. */
  private tile(slices: ReadonlyMap<string, ByteSpan[]>): void {
    for (const [key, spans] of slices) {
      let covered = 0;
      for (const span of spans.sort((a, b) => a.start - b.start)) {
        if (span.start !== covered) {
          throw new CommittedFileError(
            key,
            span.start < covered
              ? `is listed by slices that overlap at bytes ${span.start}-${Math.min(covered, span.end) - 1}: their rows would be read twice`
              : `is listed by slices that leave bytes ${covered}-${span.start - 1} out`,
          );
        }
        covered = span.end;
      }
    }
  }
}

async function readBody(objects: CommittedObjects, file: ManifestFile): Promise<Buffer> {
  let body: Buffer | undefined;
  try {
    body = await readEntryBytes(
      { whole: objects.bytes, ...(objects.range ? { range: objects.range } : {}) },
      file,
    );
  } catch (error) {
    if (error instanceof EntryBytesError) throw new CommittedFileError(file.key, error.detail);
    throw error;
  }
  if (!body) throw new CommittedFileError(file.key, 'is listed by a manifest but does not exist');
  const sha256 = createHash('sha256').update(body).digest('hex');
  if (body.length !== file.bytes || sha256 !== file.sha256) {
    throw new CommittedFileError(
      file.key,
      `does not match its manifest (${body.length} bytes, SHA-256 ${sha256})`,
    );
  }
  return Buffer.from(body);
}

/**
 * A listed file's rows, decoded line by line (its whole text may be longer than one string can be). The lines are counted in a first pass, so a file whose count differs yields nothing.
 */
async function* readFile(
  objects: CommittedObjects,
  file: ManifestFile,
): AsyncGenerator<Record<string, unknown>> {
  const body = await readBody(objects, file);
  if (file.key.endsWith('.parquet')) {
    let rows: Record<string, unknown>[];
    try {
      rows = await decodeParquetRows(body);
    } catch (error) {
      throw new CommittedFileError(file.key, (error as Error).message);
    }
    if (rows.length !== file.recordCount) {
      throw new CommittedFileError(
        file.key,
        `holds ${rows.length} records, its manifest says ${file.recordCount}`,
      );
    }
    yield* rows;
    return;
  }
  const gzip = file.key.endsWith('.gz');
  let lines = 0;
  for await (const _line of ndjsonLines(body, gzip)) lines++;
  if (lines !== file.recordCount) {
    throw new CommittedFileError(file.key, `holds ${lines} records, its manifest says ${file.recordCount}`);
  }
  for await (const line of ndjsonLines(body, gzip)) yield JSON.parse(line) as Record<string, unknown>;
}

/**
 * The rows of one file the manifest of checkpoint `checkpointId` lists, checked as {@link readCommitted} checks
 * them (a slice by one ranged read of its bytes; its key must name that checkpoint).
 */
export function readCommittedFile(
  options: Omit<ReadCommittedOptions, 'stream'>,
  file: ManifestFile,
  checkpointId: number,
): AsyncGenerator<Record<string, unknown>> {
  assertCommittedKey(options.pipeline, checkpointId, file);
  return readFile(objectsOf(options), file);
}

/** Every committed manifest, in order (gap-free and chained, else `ManifestLogError`). */
export async function* readManifests(
  options: Omit<ReadCommittedOptions, 'stream'>,
): AsyncGenerator<Manifest> {
  yield* objectsOf(options).manifests();
}

/**
 * Yields the records of all committed checkpoints of one stream, in manifest order, each record from the output
 * generation the manifest log makes current for it (`shared/sink/generations.ts`): the whole log is read first,
 * so a replayed range shows either its old rows or its new ones, never both and never neither.
 */
export async function* readCommitted(options: ReadCommittedOptions): AsyncGenerator<CommittedRecord> {
  const stream = options.stream ?? 'output';
  const objects = objectsOf(options);
  const listing = new ListingCheck(options.pipeline);
  const manifests: Manifest[] = [];
  const view = new GenerationView();
  for await (const manifest of objects.manifests()) {
    listing.add(manifest);
    view.apply(manifest);
    manifests.push(manifest);
  }
  for (const manifest of manifests) {
    for (const file of manifest.files) {
      if (file.stream !== stream) continue;
      const visibility = view.visibility(file);
      if (visibility === 'none') continue;
      for await (const row of readFile(objects, file)) {
        if (visibility === 'rows' && !view.shows(file.topic, file.partition, offsetOf(file, row))) continue;
        yield { checkpointId: manifest.checkpointId, file, row };
      }
    }
  }
}

/** A row's lineage offset, which a file partly replaced by another generation must name. */
function offsetOf(file: ManifestFile, row: Record<string, unknown>): number {
  const offset = rowOffset(row);
  if (offset === undefined) throw new CommittedFileError(file.key, 'holds a row without a source offset');
  return offset;
}
