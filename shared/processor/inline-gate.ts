/**
 * When the processor may write the fence in this release's forms: staged entries inline in the fence item
 * (`ledger/inline-entries.ts`) packed without their MD5 (`ledger/packed-entry.ts` format 2), and the fence's
 * identity packed (`ledger/fence-identity.ts`). Only once no step of an earlier release can still run:
 * - a coordinator that reads entry items alone would cover an inline entry's offsets without seeing it, and commit
 *   past records it never promoted; one that reads only the map format, or only format 1, would stop on a value it
 *   cannot read; one of the release before the moves would read an entry a chunk past the inline budget moved into
 *   an item between its fence read and its item query twice (`ledger/staging-transaction.ts`), voting a plan
 *   promote refuses for good;
 * - a processor that reads the identity only as maps would judge a batch below the fence without it (the distance
 *   rule alone), and could take a rewound source for a redelivery.
 * One gate keeps them all from their predecessors.
 *
 * The coordinator's begin notes in the checkpoint head when this release first began a checkpoint
 * (`compactFenceSince`). Steps of the earlier release may run for a while after that: an execution in flight
 * while the functions were updated, one step's function updated before another's, a processor invocation under
 * way. So the gate opens {@link INLINE_GRACE_MS} after the note, longer than any Lambda invocation (15 minutes)
 * and a stack update's function changes. Rolling back to an earlier release once entries are inline loses them:
 * roll forward.
 *
 * One gate per container: once open it stays open; while shut, the head is read again at most every
 * {@link RECHECK_MS}, a GetItem now and then, not one per batch.
 */
import type { ProcessorLedger } from './ledger-port.ts';

/** Whether this batch's chunks may put their entries inline. */
export interface InlineEntriesGate {
  allows(now: number): Promise<boolean>;
}

export const INLINE_GRACE_MS = 60 * 60 * 1000;
export const RECHECK_MS = 5 * 60 * 1000;

/** Inline from the start: for hosts where no coordinator of an earlier release runs (`eos local`, tests). */
export const ALWAYS_INLINE: InlineEntriesGate = { allows: async () => true };

/** The deployed processor's gate: the checkpoint head says how long this release's coordinator has run. */
export class CoordinatorReadersGate implements InlineEntriesGate {
  private open = false;
  private checkedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly ledger: Pick<ProcessorLedger, 'readCompactFenceSince'>,
    private readonly pipeline: string,
  ) {}

  async allows(now: number): Promise<boolean> {
    if (this.open) return true;
    if (now - this.checkedAt < RECHECK_MS) return false;
    this.checkedAt = now;
    // A read that fails shuts the gate until the next check: entries as items cost more, never a batch.
    const since = await this.ledger.readCompactFenceSince(this.pipeline).catch(() => undefined);
    this.open = since !== undefined && now - since >= INLINE_GRACE_MS;
    return this.open;
  }
}
