/**
 * Ledger items read as they are, and a partition's fence put back in the layout of the release before the fence
 * shards: the upgrade tests start from what that release left. Against the resources of `freshResources`.
 */
import { DeleteCommand, DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { Settings } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { ENTRY_ITEMS_NOTED_AT, ENTRY_ITEMS_UP_TO } from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { TestResources } from './aws.ts';
import { inlineEntries } from './ledger.ts';

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
 * no sharded fence, no moved marker, every staged entry an item. Staged objects are as that release left them.
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
  // That release kept every staged entry as an item of its own: inline ones become items again.
  for (const entry of inlineEntries(settings.pipelineId, fence)) {
    const at = keys.staged(settings.pipelineId, entry.topic, entry.partition, entry.lastOffset, entry.stream);
    await doc.send(new PutCommand({ TableName: res.table, Item: { ...at, ...entry } }));
  }
  const older = Object.fromEntries(
    Object.entries(fence).filter(
      ([name]) => !name.startsWith('e:') && name !== ENTRY_ITEMS_UP_TO && name !== ENTRY_ITEMS_NOTED_AT,
    ),
  );
  await doc.send(new DeleteCommand({ TableName: res.table, Key: sharded }));
  await doc.send(new PutCommand({ TableName: res.table, Item: { ...older, ...legacy } }));
}
