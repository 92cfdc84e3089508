/**
 * `min`, `max` and `latest` in the ledger: how a state item holds them, and that the update in the staging
 * transaction (and in the direct path of the weaker guarantees) makes the stored value the join of every value
 * applied, once or many times, in any order, whatever this container believed the stored value to be. DynamoDB
 * cannot take the smaller of two numbers in an update, so each such field is written on a condition the
 * transaction checks against the stored item; a cancelled condition returns the item, which the ledger learns from.
 * Real DynamoDB Local.
 */
import { DeleteCommand, GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { FenceIdentity } from '../../shared/ledger/records.ts';
import { NO_FENCE, StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { StateConditionError } from '../../shared/ledger/state-items.ts';
import { forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { readStateItem } from '../../shared/ledger/state-read.ts';
import { latestOrderKey } from '../../shared/transforms/state-order.ts';
import type { StateDelta } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('stateops');
});

const doc = () => ledgerDocumentClient(res.clients.dynamodb);
const ledger = () => new StagingLedger(res.clients.dynamodb, res.table);

function identity(offset: number): FenceIdentity {
  const print = { offset, digest: `d${offset}`, timestamp: 0 };
  return { fenceRecord: print, batchStart: print, recentStarts: [print] };
}

/** A partition's staging transactions, one offset each: what the processor sends, without records or objects. */
class Partition {
  private fence = NO_FENCE;
  constructor(
    readonly pipeline: string,
    readonly partition: number,
  ) {}

  async stage(state: readonly StateDelta[]): Promise<void> {
    const newOffset = this.fence + 1;
    await ledger().stage({
      pipeline: this.pipeline,
      topic: 'orders',
      partition: this.partition,
      expectedOffset: this.fence,
      newOffset,
      entries: [],
      claims: [],
      state,
      identity: identity(newOffset),
      now: Date.now(),
      attemptId: `a${newOffset}`,
    });
    this.fence = newOffset;
  }

  /** Stages, learning from each cancelled condition as the processor does, at most `tries` times. */
  async stageLearning(state: readonly StateDelta[], tries = 3): Promise<StateConditionError[]> {
    const refusals: StateConditionError[] = [];
    for (;;) {
      try {
        await this.stage(state);
        return refusals;
      } catch (error) {
        if (!(error instanceof StateConditionError) || refusals.length + 1 >= tries) throw error;
        refusals.push(error);
      }
    }
  }
}

const ops = (o: Partial<StateDelta>): StateDelta => ({ key: 'sensor', fields: {}, add: {}, ...o });

const view = (pipeline: string) => readStateItem({ doc: doc(), table: res.table }, pipeline, 'sensor');

describe('the stored form of min, max and latest', () => {
  it('holds each value as a plain attribute beside an @-companion naming its operation (and the time of a latest)', async () => {
    const pipeline = uniqueName('layout');
    await new Partition(pipeline, 0).stage([
      ops({
        fields: { site: 'lab' },
        add: { readings: 1 },
        min: { low: -4.25 },
        max: { high: 0.1 },
        latest: { last: { value: 'ok', at: 1796029200000 } },
      }),
    ]);
    const { Item } = await doc().send(
      new GetCommand({ TableName: res.table, Key: keys.state(pipeline, 'sensor'), ConsistentRead: true }),
    );
    expect(Item).toMatchObject({
      stateKey: 'sensor',
      site: 'lab',
      readings: 1,
      low: -4.25,
      high: 0.1,
      last: 'ok',
      '@low': { op: 'min' },
      '@high': { op: 'max' },
      '@last': { op: 'latest', at: 1796029200000 },
    });
    expect(await view(pipeline)).toEqual({
      key: 'sensor',
      values: { site: 'lab', readings: 1, low: -4.25, high: 0.1, last: 'ok' },
      operations: { site: 'set', readings: 'add', low: 'min', high: 'max', last: 'latest' },
      latestAt: { last: 1796029200000 },
    });
  });

  it('stores numbers DynamoDB and JavaScript read alike: fractions, tiny and large magnitudes, -0', async () => {
    const pipeline = uniqueName('numbers');
    const values = {
      a: 0.1,
      b: 1e-7,
      c: 1e-130,
      d: 2 ** 53 - 1,
      e: -(2 ** 53 - 1),
      f: -0,
      g: 0.30000000000000004,
    };
    await new Partition(pipeline, 0).stage([ops({ max: values })]);
    expect((await view(pipeline))?.values).toEqual({
      ...values,
      f: 0,
    });
  });
});

describe('the join of every value applied, once or many times, in any order', () => {
  it('a batch staged again (a replay after its fence moved) leaves the state as it was', async () => {
    const pipeline = uniqueName('replay');
    const p = new Partition(pipeline, 0);
    const batch = [ops({ min: { low: 3 }, max: { high: 3 }, latest: { last: { value: 'x', at: 5 } } })];
    await p.stage(batch);
    const once = await view(pipeline);
    await p.stage(batch);
    forgetStateKnowledge();
    await p.stageLearning(batch);
    expect(await view(pipeline)).toEqual(once);
  });

  it('later values move a field only past the stored one', async () => {
    const pipeline = uniqueName('monotone');
    const p = new Partition(pipeline, 0);
    await p.stage([ops({ min: { low: 3 }, max: { high: 3 }, latest: { last: { value: 'x', at: 5 } } })]);
    await p.stage([ops({ min: { low: 4 }, max: { high: 2 }, latest: { last: { value: 'y', at: 4 } } })]);
    expect((await view(pipeline))?.values).toEqual({
      low: 3,
      high: 3,
      last: 'x',
    });
    await p.stage([ops({ min: { low: -1 }, max: { high: 9 }, latest: { last: { value: 'z', at: 5 } } })]);
    expect((await view(pipeline))?.values).toEqual({
      low: -1,
      high: 9,
      last: 'z',
    });
  });

  it('another container’s better value, written after this one last saw the item, wins: the condition is cancelled, the item learnt, the update sent again without it', async () => {
    const pipeline = uniqueName('raced');
    const p = new Partition(pipeline, 0);
    await p.stage([ops({ max: { high: 5 }, latest: { last: { value: 'mine', at: 5 } } })]);
    // Another container (its own memory) stages a better max and a later latest, as the ledger writes them.
    await doc().send(
      new UpdateCommand({
        TableName: res.table,
        Key: keys.state(pipeline, 'sensor'),
        UpdateExpression: 'SET high = :high, #l = :last, #ch = :ch, #cl = :cl',
        ExpressionAttributeNames: { '#l': 'last', '#ch': '@high', '#cl': '@last' },
        ExpressionAttributeValues: {
          ':high': 9,
          ':last': 'theirs',
          ':ch': { op: 'max' },
          ':cl': { op: 'latest', at: 7, order: latestOrderKey({ value: 'theirs', at: 7 }) },
        },
      }),
    );
    const refusals = await p.stageLearning([
      ops({ max: { high: 7 }, latest: { last: { value: 'late', at: 6 } } }),
    ]);
    expect(refusals.length).toBeGreaterThan(0);
    expect(refusals[0]).toMatchObject({ stateKeys: ['sensor'], learnt: true });
    expect(refusals[0]!.message).not.toContain('\n');
    expect((await view(pipeline))?.values).toEqual({
      high: 9,
      last: 'theirs',
    });
  });

  it('a belief the item no longer bears out (deleted behind the pipeline) is corrected, not trusted', async () => {
    const pipeline = uniqueName('forgotten');
    const p = new Partition(pipeline, 0);
    await p.stage([ops({ max: { high: 9 }, min: { low: 1 } })]);
    await doc().send(new DeleteCommand({ TableName: res.table, Key: keys.state(pipeline, 'sensor') }));
    const refusals = await p.stageLearning([ops({ max: { high: 4 }, min: { low: 6 } })]);
    expect(refusals.map((r) => r.learnt)).toEqual([true]);
    expect((await view(pipeline))?.values).toEqual({
      high: 4,
      low: 6,
    });
  });

  it('at equal times DynamoDB resolves latest as the fold does, by UTF-8 bytes, in either order', async () => {
    for (const [first, second] of [
      ['\uFFFF', '\u{1F600}'],
      ['\u{1F600}', '\uFFFF'],
    ]) {
      const pipeline = uniqueName('tie');
      const p = new Partition(pipeline, 0);
      await p.stage([ops({ latest: { last: { value: first!, at: 1 } } })]);
      forgetStateKnowledge();
      await p.stageLearning([ops({ latest: { last: { value: second!, at: 1 } } })]);
      expect((await view(pipeline))?.values).toEqual({
        last: '\u{1F600}',
      });
    }
  });

  it('the direct path of the weaker guarantees applies them the same way, and a retry (at-least-once) changes nothing', async () => {
    const pipeline = uniqueName('direct');
    const txn = {
      pipeline,
      topic: 'orders',
      partition: 0,
      state: [ops({ add: { n: 1 }, min: { low: 2 }, latest: { last: { value: 1, at: 3 } } })],
    };
    await ledger().applyState(txn);
    await ledger().applyState(txn);
    forgetStateKnowledge();
    await ledger()
      .applyState(txn)
      .catch(async (error) => {
        expect(error).toBeInstanceOf(StateConditionError);
        await ledger().applyState(txn);
      });
    expect((await view(pipeline))?.values).toEqual({
      n: 3,
      low: 2,
      last: 1,
    });
  });
});

describe('a field keeps its operation', () => {
  it('a min, max or latest meeting a field another operation wrote is refused with the stored item, nothing applied', async () => {
    const pipeline = uniqueName('kinds');
    const p = new Partition(pipeline, 0);
    await p.stage([ops({ fields: { s: 'text' }, add: { n: 1 }, min: { m: 1 } })]);
    for (const wrong of [
      ops({ max: { n: 5 } }),
      ops({ latest: { s: { value: 'x', at: 1 } } }),
      ops({ max: { m: 5 } }),
    ]) {
      const refusal = await p.stage([wrong]).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(StateConditionError);
      expect((refusal as StateConditionError).stored.get('sensor')).toMatchObject({ s: 'text', n: 1, m: 1 });
    }
    expect((await view(pipeline))?.values).toEqual({
      s: 'text',
      n: 1,
      m: 1,
    });
  });
});
