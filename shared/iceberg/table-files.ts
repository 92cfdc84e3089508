/**
 * Which files a table's snapshot holds, read from its manifest list and its manifests as any reader would: a data
 * file is live in a snapshot when an ADDED or EXISTING entry of one of its data manifests names it (a DELETED
 * entry records a removal and names no live file). And which files a snapshot removed: the DELETED entries of the
 * manifests that snapshot itself wrote, which is where a compaction or a delete records what it took out.
 *
 * Manifests are written once and shared by the lists of many snapshots, so each is read once per reader.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../concurrency.ts';
import { PipelineError } from '../errors.ts';
import { getBytes } from '../sink/objects.ts';
import { decodeManifestEntries, ENTRY_DELETED, type ManifestEntryFile } from './manifest-entries.ts';
import { decodeManifestList, type ManifestListEntry } from './manifest-list.ts';
import { s3ObjectOf } from './metadata-json.ts';
import type { Snapshot } from './table-metadata.ts';

/** A manifest list or manifest the table's metadata names is not in the bucket. */
export class TableFileMissingError extends PipelineError {}

/** One entry naming a live data file: which snapshot added the file (undefined: the entry does not say). */
export interface LiveEntry {
  readonly addedBy: bigint | undefined;
}

export interface SnapshotFiles {
  /** Live data files by location, one element per entry naming the file (more than one: listed twice). */
  readonly live: ReadonlyMap<string, readonly LiveEntry[]>;
  /** Live delete files (row-level deletes). */
  readonly deleteFiles: number;
  /** The locations of the live position delete files (content 1). */
  readonly positionDeleteFiles?: readonly string[];
}

/** Reads a table's manifest lists and manifests from S3, each manifest once. */
export class TableFileReader {
  private readonly manifests = new Map<string, Promise<ManifestEntryFile[]>>();

  constructor(private readonly s3: S3Client) {}

  private async bytes(location: string, what: string): Promise<Buffer> {
    const { bucket, key } = s3ObjectOf(location);
    const bytes = await getBytes(this.s3, bucket, key);
    if (bytes === undefined) throw new TableFileMissingError(`the ${what} ${location} is missing`);
    return bytes;
  }

  /** The manifests `snapshot`'s list names. */
  async list(snapshot: Snapshot): Promise<ManifestListEntry[]> {
    const where = snapshot['manifest-list'];
    return decodeManifestList(
      await this.bytes(where, `manifest list of snapshot ${snapshot['snapshot-id']}`),
    );
  }

  /** The entries of the manifest at `location`. */
  entries(location: string): Promise<ManifestEntryFile[]> {
    let read = this.manifests.get(location);
    if (read === undefined) {
      read = this.bytes(location, 'manifest').then(decodeManifestEntries);
      this.manifests.set(location, read);
    }
    return read;
  }
}

/** The files `snapshot` holds (see the module comment); `concurrency` manifests read at once. */
export async function snapshotFiles(
  reader: TableFileReader,
  snapshot: Snapshot,
  concurrency = 16,
): Promise<SnapshotFiles> {
  const manifests = await reader.list(snapshot);
  const entries = await mapLimit(manifests, concurrency, (manifest) =>
    reader.entries(manifest.manifest_path),
  );
  const live = new Map<string, LiveEntry[]>();
  let deleteFiles = 0;
  const positionDeleteFiles: string[] = [];
  manifests.forEach((manifest, index) => {
    for (const entry of entries[index] ?? []) {
      if (entry.status === ENTRY_DELETED) continue;
      if (manifest.content !== 0 || entry.content !== 0) {
        deleteFiles++;
        if (entry.content === 1) positionDeleteFiles.push(entry.path);
        continue;
      }
      // An entry without its snapshot id inherits the manifest's (spec, "Snapshot ID Inheritance").
      const addedBy = entry.snapshotId ?? manifest.added_snapshot_id;
      live.set(entry.path, [...(live.get(entry.path) ?? []), { addedBy }]);
    }
  });
  return { live, deleteFiles, positionDeleteFiles };
}

/** The data files `snapshot` removed: DELETED entries of the manifests it wrote. */
export async function filesRemovedBy(reader: TableFileReader, snapshot: Snapshot): Promise<string[]> {
  const id = snapshot['snapshot-id'];
  const removed: string[] = [];
  for (const manifest of await reader.list(snapshot)) {
    if (manifest.added_snapshot_id !== id || manifest.content !== 0) continue;
    for (const entry of await reader.entries(manifest.manifest_path)) {
      if (entry.status === ENTRY_DELETED && entry.content === 0 && (entry.snapshotId ?? id) === id) {
        removed.push(entry.path);
      }
    }
  }
  return removed;
}
