/**
 * The abort (C6): for any failure before the decision, BEGUN|PREPARED → ABORTED with the reason, the attempt's cut
 * pages and working objects deleted; its staged entries stay for the next checkpoint. Refused (`decided`) once the
 * attempt is COMMITTING or COMMITTED: the state machine then rolls forward. Begin's recovery of an expired lease
 * before the decision ends in the same transition ({@link markAborted}).
 */
import {
  BEFORE_DECISION_STATUSES,
  CheckpointConflictError,
  type CheckpointHead,
  CheckpointStore,
  truncateReason,
} from '../../ledger/checkpoints.ts';
import { sweepCoordinatorOrphans } from '../cleanup/orphans.ts';
import { type AbortInput, type AbortOutput, abortInputSchema, describeCaughtError } from '../messages.ts';
import type { CoordinatorParts } from '../parts.ts';

/** What an abort reads, writes and sweeps with. */
export type AbortParts = Pick<
  CoordinatorParts,
  'settings' | 'clients' | 'clock' | 'log' | 'store' | 'ledger' | 'plans' | 'orphanSweepLimit'
>;

/**
 * The abort step: the attempt `input` names, or, when begin failed without handing back an id, the one this
 * execution allocated.
 */
export async function abortCheckpoint(parts: AbortParts, raw: AbortInput): Promise<AbortOutput> {
  const { store, log, clock } = parts;
  const input = abortInputSchema.parse(raw);
  const cause = describeCaughtError(input.error);
  const head = await store.readHead();
  let { checkpointId, attempt } = input;
  if (checkpointId === 0) {
    // Begin failed without handing back an id: abort only a checkpoint this execution allocated.
    if (!head || head.owner !== input.execution || !BEFORE_DECISION_STATUSES.includes(head.status)) {
      return { outcome: 'nothing', reason: `no checkpoint begun: ${cause}`, orphansDeleted: 0 };
    }
    ({ checkpointId, attempt } = head);
  }
  const reason = `checkpoint ${checkpointId} attempt ${attempt} aborted: ${cause}`;
  const current = await store.readRecord(checkpointId);
  if (current?.attempt === attempt && (current.status === 'COMMITTING' || current.status === 'COMMITTED')) {
    log.error('abort refused: the checkpoint is past its decision and rolls forward', {
      checkpointId,
      attempt,
      cause,
    });
    return {
      outcome: 'decided',
      reason: `checkpoint ${checkpointId} is ${current.status}; rolling forward (${cause})`,
      orphansDeleted: 0,
    };
  }
  if (
    head &&
    head.checkpointId === checkpointId &&
    head.attempt === attempt &&
    BEFORE_DECISION_STATUSES.includes(head.status)
  ) {
    try {
      await markAborted(parts, head, reason, clock.now());
    } catch (error) {
      if (!(error instanceof CheckpointConflictError)) throw error;
      return abortCheckpoint(parts, raw);
    }
  }
  // The attempt's working objects go, its candidates too; an attempt aborted by lease expiry in begin keeps
  // them until checkpoint N's cleanup deletes every attempt's.
  await parts.plans.deleteAttempt(checkpointId, attempt);
  // Again here (idempotent): a retried abort whose first run marked the attempt ABORTED but died before
  // markAborted deleted the pages finds the head already ABORTED and would otherwise leave them behind.
  const aborted = await store.readRecord(checkpointId);
  if (aborted?.attempt === attempt && aborted.status === 'ABORTED') await store.deleteCut(aborted.cutId);
  const orphansDeleted = await sweepCoordinatorOrphans(parts);
  return { outcome: 'aborted', reason, orphansDeleted };
}

/**
 * The head's attempt BEGUN|PREPARED → ABORTED with `fullReason` (truncated for the ledger), its abort counted and
 * recorded in the attempt's bounded history, and its cut pages deleted. Throws {@link CheckpointConflictError}
 * when another execution changed the attempt first.
 */
export async function markAborted(
  parts: Pick<CoordinatorParts, 'store' | 'log'>,
  head: CheckpointHead,
  fullReason: string,
  now: number,
): Promise<void> {
  const { store, log } = parts;
  const consecutiveAborts = head.consecutiveAborts + 1;
  const reason = truncateReason(fullReason);
  // Read-modify-write of the bounded history is safe: the transition below is conditioned on (attempt, status
  // before the decision), and only an abort of this very attempt — which that condition lets through once —
  // changes the history.
  const current = await store.readRecord(head.checkpointId);
  const history = CheckpointStore.abortHistory(current?.attempt === head.attempt ? current : undefined, {
    attempt: head.attempt,
    reason,
    at: now,
  });
  await store.transition({
    checkpointId: head.checkpointId,
    attempt: head.attempt,
    from: BEFORE_DECISION_STATUSES,
    to: 'ABORTED',
    head: { consecutiveAborts, lastAbortReason: reason },
    record: { abortedAt: now, abortReason: reason, ...history },
    now,
  });
  log.error('checkpoint aborted: its staged data waits for the next checkpoint', {
    checkpointId: head.checkpointId,
    attempt: head.attempt,
    reason: fullReason,
    consecutiveAborts,
  });
  // The attempt's cut is never read again (a zombie step of it fails on the missing pages, harmlessly).
  if (current?.attempt === head.attempt) await store.deleteCut(current.cutId);
}
