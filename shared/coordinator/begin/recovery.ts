/**
 * Begin's recovery of a checkpoint still in flight when it reads the head: the same execution's checkpoint is
 * handed back ({@link resume}); another's whose lease expired is rolled forward when past its decision
 * ({@link rollForward}) and presumed aborted before it ({@link abortExpired}), C4.
 */
import { CheckpointConflictError, type CheckpointHead, isInFlight } from '../../ledger/checkpoints.ts';
import { markAborted } from '../abort/abort.ts';
import { requireRecord } from '../checkpoint-state.ts';
import type { BeginOutput } from '../messages.ts';
import { type CoordinatorParts, leaseUntil } from '../parts.ts';
import { shardList } from '../shards.ts';
import { BUSY } from './allocate.ts';

/**
 * A retried begin of the execution that already allocated, or a second run of it (an Express execution runs at
 * least once): hand back the same checkpoint, wherever the other run has taken it since the head was read. One
 * that has ended since is not this run's to act on: it exits as another execution's would.
 */
export async function resume(
  parts: Pick<CoordinatorParts, 'store'>,
  head: CheckpointHead,
): Promise<BeginOutput> {
  const record = await parts.store.readRecord(head.checkpointId);
  if (record?.attempt !== head.attempt || !isInFlight(record.status)) return BUSY;
  const action = record.status === 'COMMITTING' ? 'commit' : 'checkpoint';
  return {
    action,
    checkpointId: head.checkpointId,
    attempt: head.attempt,
    shards: shardList(record.shardCount),
  };
}

/** Recovery after the decision (C4): take the expired checkpoint over and roll it forward. */
export async function rollForward(
  parts: Pick<CoordinatorParts, 'settings' | 'store' | 'log'>,
  head: CheckpointHead,
  execution: string,
  now: number,
): Promise<BeginOutput> {
  if (!(await parts.store.takeOver(head, execution, leaseUntil(parts.settings, now), now))) return BUSY;
  const record = await requireRecord(parts.store, head.checkpointId, head.attempt, ['COMMITTING']);
  parts.log.error('recovering an expired checkpoint after its decision: rolling forward', {
    checkpointId: head.checkpointId,
    attempt: head.attempt,
    previousOwner: head.owner,
  });
  return {
    action: 'commit',
    checkpointId: head.checkpointId,
    attempt: head.attempt,
    shards: shardList(record.shardCount),
  };
}

/** Recovery before the decision (C4): presume abort. False when another execution changed it first. */
export async function abortExpired(
  parts: Pick<CoordinatorParts, 'store' | 'log'>,
  head: CheckpointHead,
  execution: string,
  now: number,
): Promise<boolean> {
  const reason = `lease expired in ${head.status} (owner ${head.owner}); recovered by ${execution}`;
  try {
    await markAborted(parts, head, reason, now);
    return true;
  } catch (error) {
    if (error instanceof CheckpointConflictError) return false;
    throw error;
  }
}
