/**
 * Cleanup of one partition once a checkpoint covering it is COMMITTED: everything at or below its committed cut
 * is promoted, so its staged objects and entries go (leftovers of earlier cleanups too).
 */
import type { CutEntry } from '../../ledger/checkpoints.ts';
import { parsePartitionId } from '../../ledger/layout.ts';
import type { DeleteTarget } from '../../ledger/staged-entries.ts';
import { deleteKeys } from '../../sink/objects.ts';
import type { CoordinatorParts } from '../parts.ts';
import { assertStagedEntry, StagedEntryRejectedError } from '../promote/promoter.ts';

/**
 * Deletes the partition's staged objects and entries up to `cut.cut`; returns the entries deleted. Only a key that
 * is the staged key of exactly its entry is deleted: an entry naming anything else (a manifest, a final object,
 * another partition's object) is processor-written and untrusted, so only its ledger item goes, with a log line.
 */
export async function cleanPartition(
  parts: Pick<CoordinatorParts, 'settings' | 'clients' | 'ledger' | 'log'>,
  cut: CutEntry,
): Promise<number> {
  const { settings, log } = parts;
  const { topic, partition } = parsePartitionId(cut.partition);
  const targets: DeleteTarget[] = [];
  const objects: string[] = [];
  for await (const item of parts.ledger.items(topic, partition, { above: -1, upTo: cut.cut })) {
    if (item.kind === 'rejected') {
      // Malformed, or a copy at another entry's key: only the item itself goes, where it lies; the object it
      // names, if any, is not this item's to delete.
      log.error('cleanup: a ledger item is not a staged entry at its own key; deleting only the item', {
        partition: cut.partition,
        sk: item.at.sk,
        reason: item.reason,
      });
      targets.push({ at: item.at });
      continue;
    }
    const { entry } = item;
    targets.push({ at: item.at, key: entry.key });
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
  await deleteKeys(parts.clients.s3, settings.bucket, objects);
  return parts.ledger.deleteEntries(targets, settings.maxTransactionItems);
}
