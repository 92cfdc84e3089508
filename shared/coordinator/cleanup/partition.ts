/**
 * Cleanup of partitions once a checkpoint covering them is COMMITTED: everything at or below a partition's
 * committed cut is promoted, so its staged objects and entries go (leftovers of earlier cleanups too).
 *
 * The deletes of many partitions are gathered and sent together: staged objects in S3 DeleteObjects of up to
 * 1,000 keys, entry items in batches of deletes whichever partitions they come from, inline entries by one
 * UpdateItem per fence item (`inline-entries.ts`). Cleaning from the ledger therefore reads each partition's fence
 * item (and queries its entry items where the fence says some may lie: only a read finds every entry at or below
 * the cut, empty files and stray items included). A shard whose voted plan names every covered entry skips the
 * reads (`shard.ts`); the catch-up of earlier cleanups reads the ledger.
 *
 * Objects go before entries, batch by batch: a cleanup cut off between the two leaves entries whose objects are
 * gone, which its retry (or the catch-up) deletes again — S3 deletes of absent keys succeed. The other order
 * would leave objects no entry names, for the orphan sweep.
 */
import { mapLimit } from '../../concurrency.ts';
import type { CutEntry } from '../../ledger/checkpoints.ts';
import { parsePartitionId } from '../../ledger/layout.ts';
import type { DeleteTarget } from '../../ledger/staged-entries.ts';
import { deleteKeys } from '../../sink/objects.ts';
import type { CoordinatorParts } from '../parts.ts';
import { assertStagedEntry, StagedEntryRejectedError } from '../promote/promoter.ts';

export type CleanupParts = Pick<CoordinatorParts, 'settings' | 'clients' | 'ledger' | 'log'> &
  Partial<Pick<CoordinatorParts, 'concurrency'>>;

/** Deletes gathered before they are sent: a multiple of DeleteObjects' 1,000 keys, and memory stays bounded. */
export const CLEANUP_FLUSH_AT = 5_000;

/** Ledger items to delete, and the staged objects that go with them. */
export interface StagedDeletes {
  readonly targets: DeleteTarget[];
  readonly objects: string[];
}

/**
 * The ledger items of `cut`'s partition up to `cut.cut`, to delete. Only a key that is the staged key of exactly
 * its entry is an object to delete: an entry naming anything else (a manifest, a final object, another
 * partition's object) is processor-written and untrusted, so only its ledger item goes, with a log line.
 */
async function partitionDeletes(
  parts: CleanupParts,
  cut: CutEntry,
  fence: Record<string, unknown> | null,
): Promise<StagedDeletes> {
  const { settings, log } = parts;
  const { topic, partition } = parsePartitionId(cut.partition);
  const targets: DeleteTarget[] = [];
  const objects: string[] = [];
  for await (const item of parts.ledger.items(topic, partition, { above: -1, upTo: cut.cut }, { fence })) {
    if (item.kind === 'rejected') {
      // Malformed, or a copy at another entry's key: only the item itself goes, where it lies; the object it
      // names, if any, is not this item's to delete.
      log.error('cleanup: a ledger item is not a staged entry at its own key; deleting only the item', {
        partition: cut.partition,
        sk: item.at.sk,
        reason: item.reason,
      });
      targets.push({ at: item.at, ...(item.inline ? { inline: item.inline } : {}) });
      continue;
    }
    const { entry } = item;
    targets.push({ at: item.at, key: entry.key, ...(item.inline ? { inline: item.inline } : {}) });
    try {
      assertStagedEntry(settings.pipelineId, entry, { topic, partition });
      objects.push(entry.key);
    } catch (error) {
      if (!(error instanceof StagedEntryRejectedError)) throw error;
      log.error('cleanup: a staged entry names no staged object of its own; deleting only the entry', {
        partition: cut.partition,
        lastOffset: entry.lastOffset,
        stream: entry.stream,
        key: entry.key,
      });
    }
  }
  return { targets, objects };
}

/** Sends gathered deletes: the objects first, then their entries (see the module comment). */
async function sendDeletes(parts: CleanupParts, batch: StagedDeletes): Promise<number> {
  const { settings } = parts;
  await deleteKeys(parts.clients.s3, settings.bucket, batch.objects);
  return parts.ledger.deleteEntries(batch.targets, settings.maxTransactionItems);
}

/**
 * Sends deletes gathered from anywhere (the cleanup's plan, `shard.ts`), {@link CLEANUP_FLUSH_AT} entries at a time
 * with their objects; `objects[i]` goes with `targets[i]`. Returns the ledger items deleted.
 */
export async function deleteStaged(parts: CleanupParts, deletes: StagedDeletes): Promise<number> {
  let deleted = 0;
  for (let i = 0; i < deletes.targets.length; i += CLEANUP_FLUSH_AT) {
    deleted += await sendDeletes(parts, {
      targets: deletes.targets.slice(i, i + CLEANUP_FLUSH_AT),
      objects: deletes.objects.slice(i, i + CLEANUP_FLUSH_AT),
    });
  }
  return deleted;
}

/**
 * Deletes the staged objects and entries of every partition of `cuts` up to its cut, gathered across partitions
 * (see the module comment); returns the ledger items deleted.
 */
export async function cleanPartitions(parts: CleanupParts, cuts: readonly CutEntry[]): Promise<number> {
  let gathered: StagedDeletes = { targets: [], objects: [] };
  let deleted = 0;
  const flush = async () => {
    const batch = gathered;
    gathered = { targets: [], objects: [] };
    deleted += await sendDeletes(parts, batch);
  };
  // Their fence items (inline entries) in batches of 100, not one read a partition.
  const fences = await parts.ledger.fenceItemsOf(cuts.map((cut) => parsePartitionId(cut.partition)));
  await mapLimit(cuts, parts.concurrency ?? 16, async (cut) => {
    const found = await partitionDeletes(parts, cut, fences.get(cut.partition) ?? null);
    // One at a time, not spread: a partition's backlog can pass the arguments a call may take.
    for (const target of found.targets) gathered.targets.push(target);
    for (const key of found.objects) gathered.objects.push(key);
    if (gathered.targets.length >= CLEANUP_FLUSH_AT) await flush();
  });
  if (gathered.targets.length > 0) await flush();
  return deleted;
}

/** One partition's cleanup: {@link cleanPartitions} of its cut alone. */
export async function cleanPartition(parts: CleanupParts, cut: CutEntry): Promise<number> {
  return cleanPartitions(parts, [cut]);
}
