/**
 * Fences spread over shard keys, and the move of fences written before the shards (shared/ledger/fences.ts).
 * Real DynamoDB Local and S3 server; the coordinator runs its real steps (local/coordinator-runner.ts).
 */
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { keyWriteRates } from '../../bench/scale.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { FENCE_SHARDS, fenceKeys, fenceShard } from '../../shared/ledger/fences.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { asLegacyRelease, ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { committedOffsetsOf } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fs');
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);

function settingsFor(): Settings {
  return settingsIn(res, 'fs', { idempotencyKey: 'none' });
}

/** Committed output offsets of a partition, sorted. */
const committed = (settings: Settings, partition: number) =>
  committedOffsetsOf(res.clients, settings, partition);

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

describe('fence shards', () => {
  it('spread 1,000 partitions so that no key takes more than 500 writes a second', () => {
    const rates = keyWriteRates('pl', 'orders', 1000);
    expect(rates.maxWritesPerKeyPerSecond).toBeLessThanOrEqual(500);
    // Consecutive partitions take consecutive shards: 1,000 over 16 is 62 or 63 each.
    expect(rates.maxWritesPerKeyPerSecond).toBe(Math.ceil(1000 / FENCE_SHARDS));
    const shards = new Set(range(0, FENCE_SHARDS).map((p) => fenceShard('orders', p)));
    expect(shards.size).toBe(FENCE_SHARDS);
    expect(fenceShard('orders', 7)).toBe(fenceShard('orders', 7 + FENCE_SHARDS));
  });

  it('a new partition gets a sharded fence and a moved marker under the legacy key', async () => {
    const settings = settingsFor();
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(3, 0, 4)));
    const sharded = await ledgerItem(res, fenceKeys.fence(settings.pipelineId, 'orders', 3));
    expect(sharded).toMatchObject({ stagedOffset: 3, topic: 'orders', partition: 3 });
    const marker = await ledgerItem(res, fenceKeys.legacyFence(settings.pipelineId, 'orders', 3));
    expect(marker).toMatchObject({ movedTo: fenceKeys.fence(settings.pipelineId, 'orders', 3).pk });
    expect(marker?.stagedOffset).toBeUndefined();
    // A processor of the release before the shards would create the legacy fence: refused now.
    await expect(
      doc().send(
        new PutCommand({
          TableName: res.table,
          Item: { ...fenceKeys.legacyFence(settings.pipelineId, 'orders', 3), stagedOffset: 3 },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      ),
    ).rejects.toBeInstanceOf(ConditionalCheckFailedException);
    const ledger = new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId);
    expect(await ledger.readFences()).toEqual({ 'orders#3': 3 });
  });

  it('a legacy fence moves to its shard with the next staging, atomically, and nothing is staged twice', async () => {
    const settings = settingsFor();
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 0, 10)));
    await asLegacyRelease(res, settings, 0);
    const ledger = new StagedEntries(res.clients.dynamodb, res.table, settings.pipelineId);
    expect(await ledger.readFences()).toEqual({ 'orders#0': 9 });
    // Container B reads the legacy fence (a redelivery: nothing staged, the legacy view cached).
    const b = createProcessor({ settings, clients: res.clients });
    const redelivered = await b.processEvent(mskEvent(orderRecords(0, 5, 5)));
    expect(redelivered.partitions[0]).toMatchObject({ duplicatesByOffset: 5, stagedOffset: 9 });
    // Container A stages 10-14: the fence moves to its shard in the same transaction.
    const a = createProcessor({ settings, clients: res.clients });
    const report = await a.processEvent(mskEvent(orderRecords(0, 10, 5)));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 5, stagedOffset: 14 });
    expect(await ledgerItem(res, fenceKeys.fence(settings.pipelineId, 'orders', 0))).toMatchObject({
      stagedOffset: 14,
    });
    const legacy = await ledgerItem(res, fenceKeys.legacyFence(settings.pipelineId, 'orders', 0));
    expect(legacy).toMatchObject({
      movedFrom: 9,
      movedTo: fenceKeys.fence(settings.pipelineId, 'orders', 0).pk,
    });
    expect(legacy?.stagedOffset).toBeUndefined();
    // B, still holding the legacy view, gets 10-14 again: its move is refused, it reads the shard, drops them all.
    const again = await b.processEvent(mskEvent(orderRecords(0, 10, 5)));
    expect(again.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByOffset: 5, stagedOffset: 14 });
    // A processor of the release before the shards (its condition: the legacy offset it read) is refused too.
    await expect(
      doc().send(
        new UpdateCommand({
          TableName: res.table,
          Key: fenceKeys.legacyFence(settings.pipelineId, 'orders', 0),
          UpdateExpression: 'SET stagedOffset = :new',
          ConditionExpression: 'stagedOffset = :expected',
          ExpressionAttributeValues: { ':new': 14, ':expected': 9 },
        }),
      ),
    ).rejects.toBeInstanceOf(ConditionalCheckFailedException);
    expect(await ledger.readFences()).toEqual({ 'orders#0': 14 });
    // The checkpoint covers what the previous release staged and what this one did: each record once.
    const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
    expect(outcome.status).toBe('committed');
    expect(await committed(settings, 0)).toEqual(range(0, 15));
  });

  it('a checkpoint decided before the upgrade and one after it cover every partition, moved or not', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([...orderRecords(1, 0, 3), ...orderRecords(2, 0, 3)]));
    const coordinator = createLocalCoordinator({ settings, clients: res.clients });
    expect((await coordinator.runCheckpoint()).status).toBe('committed');
    // Upgrade: both fences back in the legacy layout; partition 1 moves with new records, partition 2 stays.
    await asLegacyRelease(res, settings, 1);
    await asLegacyRelease(res, settings, 2);
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(1, 3, 2)));
    const status = await readLedgerStatus({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock: new ManualClock(Date.now()),
    });
    expect(status.partitions.map((p) => [p.partition, p.stagedOffset, p.committedOffset])).toEqual([
      [1, 4, 2],
      [2, 2, 2],
    ]);
    expect((await coordinator.runCheckpoint()).status).toBe('committed');
    expect(await committed(settings, 1)).toEqual(range(0, 5));
    expect(await committed(settings, 2)).toEqual(range(0, 3));
    // Partition 2 moves later, and its next records commit too.
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(2, 3, 1)));
    expect((await coordinator.runCheckpoint()).status).toBe('committed');
    expect(await committed(settings, 2)).toEqual(range(0, 4));
  });
});
