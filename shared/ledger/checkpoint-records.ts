/**
 * The checkpoint head and the checkpoint record as the ledger holds them (keys in `layout.ts`:
 * `keys.checkpointHead`, `keys.checkpoint`): their statuses, fields and bounds. Written by `CheckpointStore`
 * (`checkpoints.ts`); which transition is allowed when is `shared/coordinator`'s.
 */
import { PipelineError } from '../errors.ts';
import type { CutPages } from './cut-pages.ts';

export const CHECKPOINT_STATUS = {
  /** Id allocated, cut recorded; prepare shards are verifying and voting. */
  BEGUN: 'BEGUN',
  /** Every shard voted yes: every covered staged object verified, promotion planned. */
  PREPARED: 'PREPARED',
  /** The decision (C4): from here the checkpoint only rolls forward. */
  COMMITTING: 'COMMITTING',
  /** The manifest is written; the checkpoint's output is visible. */
  COMMITTED: 'COMMITTED',
  /** Nothing was promoted; the covered staged data waits for the next attempt (C6). */
  ABORTED: 'ABORTED',
} as const;
export type CheckpointStatus = (typeof CHECKPOINT_STATUS)[keyof typeof CHECKPOINT_STATUS];

export const IN_FLIGHT_STATUSES: readonly CheckpointStatus[] = ['BEGUN', 'PREPARED', 'COMMITTING'];
export const BEFORE_DECISION_STATUSES: readonly CheckpointStatus[] = ['BEGUN', 'PREPARED'];

export function isInFlight(status: CheckpointStatus): boolean {
  return IN_FLIGHT_STATUSES.includes(status);
}

export interface CheckpointHead {
  /** The checkpoint in flight, or the last one (committed or aborted); 0 before the first. */
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: CheckpointStatus;
  /** Epoch ms; an in-flight checkpoint whose lease has passed is recovered by the next execution. */
  readonly leaseUntil: number;
  /** The execution that holds the lease. */
  readonly owner: string;
  /** The last committed checkpoint id; 0 before the first commit. */
  readonly committedId: number;
  /** Aborts since the last commit: a growing number means the pipeline is stuck (alarm on it). */
  readonly consecutiveAborts: number;
  readonly lastAbortReason?: string;
  readonly updatedAt: number;
  /**
   * Epoch ms of the first checkpoint begun by a release whose coordinator reads staged entries kept inline in
   * fence items, packed (`ledger/packed-entry.ts`): processors put entries inline only a grace period after it
   * (`processor/inline-gate.ts`). A begin of an earlier release rewrites the head without it, and the next begin
   * of this release starts it again. Named for the packed format: a release that read only the map format wrote
   * `inlineEntriesSince`, which this release neither reads nor keeps.
   */
  readonly packedEntriesSince?: number;
  /**
   * Epoch ms of the first checkpoint begun by a release whose processors read a fence's identity packed
   * (`ledger/fence-identity.ts`) and inline entries without their MD5 (`ledger/packed-entry.ts` format 2): the
   * processor's gate opens a grace period after it (`processor/inline-gate.ts`), as for `packedEntriesSince`, which
   * this release keeps writing for the processors of the release before while they run.
   */
  readonly compactFenceSince?: number;
}

/** The head of a pipeline that never took a checkpoint. */
export const INITIAL_HEAD: CheckpointHead = {
  checkpointId: 0,
  attempt: 0,
  status: 'COMMITTED',
  leaseUntil: 0,
  owner: '',
  committedId: 0,
  consecutiveAborts: 0,
  updatedAt: 0,
};

export interface AbortNote {
  readonly attempt: number;
  readonly reason: string;
  readonly at: number;
}

/** How many abort notes a record keeps (the newest); older ones are only counted in `abortCount`. */
export const RECENT_ABORTS = 5;
/** Longest abort reason stored (head and record); longer ones are cut with a marker. */
export const MAX_ABORT_REASON = 1000;

export function truncateReason(reason: string): string {
  return reason.length <= MAX_ABORT_REASON
    ? reason
    : `${reason.slice(0, MAX_ABORT_REASON - 13)} …[truncated]`;
}

export interface CheckpointRecord {
  readonly pipeline: string;
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: CheckpointStatus;
  readonly owner: string;
  /** The pk suffix of this attempt's cut pages: unique to the begin that wrote them. */
  readonly cutId: string;
  readonly cutPages: CutPages;
  /** Partitions in the cut, and how many of them moved (the ones this checkpoint covers). */
  readonly partitions: number;
  readonly changedPartitions: number;
  readonly previousCheckpointId: number;
  /** The cutId of checkpoint `previousCheckpointId` ('' for none): cleanup deletes its pages once this commits. */
  readonly previousCutId: string;
  readonly shardCount: number;
  /**
   * Replay generations this checkpoint switches readers to (`shared/replay/`): chosen by begin (switch requested,
   * every range covered by this cut), written into the manifest by commit. Absent: none.
   */
  readonly generationSwitches?: readonly number[];
  /** Shards whose prepare voted yes for this attempt. */
  readonly votes?: ReadonlySet<number>;
  /** Shards whose cleanup finished once this checkpoint COMMITTED (a cleanup that never ran is caught up). */
  readonly cleanedShards?: ReadonlySet<number>;
  /** Per shard (as a string), the hex SHA-256 of the plan that shard's yes vote is for. */
  readonly planDigests?: Readonly<Record<string, string>>;
  readonly begunAt: number;
  readonly decidedAt?: number;
  readonly committedAt?: number;
  readonly abortedAt?: number;
  readonly abortReason?: string;
  /** Aborted attempts of this checkpoint id, all of them. */
  readonly abortCount?: number;
  /** The newest {@link RECENT_ABORTS} aborted attempts, oldest first. */
  readonly recentAborts?: readonly AbortNote[];
}

/** A conditional write lost: the head or the record is no longer what the caller expected. */
export class CheckpointConflictError extends PipelineError {
  constructor(
    readonly checkpointId: number,
    readonly attempt: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`checkpoint ${checkpointId} attempt ${attempt}: ${message}`, options);
  }
}

export interface TransitionRequest {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly from: readonly CheckpointStatus[];
  readonly to: CheckpointStatus;
  /** Extra attributes to SET on the head (besides status and updatedAt). */
  readonly head?: Record<string, unknown>;
  /** Extra attributes to SET on the record (besides status). */
  readonly record?: Record<string, unknown>;
  /** An extra condition on the record, e.g. `size(votes) = :shardCount`, with its values. */
  readonly recordCondition?: { readonly expression: string; readonly values: Record<string, unknown> };
  readonly now: number;
}
