/**
 * A checkpoint's Parquet files appended to an Iceberg table as one snapshot, exactly once.
 *
 * 1. Load the table (the first attempt can take the caller's load), and have the caller judge it
 *    ({@link CheckpointAppend.judge}: a table that lost what the caller holds published is neither appended to nor
 *    taken to hold the checkpoint). If a snapshot of it already names this pipeline's checkpoint
 *    (`eos.checkpoint-id` in its summary, of this ledger: `checkpoint-identity.ts`), that snapshot is the answer: a retry, or a second invocation of the same commit step, never appends
 *    twice. With a {@link CheckpointAppend.checkpointProperty}, the table's properties answer too: each append sets
 *    that property to its checkpoint id in the same metadata swap, and a table whose snapshots maintenance expired
 *    keeps its properties, so a property at or past the checkpoint means it was committed. Either answer says
 *    whether main still holds it ({@link AppendResult.inMainHistory}): main may have been set back past it, and
 *    its snapshot expired too (the property survives both). Main's history ending at the checkpoint's own snapshot,
 *    expired, answers last (its id is the checkpoint's). Otherwise the table is created (first commit) or its
 *    schema and spec brought to the output's.
 * 2. Write the manifest of the files and the snapshot's manifest list (the new manifest, then the parent's, once
 *    they are many merged as Iceberg's merge append does: `manifest-merge.ts`).
 *    Their keys under `<table>/metadata/` are the snapshot id and a digest of the bytes, and the bytes are a
 *    function of the checkpoint and the parent: an attempt on the same parent rewrites the same objects (write-once,
 *    `If-None-Match`), one on another parent writes another list and never changes a list a committed snapshot
 *    names. The snapshot id is the checkpoint's ({@link checkpointSnapshotId}) whatever the parent.
 * 3. Commit the new metadata with the catalog's compare-and-swap. On `conflict` another writer (another
 *    checkpoint's commit, table maintenance, this same checkpoint's zombie) moved the table: reload and go again
 *    from 1, which either finds the checkpoint committed or rebases it onto the new parent; before that swap the
 *    caller's own record is asked ({@link CheckpointAppend.recorded}), as the table may no longer show the
 *    checkpoint a concurrent attempt committed. Bounded attempts.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { type Clock, systemClock } from '../clock.ts';
import { PipelineError } from '../errors.ts';
import { getBytes } from '../sink/objects.ts';
import type { ColumnDefinition } from '../transforms/api.ts';
import type { Catalog, TableState } from './catalog.ts';
import {
  type CheckpointIdentity,
  checkpointSnapshotId,
  checkpointSnapshotIds,
  identityOf,
  isOwnLedger,
  type LedgerRef,
  ledgerPropertyOf,
  SUMMARY_LEDGER,
} from './checkpoint-identity.ts';
import type { DataFile } from './manifest-file.ts';
import { decodeManifestList, encodeManifestList, type ManifestListEntry } from './manifest-list.ts';
import { mergedManifestList, s3ManifestStore } from './manifest-merge.ts';
import { s3ObjectOf } from './metadata-json.ts';
import { type ChangesOf, snapshotManifests } from './overwrite.ts';
import {
  type PartitionSettings,
  type PartitionSpec,
  partitionOnlyColumns,
  partitionSpec,
} from './partition-spec.ts';
import { type IcebergSchema, icebergSchema } from './schema.ts';
import {
  appendSnapshot,
  createTableMetadata,
  currentSchema,
  defaultSpec,
  mainHistory,
  mainSnapshotId,
  nextSnapshotBase,
  type Snapshot,
  SUMMARY_CHECKPOINT_ID,
  SUMMARY_PIPELINE_ID,
  snapshotIdOf,
  type TableMetadata,
  withSchema,
  withSpec,
} from './table-metadata.ts';

/** The table a pipeline's output is appended to. */
export interface IcebergTable {
  /** `s3://<bucket>/<table root>` without a trailing slash: where a new table is created and its metadata goes. */
  readonly location: string;
  /** The transform's declared columns (`transform.columns`). */
  readonly columns: readonly ColumnDefinition[];
  readonly partitioning: PartitionSettings;
  /** Properties of a new table. */
  readonly properties?: Readonly<Record<string, string>>;
}

export interface CheckpointAppend {
  readonly table: IcebergTable;
  /** The checkpoint's committed Parquet files, partition tuples in the order of {@link tableLayout}'s spec. */
  readonly dataFiles: readonly DataFile[];
  readonly pipelineId: string;
  /**
   * The ledger incarnation whose checkpoint this is (`checkpoint-identity.ts`): named in the summary, beside the
   * property and in the snapshot id; evidence of another ledger is not this checkpoint's. None: any evidence of
   * the pipeline's checkpoint is.
   */
  readonly ledger?: LedgerRef;
  readonly checkpointId: number;
  /** The lanes (epochs, generations, redrives) whose records the files hold. */
  readonly lanes: readonly string[];
  /**
   * The snapshot's changes as a function of its parent's live data files (`overwrite.ts`), asked on every attempt;
   * given, they replace {@link dataFiles}, and a snapshot that removes files or rows is an `overwrite`.
   */
  readonly changes?: ChangesOf;
  readonly clock?: Clock;
  /** Loads and commits before giving up on conflicts; default {@link DEFAULT_COMMIT_ATTEMPTS}. */
  readonly maxAttempts?: number;
  /**
   * A table property naming the last checkpoint appended (`eos.<pipeline>.published-checkpoint`): set to this
   * checkpoint's id by the append, and read as "every checkpoint up to its value is in" (see the module comment).
   * Only for checkpoints appended in order.
   */
  readonly checkpointProperty?: string;
  /**
   * Called with each state loaded (undefined: the table has no metadata) before it is looked at or appended to;
   * throws to stop the append. A rollback of the table can come between any two loads, so judging only a load
   * made before this call would let a retry after a conflict rebase the checkpoint onto a table that lost earlier
   * ones.
   */
  readonly judge?: (state: TableState | undefined) => void;
  /**
   * The caller's own record of the checkpoint (the ledger's, read strongly consistently), asked after a conflict
   * and before each swap after the first: recorded meanwhile, the append stops with outcome `recorded` and swaps
   * nothing. A swap held up (a zombie) can meet a table whose maintenance has since removed every trace of the
   * checkpoint (its snapshot expired, its property dropped by another engine's metadata rewrite): only the
   * record still says it is in.
   */
  readonly recorded?: () => Promise<{ snapshotId: bigint; sequenceNumber: number } | undefined>;
  /**
   * The table's state as the caller loaded it (`state` undefined: no metadata), taken for the first attempt
   * instead of a load of its own; a stale one costs a conflict and a reload, never a wrong swap.
   */
  readonly loaded?: { readonly state: TableState | undefined };
}

export interface AppendResult {
  /**
   * `appended` by this call, found `already-committed` by an earlier attempt in the table, or `recorded` by the
   * caller's own record after a conflict ({@link CheckpointAppend.recorded}).
   */
  readonly outcome: 'appended' | 'already-committed' | 'recorded';
  /** What said it was committed: its snapshot's summary, or (the snapshot expired) the checkpoint property. */
  readonly foundBy?: 'summary' | 'property' | 'history';
  readonly snapshotId: bigint;
  /**
   * The snapshot's sequence number; when only the property found it (the snapshot is no longer listed), the
   * sequence number of main's head, which descends from it unless the table was rolled back.
   */
  readonly sequenceNumber: number;
  /** The table's state this call committed, or loaded when it found the checkpoint committed. */
  readonly state: TableState;
  /**
   * Whether main's history holds the snapshot (false: the table was rolled back past it). Found by the property
   * only, the snapshot is gone: false when main's listed history, walked from its head, reaches a snapshot of an
   * earlier checkpoint of the pipeline, or its first snapshot, without meeting a snapshot no longer listed (appends
   * are in checkpoint order, so a head descending from this checkpoint meets its snapshot, expired, or a later
   * checkpoint's first); true when it cannot say, and the caller judges by sequence numbers.
   */
  readonly inMainHistory: boolean;
  /** Commits tried (1 without a conflict). */
  readonly attempts: number;
}

/** Every attempt met a conflict: other writers kept moving the table. The caller retries later. */
export class IcebergCommitConflictError extends PipelineError {}

export const DEFAULT_COMMIT_ATTEMPTS = 10;

/** The schema, partition spec and partition-only columns of the table, evolved from `current` when given. */
export function tableLayout(
  table: IcebergTable,
  current?: TableMetadata,
): {
  schema: IcebergSchema;
  lastColumnId: number;
  spec: PartitionSpec;
  lastPartitionId: number;
  partitionColumns: string[];
} {
  const partitionColumns = partitionOnlyColumns(table.columns, table.partitioning);
  const { schema, lastColumnId } = icebergSchema(table.columns, {
    partitionColumns,
    ...(current ? { previous: currentSchema(current), lastColumnId: current['last-column-id'] } : {}),
  });
  const { spec, lastPartitionId } = partitionSpec(schema, table.columns, table.partitioning, {
    ...(current ? { previous: defaultSpec(current), lastPartitionId: current['last-partition-id'] } : {}),
  });
  return { schema, lastColumnId, spec, lastPartitionId, partitionColumns };
}

/** The metadata to append to: the table created, or its schema and spec brought to the output's. */
function baseMetadata(table: IcebergTable, state: TableState | undefined, nowMs: number): TableMetadata {
  const layout = tableLayout(table, state?.metadata);
  if (!state) {
    return createTableMetadata({
      location: table.location,
      nowMs,
      ...layout,
      ...(table.properties ? { properties: table.properties } : {}),
    });
  }
  return withSpec(
    withSchema(state.metadata, layout.schema, layout.lastColumnId),
    layout.spec,
    layout.lastPartitionId,
  );
}

async function parentManifests(s3: S3Client, parent: Snapshot | undefined): Promise<ManifestListEntry[]> {
  if (!parent) return [];
  const { bucket, key } = s3ObjectOf(parent['manifest-list']);
  const bytes = await getBytes(s3, bucket, key);
  if (!bytes)
    throw new PipelineError(`the manifest list ${parent['manifest-list']} of the table's head is missing`);
  return decodeManifestList(bytes);
}

/**
 * The checkpoint id the table's `property` names; 0 when it names none, or (with `identity`) when the property
 * beside it names another ledger's.
 */
export function checkpointOfProperty(
  metadata: TableMetadata,
  property: string,
  identity?: CheckpointIdentity,
): number {
  if (identity && !isOwnLedger(identity, metadata.properties[ledgerPropertyOf(property)])) return 0;
  const value = metadata.properties[property];
  return value !== undefined && /^\d{1,15}$/.test(value) ? Number(value) : 0;
}

/** The listed snapshot whose summary names checkpoint `checkpointId` of `identity`, and whether main holds it. */
export function snapshotOfOwnCheckpoint(
  metadata: TableMetadata,
  identity: CheckpointIdentity,
  checkpointId: number,
): { snapshot: Snapshot; inMainHistory: boolean } | undefined {
  const snapshot = metadata.snapshots.find(
    (candidate) =>
      candidate.summary[SUMMARY_PIPELINE_ID] === identity.pipelineId &&
      candidate.summary[SUMMARY_CHECKPOINT_ID] === String(checkpointId) &&
      isOwnLedger(identity, candidate.summary[SUMMARY_LEDGER]),
  );
  if (!snapshot) return undefined;
  return { snapshot, inMainHistory: mainHistory(metadata).includes(snapshot['snapshot-id']) };
}

/** The sequence number of main's head; 0 when main has no snapshot listed. */
export function mainHeadSequence(metadata: TableMetadata): number {
  const head = mainSnapshotId(metadata);
  return metadata.snapshots.find((snapshot) => snapshot['snapshot-id'] === head)?.['sequence-number'] ?? 0;
}

/**
 * Whether main's history, walked from its head through the listed snapshots, ends at a first snapshot (or main has
 * none): every snapshot of it is listed. False when it is cut short at a snapshot no longer listed (expired).
 */
export function mainHistoryWhole(metadata: TableMetadata): boolean {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const seen = new Set<bigint>();
  let id = mainSnapshotId(metadata);
  while (id !== undefined && byId.has(id) && !seen.has(id)) {
    seen.add(id);
    id = byId.get(id)?.['parent-snapshot-id'];
  }
  return id === undefined || seen.has(id);
}

/**
 * The checkpoint of the pipeline's snapshot nearest main's head, walking its history through the listed snapshots;
 * undefined when the walk meets none before it ends (at the first snapshot, or at one no longer listed). With
 * `judged`, a walk ending at the snapshot of checkpoint `judged - 1`, no longer listed, meets that checkpoint: its
 * id is a function of the pipeline and the checkpoint ({@link snapshotIdOf}), its summary gone with it.
 */
export function newestCheckpointInMain(
  metadata: TableMetadata,
  pipeline: string | CheckpointIdentity,
  judged?: number,
): number | undefined {
  const identity = identityOf(pipeline);
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const seen = new Set<bigint>();
  const previous = judged !== undefined && judged > 1 ? checkpointSnapshotIds(identity, judged - 1) : [];
  for (let id = mainSnapshotId(metadata); id !== undefined && !seen.has(id); ) {
    seen.add(id);
    const snapshot = byId.get(id);
    if (snapshot === undefined && previous.includes(id)) return (judged as number) - 1;
    const checkpoint = snapshot?.summary[SUMMARY_CHECKPOINT_ID];
    const ours =
      snapshot?.summary[SUMMARY_PIPELINE_ID] === identity.pipelineId &&
      isOwnLedger(identity, snapshot.summary[SUMMARY_LEDGER]);
    if (ours && checkpoint !== undefined && /^\d{1,15}$/.test(checkpoint)) return Number(checkpoint);
    id = snapshot?.['parent-snapshot-id'];
  }
  return undefined;
}

/**
 * The checkpoint found by main's history ending at its snapshot, expired: the snapshot id is the checkpoint's, so
 * a commit on top of it (a compaction) still names it as parent after expiry took its summary and another writer's
 * metadata rewrite its property, while the ledger record of the publisher that appended it may be still to come.
 */
function historyEndsAtCheckpoint(
  metadata: TableMetadata,
  identity: CheckpointIdentity,
  checkpointId: number,
): Omit<AppendResult, 'state' | 'attempts'> | undefined {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const seen = new Set<bigint>();
  let id = mainSnapshotId(metadata);
  while (id !== undefined && byId.has(id) && !seen.has(id)) {
    seen.add(id);
    id = byId.get(id)?.['parent-snapshot-id'];
  }
  if (id === undefined || byId.has(id) || !checkpointSnapshotIds(identity, checkpointId).includes(id)) {
    return undefined;
  }
  return {
    outcome: 'already-committed',
    foundBy: 'history',
    snapshotId: id,
    sequenceNumber: mainHeadSequence(metadata),
    inMainHistory: true,
  };
}

function identityOfRequest(request: CheckpointAppend): CheckpointIdentity {
  return request.ledger
    ? { pipelineId: request.pipelineId, ledger: request.ledger }
    : { pipelineId: request.pipelineId };
}

/** The earlier commit of the checkpoint that `state` shows, if any (see the module comment). */
function committedBefore(
  state: TableState,
  request: CheckpointAppend,
): Omit<AppendResult, 'state' | 'attempts'> | undefined {
  const identity = identityOfRequest(request);
  const found = snapshotOfOwnCheckpoint(state.metadata, identity, request.checkpointId);
  if (found) {
    return {
      outcome: 'already-committed',
      foundBy: 'summary',
      snapshotId: found.snapshot['snapshot-id'],
      sequenceNumber: found.snapshot['sequence-number'],
      inMainHistory: found.inMainHistory,
    };
  }
  const property = request.checkpointProperty;
  if (
    property === undefined ||
    checkpointOfProperty(state.metadata, property, identity) < request.checkpointId
  ) {
    return historyEndsAtCheckpoint(state.metadata, identity, request.checkpointId);
  }
  const newest = newestCheckpointInMain(state.metadata, identity, request.checkpointId);
  // A property naming no ledger was set before incarnations, with the snapshot id of that time.
  const unnamed = state.metadata.properties[ledgerPropertyOf(property)] === undefined;
  return {
    outcome: 'already-committed',
    foundBy: 'property',
    snapshotId: unnamed
      ? snapshotIdOf(request.pipelineId, request.checkpointId)
      : checkpointSnapshotId(identity, request.checkpointId),
    sequenceNumber: mainHeadSequence(state.metadata),
    inMainHistory: newest === undefined ? !mainHistoryWhole(state.metadata) : newest > request.checkpointId,
  };
}

/** The next metadata: manifest and manifest list written, the snapshot appended to `base`. */
async function nextMetadata(
  s3: S3Client,
  request: CheckpointAppend,
  base: TableMetadata,
  state: TableState | undefined,
  nowMs: number,
): Promise<TableMetadata> {
  const snapshotId = checkpointSnapshotId(identityOfRequest(request), request.checkpointId);
  const { parentSnapshotId, sequenceNumber } = nextSnapshotBase(base);
  const parent = base.snapshots.find((snapshot) => snapshot['snapshot-id'] === parentSnapshotId);
  const store = s3ManifestStore(s3, base.location);
  // Manifests, merged manifests, delete files and the list, each written once under `<table>/metadata/`.
  const written = await snapshotManifests({
    s3,
    store,
    metadata: base,
    schema: currentSchema(base),
    spec: defaultSpec(base),
    snapshotId,
    sequenceNumber: BigInt(sequenceNumber),
    inherited: await parentManifests(s3, parent),
    dataFiles: request.dataFiles,
    ...(request.changes ? { changes: request.changes } : {}),
  });
  const files = written.dataFiles;
  const list = encodeManifestList({
    snapshotId,
    parentSnapshotId,
    sequenceNumber: BigInt(sequenceNumber),
    manifests: await mergedManifestList(
      {
        metadata: base,
        snapshotId,
        sequenceNumber: BigInt(sequenceNumber),
        added: written.added,
        inherited: written.inherited,
      },
      store,
    ),
  });
  const manifestList = await store.write(`snap-${snapshotId}`, list);
  const appended = appendSnapshot(base, {
    snapshotId,
    manifestList,
    nowMs,
    ...(state ? { previousLocation: state.location } : {}),
    added: {
      dataFiles: files.length,
      records: files.reduce((sum, file) => sum + file.recordCount, 0),
      filesSize: files.reduce((sum, file) => sum + file.fileSizeInBytes, 0),
      partitions: new Set(
        files.map((file) => JSON.stringify(file.partition, (_k, v) => (typeof v === 'bigint' ? `${v}` : v))),
      ).size,
    },
    pipelineId: request.pipelineId,
    checkpointId: request.checkpointId,
    lanes: request.lanes,
    ...(written.overwrite ? { overwrite: written.overwrite } : {}),
  });
  const named = request.ledger ? withLedger(appended, snapshotId, request.ledger.id) : appended;
  const property = request.checkpointProperty;
  if (property === undefined) return named;
  const ledger = request.ledger ? { [ledgerPropertyOf(property)]: request.ledger.id } : {};
  return {
    ...named,
    properties: { ...named.properties, [property]: String(request.checkpointId), ...ledger },
  };
}

/** `metadata` with snapshot `snapshotId`'s summary naming ledger `ledger`. */
function withLedger(metadata: TableMetadata, snapshotId: bigint, ledger: string): TableMetadata {
  return {
    ...metadata,
    snapshots: metadata.snapshots.map((snapshot) =>
      snapshot['snapshot-id'] === snapshotId
        ? { ...snapshot, summary: { ...snapshot.summary, [SUMMARY_LEDGER]: ledger } }
        : snapshot,
    ),
  };
}

/** Appends the checkpoint's files as one snapshot, or finds it appended (see the module comment). */
export async function appendCheckpoint(
  catalog: Catalog,
  s3: S3Client,
  request: CheckpointAppend,
): Promise<AppendResult> {
  const clock = request.clock ?? systemClock;
  const maxAttempts = request.maxAttempts ?? DEFAULT_COMMIT_ATTEMPTS;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const state = attempt === 1 && request.loaded ? request.loaded.state : await catalog.load();
    request.judge?.(state);
    const found = state && committedBefore(state, request);
    if (state && found) return { ...found, state, attempts: attempt - 1 };
    const record = attempt > 1 && state ? await request.recorded?.() : undefined;
    if (state && record) {
      return { outcome: 'recorded', ...record, state, inMainHistory: true, attempts: attempt - 1 };
    }
    const nowMs = clock.now();
    const next = await nextMetadata(s3, request, baseMetadata(request.table, state, nowMs), state, nowMs);
    const committed = await catalog.commit(state, next);
    if (committed !== 'conflict') {
      const snapshotId = checkpointSnapshotId(identityOfRequest(request), request.checkpointId);
      return {
        outcome: 'appended',
        snapshotId,
        sequenceNumber: committed.metadata['last-sequence-number'],
        state: committed,
        inMainHistory: true,
        attempts: attempt,
      };
    }
  }
  throw new IcebergCommitConflictError(
    `checkpoint ${request.checkpointId} met a conflict on each of ${maxAttempts} commits to ${request.table.location}`,
  );
}
