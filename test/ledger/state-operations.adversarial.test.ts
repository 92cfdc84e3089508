/**
 * `min`, `max` and `latest` under writers that fail: the ledger guesses whether each such field moves and states
 * the guess as a condition (`shared/ledger/state-update.ts`), so what one writer believes about an item must never
 * rest on another writer's update that has not committed. When it did, two partitions of one container whose
 * transactions failed for other reasons (a throttle, a moved fence, a refused field) left beliefs that made each
 * other's next guesses wrong, and on a virtual clock they refused each other forever: the chaos test's at-least-once
 * run of a min/max/latest workload never finished. Beside them: a belief is of one table, pipeline and key, and
 * the guess compares values as DynamoDB's condition does at the edges (±0, the smallest and largest numbers, ties
 * of latest). Real DynamoDB Local.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { FenceMovedError, NO_FENCE, StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { StateConditionError, StateTypeConflictError } from '../../shared/ledger/state-items.ts';
import { assume, beliefsOf, forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { readStateItem } from '../../shared/ledger/state-read.ts';
import type { LatestValue, StateDelta } from '../../shared/transforms/types.ts';
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

/** Sends the update again after a refusal that taught the ledger something, once at most; returns the refusals. */
async function applyLearning(pipeline: string, state: StateDelta[]): Promise<number> {
  const txn = () => ({ pipeline, topic: 'orders', partition: 0, state: state.map((d) => ({ ...d })) });
  try {
    await ledger().applyState(txn());
    return 0;
  } catch (error) {
    if (!(error instanceof StateConditionError)) throw error;
    expect(error.learnt).toBe(true);
    await ledger().applyState(txn());
    return 1;
  }
}

describe('a belief is of one table, one pipeline, one key', () => {
  it('the same key in another pipeline of the table, or in another table, commits on its first try', async () => {
    const first = uniqueName('one');
    const second = uniqueName('two');
    const elsewhere = await freshResources('stateadv2');
    const other = new StagingLedger(elsewhere.clients.dynamodb, elsewhere.table);
    const high = delta('shared', { max: { high: 100 }, latest: { last: { value: 'z', at: 9 } } });
    await ledger().applyState({ pipeline: first, topic: 'orders', partition: 0, state: [high] });
    // A belief of the first pipeline's item used for either would guess skip, refused on the absent item.
    const low = () => [delta('shared', { max: { high: 50 }, latest: { last: { value: 'a', at: 3 } } })];
    await ledger().applyState({ pipeline: second, topic: 'orders', partition: 0, state: low() });
    await other.applyState({ pipeline: first, topic: 'orders', partition: 0, state: low() });
    expect(await values(second, 'shared')).toEqual({ high: 50, last: 'a' });
    expect(
      (
        await readStateItem(
          { doc: ledgerDocumentClient(elsewhere.clients.dynamodb), table: elsewhere.table },
          first,
          'shared',
        )
      )?.values,
    ).toEqual({ high: 50, last: 'a' });
    expect(await values(first, 'shared')).toEqual({ high: 100, last: 'z' });
  });
});

describe('DynamoDB compares as the guess does', () => {
  // A comparison on which the guess and the condition disagree would be refused on every try, teaching nothing:
  // the batch would fail forever. Each value goes out from a warm container (beliefs of every earlier value) or
  // a cold one, alternately; each is refused at most once, and that refusal teaches.
  const NUMBERS = [0.3, -0, 1e-130, 0, -1e-130, 2 ** 53 - 1, 0.1 + 0.2, -(2 ** 53 - 1), 0.1, -0.3, 1e-130];

  it('min and max of ±0, ±1e-130, ±(2^53 - 1) and 0.1 + 0.2 hold the join, cold or warm', async () => {
    for (const cold of [false, true]) {
      const pipeline = uniqueName('numbers');
      const refusals: number[] = [];
      for (const [i, value] of NUMBERS.entries()) {
        if (cold || i % 3 === 0) forgetStateKnowledge();
        refusals.push(
          await applyLearning(pipeline, [delta('n', { min: { low: value }, max: { high: value } })]),
        );
      }
      expect(await values(pipeline, 'n')).toEqual({ low: -(2 ** 53 - 1), high: 2 ** 53 - 1 });
      expect(refusals.every((r) => r <= 1)).toBe(true);
    }
  });

  it('latest at equal and extreme times (numbers above strings, -0 as 0, UTF-8 order) holds the join, cold or warm', async () => {
    const top = Number.MAX_SAFE_INTEGER;
    const latest: LatestValue[] = [
      { value: 'b', at: 5 },
      { value: -0, at: 5 },
      { value: '\u{1F600}', at: 5 },
      { value: 0, at: 5 },
      { value: '\uFFFF', at: 5 },
      { value: -1e-130, at: 5 },
      { value: 1e-130, at: 5 },
      { value: 'z', at: 4 },
      { value: '', at: top },
      { value: 'a', at: top },
      { value: -(2 ** 53 - 1), at: top },
      { value: 'b', at: top },
    ];
    for (const cold of [false, true]) {
      const pipeline = uniqueName('ties');
      for (const [i, value] of latest.entries()) {
        if (cold || i % 3 === 0) forgetStateKnowledge();
        await applyLearning(pipeline, [delta('t', { latest: { last: value } })]);
        if (i === 6) expect(await values(pipeline, 't')).toEqual({ last: 1e-130 });
      }
      expect(await values(pipeline, 't')).toEqual({ last: -(2 ** 53 - 1) });
    }
  });

  it('a commit believed after a later one of the same field (its answer came late) does not set the belief back', () => {
    const at = ['t', 'p', 'k'] as const;
    assume(
      ...at,
      new Map([
        ['high', { operation: 'max', value: 10 }],
        ['low', { operation: 'min', value: 1 }],
      ]),
    );
    assume(
      ...at,
      new Map([
        ['high', { operation: 'max', value: 5 }],
        ['low', { operation: 'min', value: 4 }],
      ]),
    );
    assume(...at, new Map([['last', { operation: 'latest', order: 'b' }]]));
    assume(...at, new Map([['last', { operation: 'latest', order: 'a' }]]));
    expect(Object.fromEntries(beliefsOf(...at))).toEqual({
      high: { operation: 'max', value: 10 },
      low: { operation: 'min', value: 1 },
      last: { operation: 'latest', order: 'b' },
    });
  });
});
