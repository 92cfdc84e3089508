/**
 * Claims ahead (P4) are created by PartiQL INSERTs in BatchExecuteStatement (`claim-batch.ts`) while a staging
 * transaction may put the same claim (a takeover) or a per-key conditional update may create it. The protocol
 * relies on DynamoDB's rule that an INSERT creates its item only if no item has its key (`DuplicateItem`
 * otherwise), decided atomically against any other write of that item. These tests race an INSERT against a
 * conditional create of the same new item on DynamoDB Local, many pairs at once, and check that exactly one of
 * the two ever creates it and the item is the winner's: a local part that let both through would show here, not
 * as a rare duplicate in the chaos test.
 */
import {
  BatchExecuteStatementCommand,
  GetCommand,
  TransactWriteCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { mapLimit } from '../../shared/concurrency.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('insert-race');
});

const PAIRS = 160;
const CONCURRENCY = 8;

type Rival = 'transaction' | 'update';

/** One INSERT and one conditional create of `pk` at once: who reported success, and whose item is stored. */
async function race(pk: string, rival: Rival) {
  const doc = ledgerDocumentClient(res.clients.dynamodb);
  const key = { pk, sk: 'CLAIM' };
  const insert = doc
    .send(
      new BatchExecuteStatementCommand({
        Statements: [
          {
            Statement: `INSERT INTO "${res.table}" VALUE {'pk': ?, 'sk': ?, 'claimant': ?}`,
            Parameters: [pk, 'CLAIM', 'insert'],
          },
        ],
      }),
    )
    .then((out) => out.Responses?.[0] !== undefined && out.Responses[0].Error === undefined);
  const other =
    rival === 'transaction'
      ? doc.send(
          new TransactWriteCommand({
            TransactItems: [
              {
                Put: {
                  TableName: res.table,
                  Item: { ...key, claimant: rival },
                  ConditionExpression: 'attribute_not_exists(pk)',
                },
              },
              // A second item, as a staging transaction always has (its fence).
              { Put: { TableName: res.table, Item: { pk: `${pk}-fence`, sk: 'F' } } },
            ],
          }),
        )
      : doc.send(
          new UpdateCommand({
            TableName: res.table,
            Key: key,
            UpdateExpression: 'SET claimant = :c',
            ConditionExpression: 'attribute_not_exists(pk)',
            ExpressionAttributeValues: { ':c': rival },
          }),
        );
  const [inserted, rivalled] = await Promise.all([
    insert,
    other.then(
      () => true,
      (error: { name?: string }) => {
        // Losing is a failed condition (or a transaction cancelled for it); anything else is a failure of the test.
        if (error.name === 'ConditionalCheckFailedException' || error.name === 'TransactionCanceledException')
          return false;
        throw error;
      },
    ),
  ]);
  const { Item } = await doc.send(new GetCommand({ TableName: res.table, Key: key, ConsistentRead: true }));
  return { inserted, rivalled, stored: Item?.claimant as string | undefined };
}

describe('a PartiQL INSERT of a claim is decided atomically against a concurrent create of the same item (DynamoDB Local)', () => {
  for (const rival of ['transaction', 'update'] as const) {
    it(`against a conditional ${rival === 'transaction' ? 'Put in a TransactWriteItems' : 'UpdateItem'}: exactly one creates the item, and it holds the winner's claimant`, async () => {
      const prefix = uniqueName('race');
      const results = await mapLimit(
        Array.from({ length: PAIRS }, (_, i) => `${prefix}#CLAIM#k${i}`),
        CONCURRENCY,
        (pk) => race(pk, rival),
      );
      const wrong = results.filter(
        (r) =>
          r.inserted === r.rivalled || r.stored !== (r.inserted ? 'insert' : r.rivalled ? rival : undefined),
      );
      expect(wrong).toEqual([]);
      // Both sides won some races: the INSERT really met a concurrent writer, not an item already there.
      expect(results.some((r) => r.inserted)).toBe(true);
      expect(results.some((r) => r.rivalled)).toBe(true);
    }, 120_000);
  }
});
