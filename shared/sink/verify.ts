/**
 * `eos verify`: checks a bucket's committed layout against C5/C7, with nothing but S3 reads, so it works on a
 * deployed bucket as well as on the local runner's. It trusts no other module's reader: it lists and reads every
 * object itself.
 *
 * What must hold for a pipeline (`<pl>/_manifests/` and `<pl>/final/`):
 * 1. manifests `<pl>/_manifests/<N, 12 digits>.json` form a gap-free ordered log: ids 1..N, each naming its
 *    predecessor, each cut starting where the previous one ended and never moving back;
 * 2. every final object a manifest lists (NDJSON or Parquet, by its key) is a final data key of this pipeline
 *    naming exactly the entry's stream, partition and range (else `foreign-key`: never read), is listed exactly once, exists, and has the listed
 *    size, SHA-256 and row count, with every row inside the listed offset range and the manifest's cut. A slice
 *    entry (`sliceStart`, `entry-bytes.ts`) must instead name a merged key of this pipeline and the entry's
 *    stream that names the listing manifest's checkpoint (else `foreign-key`, and `listed-twice` as well when
 *    another manifest lists the key; a key listed both whole and as slices is both too); each slice is checked
 *    like a whole object (size, SHA-256, rows, range, lineage), and the slices of a merged object must tile it
 *    exactly: from byte 0, no gap, no bytes past the last slice (`object-mismatch`), no overlap (`listed-twice`).
 *    Each merged object is read once for all of its slices;
 * 3. no lineage (topic, partition, offset) appears twice, across files and streams, within an epoch (one row per
 *    record: the shipped `orders` transform emits exactly one; epoch N >= 1 of a topic is the lane `<topic>~<N>`,
 *    whose offsets start again, see `ledger/epochs.ts`); and no record is output in two lanes of one source
 *    partition (a redriven record in its lane and a redrive round `<lane>~r<R>`, or in two rounds);
 * 4. per stream and partition (and time folder), offsets increase in commit order (manifest order, then
 *    file order, then row order);
 * 5. nothing lies under the final prefix that no manifest lists;
 * 6. replay generations (`shared/replay/`): each switch is well-formed, names a generation once, and is covered
 *    by its manifest's own cut (the generation lane committed through each range's end); a switched generation's
 *    rows lie inside its ranges. Each generation is a lane of its own for 3 and 4.
 * A checkpoint that is committing while this runs may show its promoted objects as unlisted (5) until its
 * manifest lands: verify a quiet pipeline, or run it twice.
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../concurrency.ts';
import { STREAMS, type Stream } from '../ledger/layout.ts';
import {
  cutSlice,
  groupByObject,
  isSlice,
  type ObjectGroup,
  sliceEntryProblem,
  sliceKeyProblem,
  sliceSpan,
  tilingProblems,
} from './entry-bytes.ts';
import type { KeyedObjects } from './folder-objects.ts';
import { FINAL_DIR, finalPrefix, manifestsPrefix, parseFinalKey, parseMergedObjectKey } from './layout.ts';
import type { Manifest, ManifestFile } from './manifest.ts';
import { ndjsonLines } from './ndjson.ts';
import { getBytes, listObjects } from './objects.ts';
import { decodeParquetRows } from './parquet-read.ts';
import { Checker, type Problem } from './verify-checker.ts';

export { PROBLEM_KINDS, type Problem, type ProblemKind } from './verify-checker.ts';

interface VerifyCommon {
  /** The bucket, read through `s3`; or `objects`, a folder copy of one (`folder-objects.ts`). */
  readonly s3?: S3Client;
  readonly bucket?: string;
  readonly objects?: KeyedObjects;
  /** Parallel GETs; default 16. */
  readonly concurrency?: number;
  /** Called after each manifest and each object read: a large bucket takes minutes. */
  readonly onProgress?: (progress: VerifyProgress) => void;
}

/** How far a verify has got: manifests read, then final objects read and checked, of how many. */
export interface VerifyProgress {
  readonly phase: 'manifests' | 'objects';
  readonly done: number;
  readonly total: number;
}

/**
 * Which pipeline: its id (the root prefix, e.g. `orders`), or — the older form, still accepted — its final prefix
 * (`orders/final/`), from which the id is derived.
 */
export type VerifyOptions =
  | (VerifyCommon & { readonly pipeline: string; readonly prefix?: undefined })
  | (VerifyCommon & { readonly prefix: string; readonly pipeline?: undefined });

/** The pipeline id a {@link VerifyOptions} names; throws if a prefix is not `<pipeline>/final/`. */
export function pipelineOf(options: VerifyOptions): string {
  if (options.pipeline !== undefined) return options.pipeline.replace(/\/+$/, '');
  const prefix = normalizePrefix(options.prefix);
  const suffix = `/${FINAL_DIR}/`;
  if (!prefix.endsWith(suffix) || prefix.length === suffix.length) {
    throw new Error(`--prefix ${options.prefix} is not a pipeline's final prefix (<pipeline>/${FINAL_DIR}/)`);
  }
  return prefix.slice(0, -suffix.length);
}

export interface VerifyResult {
  readonly ok: boolean;
  readonly problems: readonly Problem[];
  readonly manifests: number;
  /** Final objects read: whole ones, and merged ones (each read once for all of its slices). */
  readonly files: number;
  /** Slice entries read, of the merged objects among {@link files}. */
  readonly slices: number;
  readonly rows: Readonly<Record<Stream, number>>;
  readonly unlistedObjects: number;
}

/** A row of a final object with where it was found. */
export interface FinalRow {
  readonly key: string;
  readonly stream: Stream;
  readonly row: Record<string, unknown>;
  /** For a row of a merged object's slice: the lane (topic) its manifest entry names, which the key does not. */
  readonly topic?: string;
}

const MANIFEST_NAME = /^(\d{12})\.json$/;

export function normalizePrefix(prefix: string): string {
  return prefix === '' || prefix.endsWith('/') ? prefix : `${prefix}/`;
}

/** Every key under `prefix`, sorted. */
export async function listKeys(s3: S3Client, bucket: string, prefix: string): Promise<string[]> {
  const keys: string[] = [];
  for await (const object of listObjects(s3, bucket, prefix)) keys.push(object.key);
  return keys.sort();
}

/** Rows of a final object: Parquet by the `.parquet` extension, else NDJSON (gzip by `.gz`); throws when malformed. */
export async function parseRows(key: string, body: Buffer): Promise<Record<string, unknown>[]> {
  if (key.endsWith('.parquet')) return decodeParquetRows(body);
  // Line by line: a final object's whole text can be longer than one string can be.
  const rows: Record<string, unknown>[] = [];
  for await (const line of ndjsonLines(body, key.endsWith('.gz')))
    rows.push(JSON.parse(line) as Record<string, unknown>);
  return rows;
}

/** The stream of a final object from its key: `<prefix><stream>/topic=…`. */
export function streamOfKey(prefix: string, key: string): Stream | undefined {
  const head = key.slice(prefix.length).split('/')[0];
  return (STREAMS as readonly string[]).includes(head ?? '') ? (head as Stream) : undefined;
}

function objectsOf(options: VerifyOptions): KeyedObjects {
  if (options.objects) return options.objects;
  const { s3, bucket } = options;
  if (!s3 || bucket === undefined) throw new TypeError('verify needs s3 and bucket, or objects');
  return { list: (prefix) => listKeys(s3, bucket, prefix), get: (key) => getBytes(s3, bucket, key) };
}

/**
 * Every row of every object under the final prefix, listed or not. A merged object's rows carry the lane (`topic`)
 * of the slice they lie in when the manifest naming its checkpoint lists slices that tile it exactly; otherwise
 * (unlisted, or sliced wrongly) its rows are read whole, without one.
 */
export async function readFinalRows(options: VerifyOptions): Promise<FinalRow[]> {
  const pipeline = pipelineOf(options);
  const prefix = finalPrefix(pipeline);
  const objects = objectsOf(options);
  const keys = await objects.list(prefix);
  const slices = await mergedSlices(options, pipeline, keys);
  const perKey = await mapLimit(keys, options.concurrency ?? 16, async (key) => {
    const body = await objects.get(key);
    const stream = streamOfKey(prefix, key) ?? 'output';
    if (!body) return [];
    const listed = slices.get(key) ?? [];
    const spans = listed.map((file) => sliceSpan(file)!);
    if (listed.length === 0 || tilingProblems(spans, body.length).length > 0) {
      return (await parseRows(key, body)).map((row) => ({ key, stream, row }));
    }
    const rows: FinalRow[] = [];
    for (const [index, file] of listed.entries()) {
      for (const row of await parseRows(key, cutSlice(key, body, spans[index]!))) {
        rows.push({ key, stream, row, topic: file.topic });
      }
    }
    return rows;
  });
  return perKey.flat();
}

/** The well-formed slices each merged key among `keys` is listed by (by the manifest of its checkpoint), by start. */
async function mergedSlices(
  options: VerifyOptions,
  pipeline: string,
  keys: readonly string[],
): Promise<Map<string, ManifestFile[]>> {
  const slices = new Map<string, ManifestFile[]>();
  if (!keys.some((key) => parseMergedObjectKey(pipeline, key) !== undefined)) return slices;
  for (const { manifest } of await readManifests(options, pipeline, new Checker())) {
    for (const file of manifest.files) {
      if (!isSlice(file) || sliceEntryProblem(pipeline, manifest.checkpointId, file) !== undefined) continue;
      slices.set(file.key, [...(slices.get(file.key) ?? []), file]);
    }
  }
  for (const list of slices.values()) list.sort((a, b) => (a.sliceStart ?? 0) - (b.sliceStart ?? 0));
  return slices;
}

async function readManifests(options: VerifyOptions, pipeline: string, checker: Checker) {
  const prefix = manifestsPrefix(pipeline);
  const objects = objectsOf(options);
  const manifestKeys = await objects.list(prefix);
  const named = manifestKeys.flatMap((key) => {
    const match = MANIFEST_NAME.exec(key.slice(prefix.length));
    if (!match) checker.problem('manifest-unreadable', 'not named <12 digits>.json', key);
    return match ? [{ key, id: Number(match[1]) }] : [];
  });
  let done = 0;
  const read = await mapLimit(named, options.concurrency ?? 16, async ({ key, id }) => {
    const body = await objects.get(key);
    options.onProgress?.({ phase: 'manifests', done: ++done, total: named.length });
    try {
      const manifest = JSON.parse(body?.toString('utf8') ?? '') as Manifest;
      if (!Array.isArray(manifest.files)) throw new Error('no files list');
      return [{ key, id, manifest }];
    } catch (error) {
      checker.problem('manifest-unreadable', `not a manifest (${(error as Error).message})`, key);
      return [];
    }
  });
  return read.flat().sort((a, b) => a.id - b.id);
}

/** A listed entry's bytes (the whole object's, or its slice's) against the entry: format, size, SHA-256, rows. */
async function checkEntry(file: ManifestFile, body: Buffer, checker: Checker) {
  const sha256 = createHash('sha256').update(body).digest('hex');
  const format = file.key.endsWith('.parquet') ? 'parquet' : 'ndjson';
  const what = isSlice(file) ? `slice at ${file.sliceStart}: ` : '';
  if (file.format !== undefined && file.format !== format) {
    checker.problem('object-mismatch', `${what}listed as ${file.format}, the key says ${format}`, file.key);
  }
  if (body.length !== file.bytes || sha256 !== file.sha256) {
    checker.problem(
      'object-mismatch',
      `${what}${body.length} bytes with SHA-256 ${sha256.slice(0, 12)}…, listed as ${file.bytes} bytes with ${String(file.sha256).slice(0, 12)}…`,
      file.key,
    );
  }
  try {
    const rows = await parseRows(file.key, body);
    if (rows.length !== file.recordCount) {
      checker.problem(
        'object-mismatch',
        `${what}holds ${rows.length} rows, listed with ${file.recordCount}`,
        file.key,
      );
    }
    return rows;
  } catch (error) {
    const format = file.key.endsWith('.parquet') ? 'Parquet' : 'NDJSON';
    checker.problem('row-malformed', `${what}not ${format} (${(error as Error).message})`, file.key);
    return [];
  }
}

/** A listed entry and the manifest that lists it. */
interface Listed {
  readonly manifest: Manifest;
  readonly file: ManifestFile;
}

/**
 * The rows of each entry of one object group (`entry-bytes.ts`): a whole object, or a merged object read once for
 * all of its slices, whose slices must tile it exactly (a gap, bytes past the last slice or a short object are
 * `object-mismatch`, an overlap `listed-twice`) and are each checked like a whole object.
 */
async function checkGroup(
  objects: KeyedObjects,
  group: ObjectGroup<Listed>,
  checker: Checker,
): Promise<Record<string, unknown>[][]> {
  const body = await objects.get(group.key);
  if (!group.merged) {
    const { file } = group.items[0]!.item;
    if (!body) {
      checker.problem('missing-object', 'listed by a manifest but absent', file.key);
      return [[]];
    }
    return [await checkEntry(file, body, checker)];
  }
  const checkpointId = group.items[0]!.item.manifest.checkpointId;
  if (!body) {
    checker.problem(
      'missing-object',
      `listed as ${group.items.length} slice(s) by manifest ${checkpointId} but absent`,
      group.key,
    );
    return group.items.map(() => []);
  }
  const spans = group.items.map(({ span }) => span!);
  for (const tiling of tilingProblems(spans, body.length)) {
    const kind = tiling.kind === 'overlap' ? 'listed-twice' : 'object-mismatch';
    checker.problem(kind, `a merged object of checkpoint ${checkpointId}: ${tiling.message}`, group.key);
  }
  const rows: Record<string, unknown>[][] = [];
  for (const { item, span } of group.items) {
    if (span!.end > body.length) {
      checker.problem(
        'object-mismatch',
        `slice at ${span!.start} of ${item.file.bytes} bytes runs past the object's end (${body.length} bytes)`,
        group.key,
      );
      rows.push([]);
      continue;
    }
    rows.push(await checkEntry(item.file, cutSlice(group.key, body, span!), checker));
  }
  return rows;
}

/** True when `file.key` is the final data key of exactly the entry's stream, partition and range. */
function isFinalDataKey(pipeline: string, file: ManifestFile): boolean {
  const parts = parseFinalKey(pipeline, String(file.key));
  return (
    parts !== undefined &&
    parts.stream === file.stream &&
    parts.topic === file.topic &&
    parts.partition === file.partition &&
    parts.firstOffset === file.firstOffset &&
    parts.lastOffset === file.lastOffset
  );
}

/** Why an entry of checkpoint `checkpointId`'s manifest may not be read as listed (never read then); else undefined. */
function foreignKeyProblem(pipeline: string, checkpointId: number, file: ManifestFile): string | undefined {
  if (isSlice(file)) {
    const problem = sliceKeyProblem(pipeline, checkpointId, file);
    return problem === undefined ? undefined : `manifest ${checkpointId} lists a slice whose key ${problem}`;
  }
  if (isFinalDataKey(pipeline, file)) return undefined;
  return parseMergedObjectKey(pipeline, String(file.key)) === undefined
    ? `manifest ${checkpointId} lists a key that is not a final data key of pipeline ${pipeline} for ${file.stream} ${file.topic}/${file.partition} ${file.firstOffset}-${file.lastOffset}`
    : `manifest ${checkpointId} lists a merged object as a whole object (a merged object is read only by slices)`;
}

/**
 * Which entries are read, by the rules of the module comment (2): an entry whose key may not be read is
 * `foreign-key` (and `listed-twice` too when its key is listed elsewhere), a malformed slice `object-mismatch`; a
 * key is listed once (whole, or as slices by one manifest) else `listed-twice`. Returns the readable entries in
 * manifest order and every key a manifest lists readably (for `unlisted-object`).
 */
function listedEntries(
  pipeline: string,
  manifests: readonly { manifest: Manifest }[],
  checker: Checker,
): { readable: Listed[]; listed: Set<string> } {
  const readable: Listed[] = [];
  const unread: Listed[] = [];
  const listed = new Map<string, { readonly checkpointId: number; readonly slices: boolean }>();
  for (const { manifest } of manifests) {
    for (const file of manifest.files) {
      const foreign = foreignKeyProblem(pipeline, manifest.checkpointId, file);
      if (foreign !== undefined) {
        // A key outside this pipeline's final data (a manifest, a staged object, another pipeline) is never read.
        checker.problem('foreign-key', foreign, String(file.key));
        unread.push({ manifest, file });
        continue;
      }
      const slices = isSlice(file);
      const first = listed.get(file.key);
      if (first === undefined) listed.set(file.key, { checkpointId: manifest.checkpointId, slices });
      else if (!slices || !first.slices || first.checkpointId !== manifest.checkpointId) {
        checker.problem(
          'listed-twice',
          `listed by manifests ${first.checkpointId} and ${manifest.checkpointId}`,
          file.key,
        );
      }
      const shape = slices ? sliceEntryProblem(pipeline, manifest.checkpointId, file) : undefined;
      if (shape !== undefined) {
        checker.problem(
          'object-mismatch',
          `manifest ${manifest.checkpointId}: this entry ${shape}`,
          file.key,
        );
        continue;
      }
      readable.push({ manifest, file });
    }
  }
  for (const { manifest, file } of unread) {
    const other = listed.get(String(file.key));
    if (other === undefined) continue;
    checker.problem(
      'listed-twice',
      `listed ${isSlice(file) ? 'as a slice' : 'whole'} by manifest ${manifest.checkpointId} and ${other.slices ? 'as slices' : 'whole'} by manifest ${other.checkpointId}`,
      String(file.key),
    );
  }
  return { readable, listed: new Set(listed.keys()) };
}

export async function verifySink(options: VerifyOptions): Promise<VerifyResult> {
  const pipeline = pipelineOf(options);
  const prefix = finalPrefix(pipeline);
  const checker = new Checker();
  const objects = objectsOf(options);
  const manifests = await readManifests(options, pipeline, checker);
  checker.chain(manifests);
  const { readable, listed } = listedEntries(pipeline, manifests, checker);
  // One read per object: a merged object's slices are cut from it (`entry-bytes.ts`).
  const groups = groupByObject(readable, (entry) => entry.file);
  let checked = 0;
  const contents = new Map<Listed, Record<string, unknown>[]>();
  await mapLimit(groups, options.concurrency ?? 16, async (group) => {
    const rows = await checkGroup(objects, group, checker);
    group.items.forEach(({ item }, index) => {
      contents.set(item, rows[index]!);
    });
    options.onProgress?.({ phase: 'objects', done: ++checked, total: groups.length });
  });
  for (const entry of readable) {
    checker.rowsOf(
      entry.manifest,
      entry.file,
      contents.get(entry)!,
      parseFinalKey(pipeline, entry.file.key)?.folder,
    );
  }
  if (manifests.length === 0) {
    checker.problem(
      'no-manifests',
      `no manifest under ${manifestsPrefix(pipeline)}: a wrong pipeline, or nothing committed yet`,
    );
  }
  const present = await objects.list(prefix);
  let unlisted = 0;
  for (const key of present) {
    if (listed.has(key)) continue;
    unlisted++;
    checker.problem('unlisted-object', 'under the final prefix but listed by no manifest', key);
  }
  return {
    ok: checker.problems.length === 0,
    problems: checker.problems,
    manifests: manifests.length,
    files: groups.length,
    slices: readable.filter((entry) => isSlice(entry.file)).length,
    rows: checker.rows,
    unlistedObjects: unlisted,
  };
}

/** A readable report: a summary line, then each problem (capped; the rest counted by kind). */
export function formatVerifyResult(result: VerifyResult, maxProblems = 50): string {
  const slices = result.slices > 0 ? ` (${result.slices} slices of merged ones)` : '';
  const summary = `${result.manifests} manifests, ${result.files} final objects${slices}, ${result.rows.output} output rows, ${result.rows.deadletter} dead-letter rows`;
  if (result.ok)
    return `OK: ${summary}; manifests gap-free, every object listed once, no lineage twice, offsets in order, nothing unlisted`;
  const lines = [`FAILED: ${result.problems.length} problem(s); ${summary}`];
  for (const problem of result.problems.slice(0, maxProblems)) {
    lines.push(`  - [${problem.kind}] ${problem.key ? `${problem.key}: ` : ''}${problem.message}`);
  }
  if (result.problems.length > maxProblems) {
    const rest = new Map<string, number>();
    for (const p of result.problems.slice(maxProblems)) rest.set(p.kind, (rest.get(p.kind) ?? 0) + 1);
    lines.push(`  … and ${[...rest].map(([kind, n]) => `${n} more ${kind}`).join(', ')}`);
  }
  return lines.join('\n');
}
