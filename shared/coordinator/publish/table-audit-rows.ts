/**
 * The rows part of the table audit (`table-audit.ts`): which data files the table must hold after the
 * checkpoints up to the published one, by the readers' rule (`sink/generations.ts`), and which of their rows its
 * position deletes must hide.
 *
 * Files: in manifest order, a file enters the table with the first checkpoint after which some of its rows are
 * shown (its own, or the switch to its generation), that checkpoint's snapshot adding it, and leaves it with the
 * first switch after which none are (`generation-changes.ts` publishes by the same rule).
 *
 * Rows: for each live data file, the positions the head's position delete files name for it must be exactly the
 * positions of its rows the readers hide (read from its lineage, `source.offset`); a file shown whole has none.
 * Every position delete file live in the head counts, whoever wrote it: readers apply them all.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { bucketByteSource, readEntryBytes } from '../../sink/entry-bytes.ts';
import { GenerationView, rowOffset } from '../../sink/generations.ts';
import type { Manifest, ManifestFile } from '../../sink/manifest.ts';
import { getBytes } from '../../sink/objects.ts';
import { decodeParquetRows } from '../../sink/parquet-read.ts';

/** A data file the table must hold live, and what of it is shown. */
export interface ExpectedFile {
  /** The checkpoint whose snapshot added it. */
  readonly addedBy: number;
  readonly listed: ManifestFile;
  /** Its shown offset spans; whole when they cover the file. */
  readonly shown: ReadonlyArray<readonly [number, number]>;
  readonly whole: boolean;
}

/** The files of a manifest publishing takes (by location), with their manifest entries. */
export type TakenFiles = (manifest: Manifest) => {
  readonly paths: string[];
  readonly listed: ManifestFile[];
};

/**
 * The files the table must hold after checkpoint `upTo` (by location), and the files publishing took but no
 * reader shows (by location, with the checkpoint that listed them).
 */
export function expectedFiles(
  manifests: readonly Manifest[],
  upTo: number,
  taken: TakenFiles,
): { live: Map<string, ExpectedFile>; hidden: Map<string, number> } {
  const view = new GenerationView();
  const live = new Map<string, { addedBy: number; listed: ManifestFile }>();
  const pending = new Map<string, { checkpointId: number; listed: ManifestFile }>();
  for (const manifest of manifests) {
    const checkpointId = manifest.checkpointId;
    if (checkpointId > upTo) break;
    view.apply(manifest);
    const switched = (manifest.generations ?? []).length > 0;
    if (switched) {
      for (const [path, file] of live) {
        if (view.visibility(file.listed) === 'none') {
          live.delete(path);
          pending.set(path, { checkpointId: file.addedBy, listed: file.listed });
        }
      }
      for (const [path, file] of pending) {
        if (view.visibility(file.listed) === 'none') continue;
        pending.delete(path);
        live.set(path, { addedBy: checkpointId, listed: file.listed });
      }
    }
    const own = taken(manifest);
    own.paths.forEach((path, index) => {
      const listed = own.listed[index] as ManifestFile;
      if (view.visibility(listed) === 'none') pending.set(path, { checkpointId, listed });
      else live.set(path, { addedBy: checkpointId, listed });
    });
  }
  const out = new Map<string, ExpectedFile>();
  for (const [path, file] of live) {
    const shown = view.shownSpans(file.listed);
    out.set(path, { ...file, shown, whole: view.visibility(file.listed) === 'all' });
  }
  const hidden = new Map([...pending].map(([path, file]) => [path, file.checkpointId]));
  return { live: out, hidden };
}

/** Position deletes by data file location, read from the delete files at `locations`. */
export async function positionDeletes(
  s3: S3Client,
  locations: readonly string[],
  canonical: (location: string) => string,
): Promise<Map<string, Set<number>>> {
  const deleted = new Map<string, Set<number>>();
  const rows = await mapLimit(locations, 8, async (location) => {
    const match = /^s3[an]?:\/\/([^/]+)\/(.+)$/.exec(location);
    const body = match ? await getBytes(s3, match[1] as string, match[2] as string) : undefined;
    if (!body) throw new Error(`the delete file ${location} is missing`);
    return decodeParquetRows(body);
  });
  for (const row of rows.flat()) {
    const path = canonical(String(row.file_path));
    const set = deleted.get(path) ?? new Set<number>();
    set.add(Number(row.pos));
    deleted.set(path, set);
  }
  return deleted;
}

/** The violations of `file` (at `location`) whose rows `deleted` names: hidden rows shown, or shown rows deleted. */
export async function rowViolations(
  s3: S3Client,
  bucket: string,
  location: string,
  file: ExpectedFile,
  deleted: ReadonlySet<number> | undefined,
): Promise<string[]> {
  if (file.whole && deleted === undefined) return [];
  // Through the entry's reader: a data file is a whole Parquet object (`data-files.ts` takes no slice).
  const body = await readEntryBytes(bucketByteSource(s3, bucket), file.listed);
  if (!body) return [`${file.listed.key} is a live data file, but it is not in the bucket`];
  const rows = await decodeParquetRows(body, ['source']);
  let [visible, lost] = [0, 0];
  rows.forEach((row, position) => {
    const offset = rowOffset(row);
    const shown = offset !== undefined && file.shown.some(([from, to]) => offset >= from && offset <= to);
    const gone = deleted?.has(position) ?? false;
    if (!shown && !gone) visible++;
    if (shown && gone) lost++;
  });
  const out: string[] = [];
  if (visible > 0) {
    out.push(`${file.listed.key}: ${visible} row(s) the readers hide are visible in the table (${location})`);
  }
  if (lost > 0) out.push(`${file.listed.key}: ${lost} row(s) the readers show are deleted in the table`);
  return out;
}
