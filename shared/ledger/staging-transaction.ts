/**
 * One chunk's effects in ONE DynamoDB transaction (P1, P2). Items, in this order (cancellation reasons are
 * reported by index):
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
 * A chunk whose only item is the fence (inline entries, no claims, state or key window) is written with a plain
 * conditional UpdateItem: the same condition on one item, billed as one write, not as a transaction.
 *
 * The identity rides in the fence update the transaction makes anyway: no extra call in the steady state. A
 * transaction DynamoDB refuses for a limit is structural, not transient: `ItemLimitExceededError` names the
 * partition and the refused item; for keyed-state items it is a `StateItemTooLargeError`.
 */
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import { QueryCommand, TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { cancellationReasons } from '../aws/classify.ts';
import {
  MAX_TRANSACTION_ITEMS,
  send,
  sendConditional,
  type TableRef,
  type TransactItem,
} from '../aws/dynamo.ts';
import { MalformedLedgerItemError, PipelineError } from '../errors.ts';
import type { StateDelta } from '../transforms/types.ts';
import {
  type ClaimHolder,
  type ClaimOwner,
  ClaimsTakenError,
  claimPut,
  claimRelease,
  holderOf,
} from './claim-items.ts';
import { CLOSED_ATTRIBUTE, isRootLane, STOP_ATTRIBUTE } from './epochs.ts';
import { identityUpdate } from './fence-identity.ts';
import { NO_FENCE } from './fence-reads.ts';
import { fenceKeys } from './fences.ts';
import { type InlineItem, inlineBytesIn, type KeyTemplates, templatesIn } from './inline-entries.ts';
import {
  inlineBytesLeft,
  inlineEntriesUpdate,
  movedEntries,
  movedEntriesUpdate,
  type UpdateParts,
} from './inline-writes.ts';
import { type BucketWrite, bucketOf, ENTRY_BYTES, type KeyWindowBucket } from './key-window.ts';
import { keys } from './layout.ts';
import type { ClaimItem, FenceIdentity, StagedFileEntry } from './records.ts';
import {
  believeCommitted,
  explainStateCancellation,
  explainStateRefusal,
  stateItem,
  tooManyItems,
} from './state-items.ts';

/** The fence is not at the value this invocation started from: someone else staged (P2). */
export class FenceMovedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly expected: number,
  ) {
    super(`fence of ${topic}-${partition} is no longer at ${expected}`);
  }
}

/**
 * A key-window bucket is not what the processor's window said although the fence was (only a writer outside the
 * protocol, or a defect, can do that): the processor reads the window again.
 */
export class KeyWindowChangedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
  ) {
    super(`key window of ${topic}-${partition} changed without its fence moving`);
  }
}

/**
 * A claim this transaction was to release (its record is dead-lettered for its state) no longer names that record:
 * the attempt no longer holds it, and plans the chunk again without the release. `holders` are the claims found
 * instead (none when the item is gone).
 */
export class ClaimHandoverLostError extends PipelineError {
  constructor(
    readonly idempotencyKeys: readonly string[],
    readonly holders: readonly ClaimHolder[],
  ) {
    super(`claims of dead-lettered records changed before their release: ${idempotencyKeys.join(', ')}`);
  }
}

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

/** The transaction's items with a label each (for the error that names a refused item). */
interface Planned {
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

function plan(table: string, txn: StagingTransaction): Planned {
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

/** What a staging write tells of the fence item it left, when it knows (a write of the fence alone). */
export interface StagedFence {
  /** Bytes of the inline entries the fence item holds now (`inline-entries.ts`). */
  readonly inlineBytes?: number;
  /** The fence item's key templates now (`inline-entries.ts`). */
  readonly templates?: KeyTemplates;
}

/**
 * Applies a chunk's effects atomically, or throws `FenceMovedError` / `ClaimsTakenError` /
 * `ClaimHandoverLostError` / `KeyWindowChangedError` / `StateTypeConflictError` / `ItemLimitExceededError`.
 */
export async function stage(at: TableRef, txn: StagingTransaction): Promise<StagedFence> {
  const planned = plan(at.table, txn);
  const { items } = planned;
  // The planner keeps a chunk within the limit (the legacy fence item included): a defect, named, not retried.
  if (items.length > MAX_TRANSACTION_ITEMS) throw tooManyItems(txn, items.length);
  if (items.length === 1) return stageFenceAlone(at, txn, items[0]!);
  await send(at.doc, new TransactWriteCommand({ TransactItems: items }), 'dynamodb:TransactWriteItems', {
    missingTable: at.table,
    explain: (error) => {
      const reasons = cancellationReasons(error);
      if (reasons) explainCancellation(txn, reasons, planned, error);
      explainStateRefusal(txn, planned.labels, error);
    },
  });
  believeCommitted(txn.state);
  // The inline bytes a transaction that moved entries out of the fence left it (those it could not move).
  const { moved } = planned;
  return moved.length === 0 ? {} : { inlineBytes: inlineBytesLeft(txn.flush ?? {}, moved) };
}

/** A chunk whose only item is the fence: one conditional UpdateItem (see the module comment). */
async function stageFenceAlone(
  at: TableRef,
  txn: StagingTransaction,
  item: TransactItem,
): Promise<StagedFence> {
  const update = item.Update;
  if (update === undefined) throw new Error('the fence item of a staging transaction is an update');
  // The item as written comes back at no charge: the processor learns the inline bytes cleanup left it.
  const written = await sendConditional(
    at.doc,
    new UpdateCommand({ ...update, ReturnValues: 'ALL_NEW' }),
    'dynamodb:UpdateItem(fence)',
    { missingTable: at.table, lost: (error) => error instanceof ConditionalCheckFailedException },
  );
  if (written === undefined) throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
  const fence = written.Attributes ?? {};
  return { inlineBytes: inlineBytesIn(fence), templates: templatesIn(fence) };
}

function explainCancellation(
  txn: StagingTransaction,
  reasons: ReadonlyArray<{ Code?: string; Message?: string; Item?: Record<string, unknown> }>,
  { claimsStart, releases, labels, entryItems }: Planned,
  error: unknown,
): void {
  const failed = (index: number) => reasons[index]?.Code === 'ConditionalCheckFailed';
  // A failed entry condition means another invocation staged the same range: the fence moved too. So does a
  // failed legacy move (another invocation moved or moved past it).
  const legacy = touchesLegacy(txn);
  const entriesStart = legacy ? 2 : 1;
  const own = entriesInline(txn) ? 0 : txn.entries.length;
  if (
    failed(0) ||
    (legacy && failed(1)) ||
    entryItems.slice(0, own).some((_, i) => failed(entriesStart + i))
  ) {
    throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
  }
  // The fence is as read, yet an entry it holds inline is an item too: a ledger this code did not write. Planning
  // the chunk again would meet it again; refused, loudly.
  const twice = entryItems.slice(own).find((_, i) => failed(entriesStart + own + i));
  if (twice !== undefined) {
    throw new MalformedLedgerItemError(
      `staged entry ${txn.topic}#${txn.partition} ${twice.stream} ${twice.firstOffset}..${twice.lastOffset}`,
      'it is both inline in the fence and an item of its own',
    );
  }
  const taken = txn.claims.flatMap((claim, i) =>
    failed(claimsStart + i) ? [holderOf(claim.idempotencyKey, reasons[claimsStart + i]?.Item)] : [],
  );
  if (taken.length > 0) throw new ClaimsTakenError(taken);
  const releasesStart = claimsStart + txn.claims.length;
  const lost = releases.filter((_, i) => failed(releasesStart + i));
  if (lost.length > 0) {
    throw new ClaimHandoverLostError(
      lost.map((owner) => owner.idempotencyKey),
      lost.flatMap((owner) => {
        const item = reasons[releasesStart + releases.indexOf(owner)]?.Item;
        return item === undefined ? [] : [holderOf(owner.idempotencyKey, item)];
      }),
    );
  }
  const windowStart = releasesStart + releases.length;
  if ((txn.keyWindow ?? []).some((_, i) => failed(windowStart + i))) {
    throw new KeyWindowChangedError(txn.topic, txn.partition);
  }
  explainStateCancellation(txn, reasons, labels, error);
}

/**
 * A transaction that creates the sharded fence also settles the legacy key (see {@link legacyItem}); a lane of
 * epoch >= 1 never had one (`epochs.ts`).
 */
function touchesLegacy(txn: StagingTransaction): boolean {
  return txn.fromLegacy === true || (txn.expectedOffset === NO_FENCE && isRootLane(txn.topic));
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

/**
 * The newest `buckets` key-window buckets of a partition (strongly consistent; read after the fence, see
 * `key-window.ts`). Expired buckets are returned too: the window ignores them by their `expiresAt`. Each page asks
 * for no more than the buckets still missing.
 */
export async function readKeyWindow(
  at: TableRef,
  pipeline: string,
  topic: string,
  partition: number,
  buckets: number,
): Promise<KeyWindowBucket[]> {
  const found: KeyWindowBucket[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await send(
      at.doc,
      new QueryCommand({
        TableName: at.table,
        KeyConditionExpression: 'pk = :pk AND begins_with(sk, :w)',
        ExpressionAttributeValues: { ':pk': keys.keyWindowPk(pipeline, topic, partition), ':w': 'W#' },
        ScanIndexForward: false,
        ConsistentRead: true,
        Limit: buckets - found.length,
        ...(start ? { ExclusiveStartKey: start } : {}),
      }),
      'dynamodb:Query',
      { missingTable: at.table },
    );
    for (const item of page.Items ?? []) found.push(bucketOf(item, `key window ${topic}#${partition}`));
    start = page.LastEvaluatedKey;
  } while (start && found.length < buckets);
  return found;
}
