/**
 * Cleanup's removal of staged entries kept inline in fence items (`inline-entries.ts`): the targets of one fence go
 * in one UpdateItem that removes their attributes (up to {@link INLINE_REMOVES_PER_UPDATE} at a time), on condition
 * the fence exists (an update never creates one), and nothing else of the fence. DynamoDB answers with the
 * attributes it removed, so a target that may lie either inline or as an item (`orItem`) is handed back for the
 * item's delete only when its attribute was not there.
 */
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import { type DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { sendConditional } from '../aws/dynamo.ts';
import { mapLimit } from '../concurrency.ts';
import type { DeleteTarget } from './entry-deletes.ts';
import type { ItemKey } from './layout.ts';

/** Attributes one UpdateItem removes at most (its expression stays far under DynamoDB's 4 KB). */
const INLINE_REMOVES_PER_UPDATE = 100;

/**
 * Removes the inline targets' attributes, fence by fence, `concurrency` fences at once; returns how many were
 * removed and the targets left to delete as items.
 */
export async function removeInlineEntries(
  doc: DynamoDBDocumentClient,
  table: string,
  targets: readonly DeleteTarget[],
  concurrency: number,
): Promise<{ removed: number; items: DeleteTarget[] }> {
  const items: DeleteTarget[] = [];
  const byFence = new Map<string, { fence: ItemKey; targets: DeleteTarget[] }>();
  for (const target of targets) {
    if (target.inline === undefined) {
      items.push(target);
      continue;
    }
    const id = `${target.inline.fence.pk}\u0000${target.inline.fence.sk}`;
    const group = byFence.get(id) ?? { fence: target.inline.fence, targets: [] };
    group.targets.push(target);
    byFence.set(id, group);
  }
  const counts = await mapLimit([...byFence.values()], concurrency, async ({ fence, targets: group }) => {
    let removed = 0;
    for (let i = 0; i < group.length; i += INLINE_REMOVES_PER_UPDATE) {
      const part = group.slice(i, i + INLINE_REMOVES_PER_UPDATE);
      const gone = await removeAttributes(
        doc,
        table,
        fence,
        part.map((t) => t.inline!.attribute),
      );
      removed += gone.size;
      for (const target of part) if (target.orItem && !gone.has(target.inline!.attribute)) items.push(target);
    }
    return removed;
  });
  return { removed: counts.reduce((sum, n) => sum + n, 0), items };
}

/** Removes attributes of one fence item; returns those it held (an absent fence holds none). */
async function removeAttributes(
  doc: DynamoDBDocumentClient,
  table: string,
  fence: ItemKey,
  attributes: readonly string[],
): Promise<Set<string>> {
  const names = Object.fromEntries(attributes.map((name, i) => [`#e${i}`, name]));
  const result = await sendConditional(
    doc,
    new UpdateCommand({
      TableName: table,
      Key: fence,
      UpdateExpression: `REMOVE ${Object.keys(names).join(', ')}`,
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeNames: names,
      ReturnValues: 'UPDATED_OLD',
    }),
    'dynamodb:UpdateItem(remove inline entries)',
    { lost: (error) => error instanceof ConditionalCheckFailedException },
  );
  return new Set(Object.keys(result?.Attributes ?? {}).filter((name) => attributes.includes(name)));
}
