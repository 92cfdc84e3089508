/** Reads of inline staged entries (shared/ledger/inline-entries.ts) for the ledger's tests: the fence, its entry attributes, the entry items. */
import { DynamoDBDocumentClient, QueryCommand } from '@aws-sdk/lib-dynamodb';
import type { Settings } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { TestResources } from './aws.ts';
import { ledgerItem } from './legacy-fence.ts';

/** The names of a fence item's inline entries (`e:<lastOffset>:<stream>`), sorted. */
export const inlineNames = (fence: Record<string, unknown>): string[] =>
  Object.keys(fence)
    .filter((name) => name.startsWith('e:'))
    .sort();

/** The sharded fence item of an `orders` partition as stored; `{}` when there is none. */
export async function fenceOf(
  res: TestResources,
  settings: Settings,
  partition: number,
): Promise<Record<string, unknown>> {
  return (await ledgerItem(res, fenceKeys.fence(settings.pipelineId, 'orders', partition))) ?? {};
}

/** The staged-entry items of an `orders` partition, as stored. */
export async function entryItemsOf(
  res: TestResources,
  settings: Settings,
  partition: number,
): Promise<Record<string, unknown>[]> {
  const { Items } = await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
    new QueryCommand({
      TableName: res.table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': keys.stagedPk(settings.pipelineId, 'orders', partition) },
      ConsistentRead: true,
    }),
  );
  return Items ?? [];
}
