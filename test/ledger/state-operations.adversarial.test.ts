/**
 * `min`, `max` and `latest` under writers that fail: the ledger guesses whether each such field moves and states
 * the guess as a condition (`shared/ledger/state-update.ts`), so what one writer believes about an item must never
 * rest on another writer's update that has not committed. When it did, two partitions of one container whose
 * transactions failed for other reasons (a throttle, a moved fence, a refused field) left beliefs that made each
 * other's next guesses wrong, and on a virtual clock they refused each other forever: the chaos test's at-least-once
 * run of a min/max/latest workload never finished. Real DynamoDB Local.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { FenceMovedError, NO_FENCE, StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { StateConditionError, StateTypeConflictError } from '../../shared/ledger/state-items.ts';
import { forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { readStateItem } from '../../shared/ledger/state-read.ts';
import type { StateDelta } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('stateadv');
});
beforeEach(() => forgetStateKnowledge());

const ledger = () => new StagingLedger(res.clients.dynamodb, res.table);
const doc = () => ledgerDocumentClient(res.clients.dynamodb);
const delta = (key: string, o: Partial<StateDelta>): StateDelta => ({ key, fields: {}, add: {}, ...o });
const values = async (pipeline: string, key: string) =>
  (await readStateItem({ doc: doc(), table: res.table }, pipeline, key))?.values;

/** Stages until committed, sending again after each cancelled condition (at most 5 tries); returns the tries. */
async function stageUntilCommitted(txn: () => ReturnType<typeof stagingOf>): Promise<number> {
  for (let tries = 1; ; tries += 1) {
    try {
      await ledger().stage(txn());
      return tries;
    } catch (error) {
      if (!(error instanceof StateConditionError) || tries >= 5) throw error;
    }
  }
}

function stagingOf(pipeline: string, partition: number, expectedOffset: number, state: StateDelta[]) {
  const print = { offset: expectedOffset + 1, digest: `d${partition}`, timestamp: 0 };
  return {
    pipeline,
    topic: 'orders',
    partition,
    expectedOffset,
    newOffset: expectedOffset + 1,
    entries: [],
    claims: [],
    state,
    identity: { fenceRecord: print, batchStart: print, recentStarts: [print] },
    now: Date.now(),
    attemptId: `p${partition}`,
  };
}

describe('a belief rests only on what committed', () => {
  it('a staging transaction cancelled by its fence leaves no belief: another partition’s smaller max commits on its first try', async () => {
    const pipeline = uniqueName('fenced');
    // Partition 0's fence is at 0; a zombie of it stages from the fence it read before (none): cancelled.
    await ledger().stage(stagingOf(pipeline, 0, NO_FENCE, [delta('other', { add: { n: 1 } })]));
    await expect(
      ledger().stage(
        stagingOf(pipeline, 0, NO_FENCE, [
          delta('shared', { max: { high: 9 }, latest: { last: { value: 'z', at: 9 } } }),
        ]),
      ),
    ).rejects.toBeInstanceOf(FenceMovedError);
    // No condition of this update can fail on the absent item unless it trusts the zombie's cancelled update.
    await ledger().stage(
      stagingOf(pipeline, 1, NO_FENCE, [
        delta('shared', { max: { high: 3 }, latest: { last: { value: 'a', at: 3 } } }),
      ]),
    );
    expect(await values(pipeline, 'shared')).toEqual({ high: 3, last: 'a' });
  });

  it('a direct transaction refused for another key leaves no belief: another writer’s smaller min and earlier latest commit on their first try', async () => {
    const pipeline = uniqueName('direct');
    // A field set as text, which a later ADD meets: DynamoDB refuses that transaction whole.
    await doc().send(
      new UpdateCommand({
        TableName: res.table,
        Key: keys.state(pipeline, 'texty'),
        UpdateExpression: 'SET stateKey = :k, label = :t',
        ExpressionAttributeValues: { ':k': 'texty', ':t': 'text' },
      }),
    );
    const refused = {
      pipeline,
      topic: 'orders',
      partition: 0,
      state: [
        delta('shared', { min: { low: 1 }, latest: { last: { value: 'z', at: 9 } } }),
        delta('texty', { add: { label: 1 } }),
      ],
    };
    await expect(ledger().applyState(refused)).rejects.toBeInstanceOf(StateTypeConflictError);
    const other = {
      pipeline,
      topic: 'orders',
      partition: 1,
      state: [delta('shared', { min: { low: 5 }, latest: { last: { value: 'a', at: 3 } } })],
    };
    await ledger().applyState(other);
    expect(await values(pipeline, 'shared')).toEqual({ low: 5, last: 'a' });
  });

  it('two writers crossing on two keys, each failing once for another reason, both commit on their next try and the fields hold the join', async () => {
    const pipeline = uniqueName('crossing');
    let fence0 = NO_FENCE;
    await ledger().stage(stagingOf(pipeline, 0, fence0, []));
    fence0 = 0;
    const first = [delta('a', { max: { high: 5 } }), delta('b', { max: { high: 3 } })];
    const second = [delta('a', { max: { high: 3 } }), delta('b', { max: { high: 5 } })];
    // Each first attempt is cancelled by a stale fence, sent at once as two partitions of one container do.
    const stale = await Promise.allSettled([
      ledger().stage(stagingOf(pipeline, 0, NO_FENCE, first)),
      ledger().stage(stagingOf(pipeline, 0, NO_FENCE, second)),
    ]);
    expect(stale.map((s) => s.status)).toEqual(['rejected', 'rejected']);
    // Sent again, learning from a cancelled condition as the processor does: the race's loser learns once.
    const tries = await Promise.all([
      stageUntilCommitted(() =>
        stagingOf(
          pipeline,
          0,
          fence0,
          first.map((d) => ({ ...d })),
        ),
      ),
      stageUntilCommitted(() =>
        stagingOf(
          pipeline,
          1,
          NO_FENCE,
          second.map((d) => ({ ...d })),
        ),
      ),
    ]);
    expect(Math.max(...tries)).toBeLessThanOrEqual(2);
    expect(await values(pipeline, 'a')).toEqual({ high: 5 });
    expect(await values(pipeline, 'b')).toEqual({ high: 5 });
  });
});
