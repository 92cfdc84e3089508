/**
 * Decide (C4): once every shard of the attempt voted, BEGUN → PREPARED → COMMITTING, each transition conditioned
 * on the attempt and its status; COMMITTING is the decision, and renews the lease for the roll-forward. Another run
 * of this step (a retry whose first invocation still runs, a second run of an Express execution) may move the
 * attempt first: that is its own decision, not a conflict.
 */
import { PipelineError } from '../../errors.ts';
import { CheckpointConflictError, type CheckpointRecord } from '../../ledger/checkpoints.ts';
import type { CheckpointRef, DecideOutput } from '../messages.ts';
import { type CoordinatorParts, leaseUntil } from '../parts.ts';

/** Decide found shards that did not vote: prepare did not complete for this attempt. */
export class VotesIncompleteError extends PipelineError {}

type DecideParts = Pick<CoordinatorParts, 'settings' | 'store' | 'clock' | 'log'>;

/**
 * Decides `record`, the attempt `input` names (BEGUN, PREPARED, COMMITTING, or COMMITTED: a run trailing another
 * run of its execution finds the decision taken, and the checkpoint committed since).
 */
export async function decideCheckpoint(
  parts: DecideParts,
  record: CheckpointRecord,
  input: CheckpointRef,
): Promise<DecideOutput> {
  if (record.status === 'COMMITTING' || record.status === 'COMMITTED')
    return { checkpointId: record.checkpointId, decidedAt: record.decidedAt ?? 0 };
  const { store, clock, log } = parts;
  const now = clock.now();
  const ref = { checkpointId: input.checkpointId, attempt: input.attempt, now };
  if (record.status === 'BEGUN') {
    const votes = record.votes?.size ?? 0;
    if (votes !== record.shardCount) {
      throw new VotesIncompleteError(
        `checkpoint ${input.checkpointId} attempt ${input.attempt}: ${votes} of ${record.shardCount} shards voted`,
      );
    }
    const moved = await decidedByTwin(parts, input, 'PREPARED', () =>
      store.transition({
        ...ref,
        from: ['BEGUN'],
        to: 'PREPARED',
        recordCondition: {
          expression: 'size(votes) = :shardCount',
          values: { ':shardCount': record.shardCount },
        },
      }),
    );
    if (moved) return moved;
  }
  const moved = await decidedByTwin(parts, input, undefined, () =>
    store.transition({
      ...ref,
      from: ['PREPARED'],
      to: 'COMMITTING',
      head: { leaseUntil: leaseUntil(parts.settings, now) },
      record: { decidedAt: now },
    }),
  );
  if (moved) return moved;
  log.info('checkpoint decided: COMMITTING', { checkpointId: input.checkpointId, attempt: input.attempt });
  return { checkpointId: input.checkpointId, decidedAt: now };
}

/**
 * Runs one of decide's transitions. A conflict may be another run of this very step that moved the attempt first:
 * `goOnAt` (the status this transition writes) lets this one go on (undefined), COMMITTING (or COMMITTED since) is
 * the decision already taken (its output). Anything else is a real conflict.
 */
async function decidedByTwin(
  parts: DecideParts,
  input: CheckpointRef,
  goOnAt: 'PREPARED' | undefined,
  transition: () => Promise<unknown>,
): Promise<DecideOutput | undefined> {
  try {
    await transition();
    return undefined;
  } catch (error) {
    if (!(error instanceof CheckpointConflictError)) throw error;
    const now = await parts.store.readRecord(input.checkpointId);
    if (now?.attempt !== input.attempt) throw error;
    if (now.status === 'COMMITTING' || now.status === 'COMMITTED')
      return { checkpointId: now.checkpointId, decidedAt: now.decidedAt ?? 0 };
    if (goOnAt !== undefined && now.status === goOnAt) return undefined;
    throw error;
  }
}
