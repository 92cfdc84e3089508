/**
 * A chunk whose entries do not fit the inline budget moves the fence's inline entries into entry items in its own
 * transaction (shared/ledger/staging-effects.ts `flushedEntries`), so the chunks after it write a small fence
 * again: the entries end up as items, each once, the fence holds none, every record is committed once, and a
 * reader that read the fence before the move and the items after reads each entry once.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { INLINE_BYTES_BUDGET, inlineBytesIn, inlineItemsOf } from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { inlineNames } from '../support/inline.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('flush');
});

const settingsFor = (): Settings =>
  settingsIn(res, 'fl', { transform: 'passthrough', idempotencyKey: 'none' });
const BATCH = 10;

/** Stages batches of {@link BATCH} records on `partition` until the fence holds no inline entry after some did. */
async function stageUntilFlushed(settings: Settings, partition: number) {
  const processor = createProcessor({ settings, clients: res.clients });
  const key = fenceKeys.fence(settings.pipelineId, 'orders', partition);
  let most = 0;
  for (let batch = 0; batch < 200; batch++) {
    await processor.processEvent(mskEvent(orderRecords(partition, batch * BATCH, BATCH)));
    const fence = (await ledgerItem(res, key))!;
    const held = inlineNames(fence).length;
    if (held === 0 && most > 0) return { batches: batch + 1, most, key, processor };
    expect(inlineBytesIn(fence)).toBeLessThanOrEqual(INLINE_BYTES_BUDGET);
    most = Math.max(most, held);
  }
  throw new Error('the fence never moved its inline entries into items');
}

async function entryItemOffsets(settings: Settings, partition: number): Promise<number[]> {
  const entries = new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId);
  const found: number[] = [];
  for await (const item of entries.items('orders', partition, { above: -1, upTo: Number.MAX_SAFE_INTEGER })) {
    expect(item.kind).toBe('entry');
    if (item.kind === 'entry') found.push(item.entry.lastOffset);
  }
  return found;
}

describe('a chunk past the inline budget', () => {
  it('moves the fence’s inline entries into items with its own, and the next chunk is inline in a small fence', async () => {
    const settings = settingsFor();
    const { batches, most, key, processor } = await stageUntilFlushed(settings, 0);
    expect(most).toBeGreaterThan(20);
    // Every batch's entry is there once, whichever place it lies in: the first (a transaction) and the moved ones
    // as items, none lost, none twice.
    const expected = Array.from({ length: batches }, (_, b) => b * BATCH + BATCH - 1);
    expect(await entryItemOffsets(settings, 0)).toEqual(expected);
    await processor.processEvent(mskEvent(orderRecords(0, batches * BATCH, BATCH)));
    const fence = (await ledgerItem(res, key))!;
    expect(inlineNames(fence)).toEqual([`e:${(batches + 1) * BATCH - 1}:output`]);
    expect(await entryItemOffsets(settings, 0)).toEqual([...expected, (batches + 1) * BATCH - 1]);
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    await expectExactlyOnce(res.clients, settings, { 'orders#0': range(0, (batches + 1) * BATCH) });
    // Cleanup removed what the checkpoint covered, items and attributes alike.
    expect(inlineNames((await ledgerItem(res, key))!)).toEqual([]);
    expect(await entryItemOffsets(settings, 0)).toEqual([]);
  }, 120_000);

  it('a reader that read the fence before the move and queries the items after reads each entry once', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 1);
    let batch = 0;
    let before: Record<string, unknown> = {};
    // Up to the last chunk that still fits: the fence as a reader would have read it just before the move.
    for (; batch < 200; batch++) {
      await processor.processEvent(mskEvent(orderRecords(1, batch * BATCH, BATCH)));
      const fence = (await ledgerItem(res, key))!;
      if (inlineNames(fence).length === 0 && batch > 1) break;
      before = fence;
    }
    expect(inlineNames(before).length).toBeGreaterThan(20);
    const entries = new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId);
    const read: string[] = [];
    const upTo = before.stagedOffset as number;
    for await (const item of entries.items('orders', 1, { above: -1, upTo }, { fence: before }))
      read.push(item.at.sk);
    expect(read).toEqual([...new Set(read)]);
    expect(read).toHaveLength((upTo + 1) / BATCH);
    expect(read.at(-1)).toBe(keys.staged(settings.pipelineId, 'orders', 1, upTo, 'output').sk);
  }, 120_000);

  it('an entry item where the fence holds the same entry inline (a ledger this code did not write) refuses the move loudly, not again and again', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 2);
    // Up to the last chunk that still fits the budget.
    let batch = 0;
    for (; batch < 200; batch++) {
      await processor.processEvent(mskEvent(orderRecords(2, batch * BATCH, BATCH)));
      if (inlineBytesIn((await ledgerItem(res, key))!) + 150 > INLINE_BYTES_BUDGET) break;
    }
    const fence = (await ledgerItem(res, key))!;
    const where = { pipeline: settings.pipelineId, topic: 'orders', partition: 2, fence: key };
    const [first] = inlineItemsOf(fence, where, { above: -1, upTo: Number.MAX_SAFE_INTEGER });
    if (first?.kind !== 'entry') throw new Error('no inline entry');
    const at = keys.staged(settings.pipelineId, 'orders', 2, first.entry.lastOffset, first.entry.stream);
    await ledgerDocumentClient(res.clients.dynamodb).send(
      new PutCommand({ TableName: res.table, Item: { ...at, ...first.entry } }),
    );
    // The batches after it: inline while they fit, then the one that would move the entries is refused.
    let refused: unknown;
    for (let more = batch + 1; refused === undefined && more < batch + 10; more++) {
      refused = await processor.processEvent(mskEvent(orderRecords(2, more * BATCH, BATCH))).then(
        () => undefined,
        (error: unknown) => error,
      );
    }
    expect(String(refused)).toMatch(/both inline in the fence and an item of its own/);
    // Nothing moved: the fence still holds the entry the stray item copies, and every one it held before.
    const all = { above: -1, upTo: Number.MAX_SAFE_INTEGER };
    const after = inlineItemsOf((await ledgerItem(res, key))!, where, all).map((item) => item.sk);
    expect(after).toEqual(expect.arrayContaining(inlineItemsOf(fence, where, all).map((item) => item.sk)));
  }, 120_000);

  it('an item at an inline entry’s sort key that names another object does not hide the inline entry', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    for (let batch = 1; batch < 4; batch++)
      await processor.processEvent(mskEvent(orderRecords(3, batch * BATCH, BATCH)));
    const key = fenceKeys.fence(settings.pipelineId, 'orders', 3);
    const fence = (await ledgerItem(res, key))!;
    const where = { pipeline: settings.pipelineId, topic: 'orders', partition: 3, fence: key };
    const inline = inlineItemsOf(fence, where, { above: -1, upTo: Number.MAX_SAFE_INTEGER });
    const last = inline.at(-1);
    if (last?.kind !== 'entry') throw new Error('no inline entry');
    const at = keys.staged(settings.pipelineId, 'orders', 3, last.entry.lastOffset, last.entry.stream);
    const stray = { ...last.entry, key: `${last.entry.key}.other`, sha256: 'ef'.repeat(32) };
    await ledgerDocumentClient(res.clients.dynamodb).send(
      new PutCommand({ TableName: res.table, Item: { ...at, ...stray } }),
    );
    // A fence whose mark says items may lie there (as after a move) is read: both come back, for prepare to refuse.
    const entries = new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId);
    const read: string[] = [];
    const marked = { ...fence, entryItemsUpTo: fence.stagedOffset, entryItemsNotedAt: fence.stagedOffset };
    for await (const item of entries.items(
      'orders',
      3,
      { above: -1, upTo: Number.MAX_SAFE_INTEGER },
      { fence: marked },
    ))
      if (item.at.sk === at.sk) read.push(item.kind === 'entry' ? item.entry.key : item.kind);
    expect(read.sort()).toEqual([last.entry.key, stray.key].sort());
  }, 120_000);
});
