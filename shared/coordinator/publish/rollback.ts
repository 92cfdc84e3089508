/**
 * Whether the table still holds what the ledger says is published. An operator (or a tool) can roll an Iceberg
 * table back: set main to an older snapshot, or point the catalog at an older metadata file. A checkpoint the
 * ledger records as published would then be missing from the table, and appending the next one over it would make
 * that loss silent. Maintenance, which expires snapshots but never main's head, must not look like a rollback.
 *
 * Judged against the published mark (checkpoint M, its snapshot S, sequence number s), by main's history, walked
 * from its head through the listed snapshots. Main lost S when:
 * - the table has no metadata;
 * - main's history is whole (it ends at a first snapshot) and does not hold S: main set back past S, or an older
 *   metadata file put back;
 * - main's history is cut short at an expired snapshot S's own history (S listed) ends at too: main and S descend
 *   from it apart (main set back below S, a commit on top, the snapshot between expired);
 * - main's head has a sequence number below s: every snapshot committed after S, compactions included, has a
 *   higher one, so the head is older than S (an older metadata file put back: it lists no S, its head is older);
 * - main's history reaches a snapshot of an earlier checkpoint of the pipeline first (listed, or the expired
 *   snapshot of M-1, known by its id): appends are in checkpoint order, so a head descending from S meets S, a
 *   later checkpoint's snapshot or another expired one first (main set back below S, a compaction on top, S
 *   expired: a rollback does not lower the sequence numbers, and an older metadata file put back lowers them to
 *   where the next commit takes S's).
 * Otherwise S is held: maintenance expires snapshots but never main's head, and a history cut short elsewhere
 * descends from S as far as the table can tell.
 * The published-checkpoint property is no evidence of a rollback on its own: a table that lost its properties
 * (another engine's metadata rewrite, a catalog migration) but whose main holds S goes on; when main lost S too,
 * a property below M is named in the report.
 */
import { PipelineError } from '../../errors.ts';
import {
  type AppendResult,
  checkpointOfProperty,
  mainHeadSequence,
  newestCheckpointInMain,
} from '../../iceberg/append.ts';
import type { TableState } from '../../iceberg/catalog.ts';
import { type CheckpointIdentity, identityOf } from '../../iceberg/checkpoint-identity.ts';
import { mainSnapshotId, type TableMetadata } from '../../iceberg/table-metadata.ts';
import type { PublishedMark, TableSnapshot } from '../../ledger/table-snapshots.ts';
import { publishedCheckpointProperty } from './target.ts';

/** The table no longer holds a checkpoint the ledger records as published: nothing is appended over it. */
export class IcebergTableRolledBackError extends PipelineError {}

/**
 * The history of snapshot `from` (main's head when undefined) through the listed snapshots, and where it is cut
 * short: the snapshot no longer listed it ends at, undefined when it ends at a first snapshot.
 */
function history(metadata: TableMetadata, from?: bigint): { ids: Set<bigint>; cutAt: bigint | undefined } {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const ids = new Set<bigint>();
  let id = from ?? mainSnapshotId(metadata);
  while (id !== undefined && byId.has(id) && !ids.has(id)) {
    ids.add(id);
    id = byId.get(id)?.['parent-snapshot-id'];
  }
  return { ids, cutAt: id !== undefined && !byId.has(id) ? id : undefined };
}

/** A checkpoint's snapshot as the ledger records it. */
export type CheckpointSnapshot = Pick<TableSnapshot, 'checkpointId' | 'snapshotId' | 'sequenceNumber'>;

/**
 * Why main does not hold the pipeline's snapshot `snapshot`, or undefined when it does (see the module comment for
 * how a history cut short and an expired snapshot are judged).
 */
export function missingFromMain(
  metadata: TableMetadata,
  snapshot: CheckpointSnapshot,
  pipeline: string | CheckpointIdentity,
): string | undefined {
  const { snapshotId, sequenceNumber, checkpointId } = snapshot;
  const main = history(metadata);
  if (main.ids.has(snapshotId)) return undefined;
  const listed = metadata.snapshots.some((candidate) => candidate['snapshot-id'] === snapshotId);
  if (listed && main.cutAt === undefined) return `snapshot ${snapshotId} is not in main's history`;
  // Both histories ending at the same expired snapshot, an ancestor of this one: main's history reaches it without
  // meeting this one, so main branches off below this one.
  if (listed && history(metadata, snapshotId).cutAt === main.cutAt) {
    return `snapshot ${snapshotId} is not in main's history: main branches off below it (both histories end at expired snapshot ${main.cutAt})`;
  }
  const head = mainHeadSequence(metadata);
  if (head < sequenceNumber) return `main's head has sequence number ${head}, below ${sequenceNumber}`;
  // Appends are in checkpoint order: a head descending from this snapshot meets it, a later checkpoint's, or an
  // expired snapshot before any earlier checkpoint's.
  const newest = newestCheckpointInMain(metadata, pipeline, checkpointId);
  if (newest !== undefined && newest < checkpointId) {
    return `snapshot ${snapshotId} is not in main's history, which reaches checkpoint ${newest}'s snapshot first`;
  }
  return main.cutAt === undefined
    ? `snapshot ${snapshotId} is expired and main's history, listed to its first snapshot, does not hold it`
    : undefined;
}

/**
 * Why main does not hold the checkpoint `appendCheckpoint` found committed though the ledger has no record of it
 * (the unknown commit state), or undefined when it does; `previous` is the ledger's record of the checkpoint just
 * before it. Found by its snapshot's summary, the snapshot is judged as the mark's is ({@link missingFromMain}).
 * Found by the property only, its snapshot expired: main lost it when its listed history reaches an earlier
 * checkpoint of the pipeline, or its first snapshot, without meeting an expired one
 * ({@link AppendResult.inMainHistory}), or when main's head has a sequence number not above the previous
 * checkpoint's, which every snapshot descending from this one is above.
 */
export function foundMissingFromMain(
  found: AppendResult,
  pipeline: string | CheckpointIdentity,
  checkpointId: number,
  previous: TableSnapshot | undefined,
): string | undefined {
  const { metadata } = found.state;
  if (found.foundBy !== 'property') {
    return found.inMainHistory ? undefined : missingFromMain(metadata, { ...found, checkpointId }, pipeline);
  }
  if (!found.inMainHistory) {
    const newest = newestCheckpointInMain(metadata, pipeline, checkpointId);
    return newest === undefined
      ? "its snapshot is expired and main's history, listed to its first snapshot, does not hold it"
      : `its snapshot is expired and main's history reaches checkpoint ${newest}'s first`;
  }
  const head = mainHeadSequence(metadata);
  if (previous !== undefined && head <= previous.sequenceNumber) {
    return `its snapshot is expired and main's head has sequence number ${head}, not above checkpoint ${previous.checkpointId}'s ${previous.sequenceNumber}`;
  }
  return undefined;
}

/** Why the table does not hold the mark's checkpoint, or undefined when it does. */
function rollbackOf(
  state: TableState | undefined,
  mark: PublishedMark,
  pipeline: string | CheckpointIdentity,
): string | undefined {
  const snapshot = mark.snapshot;
  if (mark.upTo === 0 || snapshot === undefined) return undefined;
  if (state === undefined) return 'the table has no metadata';
  const missing = missingFromMain(state.metadata, snapshot, pipeline);
  if (missing === undefined) return undefined;
  const identity = identityOf(pipeline);
  const property = publishedCheckpointProperty(identity.pipelineId);
  const named = checkpointOfProperty(state.metadata, property, identity);
  return named < mark.upTo ? `${missing}; its ${property} is ${named}` : missing;
}

/**
 * Throws {@link IcebergTableRolledBackError} (one line) when the table lost the mark's checkpoint: the published
 * mark, or the record of a checkpoint about to be marked or appended on.
 */
export function assertNotRolledBack(
  state: TableState | undefined,
  mark: PublishedMark,
  pipeline: string | CheckpointIdentity,
  location: string,
): void {
  const why = rollbackOf(state, mark, pipeline);
  if (why === undefined) return;
  throw new IcebergTableRolledBackError(
    `the Iceberg table ${location} was rolled back below checkpoint ${mark.upTo} (snapshot ${mark.snapshot?.snapshotId}), which the ledger records as published (${why}): nothing is appended over it; restore the table's metadata to a version that holds it`,
  );
}
