/**
 * A chunk whose entries do not fit the inline budget moves the fence's inline entries into entry items in its own
 * transaction (shared/ledger/staging-transaction.ts `flushedEntries`), so the chunks after it write a small fence
 * again: the entries end up as items, each once, the fence holds none, every record is committed once, and a
 * reader that read the fence before the move and the items after reads each entry once.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { INLINE_BYTES_BUDGET, inlineBytesIn } from '../../shared/ledger/inline-entries.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('flush');
});

const settingsFor = (): Settings =>
  settingsIn(res, 'fl', { transform: 'passthrough', idempotencyKey: 'none' });
const inlineNames = (fence: Record<string, unknown>) =>
  Object.keys(fence).filter((name) => name.startsWith('e:'));
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
});
