/**
 * Staged-entry items written straight into a test's ledger table, and read back: for the tests of how the ledger
 * deletes them (test/ledger/entry-deletes*.test.ts).
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { DeleteTarget } from '../../shared/ledger/entry-deletes.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { TestResources } from './aws.ts';

/** `count` staged entries of `partition`, each naming its own object `obj-<partition>-<i>`, as delete targets. */
export async function putStagedEntries(
  res: TestResources,
  pipeline: string,
  count: number,
  partition = 0,
): Promise<DeleteTarget[]> {
  const doc = ledgerDocumentClient(res.clients.dynamodb);
  const targets: DeleteTarget[] = [];
  for (let i = 0; i < count; i++) {
    const at = keys.staged(pipeline, 'orders', partition, i, 'output');
    const key = `obj-${partition}-${i}`;
    await doc.send(new PutCommand({ TableName: res.table, Item: { ...at, key, lastOffset: i } }));
    targets.push({ at, key });
  }
  return targets;
}

/** What each target's item names now (undefined: gone). */
export async function objectsNamed(
  res: TestResources,
  targets: readonly DeleteTarget[],
): Promise<Array<string | undefined>> {
  const doc = ledgerDocumentClient(res.clients.dynamodb);
  const found: Array<string | undefined> = [];
  for (const { at } of targets) {
    const { Item } = await doc.send(new GetCommand({ TableName: res.table, Key: at, ConsistentRead: true }));
    found.push(Item?.key as string | undefined);
  }
  return found;
}
