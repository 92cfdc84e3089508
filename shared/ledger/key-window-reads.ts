/**
 * The key-window read: a partition's newest buckets (`key-window.ts`), which the staging transaction writes
 * (`staging-items.ts`) on condition they are as read.
 */
import { QueryCommand } from '@aws-sdk/lib-dynamodb';
import { send, type TableRef } from '../aws/dynamo.ts';
import { bucketOf, type KeyWindowBucket } from './key-window.ts';
import { keys } from './layout.ts';

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
