/**
 * What the coordinator reads and removes of the processor's ledger items: partition fences (the cut, C2) and
 * staged-file entries (what a checkpoint covers). Writes of these items are the processor's; the coordinator only
 * deletes entries it has promoted, each delete conditioned on the entry still naming the object it promoted.
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import {
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

/** One ledger item under a partition's staged key: a trusted entry, or a rejected item and why. */
export type StagedItem =
  | { readonly kind: 'entry'; readonly at: ItemKey; readonly entry: StagedFileEntry }
  | {
      readonly kind: 'rejected';
      readonly at: ItemKey;
      /** `malformed`: not an entry's attributes; `misplaced`: an entry's attributes at another entry's key. */
      readonly reason: 'malformed' | 'misplaced';
      readonly item: Readonly<Record<string, unknown>>;
    };

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
    typeof item.md5 === 'string'
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
   * The ledger items of one partition (both streams) with sort keys from `range.above + 1` to `range.upTo`, in
   * sort-key order, each with the key it actually lies at. An item is processor-written, so nothing in it is
   * trusted: one whose attributes are not a well-formed entry, or that does not lie at
   * `keys.staged(...)` of its own attributes (a copy at another sort key), comes back rejected, never as an entry.
   */
  /**
   * Every item under the partition's staged key in the range, in offset order. `pageSize` bounds each Query (a
   * reader that wants only the first items pays for what it reads, not for a 1 MB page).
   */
  async *items(
    topic: string,
    partition: number,
    range: OffsetRange,
    { pageSize }: { readonly pageSize?: number } = {},
  ): AsyncGenerator<StagedItem> {
    if (range.upTo <= range.above) return;
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

  /** The entry at (partition, lastOffset, stream), if any. */
  async entryAt(
    topic: string,
    partition: number,
    lastOffset: number,
    stream: Stream,
  ): Promise<StagedFileEntry | undefined> {
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
   * Deletes ledger items (see {@link deleteEntry}), whatever partitions they lie in: in batches of conditional
   * PartiQL deletes, one write unit each (`entry-deletes.ts`); what a batch leaves undecided, by transactions of up
   * to `chunk` deletes (two write units each). Returns how many were deleted, an item already gone counted as the
   * batch's success counts it.
   */
  async deleteEntries(targets: readonly DeleteTarget[], chunk = 100, concurrency = 4): Promise<number> {
    const batched = await deleteEntriesInBatches(this.doc, this.table, targets, concurrency);
    return batched.deleted + (await this.deleteByTransactions(batched.undecided, chunk, concurrency));
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
