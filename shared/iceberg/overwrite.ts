/**
 * The manifests of an overwrite snapshot (Iceberg operation `overwrite`): in one swap it adds data files, removes
 * whole files the parent holds, and deletes single rows of files by position (`position-deletes.ts`).
 *
 * What it changes is a function of the parent's live data files ({@link ChangesOf}), asked again for every parent
 * the commit is tried on: a concurrent writer (a compaction) may have rewritten a file the changes meant to delete
 * rows of, and deletes computed against another parent would name rows of a file that is no longer there while
 * its rows live on in the rewrite.
 *
 * A removed file's entry is written DELETED in a rewrite of each parent manifest that lists it live, every other
 * entry of those manifests EXISTING (`manifestWithout`), as Iceberg's own overwrite does: a DELETED entry in a new
 * manifest beside the old ADDED one would leave the file live. Position delete files go in one delete manifest.
 * Every object is written once under a key of the snapshot id and a digest of its bytes, so every attempt on the
 * same parent rewrites the same keys.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../concurrency.ts';
import { PipelineError } from '../errors.ts';
import { decodeManifestEntries, ENTRY_DELETED } from './manifest-entries.ts';
import { type DataFile, encodeManifest } from './manifest-file.ts';
import { addedManifestEntry, type ManifestListEntry } from './manifest-list.ts';
import { type ManifestStore, manifestWithout } from './manifest-merge.ts';
import type { PartitionSpec } from './partition-spec.ts';
import { type PositionDelete, writePositionDeletes } from './position-deletes.ts';
import type { IcebergSchema } from './schema.ts';
import type { TableMetadata } from './table-metadata.ts';

/** What one snapshot changes, against one parent. */
export interface SnapshotChanges {
  /** Data files added. */
  readonly dataFiles: readonly DataFile[];
  /** Locations of data files live in the parent, removed whole. */
  readonly removed: readonly string[];
  /** Rows of data files (live in the parent, or added here) deleted by position. */
  readonly positionDeletes: readonly PositionDelete[];
  /** `overwrite` when the snapshot replaces rows the parent shows (a generation switch), else `append`. */
  readonly operation: 'append' | 'overwrite';
}

/**
 * The changes of a snapshot on a parent whose live data files are `parentLive`: each location, and the spec ids of
 * the parent's manifests that list it.
 */
export type ChangesOf = (parentLive: ReadonlyMap<string, readonly number[]>) => Promise<SnapshotChanges>;

/** A file to remove is live in a parent manifest this writer cannot rewrite: nothing is committed. */
export class OverwriteManifestError extends PipelineError {}

/** The parent's live data files: each location, and the parent's data manifests that list it live. */
export async function liveDataFiles(
  store: ManifestStore,
  inherited: readonly ManifestListEntry[],
): Promise<Map<string, ManifestListEntry[]>> {
  const data = inherited.filter((manifest) => manifest.content === 0);
  const entries = await mapLimit(data, 8, async (manifest) =>
    decodeManifestEntries(await store.read(manifest.manifest_path)),
  );
  const live = new Map<string, ManifestListEntry[]>();
  data.forEach((manifest, index) => {
    for (const entry of entries[index] ?? []) {
      if (entry.status === ENTRY_DELETED || entry.content !== 0) continue;
      const holders = live.get(entry.path) ?? [];
      if (!holders.includes(manifest)) holders.push(manifest);
      live.set(entry.path, holders);
    }
  });
  return live;
}

export interface OverwriteInput {
  readonly s3: S3Client;
  readonly store: ManifestStore;
  readonly metadata: TableMetadata;
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  readonly snapshotId: bigint;
  readonly sequenceNumber: bigint;
  readonly inherited: readonly ManifestListEntry[];
  readonly live: ReadonlyMap<string, readonly ManifestListEntry[]>;
  readonly changes: SnapshotChanges;
}

/** What the snapshot's summary counts besides the added data files. */
export interface OverwriteCounts {
  readonly removedFiles: number;
  readonly removedRecords: number;
  readonly removedBytes: number;
  readonly deleteFiles: number;
  readonly positionDeletes: number;
}

export interface OverwriteManifests {
  /** The manifests the snapshot writes (added data, rewritten, deletes), first in its list. */
  readonly added: ManifestListEntry[];
  /** The parent's manifests it keeps as they are. */
  readonly inherited: ManifestListEntry[];
  readonly counts: OverwriteCounts;
}

/** Writes the snapshot's delete files and manifests (see the module comment). */
export async function overwriteManifests(input: OverwriteInput): Promise<OverwriteManifests> {
  const { store, schema, spec, snapshotId, sequenceNumber, changes } = input;
  for (const { dataFile } of changes.positionDeletes) {
    const other = input.live
      .get(dataFile.path)
      ?.find((manifest) => manifest.partition_spec_id !== spec['spec-id']);
    // A position delete applies to data files of its own spec and partition: one written under the current spec
    // would not apply, for readers that match them (Iceberg's Java library), to a file of an earlier spec.
    if (other !== undefined) {
      throw new OverwriteManifestError(
        `rows of ${dataFile.path} are to be deleted, but the table lists it under partition spec ${other.partition_spec_id}, not the current ${spec['spec-id']}: position deletes would not apply to it; nothing is committed`,
      );
    }
  }
  const added: ManifestListEntry[] = [];
  const newEntry = (path: string, length: number, files: readonly DataFile[]) =>
    addedManifestEntry({ path, length, schema, spec, files, snapshotId, sequenceNumber });
  if (changes.dataFiles.length > 0) {
    const bytes = encodeManifest({ schema, spec, snapshotId, files: changes.dataFiles });
    added.push(newEntry(await store.write(`${snapshotId}-m0`, bytes), bytes.length, changes.dataFiles));
  }
  const removed = new Set(changes.removed);
  const rewrite = input.inherited.filter((manifest) =>
    [...removed].some((path) => input.live.get(path)?.includes(manifest)),
  );
  let [removedRecords, removedBytes] = [0n, 0n];
  for (const [index, manifest] of rewrite.entries()) {
    const rewritten = await manifestWithout(
      { metadata: input.metadata, snapshotId, sequenceNumber },
      manifest,
      removed,
      store,
      index,
    );
    if (rewritten === undefined) {
      throw new OverwriteManifestError(
        `the manifest ${manifest.manifest_path} lists a file to remove but cannot be rewritten whole: nothing is committed`,
      );
    }
    added.push(rewritten.entry);
    removedRecords += rewritten.removedRecords;
    removedBytes += rewritten.removedBytes;
  }
  const deleteFiles = await mapLimit(changes.positionDeletes, 8, (deletes) =>
    writePositionDeletes(input.s3, input.metadata.location, snapshotId, deletes),
  );
  if (deleteFiles.length > 0) {
    const bytes = encodeManifest({ schema, spec, snapshotId, files: deleteFiles }, true);
    const path = await store.write(`${snapshotId}-pd`, bytes);
    added.push({ ...newEntry(path, bytes.length, deleteFiles), content: 1 });
  }
  const rewritten = new Set(rewrite);
  return {
    added,
    inherited: input.inherited.filter((manifest) => !rewritten.has(manifest)),
    counts: {
      removedFiles: removed.size,
      removedRecords: Number(removedRecords),
      removedBytes: Number(removedBytes),
      deleteFiles: deleteFiles.length,
      positionDeletes: deleteFiles.reduce((sum, file) => sum + file.recordCount, 0),
    },
  };
}

export interface SnapshotManifestsInput extends Omit<OverwriteInput, 'live' | 'changes'> {
  /** The data files of a plain append (used when there are no {@link changes}). */
  readonly dataFiles: readonly DataFile[];
  readonly changes?: ChangesOf;
}

export interface SnapshotManifests {
  readonly added: ManifestListEntry[];
  readonly inherited: ManifestListEntry[];
  readonly dataFiles: readonly DataFile[];
  /** The overwrite's counts; undefined for an append. */
  readonly overwrite?: OverwriteCounts;
}

/**
 * The manifests a checkpoint's snapshot writes and keeps: an append's one manifest of its data files, or, with
 * changes, those of {@link overwriteManifests} for the changes asked of this parent's live files.
 */
export async function snapshotManifests(input: SnapshotManifestsInput): Promise<SnapshotManifests> {
  const { store, schema, spec, snapshotId, sequenceNumber } = input;
  if (input.changes === undefined) {
    const files = input.dataFiles;
    if (files.length === 0) return { added: [], inherited: [...input.inherited], dataFiles: files };
    const bytes = encodeManifest({ schema, spec, snapshotId, files });
    const path = await store.write(`${snapshotId}-m0`, bytes);
    const entry = addedManifestEntry({
      path,
      length: bytes.length,
      schema,
      spec,
      files,
      snapshotId,
      sequenceNumber,
    });
    return { added: [entry], inherited: [...input.inherited], dataFiles: files };
  }
  const live = await liveDataFiles(store, input.inherited);
  const specs = new Map(
    [...live].map(([path, holders]) => [path, holders.map((manifest) => manifest.partition_spec_id)]),
  );
  const changes = await input.changes(specs);
  const written = await overwriteManifests({ ...input, live, changes });
  const changesRows =
    changes.operation === 'overwrite' || changes.removed.length > 0 || changes.positionDeletes.length > 0;
  return {
    added: written.added,
    inherited: written.inherited,
    dataFiles: changes.dataFiles,
    ...(changesRows ? { overwrite: written.counts } : {}),
  };
}
