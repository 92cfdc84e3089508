/**
 * The cut pages of begins that crashed between writing them and the allocation (`begin/allocate.ts`): such a
 * begin noted its cutId first, so cleanup finds the pages by the note once no begin can still be running.
 */
import type { CoordinatorParts } from '../parts.ts';

/** Longest a step (a Lambda) can run: a pending cut older than this and the lease is not being written any more. */
const MAX_STEP_SECONDS = 900;
/** Most pending-cut notes one cleanup examines. */
const PENDING_CUT_SWEEP_LIMIT = 100;

/**
 * Deletes the pages of cuts whose pending-cut note is older than any begin can run and that the record of their
 * checkpoint id does not name; drops the notes of cuts a record does name. A page set is deleted only when no
 * record names it, so no live cut is touched. Returns the pages deleted.
 */
export async function sweepPendingCuts(
  parts: Pick<CoordinatorParts, 'settings' | 'clock' | 'log' | 'store'>,
): Promise<number> {
  const { store } = parts;
  const graceMs = Math.max(parts.settings.checkpointLeaseSeconds, MAX_STEP_SECONDS) * 1000;
  let deleted = 0;
  for (const cutId of await store.pendingCuts(parts.clock.now() - graceMs, PENDING_CUT_SWEEP_LIMIT)) {
    const checkpointId = Number(cutId.slice(0, cutId.indexOf('#')));
    const record = Number.isSafeInteger(checkpointId) ? await store.readRecord(checkpointId) : undefined;
    if (record?.cutId !== cutId) {
      parts.log.info('deleting the cut pages of a begin that never allocated', { cutId });
      deleted += await store.deleteCut(cutId);
    }
    await store.clearPendingCut(cutId);
  }
  return deleted;
}
