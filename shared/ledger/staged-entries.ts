/**
 * What the coordinator reads and removes of the processor's ledger items: partition fences (the cut, C2) and
 * staged-file entries (what a checkpoint covers), kept as items or inline in their fence item
 * (`inline-entries.ts`). Writes of these items are the processor's; the coordinator only deletes entries it has
 * promoted: an entry item on condition it still names the object it promoted, an inline entry by removing its
 * attribute from the fence item, and nothing else of the fence.
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import {
  BatchGetCommand,
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  paginateQuery,
  TransactWriteCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { classified, queryPages, send, sendConditional } from '../aws/dynamo.ts';
import { mapLimit } from '../concurrency.ts';
import { type DeleteTarget, deleteEntriesInBatches } from './entry-deletes.ts';
import { fenceKeys } from './fences.ts';
import {
  type InlineAt,
  type InlineItem,
  inlineAttribute,
  inlineItemsOf,
  mayHaveEntryItems,
  templateAttribute,
} from './inline-entries.ts';
import { removeInlineEntries } from './inline-removals.ts';
import { type ItemKey, keys, padOffset, partitionId, STREAMS, type Stream } from './layout.ts';
import type { FenceItem, StagedFileEntry } from './records.ts';

export type { DeleteTarget } from './entry-deletes.ts';

/** Offsets covered by a checkpoint in one partition: `above < lastOffset <= upTo`. */
export interface OffsetRange {
  /** Exclusive; -1 for "from the start". */
  readonly above: number;
  /** Inclusive. */
  readonly upTo: number;
}

/**
 * One staged entry of a partition as read, an item under its staged key or an attribute of its fence (`inline`,
 * with `at` the key its item would have): a trusted entry, or a rejected item and why.
 */
export type StagedItem = { readonly at: ItemKey; readonly inline?: InlineAt } & (
  | { readonly kind: 'entry'; readonly entry: StagedFileEntry }
  | {
      readonly kind: 'rejected';
      /** `malformed`: not an entry's attributes; `misplaced`: an entry's attributes at another entry's key. */
      readonly reason: 'malformed' | 'misplaced';
      readonly item: Readonly<Record<string, unknown>>;
    }
);

function deleteInput(target: DeleteTarget) {
  const { pk, sk } = target.at;
  return target.key === undefined
    ? { Key: { pk, sk } }
    : {
        Key: { pk, sk },
        ConditionExpression: '#key = :key',
        ExpressionAttributeNames: { '#key': 'key' },
        ExpressionAttributeValues: { ':key': target.key },
      };
}

const isOffset = (value: unknown): value is number => Number.isSafeInteger(value) && (value as number) >= 0;
const isCount = isOffset;

function isEntryShaped(item: Record<string, unknown>): boolean {
  return (
    typeof item.topic === 'string' &&
    Number.isSafeInteger(item.partition) &&
    typeof item.stream === 'string' &&
    (STREAMS as readonly string[]).includes(item.stream) &&
    isOffset(item.firstOffset) &&
    isOffset(item.lastOffset) &&
    typeof item.key === 'string' &&
    typeof item.gzip === 'boolean' &&
    isCount(item.recordCount) &&
    isCount(item.bytes) &&
    typeof item.sha256 === 'string' &&
    (item.md5 === undefined || typeof item.md5 === 'string')
  );
}

function classifyItem(
  pipeline: string,
  topic: string,
  partition: number,
  pk: string,
  item: Record<string, unknown>,
): StagedItem {
  const { pk: itemPk, sk: itemSk, ...attributes } = item;
  const at: ItemKey = { pk: typeof itemPk === 'string' ? itemPk : pk, sk: String(itemSk) };
  if (!isEntryShaped(attributes)) return { kind: 'rejected', at, reason: 'malformed', item: attributes };
  const entry = attributes as unknown as StagedFileEntry;
  const own = keys.staged(pipeline, entry.topic, entry.partition, entry.lastOffset, entry.stream);
  if (entry.topic !== topic || entry.partition !== partition || own.pk !== at.pk || own.sk !== at.sk) {
    return { kind: 'rejected', at, reason: 'misplaced', item: attributes };
  }
  return { kind: 'entry', at, entry };
}

/** Keys of one BatchGetItem (DynamoDB's limit), and rounds for the keys it leaves unprocessed. */
const BATCH_GET_KEYS = 100;
const BATCH_GET_ROUNDS = 6;

export interface ItemsOptions {
  /** Bounds each Query (a reader that wants only the first items pays for what it reads, not for a 1 MB page). */
  readonly pageSize?: number;
  /** The partition's fence item as already read ({@link StagedEntries.fenceItemsOf}; null: absent). */
  readonly fence?: Record<string, unknown> | null;
}

/** Whether an inline entry and an entry item are the one entry, moved: at one sort key, naming one object. */
function sameEntry(inline: InlineItem, item: StagedItem): boolean {
  return (
    inline.sk === item.at.sk &&
    inline.kind === 'entry' &&
    item.kind === 'entry' &&
    inline.entry.key === item.entry.key &&
    inline.entry.sha256 === item.entry.sha256
  );
}

/** An inline entry as a {@link StagedItem}: `at` is the key its item would have (`stagedPk`). */
function fromInline(stagedPk: string, read: InlineItem): StagedItem {
  const at = { pk: stagedPk, sk: read.sk };
  return read.kind === 'entry'
    ? { kind: 'entry', at, inline: read.at, entry: read.entry }
    : { kind: 'rejected', at, inline: read.at, reason: read.reason, item: read.item };
}

/** A transaction of deletes cancelled because some entry is already gone (or names another object now). */
const someEntryGone = (error: unknown): boolean =>
  cancellationReasons(error)?.some((reason) => reason.Code === 'ConditionalCheckFailed') ?? false;

export class StagedEntries {
  private readonly doc: DynamoDBDocumentClient;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
    private readonly pipeline: string,
  ) {
    this.doc = ledgerDocumentClient(dynamodb);
  }

  /**
   * Every partition's staged offset, by `<topic>#<partition>`: strongly consistent Queries of the legacy fence key,
   * then of the fence shards in parallel (`fences.ts`). Partitions that never staged anything (-1) are left out.
   */
  async readFences(): Promise<Record<string, number>> {
    const fences: Record<string, number> = {};
    // Classified as every ledger read is: a throttle is transient (the state machine retries the step).
    const items = await classified('dynamodb:Query(readFences)', () =>
      readFenceItems(this.doc, this.table, this.pipeline),
    );
    for (const item of items as unknown as FenceItem[]) {
      if (typeof item.stagedOffset === 'number' && item.stagedOffset >= 0)
        fences[partitionId(item.topic, item.partition)] = item.stagedOffset;
    }
    return fences;
  }

  /**
   * The staged entries of one partition (both streams) with `range.above < lastOffset <= range.upTo`, in sort-key
   * order (offset, then stream), each with where it lies: the inline entries of the partition's fence item (one
   * strongly consistent GetItem), merged with the entry items, which are queried only where the fence says some
   * may lie (`inline-entries.ts`). Everything is processor-written, so nothing is trusted: an item whose attributes
   * are not a well-formed entry, or that does not lie at `keys.staged(...)` of its own attributes (a copy at
   * another sort key), and an inline value that does not unpack, come back rejected, never as an entry.
   */
  async *items(
    topic: string,
    partition: number,
    range: OffsetRange,
    { pageSize, fence: known }: ItemsOptions = {},
  ): AsyncGenerator<StagedItem> {
    if (range.upTo <= range.above) return;
    const fence = known === undefined ? await this.fenceItem(topic, partition) : (known ?? undefined);
    const inline = fence === undefined ? [] : this.inlineOf(fence, topic, partition, range);
    const pk = keys.stagedPk(this.pipeline, topic, partition);
    let next = 0;
    if (mayHaveEntryItems(fence, range.above)) {
      for await (const item of this.entryItems(topic, partition, range, pageSize)) {
        while (next < inline.length && inline[next]!.sk < item.at.sk) yield fromInline(pk, inline[next++]!);
        // The same entry inline in the fence as read and as an item since: a chunk past the inline budget moved it
        // (`staging-transaction.ts`) between the fence read and this query. One entry, read once, as the item. Only
        // the same entry: an item that names another object (or none) never hides an inline one.
        if (next < inline.length && sameEntry(inline[next]!, item)) next++;
        yield item;
      }
    }
    while (next < inline.length) yield fromInline(pk, inline[next++]!);
  }

  private inlineOf(
    fence: Record<string, unknown>,
    topic: string,
    partition: number,
    range: OffsetRange,
  ): InlineItem[] {
    const where = {
      pipeline: this.pipeline,
      topic,
      partition,
      fence: keys.fence(this.pipeline, topic, partition),
    };
    return inlineItemsOf(fence, where, range);
  }

  /**
   * The (sharded) fence items of `partitions`, strongly consistent, by `<topic>#<partition>` (an absent fence is
   * `null`): BatchGetItem, 100 keys a call, for readers of many partitions (prepare's and cleanup's shards), whose
   * {@link items} then read no fence each.
   */
  async fenceItemsOf(
    partitions: readonly { readonly topic: string; readonly partition: number }[],
  ): Promise<Map<string, Record<string, unknown> | null>> {
    const found = new Map<string, Record<string, unknown> | null>();
    for (const { topic, partition } of partitions) found.set(partitionId(topic, partition), null);
    const keysOf = partitions.map(({ topic, partition }) => keys.fence(this.pipeline, topic, partition));
    for (let i = 0; i < keysOf.length; i += BATCH_GET_KEYS) {
      let pending: Record<string, unknown>[] = keysOf.slice(i, i + BATCH_GET_KEYS).map((key) => ({ ...key }));
      for (let round = 0; pending.length > 0; round++) {
        if (round >= BATCH_GET_ROUNDS)
          throw new Error(`DynamoDB left ${pending.length} fence reads unprocessed`);
        if (round > 0) await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** round));
        const output = await send(
          this.doc,
          new BatchGetCommand({
            RequestItems: { [this.table]: { Keys: pending, ConsistentRead: true } },
          }),
          'dynamodb:BatchGetItem(fence entries)',
        );
        // A fence's sort key is its `<topic>#<partition>` (`fences.ts`).
        for (const item of output.Responses?.[this.table] ?? []) found.set(String(item.sk), item);
        pending = output.UnprocessedKeys?.[this.table]?.Keys ?? [];
      }
    }
    return found;
  }

  /** The partition's (sharded) fence item, strongly consistent; inline entries live only there. */
  private async fenceItem(topic: string, partition: number): Promise<Record<string, unknown> | undefined> {
    const result = await send(
      this.doc,
      new GetCommand({
        TableName: this.table,
        Key: keys.fence(this.pipeline, topic, partition),
        ConsistentRead: true,
      }),
      'dynamodb:GetItem(fence entries)',
    );
    return result.Item;
  }

  /** The entry items under the partition's staged key in the range (see {@link items}). */
  private async *entryItems(
    topic: string,
    partition: number,
    range: OffsetRange,
    pageSize: number | undefined,
  ): AsyncGenerator<StagedItem> {
    const pk = keys.stagedPk(this.pipeline, topic, partition);
    const pages = queryPages(
      this.doc,
      {
        TableName: this.table,
        ConsistentRead: true,
        KeyConditionExpression: 'pk = :pk AND sk BETWEEN :low AND :high',
        ExpressionAttributeValues: {
          ':pk': pk,
          ':low': padOffset(range.above + 1),
          ':high': keys.stagedUpTo(range.upTo),
        },
        ...(pageSize === undefined ? {} : { Limit: pageSize }),
      },
      'dynamodb:Query(stagedEntries)',
    );
    for await (const page of pages) {
      for (const item of page) yield classifyItem(this.pipeline, topic, partition, pk, item);
    }
  }

  /** The well-formed, well-placed staged entries of {@link items} (rejected items left out). */
  async *entries(topic: string, partition: number, range: OffsetRange): AsyncGenerator<StagedFileEntry> {
    for await (const item of this.items(topic, partition, range)) if (item.kind === 'entry') yield item.entry;
  }

  /** The entry at (partition, lastOffset, stream), inline or an item, if any (unchecked, as stored). */
  async entryAt(
    topic: string,
    partition: number,
    lastOffset: number,
    stream: Stream,
  ): Promise<StagedFileEntry | undefined> {
    const fence = await send(
      this.doc,
      new GetCommand({
        TableName: this.table,
        Key: keys.fence(this.pipeline, topic, partition),
        ConsistentRead: true,
        // The entry, and the key template it may share (`inline-entries.ts`).
        ProjectionExpression: '#entry, #template',
        ExpressionAttributeNames: {
          '#entry': inlineAttribute(lastOffset, stream),
          '#template': templateAttribute(stream),
        },
      }),
      'dynamodb:GetItem(fence entry)',
    );
    const inline =
      fence.Item && this.inlineOf(fence.Item, topic, partition, { above: lastOffset - 1, upTo: lastOffset });
    const found = inline?.find((item) => item.kind === 'entry');
    if (found?.kind === 'entry') return found.entry;
    const result = await send(
      this.doc,
      new GetCommand({
        TableName: this.table,
        Key: keys.staged(this.pipeline, topic, partition, lastOffset, stream),
        ConsistentRead: true,
      }),
      'dynamodb:GetItem(staged entry)',
    );
    return result.Item as StagedFileEntry | undefined;
  }

  /**
   * Deletes one ledger item at the key it lies at: when `key` is given, only if the item still names that object
   * (a promoted entry); without it, unconditionally (a rejected item at or below a committed cut). True when this
   * call deleted it, false when the condition failed (already gone or replaced).
   */
  async deleteEntry(target: DeleteTarget): Promise<boolean> {
    const deleted = await sendConditional(
      this.doc,
      new DeleteCommand({ TableName: this.table, ...deleteInput(target) }),
      'dynamodb:DeleteItem(staged entry)',
      { lost: (error) => error instanceof ConditionalCheckFailedException },
    );
    return deleted !== undefined;
  }

  /**
   * Deletes staged entries, whatever partitions they lie in. Inline ones (`target.inline`) go by one UpdateItem per
   * fence item removing their attributes; a target that may be either (`orItem`: the cleanup's plan names its
   * files, not where their entries lie) has its item deleted when no inline entry was removed for it. Entry items
   * (see {@link deleteEntry}) go in batches of conditional PartiQL deletes, one write unit each
   * (`entry-deletes.ts`); what a batch leaves undecided, by transactions of up to `chunk` deletes (two write units
   * each). Returns how many were deleted, an item already gone counted as the batch's success counts it.
   */
  async deleteEntries(targets: readonly DeleteTarget[], chunk = 100, concurrency = 4): Promise<number> {
    const { removed, items } = await removeInlineEntries(this.doc, this.table, targets, concurrency);
    const batched = await deleteEntriesInBatches(this.doc, this.table, items, concurrency);
    return (
      removed + batched.deleted + (await this.deleteByTransactions(batched.undecided, chunk, concurrency))
    );
  }

  /**
   * Deletes by transactions of up to `chunk` items. A transaction cancelled because some entries are already gone
   * (a concurrent or earlier cleanup) or name another object is sent again without exactly those (DynamoDB names
   * them in its cancellation reasons), so a retried cleanup costs a call more per chunk, not a call per item; only
   * a cancellation that names none of them falls back to one delete per item. Returns how many this call deleted.
   */
  private async deleteByTransactions(
    targets: readonly DeleteTarget[],
    chunk = 100,
    concurrency = 4,
  ): Promise<number> {
    const chunks: DeleteTarget[][] = [];
    for (let i = 0; i < targets.length; i += chunk) chunks.push(targets.slice(i, i + chunk));
    const deleted = await mapLimit(chunks, concurrency, (part) => this.deleteChunk(part));
    return deleted.reduce((sum, n) => sum + n, 0);
  }

  /** One transaction of deletes, sent again without the items whose condition failed (see deleteByTransactions). */
  private async deleteChunk(part: readonly DeleteTarget[]): Promise<number> {
    let pending = part;
    // Each round drops at least one item, and a concurrent cleanup can only remove items: a few rounds suffice.
    for (let round = 0; round < 3 && pending.length > 0; round++) {
      const failed = await this.transactDeletes(pending);
      if (failed === undefined) return pending.length;
      if (failed.size === 0) break;
      pending = pending.filter((_, index) => !failed.has(index));
    }
    let count = 0;
    for (const target of pending) if (await this.deleteEntry(target)) count++;
    return count;
  }

  /**
   * Undefined when the transaction deleted every target; else the indexes of the targets whose condition failed
   * (empty when DynamoDB did not say which: the caller falls back to one delete per item).
   */
  private async transactDeletes(part: readonly DeleteTarget[]): Promise<Set<number> | undefined> {
    let reasons: { Code?: string }[] | undefined;
    await sendConditional(
      this.doc,
      new TransactWriteCommand({
        TransactItems: part.map((target) => ({
          Delete: { TableName: this.table, ...deleteInput(target) },
        })),
      }),
      'dynamodb:TransactWriteItems(delete staged entries)',
      {
        lost: (error) => {
          if (!someEntryGone(error)) return false;
          reasons = cancellationReasons(error);
          return true;
        },
      },
    );
    if (reasons === undefined) return undefined;
    const failed = new Set<number>();
    if (reasons.length === part.length) {
      reasons.forEach((reason, index) => {
        if (reason.Code === 'ConditionalCheckFailed') failed.add(index);
      });
    }
    return failed;
  }
}

/**
 * Every item under one partition key, strongly consistent (the SDK's paginator). Failures are DynamoDB's own:
 * each caller classifies them under its operation's name (`classified` in `aws/dynamo.ts`).
 */
export async function itemsUnder(
  documents: DynamoDBDocumentClient,
  table: string,
  pk: string,
): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  const pages = paginateQuery(
    { client: documents },
    {
      TableName: table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': pk },
      ConsistentRead: true,
    },
  );
  for await (const page of pages) items.push(...(page.Items ?? []));
  return items;
}

/**
 * Every partition's fence item, by sort key (`<topic>#<partition>`): the legacy key read first, then the shards in
 * parallel; of a partition found in both, the item with the higher staged offset (the sharded one on a tie). Items
 * are returned as stored; callers validate what they use.
 */
export async function readFenceItems(
  documents: DynamoDBDocumentClient,
  table: string,
  pipeline: string,
): Promise<Record<string, unknown>[]> {
  const [legacyPk, ...shardPks] = fenceKeys.allPks(pipeline);
  const legacy = await itemsUnder(documents, table, legacyPk!);
  const shards = (await Promise.all(shardPks.map((pk) => itemsUnder(documents, table, pk)))).flat();
  const byPartition = new Map<string, Record<string, unknown>>();
  const offsetOf = (item: Record<string, unknown> | undefined) =>
    typeof item?.stagedOffset === 'number' ? item.stagedOffset : Number.NEGATIVE_INFINITY;
  for (const item of legacy) byPartition.set(String(item.sk), item);
  for (const item of shards) {
    const sk = String(item.sk);
    if (offsetOf(item) >= offsetOf(byPartition.get(sk))) byPartition.set(sk, item);
  }
  return [...byPartition.values()];
}
