/**
 * Cleanup's bookkeeping beside the checkpoint records (keys in `layout.ts`): the cleaned-up mark (every checkpoint
 * up to it had its cleanup complete), the shards whose cleanup of a committed checkpoint finished, and the orphan
 * sweep's continuation mark. Each is one small item of fixed fields (L3), moved by conditional writes only.
 */
import { GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { isConditionFailure } from '../aws/classify.ts';
import { send, sendConditional, type TableRef } from '../aws/dynamo.ts';
import { CheckpointConflictError, type CheckpointRecord } from './checkpoint-records.ts';
import { type ItemKey, keys } from './layout.ts';

/** The ledger table and the pipeline whose checkpoint items are read and written. */
export interface CheckpointLedger extends TableRef {
  readonly pipeline: string;
}

/** An item's attributes without its key, read strongly consistently; undefined when absent. */
export async function readAttributes(
  at: TableRef,
  key: ItemKey,
  operation: string,
): Promise<Record<string, unknown> | undefined> {
  const result = await send(
    at.doc,
    new GetCommand({ TableName: at.table, Key: key, ConsistentRead: true }),
    `dynamodb:GetItem(${operation})`,
  );
  if (!result.Item) return undefined;
  const { pk: _pk, sk: _sk, ...rest } = result.Item;
  return rest;
}

/**
 * The cleaned-up mark, or undefined when there is none: a pipeline allocates its first checkpoint together with
 * a mark of 0, so a missing mark means a pipeline from the release before the mark.
 */
export async function readCleanedMarkIfAny(at: CheckpointLedger): Promise<number | undefined> {
  const item = await readAttributes(at, keys.cleanedMark(at.pipeline), 'readCleanedMark');
  if (item === undefined) return undefined;
  return Number.isSafeInteger(item.upTo) ? (item.upTo as number) : 0;
}

/**
 * Moves the cleaned-up mark from `expected` to `upTo` (conditioned, so it only moves forward by one step's
 * knowledge); false when it was not `expected` any more.
 */
export async function writeCleanedMark(
  at: CheckpointLedger,
  expected: number,
  upTo: number,
  now: number,
): Promise<boolean> {
  const written = await sendConditional(
    at.doc,
    new PutCommand({
      TableName: at.table,
      Item: { ...keys.cleanedMark(at.pipeline), upTo, updatedAt: now },
      ConditionExpression:
        expected === 0 ? 'attribute_not_exists(pk) OR upTo = :expected' : 'upTo = :expected',
      ExpressionAttributeValues: { ':expected': expected },
    }),
    'dynamodb:PutItem(cleaned-up mark)',
  );
  return written !== undefined;
}

/**
 * Records that shard `shard`'s cleanup of a COMMITTED checkpoint finished (a set: idempotent); true when every
 * shard's has.
 */
export async function markShardCleaned(
  at: CheckpointLedger,
  checkpointId: number,
  attempt: number,
  shard: number,
): Promise<boolean> {
  const result = await send(
    at.doc,
    new UpdateCommand({
      TableName: at.table,
      Key: keys.checkpoint(at.pipeline, checkpointId),
      ConditionExpression: 'attempt = :attempt AND #status = :committed',
      UpdateExpression: 'ADD cleanedShards :shard',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: {
        ':attempt': attempt,
        ':committed': 'COMMITTED',
        ':shard': new Set([shard]),
      },
      ReturnValues: 'ALL_NEW',
    }),
    'dynamodb:UpdateItem(cleaned shard)',
    {
      explain: (error) => {
        if (!isConditionFailure(error)) return;
        throw new CheckpointConflictError(
          checkpointId,
          attempt,
          `shard ${shard} cleaned up, but the attempt is not COMMITTED`,
          { cause: error },
        );
      },
    },
  );
  const record = result.Attributes as CheckpointRecord | undefined;
  return (record?.cleanedShards?.size ?? 0) >= (record?.shardCount ?? Number.POSITIVE_INFINITY);
}

/** The orphan sweep's continuation mark: the last staged key it examined ('' = start from the lowest key). */
export async function readSweepMark(at: CheckpointLedger): Promise<string> {
  const item = await readAttributes(at, keys.sweepMark(at.pipeline), 'readSweepMark');
  return typeof item?.after === 'string' ? item.after : '';
}

/**
 * Moves the sweep mark from `expected` to `after`, conditioned on it still being `expected`: of two sweeps
 * (a zombie's and a live one) one moves it; the other's result is dropped, which only means some objects are
 * examined again. False when it lost.
 */
export async function writeSweepMark(
  at: CheckpointLedger,
  expected: string,
  after: string,
  now: number,
): Promise<boolean> {
  const written = await sendConditional(
    at.doc,
    new PutCommand({
      TableName: at.table,
      Item: { ...keys.sweepMark(at.pipeline), after, updatedAt: now },
      ConditionExpression: 'attribute_not_exists(pk) OR #after = :expected',
      ExpressionAttributeNames: { '#after': 'after' },
      ExpressionAttributeValues: { ':expected': expected },
    }),
    'dynamodb:PutItem(sweep mark)',
  );
  return written !== undefined;
}
