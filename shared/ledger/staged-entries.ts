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
  QueryCommand,
  TransactWriteCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { mapLimit } from '../concurrency.ts';
import { fenceKeys } from './fences.ts';
import { type ItemKey, keys, padOffset, partitionId, STREAMS, type Stream } from './layout.ts';
import type { FenceItem, StagedFileEntry } from './records.ts';

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

/** A ledger item to delete where it lies; `key`: only while it still names that object. */
export interface DeleteTarget {
  readonly at: ItemKey;
  readonly key?: string;
}

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
    let items: Record<string, unknown>[];
    try {
      items = await readFenceItems(this.doc, this.table, this.pipeline);
    } catch (error) {
      // Classified as every ledger read is: a throttle is transient (the state machine retries the step).
      return rethrowClassified('dynamodb:Query(readFences)', error);
    }
    for (const item of items as unknown as FenceItem[]) {
      if (typeof item.stagedOffset === 'number' && item.stagedOffset >= 0)
        fences[partitionId(item.topic, item.partition)] = item.stagedOffset;
    }
    return fences;
  }

  /**
   * The ledger items of one partition (both streams) with sort keys from `range.above + 1` to `range.upTo`, in
   * sort-key order, each with the key it actually lies at. An item is processor-written, so nothing in it is
   * trusted (review R2b-3..6): one whose attributes are not a well-formed entry, or that does not lie at
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
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await this.query(
        {
          KeyConditionExpression: 'pk = :pk AND sk BETWEEN :low AND :high',
          ExpressionAttributeValues: {
            ':pk': pk,
            ':low': padOffset(range.above + 1),
            ':high': keys.stagedUpTo(range.upTo),
          },
          ExclusiveStartKey: startKey,
          ...(pageSize === undefined ? {} : { Limit: pageSize }),
        },
        'stagedEntries',
      );
      for (const item of page.items) yield classifyItem(this.pipeline, topic, partition, pk, item);
      startKey = page.next;
    } while (startKey);
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
    try {
      const result = await this.doc.send(
        new GetCommand({
          TableName: this.table,
          Key: keys.staged(this.pipeline, topic, partition, lastOffset, stream),
          ConsistentRead: true,
        }),
      );
      return result.Item as StagedFileEntry | undefined;
    } catch (error) {
      return rethrowClassified('dynamodb:GetItem(staged entry)', error);
    }
  }

  /**
   * Deletes one ledger item at the key it lies at: when `key` is given, only if the item still names that object
   * (a promoted entry); without it, unconditionally (a rejected item at or below a committed cut). True when this
   * call deleted it, false when the condition failed (already gone or replaced).
   */
  async deleteEntry(target: DeleteTarget): Promise<boolean> {
    try {
      await this.doc.send(new DeleteCommand({ TableName: this.table, ...deleteInput(target) }));
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false;
      return rethrowClassified('dynamodb:DeleteItem(staged entry)', error);
    }
  }

  /**
   * Deletes ledger items (see {@link deleteEntry}), up to `chunk` per transaction. A chunk whose transaction is
   * cancelled because some entry is already gone (a concurrent or earlier cleanup) falls back to one delete per
   * item. Returns how many this call deleted.
   */
  async deleteEntries(targets: readonly DeleteTarget[], chunk = 100, concurrency = 4): Promise<number> {
    const chunks: DeleteTarget[][] = [];
    for (let i = 0; i < targets.length; i += chunk) chunks.push(targets.slice(i, i + chunk));
    const deleted = await mapLimit(chunks, concurrency, async (part) => {
      try {
        await this.doc.send(
          new TransactWriteCommand({
            TransactItems: part.map((target) => ({
              Delete: { TableName: this.table, ...deleteInput(target) },
            })),
          }),
        );
        return part.length;
      } catch (error) {
        const reasons = cancellationReasons(error);
        if (!reasons?.some((reason) => reason.Code === 'ConditionalCheckFailed')) {
          return rethrowClassified('dynamodb:TransactWriteItems(delete staged entries)', error);
        }
        let count = 0;
        for (const target of part) if (await this.deleteEntry(target)) count++;
        return count;
      }
    });
    return deleted.reduce((sum, n) => sum + n, 0);
  }

  private async query(
    input: {
      KeyConditionExpression: string;
      ExpressionAttributeValues: Record<string, unknown>;
      ExclusiveStartKey: Record<string, unknown> | undefined;
      Limit?: number;
    },
    operation: string,
  ): Promise<{ items: Record<string, unknown>[]; next: Record<string, unknown> | undefined }> {
    try {
      const result = await this.doc.send(
        new QueryCommand({ TableName: this.table, ConsistentRead: true, ...input }),
      );
      return { items: result.Items ?? [], next: result.LastEvaluatedKey };
    } catch (error) {
      return rethrowClassified(`dynamodb:Query(${operation})`, error);
    }
  }
}

/** Every item under one partition key, strongly consistent (the SDK's paginator). */
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
