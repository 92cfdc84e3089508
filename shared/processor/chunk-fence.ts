/**
 * The fence a chunk's staging transaction leaves: the identity it writes (`batch-judge.ts` reads it) and what it
 * says of its entries (inline bytes, entry-item mark, key templates).
 */
import { type FenceIdentity, withStart } from '../ledger/records.ts';
import type { FenceState, StagedFence, StagingTransaction } from '../ledger/staging-ledger.ts';
import { createsFence, entriesInline, entryItemsMarkAfter } from '../ledger/staging-transaction.ts';
import type { Fingerprints } from './batch-judge.ts';
import type { Chunk } from './chunks.ts';

/**
 * The fence identity the chunk's transaction writes. The fence as known is the fence as stored (a staged offset
 * is written once: the transaction's condition proves it), so the ring carried forward is exact; a fence without
 * a ring seeds it with its own batch start.
 */
export function identityFor(prints: Fingerprints, known: FenceState, chunk: Chunk): FenceIdentity {
  const batchStart = prints.of(prints.firstOffset);
  const before = known.identity;
  const ring =
    before === undefined ? [] : before.recentStarts.length > 0 ? before.recentStarts : [before.batchStart];
  return {
    fenceRecord: prints.of(chunk.lastOffset),
    batchStart,
    recentStarts: withStart(ring, batchStart),
  };
}

/**
 * What the fence says of its entries after a staging write: the inline bytes the write reported (a write of the
 * fence alone), else as known plus what it added; the entry-item mark it wrote (`entryItemsMarkAfter`,
 * `staging-effects.ts`).
 */
export function fenceEntriesAfter(
  known: FenceState,
  txn: StagingTransaction,
  written: StagedFence,
  added: number,
): Pick<FenceState, 'inlineBytes' | 'entryItemsUpTo' | 'templates'> {
  const bytes = written.inlineBytes ?? (known.inlineBytes ?? 0) + (entriesInline(txn) ? added : 0);
  // A transaction writes no template: the fence's are as known, and none on a fence it created.
  const templates = written.templates ?? (createsFence(txn) ? {} : known.templates);
  return {
    ...(bytes > 0 ? { inlineBytes: bytes } : {}),
    entryItemsUpTo: entryItemsMarkAfter(txn),
    ...(templates === undefined ? {} : { templates }),
  };
}
