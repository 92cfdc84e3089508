/**
 * The items of one chunk's staging transaction (P1, P2), each with a label for the error that names a refused item.
 * Items, in this order (cancellation reasons are reported by index, `staging-refusals.ts`):
 *   0      the fence: stagedOffset := newOffset and its identity (the fingerprints of the record at newOffset and
 *          of the delivered batch's first record), on condition stagedOffset = expected (or absent when -1)
 *   (1)    the legacy fence key, when this transaction moves the fence to its shard (`fences.ts`)
 *   ...    staged-file entries (one per stream with rows), each on condition the entry does not exist, unless the
 *          entries are inline: then they are attributes of the fence item (`inline-entries.ts`)
 *   ...    idempotency claims (`claim-items.ts`), each on condition: absent, expired, or already ours; a failed one
 *          returns the holder, so the processor tells a duplicate (same digest) from a conflict
 *   ...    handovers: claims written ahead for records this transaction dead-letters for their state, released on
 *          condition they still name that record (a claim put above for the same key takes it over instead)
 *   ...    key-window buckets (partition-scoped idempotency, `key-window.ts`): whole-item Puts, each on condition
 *          the bucket is as the processor's window says (absent, or holding that many entries)
 *   ...    keyed-state deltas (`state-items.ts`), guarded by the fence condition of the same transaction
 *
 * The identity rides in the fence update the transaction makes anyway: no extra call in the steady state.
 */
import type { TransactItem } from '../aws/dynamo.ts';
import { type ClaimOwner, claimPut, claimRelease } from './claim-items.ts';
import { CLOSED_ATTRIBUTE, STOP_ATTRIBUTE } from './epochs.ts';
import { identityUpdate } from './fence-identity.ts';
import { NO_FENCE } from './fence-reads.ts';
import { fenceKeys } from './fences.ts';
import type { InlineItem } from './inline-entries.ts';
import { inlineEntriesUpdate, movedEntriesUpdate, type UpdateParts } from './inline-writes.ts';
import { type BucketWrite, ENTRY_BYTES } from './key-window.ts';
import { keys } from './layout.ts';
import type { StagedFileEntry } from './records.ts';
import {
  createsFence,
  entriesInline,
  entryItemsMarkAfter,
  flushedEntries,
  type StagingTransaction,
  touchesLegacy,
} from './staging-effects.ts';
import { stateItem } from './state-items.ts';

/** The transaction's items with a label each (for the error that names a refused item). */
export interface Planned {
  readonly items: TransactItem[];
  readonly labels: string[];
  readonly claimsStart: number;
  /** The handovers released by an item of their own (not taken over by a claim put), in item order. */
  readonly releases: readonly ClaimOwner[];
  /** The chunk's own entries written as items (none when inline), then those it moves from the fence. */
  readonly entryItems: readonly StagedFileEntry[];
  /** The fence's inline entries the write moves into items ({@link flushedEntries}), decoded once. */
  readonly moved: readonly InlineItem[];
}

export function plan(table: string, txn: StagingTransaction): Planned {
  const moves = touchesLegacy(txn) ? [legacyItem(table, txn)] : [];
  const moved = flushedEntries(txn);
  // The chunk's own entries as items (unless inline), then those it moves from the fence.
  const entryItems = entriesInline(txn)
    ? []
    : [...txn.entries, ...moved.flatMap((item) => (item.kind === 'entry' ? [item.entry] : []))];
  const items = [fenceItem(table, txn, moved), ...moves, ...entryItems.map((e) => entryItem(table, txn, e))];
  const labels = [
    'fence',
    ...moves.map(() => 'legacy fence'),
    ...entryItems.map((e) => `staged entry ${e.stream} ${e.firstOffset}..${e.lastOffset}`),
  ];
  const claimsStart = items.length;
  const handovers = new Map((txn.handovers ?? []).map((owner) => [owner.idempotencyKey, owner]));
  // The holder comes back with a failed condition: duplicate (same digest) or conflict.
  items.push(
    ...txn.claims.map((claim) => ({
      Put: {
        ...claimPut(table, txn.pipeline, claim, txn.now, txn.attemptId, handovers.get(claim.idempotencyKey)),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
      },
    })),
  );
  labels.push(...txn.claims.map((claim) => `claim ${claim.idempotencyKey}`));
  // One operation per item in a transaction: a key put above takes its handover over in that put.
  const put = new Set(txn.claims.map((claim) => claim.idempotencyKey));
  const releases = [...handovers.values()].filter((owner) => !put.has(owner.idempotencyKey));
  items.push(
    ...releases.map((owner) => ({
      Update: {
        ...claimRelease(table, txn.pipeline, owner),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
      },
    })),
  );
  labels.push(...releases.map((owner) => `release of claim ${owner.idempotencyKey}`));
  const windowWrites = txn.keyWindow ?? [];
  items.push(...windowWrites.map((write) => bucketItem(table, txn, write)));
  labels.push(...windowWrites.map((write) => `key-window bucket ${write.bucket.seq}`));
  items.push(...txn.state.map((delta) => stateItem(table, txn.pipeline, delta)));
  labels.push(...txn.state.map((delta) => `state ${delta.key}`));
  return { items, labels, claimsStart, releases, entryItems, moved };
}

/**
 * The legacy fence key's part of a transaction that creates the sharded fence (`fences.ts`): a legacy fence (the
 * value read) is marked moved and loses its staged offset, on condition it is still that value and not moved;
 * for a new partition a moved marker is created, on condition nothing is there. Either way a processor of the
 * release before the shards (a rolling deploy, a zombie) can no longer stage on the legacy key: its condition
 * (the staged offset it read, or the key absent) fails, and it stops on the fence without an offset.
 */
function legacyItem(table: string, txn: StagingTransaction): TransactItem {
  const moved = fenceKeys.fence(txn.pipeline, txn.topic, txn.partition);
  const fresh = txn.expectedOffset === NO_FENCE;
  return {
    Update: {
      TableName: table,
      Key: fenceKeys.legacyFence(txn.pipeline, txn.topic, txn.partition),
      // The marker names its partition, as a fence does (readers of the release before the shards list them).
      UpdateExpression: fresh
        ? 'SET movedTo = :movedTo, movedFrom = :none, topic = :topic, #partition = :partition'
        : 'SET movedTo = :movedTo, movedFrom = stagedOffset REMOVE stagedOffset',
      ConditionExpression: fresh
        ? 'attribute_not_exists(pk)'
        : 'stagedOffset = :expected AND attribute_not_exists(movedTo) AND attribute_not_exists(#closed)',
      ExpressionAttributeNames: fresh ? { '#partition': 'partition' } : { '#closed': CLOSED_ATTRIBUTE },
      ExpressionAttributeValues: fresh
        ? { ':movedTo': moved.pk, ':none': NO_FENCE, ':topic': txn.topic, ':partition': txn.partition }
        : { ':movedTo': moved.pk, ':expected': txn.expectedOffset },
    },
  };
}

function fenceItem(table: string, txn: StagingTransaction, moved: readonly InlineItem[]): TransactItem {
  // The sharded fence is created (absent) for a new partition or lane and when the legacy one moves. A closed
  // fence (an operator opened a newer epoch, `epochs.ts`) takes no staging: the condition sends a processor that
  // still holds it to read the new lane. Staging clears a stop record: the partition moves again.
  const absent = createsFence(txn);
  const entries = entriesUpdate(txn, moved);
  const identity = identityUpdate(txn.identity, txn.compact === true);
  return {
    Update: {
      TableName: table,
      Key: keys.fence(txn.pipeline, txn.topic, txn.partition),
      UpdateExpression:
        'SET stagedOffset = :new, updatedAt = :now, topic = :topic, #partition = :partition, ' +
        `${identity.set}${entries.set} ` +
        `REMOVE #stop, ${identity.remove}${entries.remove}`,
      ConditionExpression:
        (absent ? 'attribute_not_exists(pk)' : 'stagedOffset = :expected AND attribute_not_exists(#closed)') +
        entries.condition,
      ExpressionAttributeNames: {
        '#partition': 'partition',
        '#stop': STOP_ATTRIBUTE,
        ...(absent ? {} : { '#closed': CLOSED_ATTRIBUTE }),
        ...identity.names,
        ...entries.names,
      },
      ExpressionAttributeValues: {
        ':new': txn.newOffset,
        ':now': txn.now,
        ':topic': txn.topic,
        ':partition': txn.partition,
        ...identity.values,
        ...(absent ? {} : { ':expected': txn.expectedOffset }),
        ...entries.values,
      },
    },
  };
}

/**
 * The fence update's part for the chunk's entries: the entry-item mark ({@link entryItemsMarkAfter}), noted at the
 * new offset; inline, each entry's attribute; past the budget, the removal of the entries moved into items.
 */
function entriesUpdate(txn: StagingTransaction, moved: readonly InlineItem[]): UpdateParts {
  const mark = entryItemsMarkAfter(txn);
  return entriesInline(txn)
    ? inlineEntriesUpdate(txn.entries, txn.templates, mark)
    : movedEntriesUpdate(moved, mark);
}

function entryItem(table: string, txn: StagingTransaction, entry: StagedFileEntry): TransactItem {
  return {
    Put: {
      TableName: table,
      Item: {
        ...keys.staged(txn.pipeline, txn.topic, txn.partition, entry.lastOffset, entry.stream),
        ...entry,
      },
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

function bucketItem(
  table: string,
  txn: StagingTransaction,
  { bucket, previousEntries }: BucketWrite,
): TransactItem {
  const fresh = previousEntries === undefined;
  return {
    Put: {
      TableName: table,
      Item: {
        ...keys.keyWindowBucket(txn.pipeline, txn.topic, txn.partition, bucket.seq),
        seq: bucket.seq,
        createdAt: bucket.createdAt,
        expiresAt: bucket.expiresAt,
        entries: bucket.entries,
      },
      ConditionExpression: fresh ? 'attribute_not_exists(pk)' : 'size(entries) = :bytes',
      ...(fresh ? {} : { ExpressionAttributeValues: { ':bytes': previousEntries * ENTRY_BYTES } }),
    },
  };
}
