/**
 * Keyed state as a reader sees it (`eos state`): one state key's item, or every item whose key starts with a
 * prefix, each as a {@link StateView} (values with their operations, `state-fields.ts`). Reads are strongly
 * consistent: a committed staging transaction's state is there.
 *
 * State items are keyed by their state key alone (`<pl>#STATE#<stateKey>`), so a prefix is found by a Scan of the
 * table filtered on that key prefix: it reads every item of the table (every pipeline's fences, claims and
 * entries too), which is what a one-off look costs; a dashboard reads keys it knows with `readStateItem`.
 */
import { GetCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { send, type TableRef } from '../aws/dynamo.ts';
import { keys } from './layout.ts';
import { type StateView, viewOfState } from './state-fields.ts';

export type { StateView };

/** The state item of `stateKey`, or undefined when none was written. */
export async function readStateItem(
  at: TableRef,
  pipeline: string,
  stateKey: string,
): Promise<StateView | undefined> {
  const { Item } = await send(
    at.doc,
    new GetCommand({ TableName: at.table, Key: keys.state(pipeline, stateKey), ConsistentRead: true }),
    'dynamodb:GetItem',
    { missingTable: at.table },
  );
  return Item === undefined ? undefined : viewOfState(Item);
}

export interface StateListing {
  /** The items found, by key (UTF-16 order, as JavaScript sorts), at most the limit asked for. */
  readonly items: readonly StateView[];
  /** More items matched than the limit. */
  readonly more: boolean;
}

/** Every state item whose key starts with `prefix` (`''`: all of the pipeline's), sorted by key. */
export async function listStateItems(
  at: TableRef,
  pipeline: string,
  prefix: string,
  limit = Number.POSITIVE_INFINITY,
): Promise<StateListing> {
  const found: StateView[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await send(
      at.doc,
      new ScanCommand({
        TableName: at.table,
        ConsistentRead: true,
        FilterExpression: 'begins_with(pk, :prefix) AND sk = :sk',
        ExpressionAttributeValues: { ':prefix': `${keys.statePrefix(pipeline)}${prefix}`, ':sk': 'STATE' },
        ...(start ? { ExclusiveStartKey: start } : {}),
      }),
      'dynamodb:Scan',
      { missingTable: at.table },
    );
    for (const item of page.Items ?? []) found.push(viewOfState(item));
    start = page.LastEvaluatedKey;
  } while (start);
  found.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  return { items: found.slice(0, limit), more: found.length > limit };
}
