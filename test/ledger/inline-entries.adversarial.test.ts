import { DynamoDBDocumentClient, QueryCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { sweepOrphans } from '../../shared/coordinator/cleanup/orphans.ts';
import { CLOSED_ATTRIBUTE } from '../../shared/ledger/epochs.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { ENTRY_ITEMS_NOTED_AT, ENTRY_ITEMS_UP_TO } from '../../shared/ledger/inline-entries.ts';
import { keys, padOffset } from '../../shared/ledger/layout.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { INLINE_GRACE_MS } from '../../shared/processor/inline-gate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { spiedClients } from '../support/claims.ts';
import { crashAt } from '../support/hooks.ts';
import { entryItemsOf, fenceOf as fenceItemOf, inlineNames } from '../support/inline.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { committedOffsetsOf, expectExactlyOnce, putStagedObject, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('inl');
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);
// No state, no idempotency keys: the fence is a chunk's only item, so its entries go inline (`entriesInline`).
const settingsFor = (): Settings =>
  settingsIn(res, 'inl', { transform: 'passthrough', idempotencyKey: 'none' });
const processorFor = (settings: Settings) => createProcessor({ settings, clients: res.clients });
const coordinatorFor = (
  settings: Settings,
  extra: Partial<Parameters<typeof createLocalCoordinator>[0]> = {},
) => createLocalCoordinator({ settings, clients: res.clients, ...extra });

const fenceOf = (settings: Settings, partition: number) => fenceItemOf(res, settings, partition);

const entryItems = (settings: Settings, partition: number) => entryItemsOf(res, settings, partition);

const committed = (settings: Settings, partition: number) =>
  committedOffsetsOf(res.clients, settings, partition);

/**
 * A processor of the release before inline entries (HEAD's `staging-transaction.ts`) stages [first, last] on the
 * sharded fence: its object, then one transaction moving the fence on "stagedOffset = expected, not closed" and
 * putting the staged-entry ITEM. That release knows nothing of `entryItemsUpTo` and leaves it as it is.
 */
async function previousReleaseStage(
  settings: Settings,
  partition: number,
  first: number,
  last: number,
  expected: number,
): Promise<void> {
  const spec = { partition, firstOffset: first, lastOffset: last };
  const entry = await putStagedObject(res.clients, settings, spec, `prev-${first}-${last}.0`);
  await doc().send(
    new TransactWriteCommand({
      TransactItems: [
        {
          Update: {
            TableName: res.table,
            Key: fenceKeys.fence(settings.pipelineId, 'orders', partition),
            UpdateExpression: 'SET stagedOffset = :new, updatedAt = :now',
            ConditionExpression: 'stagedOffset = :expected AND attribute_not_exists(#closed)',
            ExpressionAttributeNames: { '#closed': CLOSED_ATTRIBUTE },
            ExpressionAttributeValues: { ':new': last, ':now': Date.now(), ':expected': expected },
          },
        },
        {
          Put: {
            TableName: res.table,
            Item: { ...keys.staged(settings.pipelineId, 'orders', partition, last, 'output'), ...entry },
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        },
      ],
    }),
  );
}

describe('a rolling deploy: the release before inline entries still runs beside this one', () => {
  it('end-to-end 1: entry items a processor of the previous release stages between inline stagings are committed', async () => {
    // A processor of the previous release (mid-deploy, or a zombie of it) stages on the same sharded fence with its
    // old transaction: the fence moves and an entry ITEM is written, the entry-item mark left as it was.
    //   new      stages 0..4 (first staging: moved marker, so items)   fence 4,  mark 4 noted at 4
    //   new      stages 5..9 inline                                      fence 9,  mark 4 noted at 9
    //   checkpoint 1 commits up to 9
    //   previous stages 10..14 as an entry item                         fence 14, mark 4 noted at 9: not holding
    //   new      stages 15..19 inline: it read a mark that did not hold  fence 19, mark 14 noted at 19
    //   checkpoint 2 (9, 19]: the mark 14 is above 9, so items() queries the entry items and finds 10..14.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(1, 0, 5)));
    await processorFor(settings).processEvent(mskEvent(orderRecords(1, 5, 5)));
    expect(inlineNames(await fenceOf(settings, 1))).toEqual(['e:9:output']);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await previousReleaseStage(settings, 1, 10, 14, 9);
    expect(await fenceOf(settings, 1)).toMatchObject({
      stagedOffset: 14,
      [ENTRY_ITEMS_UP_TO]: 4,
      [ENTRY_ITEMS_NOTED_AT]: 9,
    });
    await processorFor(settings).processEvent(mskEvent(orderRecords(1, 15, 5)));
    expect(await fenceOf(settings, 1)).toMatchObject({
      stagedOffset: 19,
      [ENTRY_ITEMS_UP_TO]: 14,
      [ENTRY_ITEMS_NOTED_AT]: 19,
    });
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    expect(await committed(settings, 1)).toEqual(range(0, 20));
  });

  it("C2: a deployed processor keeps entries where the previous release's prepare reads them until this release's coordinator has run for the grace period", async () => {
    // The previous release's begin reads the sharded fences, but its prepare reads only the entry items (one Query
    // of `<pl>#STAGED#orders#2` in (previous, cut], reproduced here): an inline entry would be invisible to it and
    // its cut would pass the entry's records. So the deployed processor (`after-coordinator-upgrade`) keeps entries
    // as items until the checkpoint head says this release's begin first ran at least the grace period ago.
    const settings = settingsFor();
    const clock = new ManualClock(Date.now());
    const deployed = () =>
      createProcessor({ settings, clients: res.clients, clock, inlineEntries: 'after-coordinator-upgrade' });
    const itemsOf = async (upTo: number) => {
      const { Items } = await doc().send(
        new QueryCommand({
          TableName: res.table,
          ConsistentRead: true,
          KeyConditionExpression: 'pk = :pk AND sk BETWEEN :low AND :high',
          ExpressionAttributeValues: {
            ':pk': keys.stagedPk(settings.pipelineId, 'orders', 2),
            ':low': padOffset(0),
            ':high': keys.stagedUpTo(upTo),
          },
        }),
      );
      return (Items ?? []).map((item) => item.lastOffset);
    };
    // No checkpoint head yet (a coordinator of either release may begin the first): items.
    await deployed().processEvent(mskEvent(orderRecords(2, 0, 5)));
    await deployed().processEvent(mskEvent(orderRecords(2, 5, 5)));
    expect(inlineNames(await fenceOf(settings, 2))).toEqual([]);
    expect(await itemsOf(9)).toEqual([4, 9]);
    // This release's begin notes when it first ran; within the grace period, still items.
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    const head = await ledgerItem(res, keys.checkpointHead(settings.pipelineId));
    expect(head?.compactFenceSince).toBe(clock.now());
    clock.advance(INLINE_GRACE_MS - 1);
    await deployed().processEvent(mskEvent(orderRecords(2, 10, 5)));
    expect(await itemsOf(14)).toEqual([14]);
    // Past it, a new container puts its entries inline.
    clock.advance(1);
    await deployed().processEvent(mskEvent(orderRecords(2, 15, 5)));
    expect(inlineNames(await fenceOf(settings, 2))).toEqual(['e:19:output']);
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    expect(await committed(settings, 2)).toEqual(range(0, 20));
  });
});

describe('the inline budget as a warm container knows it', () => {
  it('a warm container stages inline again once cleanup removed the entries its fence held', async () => {
    // A warm container re-reads its fence only when a condition fails (lane-fences.ts: "the steady state reads
    // nothing"), and a spilled chunk's transaction reports nothing back, so the inline bytes it carries would only
    // grow: it would spill every later chunk until it died, although cleanup emptied the fence. A fence write of
    // its own reports the bytes left (ReturnValues), and past the budget the container reads the fence once before
    // it spills.
    const settings = settingsFor();
    const warm = processorFor(settings);
    let offset = 0;
    for (let batch = 0; batch < 24; batch++, offset += 2)
      await warm.processEvent(mskEvent(orderRecords(3, offset, 2)));
    expect((await entryItems(settings, 3)).length).toBeGreaterThan(0); // the budget was reached: spilled
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    expect(inlineNames(await fenceOf(settings, 3))).toEqual([]);
    expect(await entryItems(settings, 3)).toEqual([]);
    await warm.processEvent(mskEvent(orderRecords(3, offset, 2)));
    expect(inlineNames(await fenceOf(settings, 3))).toEqual([`e:${offset + 1}:output`]);
  });
});

describe('inline entries, spills and cleanup under interleavings (properties that hold)', () => {
  it('end-to-end 1: inline and spilled entries in one range, with cleanups between checkpoints, commit each record once', async () => {
    // One range holds inline entries, then spilled items (budget reached, entryItemsUpTo raised), then inline
    // entries again in a fresh container (whose read fence knows the real bytes). items() queries while
    // entryItemsUpTo > previous cut and merges in offset order; the next range, above the note, skips the Query.
    const settings = settingsFor();
    const warm = processorFor(settings);
    let offset = 0;
    for (let batch = 0; batch < 20; batch++, offset += 3)
      await warm.processEvent(mskEvent(orderRecords(4, offset, 3)));
    const spilled = (await entryItems(settings, 4)).length;
    expect(spilled).toBeGreaterThan(0);
    expect(inlineNames(await fenceOf(settings, 4)).length).toBeGreaterThan(0);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    expect(await entryItems(settings, 4)).toEqual([]);
    expect(inlineNames(await fenceOf(settings, 4))).toEqual([]);
    for (let batch = 0; batch < 3; batch++, offset += 3)
      await processorFor(settings).processEvent(mskEvent(orderRecords(4, offset, 3)));
    expect(inlineNames(await fenceOf(settings, 4))).toHaveLength(3);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#4': range(0, offset) });
    expect(inlineNames(await fenceOf(settings, 4))).toEqual([]);
  });

  it('C2: prepare reading the fence item after it moved past the cut covers exactly the entries at or below the cut', async () => {
    // begin takes the cut (fence 4); before prepare's GetItem of the fence item a processor stages 5..9 inline
    // and then 10..14. prepare sees all three attributes and takes only e:4 (lastOffset <= cut); the next
    // checkpoint takes the rest.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(5, 0, 5)));
    let raced = false;
    const first = await coordinatorFor(settings, {
      hooks: {
        async beforeStep(step) {
          if (step !== 'prepare' || raced) return;
          raced = true;
          await processorFor(settings).processEvent(mskEvent(orderRecords(5, 5, 5)));
          await processorFor(settings).processEvent(mskEvent(orderRecords(5, 10, 5)));
        },
      },
    }).runCheckpoint();
    expect(raced).toBe(true);
    expect(first.status).toBe('committed');
    expect(await committed(settings, 5)).toEqual(range(0, 5));
    expect(inlineNames(await fenceOf(settings, 5))).toEqual(['e:14:output', 'e:9:output']);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#5': range(0, 15) });
  });

  it("P2/C5: cleanup's REMOVE of a committed checkpoint's attributes, racing a processor's inline write to the same fence, loses no new entry", async () => {
    // Cleanup (from the voted plan) is about to send its UpdateItem REMOVE e:9:output on the fence item; the
    // processor stages 10..14 inline on that item first. DynamoDB applies the two updates of one item one after
    // the other: the REMOVE names only attributes at or below the cut, so e:14 stays and the next checkpoint
    // commits it.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(6, 0, 5)));
    await processorFor(settings).processEvent(mskEvent(orderRecords(6, 5, 5)));
    let raced = false;
    const clients = spiedClients(res.clients, 'inlineSpy', async (command, input, call) => {
      const expression = (input as { UpdateExpression?: string }).UpdateExpression ?? '';
      if (!raced && command.startsWith('UpdateItem') && expression.startsWith('REMOVE')) {
        raced = true;
        await processorFor(settings).processEvent(mskEvent(orderRecords(6, 10, 5)));
      }
      return call();
    });
    expect((await coordinatorFor(settings, { clients }).runCheckpoint()).status).toBe('committed');
    expect(raced).toBe(true);
    expect(inlineNames(await fenceOf(settings, 6))).toEqual(['e:14:output']);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#6': range(0, 15) });
    expect(inlineNames(await fenceOf(settings, 6))).toEqual([]);
  });

  it('P5/P3: a crash after the inline write, then the retry: one entry, its object kept by the orphan sweep, each record once', async () => {
    // crashAt('after-transaction'): the fence update with e:9 committed, the invocation dies; the retry is a
    // redelivery (drops 5..9) and writes nothing. The orphan sweep, long past its grace, judges each staged
    // object by entryAt (the inline attribute, else the item): the objects of e:4 (an item) and e:9 (inline) are
    // referenced and kept; only the crashed attempt's objects, if any, are orphans. Then one checkpoint.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(7, 0, 5)));
    const batch = mskEvent(orderRecords(7, 5, 5));
    const crashed = await createProcessor({
      settings,
      clients: res.clients,
      hooks: crashAt('after-transaction'),
    })
      .processEvent(batch)
      .catch((error: unknown) => error);
    expect(crashed).toBeInstanceOf(Error);
    expect((await processorFor(settings).processEvent(batch)).partitions[0]).toMatchObject({
      stagedRows: 0,
      duplicatesByOffset: 5,
    });
    expect(inlineNames(await fenceOf(settings, 7))).toEqual(['e:9:output']);
    const orphans = await sweepOrphans({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      ledger: new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId),
      now: Date.now() + 86_400_000,
      graceMs: 1,
    });
    expect(orphans.filter((key) => key.includes('/partition=7/'))).toEqual([]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#7': range(0, 10) });
  });
});
