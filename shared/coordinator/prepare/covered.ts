/**
 * The staged entries a checkpoint covers in one partition (C2): previous cut < lastOffset ≤ cut. An entry is
 * processor-written, so nothing in it is trusted: its object key must be the staged key of exactly that entry in
 * this pipeline, and its offsets must lie within the partition's range of the cut, else the attempt aborts.
 */
import type { CutEntry } from '../../ledger/checkpoints.ts';
import { parsePartitionId } from '../../ledger/layout.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import type { ItemsOptions } from '../../ledger/staged-entries.ts';
import type { CoordinatorParts } from '../parts.ts';
import { assertStagedEntry, StagedEntryRejectedError } from '../promote/promoter.ts';

/** The covered entries of `cut`'s partition; throws {@link StagedEntryRejectedError} for one that is refused. */
export async function coveredEntries(
  parts: Pick<CoordinatorParts, 'settings' | 'ledger' | 'log'>,
  cut: CutEntry,
  options: Pick<ItemsOptions, 'fence'> = {},
): Promise<CoveredEntries> {
  const { topic, partition } = parsePartitionId(cut.partition);
  const entries: StagedFileEntry[] = [];
  let inline = false;
  for await (const item of parts.ledger.items(
    topic,
    partition,
    { above: cut.previous, upTo: cut.cut },
    options,
  )) {
    if (item.inline) inline = true;
    if (item.kind === 'rejected') {
      // A copy of an entry's attributes at another entry's key covers nothing: the entry it names is covered at
      // its own key, by the checkpoint whose cut reaches it. Anything else is refused.
      if (item.reason === 'misplaced') {
        parts.log.error("prepare: a ledger item lies at another entry's key; ignoring it", {
          partition: cut.partition,
          sk: item.at.sk,
        });
        continue;
      }
      throw new StagedEntryRejectedError(
        item.inline?.attribute ?? String(item.item.key),
        item.inline
          ? `the inline entry ${item.inline.attribute} of ${cut.partition}'s fence is not a staged entry`
          : `the ledger item at ${item.at.sk} in ${cut.partition} is not a staged entry`,
      );
    }
    const { entry } = item;
    assertStagedEntry(parts.settings.pipelineId, entry, { topic, partition });
    // An entry reaching at or below the previous cut would put offsets an earlier manifest already lists into
    // this one, one above the cut offsets a later one will: the attempt aborts instead.
    if (entry.firstOffset <= cut.previous || entry.lastOffset > cut.cut) {
      throw new StagedEntryRejectedError(
        entry.key,
        `its offsets ${entry.firstOffset}-${entry.lastOffset} are not within ${cut.partition}'s ${cut.previous + 1}-${cut.cut}`,
      );
    }
    entries.push(entry);
  }
  return { entries, inline };
}

/** A partition's covered entries, and whether any lies inline in its fence item (`ledger/inline-entries.ts`). */
export interface CoveredEntries {
  readonly entries: StagedFileEntry[];
  readonly inline: boolean;
}
