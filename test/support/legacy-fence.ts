/**
 * Ledger items read as they are, and a partition's fence put back in the layout of the release before the fence
 * shards: the upgrade tests start from what that release left. Against the resources of `freshResources`.
 */
import { DeleteCommand, DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { Settings } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import type { TestResources } from './aws.ts';

/** One ledger item, read strongly consistent; undefined when absent. */
export async function ledgerItem(
  res: TestResources,
  key: { pk: string; sk: string },
): Promise<Record<string, unknown> | undefined> {
  const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
  const { Item } = await doc.send(new GetCommand({ TableName: res.table, Key: key, ConsistentRead: true }));
  return Item;
}

/**
 * Rewrites a partition's fence into the layout of the release before the shards: the fence under the legacy key,
 * no sharded fence, no moved marker. Everything else (staged entries and objects) is as that release left it.
 */
export async function asLegacyRelease(
  res: TestResources,
  settings: Settings,
  partition: number,
): Promise<void> {
  const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
  const sharded = fenceKeys.fence(settings.pipelineId, 'orders', partition);
  const legacy = fenceKeys.legacyFence(settings.pipelineId, 'orders', partition);
  const fence = (await ledgerItem(res, sharded))!;
  await doc.send(new DeleteCommand({ TableName: res.table, Key: sharded }));
  await doc.send(new PutCommand({ TableName: res.table, Item: { ...fence, ...legacy } }));
}
