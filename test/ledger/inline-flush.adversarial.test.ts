/**
 * The chunk past the inline budget moves the fence's inline entries into entry items in its own staging
 * transaction (shared/ledger/staging-effects.ts `flushedEntries`, shared/processor/entry-placement.ts
 * `placeEntries`), under the interleavings a deployed pipeline meets: prepare, cleanup, the orphan sweep and `eos
 * status` reading the fence before the move and the items after; cleanup's REMOVE before the move; a crash after
 * the move and the mapping's retry; a zombie holding the same batch; entries of the release before the packed
 * format; both streams; one-record chunks with their own templates; a coordinator of the previous release.
 */
import { DynamoDBDocumentClient, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock, systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { sweepOrphans } from '../../shared/coordinator/cleanup/orphans.ts';
import { CLOSED_ATTRIBUTE } from '../../shared/ledger/epochs.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import {
  ENTRY_ITEMS_NOTED_AT,
  ENTRY_ITEMS_UP_TO,
  INLINE_BYTES_BUDGET,
  type InlineItem,
  inlineAttribute,
  inlineBytesIn,
  mayHaveEntryItems,
} from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { templateOf } from '../../shared/ledger/packed-entry.ts';
import {
  type ItemsOptions,
  type OffsetRange,
  StagedEntries,
  type StagedItem,
} from '../../shared/ledger/staged-entries.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { plain, spiedClients } from '../support/claims.ts';
import { crashAt } from '../support/hooks.ts';
import { entryItemsOf, fenceOf as fenceItemOf, inlineNames } from '../support/inline.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsetsOf, expectExactlyOnce, putStagedObject, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('iflx');
});
afterEach(() => {
  vi.restoreAllMocks();
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);
// No state, no idempotency keys: the fence is a chunk's only item, so its entries go inline (`entriesInline`).
const settingsFor = (): Settings =>
  settingsIn(res, 'iflx', { transform: 'passthrough', idempotencyKey: 'none' });
const processorFor = (settings: Settings, extra: Partial<Parameters<typeof createProcessor>[0]> = {}) =>
  createProcessor({ settings, clients: res.clients, ...extra });
const coordinatorFor = (
  settings: Settings,
  extra: Partial<Parameters<typeof createLocalCoordinator>[0]> = {},
) => createLocalCoordinator({ settings, clients: res.clients, ...extra });
const BATCH = 10;

const fenceKey = (settings: Settings, partition: number) =>
  fenceKeys.fence(settings.pipelineId, 'orders', partition);
const fenceOf = (settings: Settings, partition: number) => fenceItemOf(res, settings, partition);

const entryItems = (settings: Settings, partition: number) => entryItemsOf(res, settings, partition);

const committed = (settings: Settings, partition: number) =>
  committedOffsetsOf(res.clients, settings, partition);

/** Stages `count` batches of {@link BATCH} records from `from` with one warm processor; returns the next offset. */
async function stageBatches(settings: Settings, partition: number, from: number, count: number) {
  const processor = processorFor(settings);
  for (let batch = 0; batch < count; batch++)
    await processor.processEvent(mskEvent(orderRecords(partition, from + batch * BATCH, BATCH)));
  return from + count * BATCH;
}

/**
 * Stages batches from `from` (by default {@link BATCH} records each, a warm processor) until one moves the fence's
 * inline entries into items: the fence then holds none after it held some. Returns the next offset.
 */
async function stageUntilMoved(
  settings: Settings,
  partition: number,
  from: number,
  stage?: (offset: number) => Promise<number>,
): Promise<number> {
  const warm = processorFor(settings);
  const next =
    stage ??
    (async (offset: number) => {
      await warm.processEvent(mskEvent(orderRecords(partition, offset, BATCH)));
      return offset + BATCH;
    });
  let offset = from;
  let held = inlineNames(await fenceOf(settings, partition)).length;
  for (let batch = 0; batch < 400; batch++) {
    offset = await next(offset);
    const fence = await fenceOf(settings, partition);
    expect(inlineBytesIn(fence)).toBeLessThanOrEqual(INLINE_BYTES_BUDGET);
    const now = inlineNames(fence).length;
    if (now === 0 && held > 0) return offset;
    held = now;
  }
  throw new Error('the fence never moved its inline entries into items');
}

/** The pk a Query sent through a spied client names (typed or plain). */
const queriedPk = (input: unknown) =>
  plain(
    (input as { ExpressionAttributeValues?: Record<string, unknown> }).ExpressionAttributeValues?.[':pk'],
  );

/** The fence update of a staging transaction that moves inline entries (it removes `#f0`). */
const movesEntries = (command: string, input: unknown) => {
  if (!command.startsWith('TransactWriteItems')) return false;
  const items = (input as { TransactItems?: { Update?: { UpdateExpression?: string } }[] }).TransactItems;
  return (items?.[0]?.Update?.UpdateExpression ?? '').includes('#f0');
};

describe('readers that read the fence before a move and the items after (properties that hold)', () => {
  it("C2: prepare's fence read (BatchGetItem) before a move and its item Query after cover each entry of the cut once", async () => {
    //   0..9 an item (first staging), 10..49 inline: fence 49, mark 9. begin cuts at 49.
    //   prepare reads the fence item, then (before its Query) the processor stages until a chunk moves e:19..e:N
    //   into items. Its Query finds them as items: each read once, as the item.
    const settings = settingsFor();
    const p = 0;
    let next = await stageBatches(settings, p, 0, 5);
    let raced = false;
    const clients = spiedClients(res.clients, 'prepareQuery', async (command, input, call) => {
      if (
        !raced &&
        command.startsWith('Query') &&
        queriedPk(input) === keys.stagedPk(settings.pipelineId, 'orders', p)
      ) {
        raced = true;
        next = await stageUntilMoved(settings, p, next);
      }
      return call();
    });
    expect((await coordinatorFor(settings, { clients }).runCheckpoint()).status).toBe('committed');
    expect(raced).toBe(true);
    expect(await committed(settings, p)).toEqual(range(0, 50));
    // Cleanup deleted the moved items at or below the cut (they were inline when prepare read the fence).
    expect(
      (await entryItems(settings, p)).map((item) => item.lastOffset as number).filter((o) => o <= 49),
    ).toEqual([]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#0': range(0, next) });
    expect(await entryItems(settings, p)).toEqual([]);
    expect(inlineNames(await fenceOf(settings, p))).toEqual([]);
  }, 180_000);

  it('C2/L3: a move between begin and prepare (entries on both sides of the cut) is covered up to the cut, and the second checkpoint cleans the rest', async () => {
    const settings = settingsFor();
    const p = 1;
    let next = await stageBatches(settings, p, 0, 5);
    let raced = false;
    const first = await coordinatorFor(settings, {
      hooks: {
        async beforeStep(step) {
          if (step !== 'prepare' || raced) return;
          raced = true;
          next = await stageUntilMoved(settings, p, next);
        },
      },
    }).runCheckpoint();
    expect(raced).toBe(true);
    expect(first.status).toBe('committed');
    expect(await committed(settings, p)).toEqual(range(0, 50));
    const left = (await entryItems(settings, p))
      .map((item) => item.lastOffset as number)
      .sort((a, b) => a - b);
    expect(left.every((offset) => offset > 49)).toBe(true);
    expect(left.at(-1)).toBe(next - 1);
    // A later inline chunk: the mark stays at the move's offset, noted at the new one; the template is shared.
    next = await stageBatches(settings, p, next, 1);
    const fence = await fenceOf(settings, p);
    expect(inlineNames(fence)).toEqual([inlineAttribute(next - 1, 'output')]);
    expect(fence).toMatchObject({ [ENTRY_ITEMS_UP_TO]: next - 11, [ENTRY_ITEMS_NOTED_AT]: next - 1 });
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#1': range(0, next) });
    expect(await entryItems(settings, p)).toEqual([]);
    expect(inlineNames(await fenceOf(settings, p))).toEqual([]);
  }, 180_000);

  it('C5/L3: a move just before cleanup REMOVEs the committed attributes: cleanup deletes their items instead, none leaks', async () => {
    const settings = settingsFor();
    const p = 2;
    let next = await stageBatches(settings, p, 0, 5);
    let raced = false;
    const clients = spiedClients(res.clients, 'cleanupRemove', async (command, input, call) => {
      const expression = (input as { UpdateExpression?: string }).UpdateExpression ?? '';
      if (!raced && command.startsWith('UpdateItem') && expression.startsWith('REMOVE')) {
        raced = true;
        next = await stageUntilMoved(settings, p, next);
      }
      return call();
    });
    expect((await coordinatorFor(settings, { clients }).runCheckpoint()).status).toBe('committed');
    expect(raced).toBe(true);
    expect(await committed(settings, p)).toEqual(range(0, 50));
    const left = (await entryItems(settings, p)).map((item) => item.lastOffset as number);
    expect(left.filter((offset) => offset <= 49)).toEqual([]);
    expect(left.length).toBeGreaterThan(0);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#2': range(0, next) });
    expect(await entryItems(settings, p)).toEqual([]);
  }, 180_000);

  it('P2/P3: the orphan sweep judging objects while a move runs keeps every referenced object', async () => {
    const settings = settingsFor();
    const p = 3;
    let next = await stageBatches(settings, p, 0, 8);
    let raced = false;
    const clients = spiedClients(res.clients, 'sweepEntryAt', async (command, input, call) => {
      const out = await call();
      const projection = (input as { ProjectionExpression?: string }).ProjectionExpression ?? '';
      // Right after entryAt read a fence (entry found inline or not), before its item read.
      if (!raced && command.startsWith('GetItem') && projection.includes('#entry')) {
        raced = true;
        next = await stageUntilMoved(settings, p, next);
      }
      return out;
    });
    const sweep = (ledgerClients: typeof res.clients) =>
      sweepOrphans({
        s3: res.clients.s3,
        bucket: settings.bucket,
        pipeline: settings.pipelineId,
        ledger: new StagedEntries(ledgerClients.dynamodb, res.table, settings.pipelineId),
        now: Date.now() + 86_400_000,
        graceMs: 1,
      });
    const mine = (orphans: string[]) =>
      orphans.filter((key) => key.includes(`/partition=${p}/`) && key.includes(settings.pipelineId));
    expect(mine(await sweep(clients))).toEqual([]);
    expect(raced).toBe(true);
    expect(mine(await sweep(res.clients))).toEqual([]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#3': range(0, next) });
  }, 180_000);

  it("eos status: a move between the status's fence read and its item Query counts each uncommitted file once", async () => {
    const settings = settingsFor();
    const p = 4;
    let next = await stageBatches(settings, p, 0, 5);
    let raced = false;
    const clients = spiedClients(res.clients, 'statusQuery', async (command, input, call) => {
      if (
        !raced &&
        command.startsWith('Query') &&
        queriedPk(input) === keys.stagedPk(settings.pipelineId, 'orders', p)
      ) {
        raced = true;
        next = await stageUntilMoved(settings, p, next);
      }
      return call();
    });
    const status = await readLedgerStatus({
      dynamodb: clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock: systemClock,
    });
    expect(raced).toBe(true);
    const partition = status.partitions.find((s) => s.topic === 'orders' && s.partition === p)!;
    // The fence as read said 49; the items queried after hold every entry up to the move's chunk.
    expect(partition.uncommittedRecords).toBe(next);
    expect(partition.uncommittedFiles.output).toBe(next / BATCH);
  }, 180_000);
});

describe('the move under faults and other writers (properties that hold)', () => {
  it("P2: cleanup's REMOVE between the mover's fence read and its transaction fails the move; the chunk is planned again, nothing lost or leaked", async () => {
    const settings = settingsFor();
    const p = 5;
    let checkpointed: string | undefined;
    let cutAt = -1;
    const clients = spiedClients(res.clients, 'moverTxn', async (command, input, call) => {
      if (checkpointed === undefined && movesEntries(command, input)) {
        cutAt = (await fenceOf(settings, p)).stagedOffset as number;
        checkpointed = (await coordinatorFor(settings).runCheckpoint()).status;
      }
      return call();
    });
    const staging = processorFor(settings, { clients });
    let next = 0;
    for (let batch = 0; batch < 200 && checkpointed === undefined; batch++, next += BATCH)
      await staging.processEvent(mskEvent(orderRecords(p, next, BATCH)));
    expect(checkpointed).toBe('committed');
    expect(await committed(settings, p)).toEqual(range(0, cutAt + 1));
    // The racing chunk went inline into the emptied fence; no item was written for the removed entries.
    expect(inlineNames(await fenceOf(settings, p))).toEqual([inlineAttribute(next - 1, 'output')]);
    expect(await entryItems(settings, p)).toEqual([]);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#5': range(0, next) });
  }, 180_000);

  it('P5: a crash after every staging transaction (the move included) and the mapping’s retry: each entry once, each record committed once', async () => {
    const settings = settingsFor();
    const p = 6;
    const next = await stageUntilMoved(settings, p, 0, async (offset) => {
      const batch = mskEvent(orderRecords(p, offset, BATCH));
      const crashed = await processorFor(settings, { hooks: crashAt('after-transaction') })
        .processEvent(batch)
        .catch((error: unknown) => error);
      expect(crashed).toBeInstanceOf(Error);
      expect((await processorFor(settings).processEvent(batch)).partitions[0]).toMatchObject({
        stagedRows: 0,
        duplicatesByOffset: BATCH,
      });
      return offset + BATCH;
    });
    const items = (await entryItems(settings, p))
      .map((item) => item.lastOffset as number)
      .sort((a, b) => a - b);
    expect(items).toEqual(Array.from({ length: next / BATCH }, (_, b) => b * BATCH + BATCH - 1));
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#6': range(0, next) });
    expect(await entryItems(settings, p)).toEqual([]);
  }, 180_000);

  it('P2: a zombie holding the batch that moves, and the live retry moving first: applied once', async () => {
    const settings = settingsFor();
    const p = 7;
    let current: RecordSpec[] = [];
    let raced = false;
    const clients = spiedClients(res.clients, 'zombieTxn', async (command, input, call) => {
      if (!raced && movesEntries(command, input)) {
        raced = true;
        await processorFor(settings).processEvent(mskEvent(current));
      }
      return call();
    });
    const zombie = processorFor(settings, { clients });
    let next = 0;
    for (let batch = 0; batch < 200 && !raced; batch++, next += BATCH) {
      current = orderRecords(p, next, BATCH);
      await zombie.processEvent(mskEvent(current));
    }
    expect(raced).toBe(true);
    // The zombie's move failed on the fence; what it read was moved once, by the live invocation.
    expect(inlineNames(await fenceOf(settings, p))).toEqual([]);
    const items = (await entryItems(settings, p))
      .map((item) => item.lastOffset as number)
      .sort((a, b) => a - b);
    expect(items).toEqual(Array.from({ length: next / BATCH }, (_, b) => b * BATCH + BATCH - 1));
    next = await stageBatches(settings, p, next, 2);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#7': range(0, next) });
  }, 180_000);

  it('end-to-end 1: an inline entry of the release before the packed format (a map) is moved into an item naming its object, and committed once', async () => {
    const settings = settingsFor();
    const p = 8;
    let next = await stageBatches(settings, p, 0, 2);
    // The previous release stages 20..29 with its entry inline as a map of named fields (template in the map).
    const entry = await putStagedObject(
      res.clients,
      settings,
      { partition: p, firstOffset: 20, lastOffset: 29 },
      'prev-20-29',
    );
    await doc().send(
      new UpdateCommand({
        TableName: res.table,
        Key: fenceKey(settings, p),
        UpdateExpression:
          'SET stagedOffset = :new, updatedAt = :now, #itemsUpTo = :itemsUpTo, #notedAt = :new, #e0 = :e0',
        ConditionExpression: 'stagedOffset = :expected AND attribute_not_exists(#closed)',
        ExpressionAttributeNames: {
          '#closed': CLOSED_ATTRIBUTE,
          '#itemsUpTo': ENTRY_ITEMS_UP_TO,
          '#notedAt': ENTRY_ITEMS_NOTED_AT,
          '#e0': inlineAttribute(29, 'output'),
        },
        ExpressionAttributeValues: {
          ':new': 29,
          ':now': Date.now(),
          ':itemsUpTo': 9,
          ':expected': 19,
          ':e0': {
            f: entry.firstOffset,
            c: entry.recordCount,
            b: entry.bytes,
            h: Buffer.from(entry.sha256, 'hex'),
            m: Buffer.from(entry.md5 ?? '', 'hex'),
            g: entry.gzip,
            a: entry.attemptId,
            t: entry.stagedAt,
            k: templateOf(entry),
          },
        },
      }),
    );
    next = await stageUntilMoved(settings, 8, 30);
    const moved = (await entryItems(settings, p)).find((item) => item.lastOffset === 29);
    expect(moved).toMatchObject({ key: entry.key, sha256: entry.sha256, firstOffset: 20, recordCount: 10 });
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    await expectExactlyOnce(res.clients, settings, { 'orders#8': range(0, next) });
  }, 180_000);

  it('end-to-end 1 / L3: one-record chunks with an output or a dead-letter entry each (own templates, ~140 bytes) move twice within DynamoDB limits; both streams committed once', async () => {
    const rejectEveryThird: Transform = {
      name: 'reject-every-third',
      apply(record) {
        if (record.offset % 3 === 0) return { kind: 'poison', error: 'rejected' };
        return { kind: 'ok', rows: [{ offset: record.offset }], state: [] };
      },
    };
    const settings = settingsFor();
    const p = 9;
    const warm = processorFor(settings, { transform: rejectEveryThird });
    const one = async (offset: number) => {
      await warm.processEvent(mskEvent(orderRecords(p, offset, 1)));
      return offset + 1;
    };
    let next = await stageUntilMoved(settings, p, 0, one);
    next = await stageUntilMoved(settings, p, next, one);
    const fence = await fenceOf(settings, p);
    expect(inlineNames(fence)).toEqual([]);
    expect(await entryItems(settings, p)).toHaveLength(next);
    expect((await coordinatorFor(settings).runCheckpoint()).status).toBe('committed');
    const all = range(0, next);
    await expectExactlyOnce(res.clients, settings, { 'orders#9': all.filter((o) => o % 3 !== 0) });
    await expectExactlyOnce(
      res.clients,
      settings,
      { 'orders#9': all.filter((o) => o % 3 === 0) },
      'deadletter',
    );
    expect(await entryItems(settings, p)).toEqual([]);
  }, 240_000);
});

/** An inline entry as a StagedItem, as the previous release's reader made it. */
function fromInline(stagedPk: string, read: InlineItem): StagedItem {
  const at = { pk: stagedPk, sk: read.sk };
  return read.kind === 'entry'
    ? { kind: 'entry', at, inline: read.at, entry: read.entry }
    : { kind: 'rejected', at, inline: read.at, reason: read.reason, item: read.item };
}

/**
 * `StagedEntries.items` of the release before this one (9783b44): the fence's inline entries merged with the entry
 * items, with no rule for an entry found in both places (that release's processors never moved one).
 */
async function* previousReleaseItems(
  this: StagedEntries,
  topic: string,
  partition: number,
  span: OffsetRange,
  { pageSize, fence: known }: ItemsOptions = {},
): AsyncGenerator<StagedItem> {
  const self = this as unknown as {
    pipeline: string;
    fenceItem(topic: string, partition: number): Promise<Record<string, unknown> | undefined>;
    inlineOf(
      fence: Record<string, unknown>,
      topic: string,
      partition: number,
      range: OffsetRange,
    ): InlineItem[];
    entryItems(
      topic: string,
      partition: number,
      range: OffsetRange,
      pageSize?: number,
    ): AsyncGenerator<StagedItem>;
  };
  if (span.upTo <= span.above) return;
  const fence = known === undefined ? await self.fenceItem(topic, partition) : (known ?? undefined);
  const inline = fence === undefined ? [] : self.inlineOf(fence, topic, partition, span);
  const pk = keys.stagedPk(self.pipeline, topic, partition);
  let next = 0;
  if (mayHaveEntryItems(fence, span.above)) {
    for await (const item of self.entryItems(topic, partition, span, pageSize)) {
      while (next < inline.length && inline[next]!.sk < item.at.sk) yield fromInline(pk, inline[next++]!);
      yield item;
    }
  }
  while (next < inline.length) yield fromInline(pk, inline[next++]!);
}

describe('a rolling deploy: a coordinator of the previous release beside a processor that moves', () => {
  it("end-to-end 1 / C4: while a coordinator of the previous release may run, a deployed processor moves no entry, so that release's prepare, planning while chunks are staged, commits each record once", async () => {
    // The previous release's reader (modelled by `previousReleaseItems`: no rule for one entry in both places, its
    // processors never moved one) would read an entry moved between its fence read and its item Query twice, and
    // vote a plan promote refuses for good. The move comes only with inline entries, and a deployed processor puts
    // entries inline only a grace period after this release's begin noted `compactFenceSince` on the head
    // (`processor/inline-gate.ts`): the previous release's begin never notes it.
    const settings = settingsFor();
    const p = 10;
    const clock = new ManualClock(Date.now());
    const deployed = processorFor(settings, { clock, inlineEntries: 'after-coordinator-upgrade' });
    const stage = async (offset: number) => {
      await deployed.processEvent(mskEvent(orderRecords(p, offset, BATCH)));
      return offset + BATCH;
    };
    let next = 0;
    while (next < 40 * BATCH) next = await stage(next);
    expect(inlineNames(await fenceOf(settings, p))).toEqual([]);
    expect(await entryItems(settings, p)).toHaveLength(40);
    vi.spyOn(StagedEntries.prototype, 'items').mockImplementation(previousReleaseItems);
    let raced = false;
    const clients = spiedClients(res.clients, 'previousPrepare', async (command, input, call) => {
      if (
        !raced &&
        command.startsWith('Query') &&
        queriedPk(input) === keys.stagedPk(settings.pipelineId, 'orders', p)
      ) {
        raced = true;
        for (let batch = 0; batch < 10; batch++) next = await stage(next);
      }
      return call();
    });
    const first = await coordinatorFor(settings, { clients, clock }).runCheckpoint();
    expect(raced).toBe(true);
    expect(first.status).toBe('committed');
    vi.restoreAllMocks();
    expect((await coordinatorFor(settings, { clock }).runCheckpoint()).status).toBe('committed');
    expect(await committed(settings, p)).toEqual(range(0, next));
  }, 180_000);
});
