/**
 * The harness of the Iceberg publish tests: a pipeline with Parquet output in hour folders, a file catalog in its
 * bucket and the parts `publishCheckpoint` takes; checkpoints of rows staged on two partitions and committed by
 * the local state machine; the rows icebird reads back; and what happens to a table between publishes
 * (compaction, expiry, an operator's rollback) and to a publish step (a crash at a ledger write). The caller
 * stubs the global `fetch` with `localS3Fetch` (test/iceberg/icebird-s3.ts) so icebird reads the local S3 server.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { icebergRead } from 'icebird';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { PublishParts } from '../../shared/coordinator/publish/publish.ts';
import { auditTable, type TableAudit } from '../../shared/coordinator/publish/table-audit.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import { checkpointSnapshotId } from '../../shared/iceberg/checkpoint-identity.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import {
  decodeManifestList,
  encodeManifestList,
  type ManifestListEntry,
} from '../../shared/iceberg/manifest-list.ts';
import {
  type ManifestStore as IcebergManifestStore,
  s3ManifestStore,
} from '../../shared/iceberg/manifest-merge.ts';
import { mainHistory, type Snapshot, type TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { settingsIn, type TestResources } from './aws.ts';
import { checkpoint } from './checkpoint-steps.ts';
import { stageFiles } from './staging.ts';

export const PUBLISH_COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];

export interface PublishSetup {
  readonly settings: Settings;
  readonly catalog: FileCatalog;
  readonly parts: PublishParts;
  /** What the publish logged as errors. */
  readonly errors: string[];
  /** Offsets staged so far on each partition (the next checkpoint stages above them). */
  staged: number;
  /** Added to every row's `n`: pipelines sharing a table write distinct rows. */
  readonly base: number;
}

/** The table audit (`eos verify --iceberg-table`) of a pipeline's table against its manifest log. */
export function auditSetupTable(
  s3: S3Client,
  s: { readonly settings: Settings; readonly catalog: FileCatalog },
): Promise<TableAudit> {
  return auditTable({
    pipelineId: s.settings.pipelineId,
    bucket: s.settings.bucket,
    s3,
    manifests: new ManifestStore(s3, s.settings.bucket, s.settings.pipelineId),
    catalog: s.catalog,
    location: s.catalog.location,
  });
}

/** A fresh pipeline and its table (at `root`, default the pipeline's own `<pipeline>/iceberg/output`). */
export function publishSetup(
  res: TestResources,
  idPrefix: string,
  options: { root?: string; base?: number } = {},
): PublishSetup {
  const settings = settingsIn(res, idPrefix, {
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: PUBLISH_COLUMNS,
  });
  const { s3, dynamodb } = res.clients;
  const catalog = new FileCatalog(s3, res.bucket, options.root ?? `${settings.pipelineId}/iceberg/output`);
  const table = publishedTable({
    location: catalog.location,
    columns: PUBLISH_COLUMNS,
    timePartitioning: 'hour',
  });
  const errors: string[] = [];
  const parts: PublishParts = {
    pipelineId: settings.pipelineId,
    bucket: settings.bucket,
    s3,
    clock: systemClock,
    log: { info: () => {}, error: (message) => errors.push(message) },
    store: new CheckpointStore(dynamodb, settings.ledgerTable, settings.pipelineId),
    manifests: new ManifestStore(s3, settings.bucket, settings.pipelineId),
    snapshots: new TableSnapshots(dynamodb, settings.ledgerTable, settings.pipelineId),
    target: { catalog, table },
  };
  return { settings, catalog, parts, errors, staged: 0, base: options.base ?? 0 };
}

/** Stages `count` rows on two partitions and commits them as the next checkpoint (the local state machine). */
export async function commitNext(res: TestResources, setup: PublishSetup, count = 3): Promise<void> {
  const first = setup.staged;
  const last = first + count - 1;
  const rows = (partition: number) =>
    Array.from({ length: count }, (_, i) => ({
      n: setup.base + partition * 1000 + first + i,
      at: Date.UTC(2026, 2, 14, 7) + first + i,
      source: { topic: 'orders', partition, offset: first + i },
    }));
  await stageFiles(res.clients, setup.settings, [
    { partition: 0, firstOffset: first, lastOffset: last, rows: rows(0) },
    { partition: 1, firstOffset: first, lastOffset: last, rows: rows(1) },
  ]);
  setup.staged = last + 1;
  await checkpoint(res, setup.settings);
}

/** The `n` of every row icebird reads from the table, sorted. */
export async function rowsBack(catalog: FileCatalog): Promise<number[]> {
  const rows = await icebergRead({ tableUrl: catalog.location });
  return rows.map((row) => Number((row as { n: bigint | number }).n)).sort((a, b) => a - b);
}

/** The `n` of the rows of the first `checkpoints` checkpoints of three rows per partition. */
export function rowsOf(checkpoints: number, base = 0): number[] {
  const n = Array.from({ length: checkpoints * 3 }, (_, i) => base + i);
  return [...n, ...n.map((i) => 1000 + i)].sort((a, b) => a - b);
}

export async function stateOf(catalog: Catalog): Promise<TableState> {
  const state = await catalog.load();
  if (!state) throw new Error('the table has no metadata');
  return state;
}

/** Commits `next` over `state`; a conflict is a broken test, not an outcome. */
export async function commitOver(
  catalog: Catalog,
  state: TableState,
  next: TableMetadata,
): Promise<TableState> {
  const committed = await catalog.commit(state, next);
  if (committed === 'conflict') throw new Error("the test's own commit met a conflict");
  return committed;
}

/** Main's head snapshot; a table without one is a broken test. */
function headOf(metadata: TableMetadata): Snapshot {
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  if (!head) throw new Error('the table has no head');
  return head;
}

/**
 * Commits `snapshot` (its sequence number the next) over `state` as main's head, logged; with `expire`, the only
 * snapshot left in the metadata, as snapshot expiry leaves it.
 */
async function commitAsHead(
  catalog: Catalog,
  state: TableState,
  snapshot: Snapshot,
  expire = false,
): Promise<void> {
  const { metadata } = state;
  const id = snapshot['snapshot-id'];
  const logged = { 'timestamp-ms': snapshot['timestamp-ms'], 'snapshot-id': id };
  await commitOver(catalog, state, {
    ...metadata,
    'last-sequence-number': snapshot['sequence-number'],
    'last-updated-ms': snapshot['timestamp-ms'],
    'current-snapshot-id': id,
    refs: { main: { 'snapshot-id': id, type: 'branch' } },
    snapshots: expire ? [snapshot] : [...metadata.snapshots, snapshot],
    'snapshot-log': expire ? [logged] : [...metadata['snapshot-log'], logged],
  });
}

/** The checkpoint ids the table's snapshots name, in the order of the snapshot list ('-' for another writer's). */
export function checkpointsOf(metadata: TableMetadata): string[] {
  return metadata.snapshots.map((snapshot) => snapshot.summary['eos.checkpoint-id'] ?? '-');
}

/** The checkpoint ids main's history names, oldest first ('-' for another writer's snapshot). */
export function mainCheckpoints(metadata: TableMetadata, pipelineId?: string): string[] {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  return mainHistory(metadata)
    .reverse()
    .map((id) => byId.get(id)?.summary)
    .filter((summary) => pipelineId === undefined || summary?.['eos.pipeline-id'] === pipelineId)
    .map((summary) => summary?.['eos.checkpoint-id'] ?? '-');
}

/**
 * A compaction that changed nothing: a `replace` snapshot at main's head over the same manifest list, properties
 * kept; with `expire`, every other snapshot dropped from the metadata as snapshot expiry drops them. Its id.
 */
export async function compact(catalog: Catalog, { expire = false } = {}): Promise<bigint> {
  const state = await stateOf(catalog);
  const { metadata } = state;
  const head = headOf(metadata);
  const sequence = metadata['last-sequence-number'] + 1;
  const id = 7_000_000_000_000_000n + BigInt(sequence);
  const snapshot: Snapshot = {
    'snapshot-id': id,
    'parent-snapshot-id': head['snapshot-id'],
    'sequence-number': sequence,
    'timestamp-ms': metadata['last-updated-ms'] + 1,
    'manifest-list': head['manifest-list'],
    summary: { operation: 'replace' },
    'schema-id': metadata['current-schema-id'],
  };
  await commitAsHead(catalog, state, snapshot, expire);
  return id;
}

/** The new snapshot another writer commits on main's head: its id and sequence number, and where manifests go. */
export interface HeadSnapshot {
  readonly id: bigint;
  readonly sequence: number;
  readonly metadata: TableMetadata;
  readonly store: IcebergManifestStore;
}

/**
 * Another writer's snapshot on main's head, logged: its manifest list is what `manifests` makes of the head's
 * manifests (it may write manifests of its own first), its summary names `operation` alone, its id is `idBase`
 * plus its sequence number. Its id.
 */
export async function commitOnHead(
  catalog: FileCatalog,
  s3: S3Client,
  idBase: bigint,
  operation: string,
  manifests: (
    current: ManifestListEntry[],
    at: HeadSnapshot,
  ) => Promise<ManifestListEntry[]> | ManifestListEntry[],
): Promise<bigint> {
  const state = await stateOf(catalog);
  const { metadata } = state;
  const head = headOf(metadata);
  const store = s3ManifestStore(s3, metadata.location);
  const sequence = metadata['last-sequence-number'] + 1;
  const id = idBase + BigInt(sequence);
  const current = decodeManifestList(await store.read(head['manifest-list']));
  const list = encodeManifestList({
    snapshotId: id,
    parentSnapshotId: head['snapshot-id'],
    sequenceNumber: BigInt(sequence),
    manifests: await manifests(current, { id, sequence, metadata, store }),
  });
  const snapshot: Snapshot = {
    'snapshot-id': id,
    'parent-snapshot-id': head['snapshot-id'],
    'sequence-number': sequence,
    'timestamp-ms': metadata['last-updated-ms'] + 1,
    'manifest-list': await store.write(`snap-${id}`, list),
    summary: { operation },
    'schema-id': metadata['current-schema-id'],
  };
  await commitAsHead(catalog, state, snapshot);
  return id;
}

/** Snapshot expiry: every snapshot `keep` does not take dropped from the metadata (main's head must be kept). */
export async function expire(catalog: Catalog, keep: (id: bigint) => boolean): Promise<void> {
  const state = await stateOf(catalog);
  const snapshots = state.metadata.snapshots.filter((snapshot) => keep(snapshot['snapshot-id']));
  await commitOver(catalog, state, { ...state.metadata, snapshots });
}

/**
 * An operator's rollback of main to snapshot `to` (Iceberg's rollback_to_snapshot: properties and snapshots stay),
 * then expiry of every snapshot `keep` does not take (all kept without it).
 */
export async function setMain(catalog: Catalog, to: bigint, keep?: (id: bigint) => boolean): Promise<void> {
  const state = await stateOf(catalog);
  await commitOver(catalog, state, {
    ...state.metadata,
    'current-snapshot-id': to,
    refs: { main: { 'snapshot-id': to, type: 'branch' } },
  });
  if (keep) await expire(catalog, keep);
}

/** The ledger's snapshot writes, `record` or `advanceMark` failing once as a crash just before it would. */
export function crashingLedger(parts: PublishParts, at: 'record' | 'advanceMark'): PublishParts {
  const real = parts.snapshots;
  let crashed = false;
  const crash = () => {
    crashed = true;
    return Promise.reject(new InjectedCrashError(`publish before ${at}`));
  };
  return {
    ...parts,
    snapshots: {
      read: (id) => real.read(id),
      readMark: () => real.readMark(),
      createIncarnation: (now) => real.createIncarnation(now),
      record: (snapshot, now) => (at === 'record' && !crashed ? crash() : real.record(snapshot, now)),
      advanceMark: (snapshot, now, ledger) =>
        at === 'advanceMark' && !crashed ? crash() : real.advanceMark(snapshot, now, ledger),
    },
  };
}

/** The snapshot id of checkpoint `checkpointId` of `s`'s ledger (its incarnation, once a publish created it). */
export async function ownSnapshotId(s: PublishSetup, checkpointId: number): Promise<bigint> {
  const { ledger } = await s.parts.snapshots.readMark();
  const pipelineId = s.settings.pipelineId;
  return checkpointSnapshotId(ledger ? { pipelineId, ledger } : { pipelineId }, checkpointId);
}

/**
 * `parts` publishing as a ledger from before incarnations did: no incarnation is created, so the table's evidence
 * names no ledger and its snapshot ids are of (pipeline, checkpoint) alone.
 */
export function withoutIncarnation(parts: PublishParts): PublishParts {
  const real = parts.snapshots;
  return {
    ...parts,
    snapshots: {
      read: (id) => real.read(id),
      readMark: () => real.readMark(),
      createIncarnation: () => real.readMark(),
      record: (snapshot, now) => real.record(snapshot, now),
      advanceMark: (snapshot, now) => real.advanceMark(snapshot, now),
    },
  };
}
