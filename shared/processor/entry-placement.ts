/**
 * Where a chunk's staged-file entries go: inline in the fence item while they fit its budget
 * (`inline-entries.ts`), else as entry items, moving the fence's inline entries into items with them (`flushedEntries`,
 * `staging-effects.ts`).
 */
import { inlineBytesOf, type KeyTemplates, packEntry } from '../ledger/inline-entries.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import type { FenceState } from '../ledger/staging-ledger.ts';
import type { ProcessorContext } from './context.ts';

/** The partition whose fence a chunk's entries go to, as the stager knows it. */
export interface EntryTarget {
  readonly ctx: ProcessorContext;
  readonly topic: string;
  readonly partition: number;
  readonly known: FenceState;
  /** Keeps a fresher copy of the fence as the one known (the stager's and the container's). */
  readonly remember: (fence: FenceState) => void;
}

/** Inline or as items; `flush`: the fence's inline entries that move into items with the chunk's. */
export interface EntryPlacement {
  readonly inline: boolean;
  readonly flush?: Readonly<Record<string, unknown>>;
}

/**
 * Where the chunk's entries go: inline when the gate is open (`gateOpen`) and they fit the budget as this
 * container knows the fence. Past it, one read of the fence tells (a transaction, which reports nothing back, may
 * have put the fence there, and cleanup may have removed entries since; what it read counts only while the fence
 * is still at the offset this chunk was planned from): inline if they fit now, else as items, moving the fence's
 * inline entries into items with them (`flushedEntries`, `staging-effects.ts`), so that the chunks after it write a
 * small fence again.
 */
export async function placeEntries(
  target: EntryTarget,
  entries: readonly StagedFileEntry[],
  fits: (fence: FenceState) => boolean,
  gateOpen: boolean,
): Promise<EntryPlacement> {
  const { ctx, topic, partition, known } = target;
  if (entries.length === 0 || !gateOpen) return { inline: false };
  if (fits(known)) return { inline: true };
  const fresh = await ctx.ledger.readFence(ctx.settings.pipelineId, topic, partition);
  if (fresh.stagedOffset !== known.stagedOffset || fresh.closed) return { inline: false };
  const refreshed: FenceState = {
    ...known,
    inlineBytes: fresh.inlineBytes ?? 0,
    entryItemsUpTo: fresh.entryItemsUpTo,
    templates: fresh.templates,
    inlineAttributes: fresh.inlineAttributes,
  };
  target.remember(refreshed);
  if (fits(refreshed)) return { inline: true };
  return fresh.inlineAttributes === undefined
    ? { inline: false }
    : { inline: false, flush: fresh.inlineAttributes };
}

/** The bytes a chunk's entries add to the fence item if they go inline (`inline-entries.ts`). */
export function inlineBytesOfAll(
  entries: readonly StagedFileEntry[],
  templates: KeyTemplates | undefined,
): number {
  return entries.reduce((sum, entry) => {
    const { name, value } = packEntry(entry, templates);
    return sum + inlineBytesOf(name, value);
  }, 0);
}
