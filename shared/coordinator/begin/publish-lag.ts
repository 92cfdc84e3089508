/**
 * Begin's answer on an idle pipeline that publishes to an Iceberg table. A publish that fails after every retry
 * leaves the commit standing and the table behind, and only a later checkpoint's publish catches it up; an idle
 * pipeline has no later checkpoint. So when there is nothing to commit, begin compares the published mark with the
 * last committed checkpoint and, when the mark is behind, answers `publish` with that checkpoint for the state
 * machine to publish (with every earlier one the mark has not reached) before it ends.
 *
 * What an idle execution pays for it: one GetItem of the mark, and no publish invocation, when nothing lags; the
 * committed record's GetItem and one publish invocation when something does. Nothing before the first commit.
 */
import { TransientAwsError } from '../../errors.ts';
import type { TableSnapshots } from '../../ledger/table-snapshots.ts';
import type { BeginOutput } from '../messages.ts';
import type { CoordinatorParts } from '../parts.ts';
import { EMPTY } from './allocate.ts';

/** `empty`, or `publish` with the last committed checkpoint when the published mark is behind it. */
export async function idleAnswer(
  parts: Pick<CoordinatorParts, 'store' | 'log'>,
  snapshots: Pick<TableSnapshots, 'readMark'>,
  committedId: number,
): Promise<BeginOutput> {
  if (committedId === 0) return EMPTY;
  try {
    const mark = await snapshots.readMark();
    if (mark.upTo >= committedId) return EMPTY;
    const record = await parts.store.readRecord(committedId);
    // The head names its committed checkpoint only once the record is COMMITTED; anything else is not ours to publish.
    if (record?.status !== 'COMMITTED') return EMPTY;
    parts.log.error('the Iceberg table is behind the last committed checkpoint: publishing it', {
      checkpointId: committedId,
      publishedUpTo: mark.upTo,
    });
    return { action: 'publish', checkpointId: committedId, attempt: record.attempt, shards: [] };
  } catch (error) {
    // Begin retries a transient failure in place, as it does its other reads. Anything else (a malformed mark) must
    // not fail an execution that has nothing to commit, as a failed publish does not: the table waits, logged.
    if (error instanceof TransientAwsError) throw error;
    parts.log.error('could not tell whether the Iceberg table is behind: nothing published', {
      checkpointId: committedId,
      error: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    });
    return EMPTY;
  }
}
