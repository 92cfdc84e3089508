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
  QueryCommand,
  TransactWriteCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { mapLimit } from '../sink/objects.ts';
import { keys, padOffset, partitionId, type Stream } from './layout.ts';
import type { FenceItem, StagedFileEntry } from './records.ts';

/** Offsets covered by a checkpoint in one partition: `above < lastOffset <= upTo`. */
export interface OffsetRange {
  /** Exclusive; -1 for "from the start". */
  readonly above: number;
  /** Inclusive. */
  readonly upTo: number;
}

export class StagedLedger {
  private readonly doc: DynamoDBDocumentClient;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
    private readonly pipeline: string,
  ) {
    this.doc = ledgerDocumentClient(dynamodb);
  }

  /**
   * Every partition's staged offset, by `<topic>#<partition>`: one strongly consistent Query (paged) on the
   * pipeline's fence partition key. Partitions that never staged anything (-1) are left out.
   */
  async readFences(): Promise<Record<string, number>> {
    const fences: Record<string, number> = {};
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await this.query(
        {
          KeyConditionExpression: 'pk = :pk',
          ExpressionAttributeValues: { ':pk': keys.fencePk(this.pipeline) },
          ExclusiveStartKey: startKey,
        },
        'readFences',
      );
      for (const item of page.items as unknown as FenceItem[]) {
        if (item.stagedOffset >= 0) fences[partitionId(item.topic, item.partition)] = item.stagedOffset;
      }
      startKey = page.next;
    } while (startKey);
    return fences;
  }

  /** The staged entries of one partition (both streams) with `range.above < lastOffset <= range.upTo`, in sort-key order. */
  async *entries(topic: string, partition: number, range: OffsetRange): AsyncGenerator<StagedFileEntry> {
    if (range.upTo <= range.above) return;
    let startKey: Record<string, unknown> | undefined;
    do {
      const page = await this.query(
        {
          KeyConditionExpression: 'pk = :pk AND sk BETWEEN :low AND :high',
          ExpressionAttributeValues: {
            ':pk': keys.stagedPk(this.pipeline, topic, partition),
            ':low': padOffset(range.above + 1),
            ':high': keys.stagedUpTo(range.upTo),
          },
          ExclusiveStartKey: startKey,
        },
        'stagedEntries',
      );
      for (const item of page.items) {
        const { pk: _pk, sk: _sk, ...entry } = item;
        yield entry as unknown as StagedFileEntry;
      }
      startKey = page.next;
    } while (startKey);
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

  /** Deletes a promoted entry if it still names `entry.key`; true when it was deleted, false when already gone. */
  async deleteEntry(entry: StagedFileEntry): Promise<boolean> {
    try {
      await this.doc.send(
        new DeleteCommand({
          TableName: this.table,
          Key: keys.staged(this.pipeline, entry.topic, entry.partition, entry.lastOffset, entry.stream),
          ConditionExpression: '#key = :key',
          ExpressionAttributeNames: { '#key': 'key' },
          ExpressionAttributeValues: { ':key': entry.key },
        }),
      );
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) return false;
      return rethrowClassified('dynamodb:DeleteItem(staged entry)', error);
    }
  }

  /**
   * Deletes promoted entries, up to `chunk` per transaction (each Delete conditioned on the entry still naming
   * its object). A chunk whose transaction is cancelled because some entry is already gone (a concurrent or
   * earlier cleanup) falls back to one conditional delete per entry. Returns how many this call deleted.
   */
  async deleteEntries(entries: readonly StagedFileEntry[], chunk = 100, concurrency = 4): Promise<number> {
    const chunks: StagedFileEntry[][] = [];
    for (let i = 0; i < entries.length; i += chunk) chunks.push(entries.slice(i, i + chunk));
    const deleted = await mapLimit(chunks, concurrency, async (part) => {
      try {
        await this.doc.send(
          new TransactWriteCommand({
            TransactItems: part.map((entry) => ({
              Delete: {
                TableName: this.table,
                Key: keys.staged(this.pipeline, entry.topic, entry.partition, entry.lastOffset, entry.stream),
                ConditionExpression: '#key = :key',
                ExpressionAttributeNames: { '#key': 'key' },
                ExpressionAttributeValues: { ':key': entry.key },
              },
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
        for (const entry of part) if (await this.deleteEntry(entry)) count++;
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
