/**
 * A chunk's effects as the staging transaction takes them ({@link StagingTransaction}), and what follows from them
 * alone, before any item is built: whether the entries go inline in the fence, which of the fence's inline entries
 * the write moves into items, whether it creates the sharded fence or settles the legacy key, and the entry-item
 * mark it leaves. The items themselves are `staging-items.ts`; the write is `staging-transaction.ts`.
 */
import type { StateDelta } from '../transforms/types.ts';
import type { ClaimOwner } from './claim-items.ts';
import { isRootLane } from './epochs.ts';
import { NO_FENCE } from './fence-reads.ts';
import type { InlineItem, KeyTemplates } from './inline-entries.ts';
import { movedEntries } from './inline-writes.ts';
import type { BucketWrite } from './key-window.ts';
import type { ClaimItem, FenceIdentity, StagedFileEntry } from './records.ts';

export interface StagingTransaction {
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  /** The fence value the invocation read (-1: no fence yet). */
  readonly expectedOffset: number;
  /** That value was read from the legacy fence key: this transaction moves the fence to its shard (`fences.ts`). */
  readonly fromLegacy?: boolean;
  /** The chunk's last offset: the fence after this transaction. */
  readonly newOffset: number;
  readonly entries: readonly StagedFileEntry[];
  /**
   * The entries may go into the fence item (`inline-entries.ts`) instead of items of their own: they do when the
   * fence is then the transaction's only item ({@link entriesInline}).
   */
  readonly inline?: boolean;
  /**
   * The highest offset an entry item of the partition may have, as the fence read said while its mark held
   * (`FenceState.entryItemsUpTo`); undefined when not known: the write then marks everything up to `expectedOffset`.
   */
  readonly entryItemsUpTo?: number;
  /**
   * The fence item's key templates as known (`FenceState.templates`); undefined when not known: inline entries
   * then keep their templates in their values.
   */
  readonly templates?: KeyTemplates;
  /**
   * The fence item's inline-entry attributes as just read (`FenceState.inlineAttributes`), for a chunk whose entries
   * do not fit the inline budget: a chunk that writes nothing but its fence and entries moves them into entry items
   * in the same transaction, on condition each is still there ({@link flushedEntries}).
   */
  readonly flush?: Readonly<Record<string, unknown>>;
  readonly claims: readonly ClaimItem[];
  /**
   * Claims written ahead for records this transaction dead-letters for their state: each is released here, or, when
   * the transaction puts a claim of the same key (the batch's next record with it), taken over by that put.
   */
  readonly handovers?: readonly ClaimOwner[];
  /** Folded per key: at most one delta per state key. */
  readonly state: readonly StateDelta[];
  /** Partition-scoped idempotency: the key-window buckets this chunk writes (see `key-window.ts`). */
  readonly keyWindow?: readonly BucketWrite[];
  /** What the fence will say about the records it moves past (see {@link FenceIdentity}). */
  readonly identity: FenceIdentity;
  /**
   * Only this release's readers run (the processor's gate, `processor/inline-gate.ts`): the identity is written
   * packed (`fence-identity.ts`). Else in the form of the release before.
   */
  readonly compact?: true;
  /** Epoch ms. */
  readonly now: number;
  /**
   * The attempt staging this transaction: every claim it puts lists it as holder, for good (see
   * `StagingLedger.releaseClaims`).
   */
  readonly attemptId: string;
}

/**
 * Whether a chunk's entries go inline: asked for, and nothing but the fence to write besides them, so the chunk is
 * one UpdateItem billed by the fence item's size. With other items the write is a transaction, which bills every
 * item twice by its size: a fence grown by inline entries would cost more there than an entry item of its own.
 */
export function entriesInline(txn: StagingTransaction): boolean {
  return txn.inline === true && fenceAndEntriesOnly(txn);
}

/** A chunk that writes nothing but its fence and its entries: no claims, state, key window or legacy move. */
function fenceAndEntriesOnly(txn: StagingTransaction): boolean {
  return (
    txn.entries.length > 0 &&
    !touchesLegacy(txn) &&
    txn.claims.length === 0 &&
    (txn.handovers ?? []).length === 0 &&
    (txn.keyWindow ?? []).length === 0 &&
    txn.state.length === 0
  );
}

/**
 * The inline entries a chunk past the inline budget moves into entry items (`txn.flush`, `inline-writes.ts`): only
 * for a chunk of fence and entries alone, whose transaction has room for them.
 */
export function flushedEntries(txn: StagingTransaction): InlineItem[] {
  return txn.flush === undefined || txn.inline === true || !fenceAndEntriesOnly(txn) ? [] : movedEntries(txn);
}

/**
 * A transaction that creates the sharded fence also settles the legacy key (see `legacyItem`, `staging-items.ts`);
 * a lane of epoch >= 1 never had one (`epochs.ts`).
 */
export function touchesLegacy(txn: StagingTransaction): boolean {
  return txn.fromLegacy === true || (txn.expectedOffset === NO_FENCE && isRootLane(txn.topic));
}

/** Whether the write creates the sharded fence item: a new partition or lane, or a move from the legacy key. */
export function createsFence(txn: StagingTransaction): boolean {
  return txn.fromLegacy === true || txn.expectedOffset === NO_FENCE;
}

/**
 * The entry-item mark a staging write leaves (`inline-entries.ts`): the chunk's last offset when its entries are
 * items, else the mark as known, or the offset read when the mark is not known to hold.
 */
export function entryItemsMarkAfter(txn: StagingTransaction): number {
  const asItems = txn.entries.length > 0 && !entriesInline(txn);
  return asItems ? txn.newOffset : (txn.entryItemsUpTo ?? txn.expectedOffset);
}
