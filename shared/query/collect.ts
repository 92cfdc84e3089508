/**
 * The committed files of one stream, fetched to a local directory for the query engine: exactly the objects the
 * manifests list (never a prefix listing, so an object written by anything else is not read), each checked
 * against its manifest entry (size and SHA-256) while it is written, each listed key checked to be this
 * pipeline's final data key for the entry's stream, partition and range, and no key listed twice — the same rules
 * the committed reader (`shared/sink/reader.ts`, `ListingCheck`) applies record by record. A slice of a merged final
 * object (`sliceStart`, `shared/sink/entry-bytes.ts`) becomes a local file of its own, an NDJSON (gzip) stream like
 * any other: each merged object is read once, as one stream cut into its shown slices on the way, each slice
 * checked against its entry.
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import { finished, pipeline as pipe } from 'node:stream/promises';
import { mapLimit } from '../concurrency.ts';
import type { Stream } from '../ledger/layout.ts';
import { groupByObject, isSlice, splitSlices } from '../sink/entry-bytes.ts';
import { GenerationView } from '../sink/generations.ts';
import { type FinalEncoding, parseFinalKey, parseMergedObjectKey } from '../sink/layout.ts';
import type { ManifestFile } from '../sink/manifest.ts';
import { CommittedFileError, ListingCheck } from '../sink/reader.ts';
import type { CommittedSource } from './sources.ts';

/** How the query engine reads a file, from the encoding the final key names (layout.ts). */
export type FileFormat = 'ndjson' | 'parquet';

export interface LocalCommittedFile {
  readonly path: string;
  readonly format: FileFormat;
  /** The key's time folder (`dt=…[/hour=…]`), kept in the local path so the engine can expose it as columns. */
  readonly folder?: string;
  readonly entry: ManifestFile;
  /**
   * Set when only some of the file's rows are shown (a replayed range begins or ends inside it,
   * `shared/sink/generations.ts`): the offset intervals, inclusive, whose rows are.
   */
  readonly shownOffsets?: ReadonlyArray<readonly [number, number]>;
}

export interface CollectOptions {
  readonly source: CommittedSource;
  readonly pipeline: string;
  readonly stream: Stream;
  /** An empty directory of the caller's; the files land in it as `[<folder>/]<n>.<extension>`. */
  readonly dir: string;
  /** Downloads in flight; default 8. */
  readonly concurrency?: number;
}

export interface CollectedFiles {
  readonly manifests: number;
  readonly files: readonly LocalCommittedFile[];
  /**
   * Sum of the shown files' record counts for the stream: what `SELECT count(*)` gives, except that a file only
   * partly shown (a replayed range's edge) counts whole.
   */
  readonly records: number;
}

const FORMATS: Readonly<Record<FinalEncoding, FileFormat>> = {
  ndjson: 'ndjson',
  'ndjson.gz': 'ndjson',
  parquet: 'parquet',
};

/** Where a listed (already checked) key goes locally and how it is read. */
function localPlace(
  pipeline: string,
  entry: ManifestFile,
): { format: FileFormat; encoding: FinalEncoding; folder?: string } {
  if (isSlice(entry)) {
    // A slice is NDJSON, gzip by the merged key's extension; merged objects sit in no time folder.
    const merged = parseMergedObjectKey(pipeline, entry.key);
    if (merged === undefined) {
      throw new CommittedFileError(
        entry.key,
        `is not the final data key of a merged object of pipeline ${pipeline}`,
      );
    }
    return { format: 'ndjson', encoding: merged.gzip ? 'ndjson.gz' : 'ndjson' };
  }
  const parts = parseFinalKey(pipeline, entry.key);
  if (parts === undefined) {
    throw new CommittedFileError(entry.key, `is not a final data key of pipeline ${pipeline}`);
  }
  return {
    format: FORMATS[parts.encoding],
    encoding: parts.encoding,
    ...(parts.folder === undefined ? {} : { folder: parts.folder }),
  };
}

/** Every listed entry of `stream`, in manifest order, after the whole log's keys are checked. */
async function listedEntries(
  options: CollectOptions,
): Promise<{ manifests: number; entries: ManifestFile[]; view: GenerationView }> {
  // Keys, and no key listed twice (a file listed twice would be counted twice: refused, C7), slices included.
  const listing = new ListingCheck(options.pipeline);
  const entries: ManifestFile[] = [];
  const view = new GenerationView();
  let manifests = 0;
  for await (const manifest of options.source.manifests()) {
    manifests++;
    view.apply(manifest);
    listing.add(manifest);
    for (const entry of manifest.files) if (entry.stream === options.stream) entries.push(entry);
  }
  return { manifests, entries, view };
}

/** Copies one listed object to `path`, hashing and counting on the way; throws unless it matches its entry. */
async function fetchChecked(source: CommittedSource, entry: ManifestFile, path: string): Promise<void> {
  const body = await source.open(entry.key);
  if (body === undefined)
    throw new CommittedFileError(entry.key, 'is listed by a manifest but does not exist');
  const hash = createHash('sha256');
  let bytes = 0;
  const measure = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      hash.update(chunk);
      bytes += chunk.length;
      done(null, chunk);
    },
  });
  await pipe(body, measure, createWriteStream(path));
  const sha256 = hash.digest('hex');
  if (bytes !== entry.bytes || sha256 !== entry.sha256) {
    throw new CommittedFileError(
      entry.key,
      `does not match its manifest (${bytes} bytes, SHA-256 ${sha256}; the manifest says ${entry.bytes} bytes, ${entry.sha256})`,
    );
  }
}

/** A shown slice of a merged object and where it goes. */
interface SliceTarget {
  readonly entry: ManifestFile;
  readonly path: string;
}

/**
 * Reads a merged object once, as a stream, writing each of `slices` (by start, not overlapping) to its path as it
 * passes; throws unless each slice's bytes match its entry (size and SHA-256).
 */
async function fetchSlicesChecked(
  source: CommittedSource,
  key: string,
  slices: readonly { readonly item: SliceTarget; readonly span?: { start: number; end: number } }[],
): Promise<void> {
  const body = await source.open(key);
  if (body === undefined) throw new CommittedFileError(key, 'is listed by a manifest but does not exist');
  const outs = slices.map(({ item }) => ({
    // Its errors reach `once` and `finished` below; the listener keeps one after a failure from crashing.
    file: createWriteStream(item.path).on('error', () => {}),
    hash: createHash('sha256'),
    bytes: 0,
  }));
  try {
    await splitSlices(
      body,
      slices.map(({ span }) => span!),
      async (index, chunk) => {
        const out = outs[index]!;
        out.hash.update(chunk);
        out.bytes += chunk.length;
        if (!out.file.write(chunk)) await once(out.file, 'drain');
      },
    );
  } finally {
    for (const out of outs) out.file.end();
    body.destroy();
  }
  await Promise.all(outs.map((out) => finished(out.file)));
  slices.forEach(({ item: { entry }, span }, index) => {
    const { bytes, hash } = outs[index]!;
    const sha256 = hash.digest('hex');
    if (bytes !== entry.bytes || sha256 !== entry.sha256) {
      throw new CommittedFileError(
        key,
        `does not match its manifest (${bytes} bytes, SHA-256 ${sha256}; the manifest says ${entry.bytes} bytes, ${entry.sha256} for its slice at ${span!.start}-${span!.end - 1})`,
      );
    }
  });
}

export async function collectCommittedFiles(options: CollectOptions): Promise<CollectedFiles> {
  const listed = await listedEntries(options);
  const { manifests, view } = listed;
  // Only the output generation each record's position shows (`shared/sink/generations.ts`).
  const entries = listed.entries.filter((entry) => view.visibility(entry) !== 'none');
  const files: LocalCommittedFile[] = entries.map((entry, index) => {
    const { format, encoding, folder } = localPlace(options.pipeline, entry);
    // A local name of our own under the key's time folder (checked by parseFinalKey: `dt=…[/hour=…]` only): the
    // engine sees no other part of a key, so nothing in one can act as a glob or a path.
    const parent = folder === undefined ? options.dir : join(options.dir, ...folder.split('/'));
    mkdirSync(parent, { recursive: true });
    const path = join(parent, `${String(index).padStart(8, '0')}.${encoding}`);
    const shown = view.visibility(entry) === 'rows' ? { shownOffsets: view.shownSpans(entry) } : {};
    return { path, format, ...(folder === undefined ? {} : { folder }), entry, ...shown };
  });
  // One read per object: a merged object's shown slices are cut from one stream of it.
  const groups = groupByObject(files, (file) => file.entry);
  await mapLimit(groups, options.concurrency ?? 8, async (group) => {
    if (group.merged) await fetchSlicesChecked(options.source, group.key, group.items);
    else await fetchChecked(options.source, group.items[0]!.item.entry, group.items[0]!.item.path);
  });
  return { manifests, files, records: entries.reduce((sum, entry) => sum + entry.recordCount, 0) };
}
