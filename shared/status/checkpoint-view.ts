/**
 * How `eos status` reads checkpoint items. The coordinator owns their shape (`shared/ledger/checkpoints.ts`:
 * {@link CheckpointRecord}, {@link CheckpointHead}); this module is the one place that turns them into the status
 * view. An aborted attempt of checkpoint N is followed by attempt k+1 of the same N, so "aborted" is a property of
 * attempts: each record keeps a bounded history of them (`abortCount`, the newest notes in `recentAborts`). A cut
 * is not part of the record (it lives in cut pages); the status reads it only for the last committed checkpoint.
 */
import type { AbortNote, CheckpointHead, CheckpointRecord } from '../ledger/checkpoints.ts';

export interface CheckpointView {
  readonly id: number;
  readonly attempt: number;
  /** BEGUN, PREPARED, COMMITTING, COMMITTED or ABORTED. */
  readonly status: string;
  readonly begunAt?: number;
  readonly decidedAt?: number;
  /** When it reached COMMITTED or ABORTED. */
  readonly endedAt?: number;
  /**
   * Per partition (`<topic>#<partition>`), the staged offset taken as the cut at begin (C2). Filled in for the last
   * committed checkpoint only (read from its cut pages); empty for the others.
   */
  readonly cut: ReadonlyMap<string, number>;
  /** Partitions in the cut, and how many of them this checkpoint covers (cut moved). */
  readonly partitions?: number;
  readonly changedPartitions?: number;
  readonly abortReason?: string;
  /** Aborted attempts of this id in all; `aborts` holds the newest of them. */
  readonly abortCount: number;
  readonly aborts: readonly AbortNote[];
}

/** One aborted attempt of a checkpoint. */
export interface AbortedAttempt {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly reason: string;
  readonly at?: number;
}

const IN_FLIGHT = new Set(['BEGUN', 'PREPARED', 'COMMITTING']);

export function isCommitted(view: { readonly status: string }): boolean {
  return view.status === 'COMMITTED';
}

export function isInFlight(view: { readonly status: string }): boolean {
  return IN_FLIGHT.has(view.status);
}

/** A stored checkpoint record (keys stripped or not) as the status view; undefined for the head or junk. */
export function toCheckpointView(item: Record<string, unknown>): CheckpointView | undefined {
  const record = item as Partial<CheckpointRecord>;
  if (typeof record.checkpointId !== 'number' || typeof record.status !== 'string') return undefined;
  return {
    id: record.checkpointId,
    attempt: record.attempt ?? 1,
    status: record.status,
    begunAt: record.begunAt,
    decidedAt: record.decidedAt,
    endedAt: record.committedAt ?? record.abortedAt,
    cut: new Map(),
    partitions: record.partitions,
    changedPartitions: record.changedPartitions,
    abortReason: record.abortReason,
    abortCount: record.abortCount ?? 0,
    aborts: record.recentAborts ?? [],
  };
}

/**
 * The aborted attempts a record still describes: its recent notes, plus its current attempt if that is ABORTED.
 * Older ones are only counted (`abortCount`).
 */
export function abortedAttempts(view: CheckpointView): AbortedAttempt[] {
  const attempts: AbortedAttempt[] = view.aborts.map((note) => ({
    checkpointId: view.id,
    attempt: note.attempt,
    reason: note.reason,
    at: note.at,
  }));
  if (view.status === 'ABORTED' && !attempts.some((a) => a.attempt === view.attempt)) {
    attempts.push({
      checkpointId: view.id,
      attempt: view.attempt,
      reason: view.abortReason ?? 'unknown',
      at: view.endedAt,
    });
  }
  return attempts.sort((a, b) => b.attempt - a.attempt);
}

/** The head's fields the status shows. */
export interface HeadView {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: string;
  readonly committedId: number;
  readonly consecutiveAborts: number;
  readonly leaseUntil: number;
  readonly lastAbortReason?: string;
}

export function toHeadView(item: Record<string, unknown> | undefined): HeadView | undefined {
  const head = item as Partial<CheckpointHead> | undefined;
  if (!head || typeof head.checkpointId !== 'number' || typeof head.status !== 'string') return undefined;
  return {
    checkpointId: head.checkpointId,
    attempt: head.attempt ?? 1,
    status: head.status,
    committedId: head.committedId ?? 0,
    consecutiveAborts: head.consecutiveAborts ?? 0,
    leaseUntil: head.leaseUntil ?? 0,
    lastAbortReason: head.lastAbortReason,
  };
}
