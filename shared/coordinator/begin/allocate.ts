/**
 * Begin's allocation of checkpoint N once no other checkpoint is live (C1, C2): the cut is every partition's
 * fence `stagedOffset`, never below the committed cut. Unchanged since the last committed cut → `empty`, so the
 * manifest log has no gap. Else the cut is written as pages under a fresh `cutId` (the changed partitions dealt
 * round-robin to the shards, then the unchanged ones: no item grows with the number of partitions, L3), and one
 * transaction conditioned on the head being exactly what was read allocates id N: of two executions started
 * together one wins, the other exits `busy` and deletes its pages. A begin that dies between the pages and the
 * allocation noted the cutId first, so a later cleanup deletes them (`cleanup/pending-cuts.ts`).
 */
import { randomUUID } from 'node:crypto';
import type { CheckpointHead, CheckpointRecord, CutEntry } from '../../ledger/checkpoints.ts';
import { padCheckpointId } from '../../ledger/layout.ts';
import type { BeginOutput } from '../messages.ts';
import { type CoordinatorParts, leaseUntil } from '../parts.ts';
import { dealToShards, shardCountFor, shardList, splitCut } from '../shards.ts';
import { coveredSwitches } from './switches.ts';

/** Another execution's checkpoint is live, or it won the race: exit cleanly. */
export const BUSY: BeginOutput = { action: 'busy', checkpointId: 0, attempt: 0, shards: [] };

/** An Express workflow leaves this checkpoint to the Standard workflow (see `definition.ts`). */
export const HAND_OFF: BeginOutput = { action: 'handoff', checkpointId: 0, attempt: 0, shards: [] };

/**
 * An Express workflow hands the next checkpoint to the Standard one when the last committed one took longer than
 * this from begin to commit: well inside Express's five minutes, so that a pipeline whose checkpoints grow long
 * moves to the Standard workflow before one is cut off (and waits a lease to be recovered).
 */
export const LONG_CHECKPOINT_MS = 120_000;

/** Nothing staged since the last commit: no checkpoint. */
export const EMPTY: BeginOutput = { action: 'empty', checkpointId: 0, attempt: 0, shards: [] };

type AllocateParts = Pick<
  CoordinatorParts,
  'settings' | 'store' | 'ledger' | 'replays' | 'log' | 'partitionsPerShard'
>;

/** The cut as of now (C2): per partition, the staged offset read now, never below the committed cut. */
async function readCutNow(parts: AllocateParts, committedId: number) {
  const previous = await parts.store.committedCut(committedId);
  // A partition the fences no longer show keeps its committed offset, so the cut never drops a partition.
  const cut = new Map<string, CutEntry>();
  for (const [partition, offset] of previous.cut)
    cut.set(partition, { partition, previous: offset, cut: offset });
  for (const [partition, staged] of Object.entries(await parts.ledger.readFences())) {
    const before = previous.cut.get(partition) ?? -1;
    cut.set(partition, { partition, previous: before, cut: Math.max(staged, before) });
  }
  return { previous, cut, ...splitCut(cut.values()) };
}

/**
 * Allocates the next checkpoint (or attempt) over `head`, which is not in flight, for `execution`. `handOff` (an
 * Express workflow): the attempt after an abort, and a checkpoint after a long one ({@link LONG_CHECKPOINT_MS}),
 * are left to the Standard workflow.
 */
export async function allocateCheckpoint(
  parts: AllocateParts,
  head: CheckpointHead | undefined,
  execution: string,
  now: number,
  { handOff = false }: { readonly handOff?: boolean } = {},
): Promise<BeginOutput> {
  const { store, log } = parts;
  const committedId = head?.committedId ?? 0;
  const { previous, cut, changed, unchanged } = await readCutNow(parts, committedId);
  const switches = await coveredSwitches(parts, cut);
  // A requested switch whose ranges are all committed already needs a checkpoint of its own on an idle pipeline.
  if (changed.length === 0 && switches.length === 0) return EMPTY;
  // The attempt after an abort (which may have aborted for want of time), or the checkpoint after a long one, runs
  // where it has more time. Only with work to do: an idle pipeline does not hand off every interval.
  const last = previous.record;
  if (handOff && (head?.consecutiveAborts ?? 0) > 0) return HAND_OFF;
  if (handOff && last?.committedAt !== undefined && last.committedAt - last.begunAt > LONG_CHECKPOINT_MS)
    return HAND_OFF;

  const checkpointId = committedId + 1;
  const attempt = head && head.checkpointId === checkpointId ? head.attempt + 1 : 1;
  // An abort that crashed between marking the attempt ABORTED and deleting its cut pages, and was never retried,
  // left them behind; the allocation below overwrites the record that names them, so they go now (idempotent).
  if (head?.status === 'ABORTED' && head.checkpointId === checkpointId) {
    const aborted = await store.readRecord(checkpointId);
    if (aborted?.status === 'ABORTED' && aborted.attempt === head.attempt)
      await store.deleteCut(aborted.cutId);
  }
  const shardCount = shardCountFor(changed.length, parts.partitionsPerShard);
  // Unique to this begin: two racing begins never write the same pages, and the loser's are never named.
  const cutId = `${padCheckpointId(checkpointId)}#${attempt}#${randomUUID()}`;
  // Noted first: if this begin dies before the allocation names the cut, a later cleanup finds the pages.
  await store.notePendingCut(cutId, now);
  const cutPages = await store.writeCut(cutId, dealToShards(changed, shardCount), unchanged);
  const record: CheckpointRecord = {
    pipeline: parts.settings.pipelineId,
    checkpointId,
    attempt,
    status: 'BEGUN',
    owner: execution,
    cutId,
    cutPages,
    partitions: cut.size,
    changedPartitions: changed.length,
    previousCheckpointId: committedId,
    previousCutId: previous.record?.cutId ?? '',
    shardCount,
    ...(switches.length === 0 ? {} : { generationSwitches: switches }),
    begunAt: now,
  };
  if (!(await store.allocate(head, record, leaseUntil(parts.settings, now), now))) {
    log.info('lost the race to allocate a checkpoint', { checkpointId });
    await store.deleteCut(cutId);
    await store.clearPendingCut(cutId);
    return BUSY;
  }
  await store.clearPendingCut(cutId);
  log.info('checkpoint begun', { checkpointId, attempt, partitions: changed.length, shards: shardCount });
  return { action: 'checkpoint', checkpointId, attempt, shards: shardList(shardCount) };
}
