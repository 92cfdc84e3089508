/**
 * Reading the entries of an Iceberg manifest (spec, "Manifests") written by any writer: this pipeline's appends,
 * or table maintenance (a compaction's manifest of DELETED and ADDED entries, a manifest rewrite's EXISTING ones).
 * Only what says which files a snapshot holds is read: each entry's status, the snapshot that added or deleted it,
 * and its file's content and location. The records are projected by field name onto that much (the avro-js reader
 * of `avro-container.ts`, a runtime dependency), so any partition spec and any optional metrics read the same.
 */
import { decodeContainer } from './avro-container.ts';

/** Manifest entry statuses of the spec besides ADDED (`ENTRY_ADDED` of `manifest-file.ts`). */
export const ENTRY_EXISTING = 0;
export const ENTRY_DELETED = 2;

/** One entry of a manifest, as far as which files are live goes. */
export interface ManifestEntryFile {
  /** 0 EXISTING, 1 ADDED, 2 DELETED. */
  readonly status: number;
  /** The snapshot that added (or, DELETED, deleted) the file; null: inherited from the manifest list entry. */
  readonly snapshotId: bigint | null;
  /** 0 data, 1 position deletes, 2 equality deletes (v1 manifests have data files only). */
  readonly content: number;
  /** The file's location as written (`s3://…`). */
  readonly path: string;
}

/** What is read of each entry: any writer's manifest projects onto it (a field left out takes its default). */
const ENTRY_READER = {
  type: 'record',
  name: 'manifest_entry',
  fields: [
    { name: 'status', type: 'int' },
    { name: 'snapshot_id', type: ['null', 'long'], default: null },
    {
      name: 'data_file',
      type: {
        type: 'record',
        name: 'r2',
        fields: [
          { name: 'content', type: 'int', default: 0 },
          { name: 'file_path', type: 'string' },
        ],
      },
    },
  ],
};

interface ReadEntry {
  readonly status: number;
  readonly snapshot_id: bigint | null;
  readonly data_file: { readonly content: number; readonly file_path: string };
}

/** The entries of a manifest file (an Avro object container file of `manifest_entry` records). */
export function decodeManifestEntries(bytes: Buffer): ManifestEntryFile[] {
  const { records } = decodeContainer(bytes, ENTRY_READER);
  return (records as ReadEntry[]).map((record) => ({
    status: record.status,
    snapshotId: record.snapshot_id,
    content: record.data_file.content,
    path: record.data_file.file_path,
  }));
}
