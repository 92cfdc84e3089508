/**
 * The direct path of the weaker guarantees (at-least-once, none) under a writer outside the protocol: a min, max or
 * latest update is sent on conditions that state the ledger's guess, and a cancelled condition teaches the ledger
 * the stored item before the chunk is sent again. Inside the protocol each such refusal means another writer
 * committed, so it ends; a writer that keeps deleting and rewriting the item behind the pipeline would refuse every
 * try, and the invocation must fail the batch (its retry starts afresh) rather than loop until it times out. A record
 * whose operation meets a field another operation holds is dead-lettered the same whatever the container believes.
 * Real DynamoDB Local.
 */
import { DeleteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { StateConditionError } from '../../shared/ledger/state-items.ts';
import { forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { applyDirectState } from '../../shared/processor/direct-state.ts';
import type { EvaluatedRecord } from '../../shared/processor/evaluate.ts';
import { MAX_CONDITION_RELEARNING } from '../../shared/processor/state-refusal.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { evaluatedRecord } from '../support/evaluated.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('dstate');
});

/** A record taking the max of `high` on the state key `sensor`. */
const record = (offset: number, high: number): EvaluatedRecord =>
  evaluatedRecord(offset, [{ key: 'sensor', fields: {}, add: {}, max: { high } }]);

describe('the direct path under a writer outside the protocol', () => {
  it('a key deleted and rewritten behind the pipeline before every try fails the batch after a bounded number of refusals', async () => {
    forgetStateKnowledge();
    const pipeline = uniqueName('outside');
    const real = new StagingLedger(res.clients.dynamodb, res.table);
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    const key = keys.state(pipeline, 'sensor');
    let tries = 0;
    // Before each try the outsider flips the item: gone, then a max above the record's, then gone again.
    const ledger: Parameters<typeof applyDirectState>[0]['ledger'] = {
      readState: (p, k) => real.readState(p, k),
      applyState: async (txn) => {
        tries += 1;
        if (tries % 2 === 1) await doc.send(new DeleteCommand({ TableName: res.table, Key: key }));
        else {
          await doc.send(
            new UpdateCommand({
              TableName: res.table,
              Key: key,
              UpdateExpression: 'SET stateKey = :k, high = :h, #c = :c',
              ExpressionAttributeNames: { '#c': '@high' },
              ExpressionAttributeValues: { ':k': 'sensor', ':h': 100, ':c': { op: 'max' } },
            }),
          );
        }
        return real.applyState(txn);
      },
    };
    // Seed a belief the first delete will contradict.
    await real.applyState({ pipeline, topic: 'orders', partition: 0, state: [record(0, 50).state[0]!] });
    const target = { ledger, pipeline, topic: 'orders', partition: 0, maxItems: 100 };
    await expect(applyDirectState(target, [record(1, 40)])).rejects.toBeInstanceOf(StateConditionError);
    // The first refusal that turns the field to a skip is progress; every later one repeats what was learnt.
    expect(tries).toBe(MAX_CONDITION_RELEARNING + 2);
  });
});

describe('a record mixing operations on a field, on every retry', () => {
  function on(offset: number, change: Partial<EvaluatedRecord['state'][number]>): EvaluatedRecord {
    return evaluatedRecord(offset, [{ key: 'sensor', fields: {}, add: {}, ...change }]);
  }

  it('is dead-lettered with the same reason warm, cold, and after another writer moved the field', async () => {
    forgetStateKnowledge();
    const pipeline = uniqueName('mixed');
    const real = new StagingLedger(res.clients.dynamodb, res.table);
    const batch = [
      on(0, { max: { high: 5 } }),
      on(1, { min: { high: 3 } }),
      on(2, { latest: { high: { value: 'x', at: 1 } } }),
      on(3, { add: { high: 1 } }),
      on(4, { fields: { high: 'text' } }),
      on(5, { max: { high: 7 } }),
    ];
    const target = { ledger: real, pipeline, topic: 'orders', partition: 0, maxItems: 8 };
    const reasons = async () =>
      (await applyDirectState(target, batch)).records.flatMap((r) =>
        r.deadLetter === undefined ? [] : [[r.offset, r.deadLetter.error]],
      );
    const first = await reasons();
    expect(first.map(([offset]) => offset)).toEqual([1, 2, 3, 4]);
    expect(await reasons()).toEqual(first);
    forgetStateKnowledge();
    expect(await reasons()).toEqual(first);
    // Another writer moves the max past what this container believes it to be.
    await ledgerDocumentClient(res.clients.dynamodb).send(
      new UpdateCommand({
        TableName: res.table,
        Key: keys.state(pipeline, 'sensor'),
        UpdateExpression: 'SET high = :h',
        ExpressionAttributeValues: { ':h': 9 },
      }),
    );
    expect(await reasons()).toEqual(first);
    expect((await real.readState(pipeline, 'sensor'))?.high).toBe(9);
  });
});
