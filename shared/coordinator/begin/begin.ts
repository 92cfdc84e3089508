/**
 * The begin step (C1, C2): a checkpoint still in flight is handed back to its own execution, left to another's
 * live lease, or recovered once its lease expired (`recovery.ts`); then the next checkpoint is allocated
 * (`allocate.ts`), and with nothing to commit in a state machine that publishes, the last committed checkpoint is
 * answered when the table lags behind it (`publish-lag.ts`).
 */
import { isInFlight } from '../../ledger/checkpoints.ts';
import type { TableSnapshots } from '../../ledger/table-snapshots.ts';
import type { BeginInput, BeginOutput } from '../messages.ts';
import type { CoordinatorParts } from '../parts.ts';
import { allocateCheckpoint, BUSY, HAND_OFF } from './allocate.ts';
import { idleAnswer } from './publish-lag.ts';
import { abortExpired, resume, rollForward } from './recovery.ts';

/** What begin reads, writes and allocates with. */
export type BeginParts = Pick<
  CoordinatorParts,
  'settings' | 'clock' | 'log' | 'store' | 'ledger' | 'replays' | 'partitionsPerShard'
>;

export async function beginCheckpoint(
  parts: BeginParts,
  snapshots: Pick<TableSnapshots, 'readMark'>,
  input: BeginInput,
): Promise<BeginOutput> {
  const { store, log, clock } = parts;
  const now = clock.now();
  let head = await store.readHead();
  if (head && isInFlight(head.status)) {
    if (head.owner === input.execution) return resume(parts, head);
    if (head.leaseUntil > now) {
      log.info('another checkpoint is in flight', {
        checkpointId: head.checkpointId,
        owner: head.owner,
      });
      return BUSY;
    }
    // An expired checkpoint is recovered by a Standard workflow, which a step's timeout bounds, not five minutes.
    if (input.handOff) return HAND_OFF;
    if (head.status === 'COMMITTING') return rollForward(parts, head, input.execution, now);
    if (!(await abortExpired(parts, head, input.execution, now))) return BUSY;
    head = await store.readHead();
  }
  const allocated = await allocateCheckpoint(parts, head, input.execution, now, {
    handOff: input.handOff === true,
  });
  if (allocated.action !== 'empty' || !input.publish) return allocated;
  return idleAnswer(parts, snapshots, head?.committedId ?? 0);
}
