/**
 * The check every step makes before it acts: the checkpoint's record is of the attempt it was given and in a status
 * the step may act on, else the step refuses with {@link CheckpointStateError} (superseded, or out of order).
 */
import { PipelineError } from '../errors.ts';
import type { CheckpointRecord, CheckpointStatus, CheckpointStore } from '../ledger/checkpoints.ts';

/** A step was asked to act on a checkpoint that is not in the status the step needs (superseded, or out of order). */
export class CheckpointStateError extends PipelineError {
  constructor(
    readonly checkpointId: number,
    readonly attempt: number,
    readonly found: string,
    expected: string,
  ) {
    super(`checkpoint ${checkpointId} attempt ${attempt} is ${found}, expected ${expected}`);
  }
}

/** The record of (checkpointId, attempt) in one of `statuses`, or {@link CheckpointStateError}. */
export async function requireRecord(
  store: Pick<CheckpointStore, 'readRecord'>,
  checkpointId: number,
  attempt: number,
  statuses: readonly CheckpointStatus[],
): Promise<CheckpointRecord> {
  const record = await store.readRecord(checkpointId);
  if (!record || record.attempt !== attempt || !statuses.includes(record.status)) {
    const found = record ? `attempt ${record.attempt} ${record.status}` : 'absent';
    throw new CheckpointStateError(checkpointId, attempt, found, statuses.join('|'));
  }
  return record;
}
