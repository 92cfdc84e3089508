/**
 * Catch-up of earlier cleanups: a committed checkpoint whose cleanup never completed (an execution cut off after
 * COMMITTED, or a failed cleanup, which the definition routes to Committed) is cleaned up by a later checkpoint's
 * cleanup, from its own cut pages. The cleaned-up mark in the ledger says how far this has come.
 */
import { isTransient } from '../../aws/classify.ts';
import { type CheckpointRecord, CutPagesError } from '../../ledger/checkpoints.ts';
import type { CoordinatorParts } from '../parts.ts';
import { shardList } from '../shards.ts';
import { cleanPartitions } from './partition.ts';

/** Most earlier checkpoints one cleanup catches up on. */
const CATCH_UP_LIMIT = 10;

type CatchUpParts = Pick<
  CoordinatorParts,
  'settings' | 'clients' | 'clock' | 'log' | 'store' | 'ledger' | 'plans' | 'concurrency'
>;

/**
 * Cleans up the committed checkpoints between the cleaned-up mark and `record` whose cleanup never completed:
 * their partitions up to their cuts, their working objects and the cut pages they superseded. At most
 * {@link CATCH_UP_LIMIT} per cleanup; the mark moves after each, so the next cleanup continues from there.
 */
export async function catchUpCleanups(parts: CatchUpParts, record: CheckpointRecord): Promise<void> {
  const { store, clock, log } = parts;
  const found = await store.readCleanedMarkIfAny();
  if (found === undefined) {
    // A pipeline from the release before the mark: that release cleaned up every checkpoint in its own cleanup
    // and recorded none, so the earlier ones count as cleaned; the mark starts below this one.
    log.info('starting the cleaned-up mark of a pipeline from before it', { upTo: record.checkpointId - 1 });
    await store.writeCleanedMark(0, record.checkpointId - 1, clock.now());
    return;
  }
  let mark = found;
  const last = Math.min(record.checkpointId - 1, mark + CATCH_UP_LIMIT);
  for (let id = mark + 1; id <= last; id++) {
    const earlier = await store.readRecord(id);
    if (earlier?.status !== 'COMMITTED') return;
    if ((earlier.cleanedShards?.size ?? 0) < earlier.shardCount) {
      log.error('catching up on the cleanup of an earlier checkpoint that never completed', {
        checkpointId: id,
        by: record.checkpointId,
      });
      try {
        await catchUpOne(parts, earlier);
      } catch (error) {
        // A transient failure is retried with this cleanup. Anything else would fail the same way on every
        // later cleanup and pin the mark: it is logged and this checkpoint is passed over.
        if (isTransient(error)) throw error;
        log.error('passing over a catch-up cleanup that cannot complete', {
          checkpointId: id,
          error: error instanceof Error ? error.message : String(error),
        });
      }
    }
    if (!(await store.writeCleanedMark(mark, id, clock.now()))) return;
    mark = id;
  }
}

/** One earlier checkpoint's cleanup, from its own cut pages (see {@link catchUpCleanups}). */
async function catchUpOne(parts: CatchUpParts, earlier: CheckpointRecord): Promise<void> {
  // A record from before cut pages (an inline cut) has nothing to walk here.
  const paged = (earlier as Partial<CheckpointRecord>).cutPages !== undefined;
  if (paged && typeof earlier.cutId === 'string' && earlier.cutId !== '') {
    try {
      for (const shard of shardList(earlier.shardCount))
        await cleanPartitions(parts, await parts.store.readCut(earlier, shard));
    } catch (error) {
      // Its pages are gone (a pipeline older than the mark): nothing to walk; later cuts cover its partitions
      // whenever they move again.
      if (!(error instanceof CutPagesError)) throw error;
    }
  }
  await parts.plans.deleteCheckpoint(earlier.checkpointId);
  await parts.store.deleteCut(earlier.previousCutId);
}
