/**
 * A stop is confirmed only when a second invocation judged the same batch start backwards too (L2): the event source
 * mapping retries a truly backwards batch forever, so a real stop is confirmed within one retry, while a zombie's
 * false stop is never retried. `eos epoch --start-new` (without `--force`) refuses a stop seen once. Real DynamoDB
 * Local and S3 server, the real processor and `eos epoch`.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runEpoch } from '../../cli/epoch.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { OffsetsWentBackwardsError } from '../../shared/errors.ts';
import { STOP_ATTRIBUTE, sightedStop } from '../../shared/ledger/epochs.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('stopc');
});

afterEach(() => {
  // `eos epoch` sets the exit code of a refused switch; the test runner must not inherit it.
  process.exitCode = undefined;
});

async function stageBatches(settings: Settings, clock: ManualClock, partition: number, count: number) {
  for (let first = 0; first < count * 10; first += 10) {
    clock.advance(1_000);
    await createProcessor({ settings, clients: res.clients, clock }).processEvent(
      mskEvent(orderRecords(partition, first, 10)),
    );
  }
}

/** One invocation of a recreated topic's batch in a fresh container: it stops the partition. */
async function deliverRecreated(settings: Settings, clock: ManualClock, partition: number) {
  clock.advance(1_000);
  await expect(
    createProcessor({ settings, clients: res.clients, clock }).processEvent(
      mskEvent(orderRecords(partition, 0, 5, 'gen2')),
    ),
  ).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
}

async function startNew(settings: Settings, partition: number) {
  const lines: string[] = [];
  const result = await runEpoch(
    {
      table: res.table,
      pipeline: settings.pipelineId,
      topic: 'orders',
      partition,
      startNew: true,
      force: false,
      json: false,
    },
    { dynamodb: res.clients.dynamodb, write: (text) => lines.push(text) },
  );
  return { outcome: result.switched?.[0]?.outcome, text: lines.join(''), exitCode: process.exitCode };
}

async function stopOf(settings: Settings, partition: number) {
  return (
    await new StagingLedger(res.clients.dynamodb, res.table).readFence(
      settings.pipelineId,
      'orders',
      partition,
    )
  ).stop;
}

describe('a stop seen by one invocation', () => {
  it('is refused by eos epoch --start-new with one line and exit 1, and the mapping retry confirms it', async () => {
    const settings = settingsIn(res, 'stopc');
    const clock = new ManualClock();
    await stageBatches(settings, clock, 0, 3);
    await deliverRecreated(settings, clock, 0);
    expect((await stopOf(settings, 0))?.seenBy).toMatchObject({ count: 1 });

    const refused = await startNew(settings, 0);
    expect(refused.outcome).toMatchObject({ kind: 'unconfirmed', epoch: 0, stagedOffset: 29 });
    expect(refused.exitCode).toBe(1);
    expect(refused.text.trim().split('\n')).toHaveLength(1);
    expect(refused.text).toMatch(/orders-0: NOT switched: .*seen by one invocation only.*--force/);

    // The mapping retries the batch: a second invocation sees the same stop and confirms it.
    await deliverRecreated(settings, clock, 0);
    expect((await stopOf(settings, 0))?.seenBy).toMatchObject({ count: 2 });
    process.exitCode = undefined;
    const opened = await startNew(settings, 0);
    expect(opened.outcome).toEqual({ kind: 'opened', epoch: 1, closedFence: 29 });
    expect(opened.exitCode).toBeUndefined();
  });

  it('is not confirmed by the same invocation seeing it again', async () => {
    const settings = settingsIn(res, 'stopc');
    const clock = new ManualClock();
    await stageBatches(settings, clock, 1, 2);
    const processor = createProcessor({ settings, clients: res.clients, clock, newAttemptId: () => 'same' });
    for (let i = 0; i < 2; i++) {
      clock.advance(1_000);
      await expect(processor.processEvent(mskEvent(orderRecords(1, 0, 5, 'gen2')))).rejects.toBeInstanceOf(
        OffsetsWentBackwardsError,
      );
    }
    expect((await stopOf(settings, 1))?.seenBy).toEqual({ first: 'same', last: 'same', count: 1 });
    expect((await startNew(settings, 1)).outcome?.kind).toBe('unconfirmed');
  });

  it('written before stops counted invocations, counts as seen once: refused until a retry sees it', async () => {
    const settings = settingsIn(res, 'stopc');
    const clock = new ManualClock();
    await stageBatches(settings, clock, 2, 2);
    const legacy = {
      reason: 'an earlier release',
      fence: 19,
      firstOffset: 0,
      lastOffset: 4,
      at: clock.now(),
    };
    await res.clients.dynamodb.send(
      new UpdateCommand({
        TableName: res.table,
        Key: fenceKeys.readFrom(settings.pipelineId, 'orders', 2, false),
        UpdateExpression: 'SET #stop = :stop',
        ExpressionAttributeNames: { '#stop': STOP_ATTRIBUTE },
        ExpressionAttributeValues: { ':stop': legacy },
      }),
    );
    expect((await startNew(settings, 2)).outcome?.kind).toBe('unconfirmed');
    await deliverRecreated(settings, clock, 2);
    expect((await stopOf(settings, 2))?.seenBy).toMatchObject({ count: 2 });
    process.exitCode = undefined;
    expect((await startNew(settings, 2)).outcome).toEqual({ kind: 'opened', epoch: 1, closedFence: 19 });
  });

  it('with --force, a stop seen once is switched as a partition that is not stopped is', async () => {
    const settings = settingsIn(res, 'stopc');
    const clock = new ManualClock();
    await stageBatches(settings, clock, 3, 2);
    await deliverRecreated(settings, clock, 3);
    const result = await runEpoch(
      {
        table: res.table,
        pipeline: settings.pipelineId,
        topic: 'orders',
        partition: 3,
        startNew: true,
        force: true,
        json: true,
      },
      { dynamodb: res.clients.dynamodb, write: () => undefined },
    );
    expect(result.switched?.[0]?.outcome).toEqual({ kind: 'opened', epoch: 1, closedFence: 19 });
  });
});

describe('a sighting of a stop (sightedStop)', () => {
  const stop = { reason: 'backwards', fence: 99, firstOffset: 0, lastOffset: 9, at: 1_000 };
  const first = sightedStop(undefined, stop, 'attempt-1', 900)!;

  it('counts a later attempt begun after the first sighting: the mapping retry of the refused batch', () => {
    const retried = sightedStop(first, { ...stop, at: 2_000 }, 'attempt-2', 1_500);
    expect(retried?.seenBy).toEqual({ first: 'attempt-1', last: 'attempt-2', count: 2 });
    expect(retried?.at).toBe(1_000);
  });

  it('does not count an attempt begun before the first sighting (a stale twin of the batch), nor the same attempt', () => {
    expect(sightedStop(first, { ...stop, at: 2_000 }, 'attempt-0', 950)).toBeUndefined();
    expect(sightedStop(first, { ...stop, at: 2_000 }, 'attempt-1', 1_500)).toBeUndefined();
  });
});
