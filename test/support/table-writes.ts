/**
 * Commits of other writers to a file-catalog table, written as such a writer writes them (a manifest list and
 * manifests in the bucket, a snapshot at main's head by compare-and-swap): a compaction that rewrites every live
 * file into one (DELETED entries for them, ADDED for its own), a writer appending a checkpoint's files again, one
 * that drops a checkpoint's manifest from the list without recording a delete, and a snapshot naming a checkpoint
 * of a pipeline it is not.
 */
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { expect } from 'vitest';
import { decodeContainer, encodeContainer } from '../../shared/iceberg/avro-container.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import { ENTRY_DELETED } from '../../shared/iceberg/manifest-entries.ts';
import { ENTRY_ADDED } from '../../shared/iceberg/manifest-file.ts';
import {
  decodeManifestList,
  encodeManifestList,
  type ManifestListEntry,
} from '../../shared/iceberg/manifest-list.ts';
import { s3ObjectOf } from '../../shared/iceberg/metadata-json.ts';
import {
  mainSnapshotId,
  type Snapshot,
  SUMMARY_CHECKPOINT_ID,
  SUMMARY_PIPELINE_ID,
  snapshotIdOf,
  type TableMetadata,
} from '../../shared/iceberg/table-metadata.ts';
import { getBytes } from '../../shared/sink/objects.ts';

/** A `manifest_entry` record as avro-js reads it (plain unions, bigint longs). */
interface EntryRecord {
  readonly status: number;
  readonly snapshot_id: bigint | null;
  readonly sequence_number: bigint | null;
  readonly file_sequence_number: bigint | null;
  readonly data_file: {
    readonly file_path: string;
    readonly record_count: bigint;
    readonly [field: string]: unknown;
  };
}

interface Head {
  readonly state: TableState;
  readonly metadata: TableMetadata;
  readonly snapshot: Snapshot;
  readonly list: ManifestListEntry[];
}

async function put(s3: S3Client, location: string, bytes: Buffer): Promise<void> {
  const { bucket, key } = s3ObjectOf(location);
  await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes }));
}

async function read(s3: S3Client, location: string): Promise<Buffer> {
  const { bucket, key } = s3ObjectOf(location);
  const bytes = await getBytes(s3, bucket, key);
  if (!bytes) throw new Error(`${location} is missing`);
  return bytes;
}

/** The table's state, main's head and the manifests its list names. */
export async function headOf(s3: S3Client, catalog: Catalog): Promise<Head> {
  const state = await catalog.load();
  if (!state) throw new Error('the table has no metadata');
  const { metadata } = state;
  const snapshot = metadata.snapshots.find((s) => s['snapshot-id'] === mainSnapshotId(metadata));
  if (!snapshot) throw new Error('the table has no head');
  return { state, metadata, snapshot, list: decodeManifestList(await read(s3, snapshot['manifest-list'])) };
}

/** The manifest's schema, file metadata and entries. */
async function manifestOf(s3: S3Client, entry: ManifestListEntry) {
  const { schema, metadata, records } = decodeContainer(await read(s3, entry.manifest_path));
  const pairs = [...metadata].filter(([key]) => !key.startsWith('avro.'));
  return { schema: schema as object, pairs, records: records as EntryRecord[] };
}

/** A manifest like `like` (its schema and metadata) holding `records`, added by snapshot `id`: its list entry. */
async function writeManifest(
  s3: S3Client,
  head: Head,
  like: ManifestListEntry,
  id: bigint,
  records: readonly EntryRecord[],
): Promise<ManifestListEntry> {
  const { schema, pairs } = await manifestOf(s3, like);
  const bytes = encodeContainer(schema, pairs, records);
  const path = `${head.metadata.location}/metadata/other-${id}-m0.avro`;
  await put(s3, path, bytes);
  const count = (status: number) => records.filter((record) => record.status === status);
  const rows = (status: number) => count(status).reduce((sum, r) => sum + r.data_file.record_count, 0n);
  return {
    ...like,
    manifest_path: path,
    manifest_length: BigInt(bytes.length),
    sequence_number: BigInt(head.metadata['last-sequence-number'] + 1),
    min_sequence_number: BigInt(head.metadata['last-sequence-number'] + 1),
    added_snapshot_id: id,
    added_files_count: count(ENTRY_ADDED).length,
    existing_files_count: 0,
    deleted_files_count: count(ENTRY_DELETED).length,
    added_rows_count: rows(ENTRY_ADDED),
    existing_rows_count: 0n,
    deleted_rows_count: rows(ENTRY_DELETED),
  };
}

/** Commits snapshot `id` at main's head, its list `manifests`; with `expire`, every other snapshot dropped. */
async function commitSnapshot(
  s3: S3Client,
  catalog: Catalog,
  head: Head,
  commit: { id: bigint; summary: Record<string, string>; manifests: ManifestListEntry[]; expire?: boolean },
): Promise<void> {
  const { metadata } = head;
  const sequence = metadata['last-sequence-number'] + 1;
  const list = `${metadata.location}/metadata/snap-other-${commit.id}.avro`;
  const parent = head.snapshot['snapshot-id'];
  await put(
    s3,
    list,
    encodeManifestList({
      snapshotId: commit.id,
      parentSnapshotId: parent,
      sequenceNumber: BigInt(sequence),
      manifests: commit.manifests,
    }),
  );
  const snapshot: Snapshot = {
    'snapshot-id': commit.id,
    'parent-snapshot-id': parent,
    'sequence-number': sequence,
    'timestamp-ms': metadata['last-updated-ms'] + 1,
    'manifest-list': list,
    summary: commit.summary,
    'schema-id': metadata['current-schema-id'],
  };
  const logged = { 'timestamp-ms': snapshot['timestamp-ms'], 'snapshot-id': commit.id };
  const next: TableMetadata = {
    ...metadata,
    'last-sequence-number': sequence,
    'last-updated-ms': snapshot['timestamp-ms'],
    'current-snapshot-id': commit.id,
    refs: { ...metadata.refs, main: { 'snapshot-id': commit.id, type: 'branch' } },
    snapshots: commit.expire ? [snapshot] : [...metadata.snapshots, snapshot],
    'snapshot-log': commit.expire ? [logged] : [...metadata['snapshot-log'], logged],
  };
  expect(await catalog.commit(head.state, next)).not.toBe('conflict');
}

/**
 * A compaction: every live data file rewritten into `into` (one ADDED entry holding all their rows, the files
 * DELETED by snapshot `id`), a `replace` snapshot whose list is that one manifest.
 */
export async function compact(s3: S3Client, catalog: Catalog, id: bigint, into: string): Promise<void> {
  const head = await headOf(s3, catalog);
  const live = (await Promise.all(head.list.map(async (entry) => (await manifestOf(s3, entry)).records)))
    .flat()
    .filter((record) => record.status !== ENTRY_DELETED);
  const deleted = live.map((record) => ({ ...record, status: ENTRY_DELETED, snapshot_id: id }));
  const rows = live.reduce((sum, record) => sum + record.data_file.record_count, 0n);
  const first = live[0] as EntryRecord;
  const added: EntryRecord = {
    ...first,
    status: ENTRY_ADDED,
    snapshot_id: id,
    sequence_number: null,
    file_sequence_number: null,
    data_file: { ...first.data_file, file_path: into, record_count: rows },
  };
  const manifest = await writeManifest(s3, head, head.list[0] as ManifestListEntry, id, [...deleted, added]);
  await commitSnapshot(s3, catalog, head, { id, summary: { operation: 'replace' }, manifests: [manifest] });
}

/** The list entry of the manifest that `pipelineId`'s checkpoint's snapshot added. */
function manifestOfCheckpoint(head: Head, pipelineId: string, checkpointId: number): ManifestListEntry {
  const own = snapshotIdOf(pipelineId, checkpointId);
  const entry = head.list.find((candidate) => candidate.added_snapshot_id === own);
  if (!entry) throw new Error(`no manifest of checkpoint ${checkpointId} in the head's list`);
  return entry;
}

/** Another snapshot `id` naming the checkpoint, appending its files again (a second, different snapshot of it). */
export async function appendAgain(
  s3: S3Client,
  catalog: Catalog,
  pipelineId: string,
  checkpointId: number,
  id: bigint,
): Promise<void> {
  const head = await headOf(s3, catalog);
  const like = manifestOfCheckpoint(head, pipelineId, checkpointId);
  const records = (await manifestOf(s3, like)).records.map((record) => ({ ...record, snapshot_id: id }));
  const manifest = await writeManifest(s3, head, like, id, records);
  await commitSnapshot(s3, catalog, head, {
    id,
    summary: {
      operation: 'append',
      [SUMMARY_PIPELINE_ID]: pipelineId,
      [SUMMARY_CHECKPOINT_ID]: String(checkpointId),
    },
    manifests: [manifest, ...head.list],
  });
}

/** A `replace` snapshot `id` whose list lost the checkpoint's manifest and records no delete of its files. */
export async function dropManifest(
  s3: S3Client,
  catalog: Catalog,
  pipelineId: string,
  checkpointId: number,
  id: bigint,
  options: { expire?: boolean } = {},
): Promise<void> {
  const head = await headOf(s3, catalog);
  const dropped = manifestOfCheckpoint(head, pipelineId, checkpointId);
  await commitSnapshot(s3, catalog, head, {
    id,
    summary: { operation: 'replace' },
    manifests: head.list.filter((entry) => entry !== dropped),
    ...options,
  });
}

/** A snapshot `id` whose summary names `pipelineId` and `checkpoint` with the head's files, as a foreign writer. */
export async function nameCheckpoint(
  s3: S3Client,
  catalog: Catalog,
  pipelineId: string,
  checkpoint: string,
  id: bigint,
): Promise<void> {
  const head = await headOf(s3, catalog);
  await commitSnapshot(s3, catalog, head, {
    id,
    summary: { operation: 'append', [SUMMARY_PIPELINE_ID]: pipelineId, [SUMMARY_CHECKPOINT_ID]: checkpoint },
    manifests: head.list,
  });
}

/**
 * A snapshot `id` of another writer that lists the checkpoint's files again as its own additions and drops the
 * checkpoint's manifest: the files stay live once, added by the wrong snapshot.
 */
export async function readdAsOwn(
  s3: S3Client,
  catalog: Catalog,
  pipelineId: string,
  checkpointId: number,
  id: bigint,
): Promise<void> {
  const head = await headOf(s3, catalog);
  const like = manifestOfCheckpoint(head, pipelineId, checkpointId);
  const records = (await manifestOf(s3, like)).records.map((record) => ({ ...record, snapshot_id: id }));
  const manifest = await writeManifest(s3, head, like, id, records);
  await commitSnapshot(s3, catalog, head, {
    id,
    summary: { operation: 'append' },
    manifests: [manifest, ...head.list.filter((entry) => entry !== like)],
  });
}
