/**
 * Epochs (shared/ledger/epochs.ts): a partition stopped because its offsets went backwards (a recreated
 * topic) is resumed by opening a new epoch; nothing of the old epoch is lost or rewritten, the new epoch's records
 * are committed once each under their own lane, and a processor still holding the old epoch stages nothing there.
 * Real DynamoDB Local and S3 server; the coordinator runs its real steps (local/coordinator-runner.ts).
 */
import { DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { OffsetsWentBackwardsError } from '../../shared/errors.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { laneOf, parseLane } from '../../shared/ledger/epochs.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { EpochChangedError } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { formatStatus } from '../../shared/status/format.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsets, committedRangesByLane, range } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('ep');
});

const clock = () => new ManualClock(1_764_374_400_000);

function settingsFor(overrides: Parameters<typeof settingsIn>[2] = {}): Settings {
  return settingsIn(res, 'ep', { idempotencyKey: 'none', ...overrides });
}

/** Records of a recreated topic: the same offsets, other payloads. */
function secondGeneration(partition: number, from: number, count: number): RecordSpec[] {
  return orderRecords(partition, from, count, `gen2-p${partition}`);
}

/** Committed output offsets per lane (`orders#0`, `orders~1#0`, …), from the manifests' files. */
const committedByLane = (settings: Settings) => committedRangesByLane(res.clients, settings);

async function checkpoint(settings: Settings): Promise<void> {
  const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(outcome.status).toBe('committed');
}

describe('lanes', () => {
  it('name epoch 0 as the topic and epoch N as <topic>~N, never a Kafka topic name', () => {
    expect(laneOf('orders', 0)).toBe('orders');
    expect(laneOf('orders', 3)).toBe('orders~3');
    expect(parseLane('orders~3')).toEqual({ topic: 'orders', epoch: 3 });
    expect(parseLane('orders')).toEqual({ topic: 'orders', epoch: 0 });
    expect(parseLane('orders~0')).toBeUndefined();
    expect(parseLane('orders~01')).toBeUndefined();
    expect(() => laneOf('orders', -1)).toThrow(RangeError);
  });
});

describe('a recreated topic', () => {
  it('stops the partition with a stop record; a new epoch resumes it; both epochs commit exactly once', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients, clock: clock() });
    await processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await checkpoint(settings);
    // Epoch 0 stages 10..14 that no checkpoint has committed yet when the topic is recreated.
    await processor.processEvent(mskEvent(orderRecords(0, 10, 5)));

    const recreated = mskEvent(secondGeneration(0, 0, 6));
    await expect(processor.processEvent(recreated)).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, clock());
    const [view] = await epochs.partitions();
    expect(view).toMatchObject({ topic: 'orders', partition: 0, epoch: 0 });
    expect(view!.epochs[0]!.stop).toMatchObject({ fence: 14, firstOffset: 0, lastOffset: 5 });
    // The mapping retries: still stopped; the second invocation's sighting confirms the stop.
    await expect(processor.processEvent(recreated)).rejects.toBeInstanceOf(OffsetsWentBackwardsError);

    expect(await epochs.startNew('orders', 0)).toEqual({ kind: 'opened', epoch: 1, closedFence: 14 });
    // Run again (a crash after the write, or an operator's second try): nothing more happens.
    expect(await epochs.startNew('orders', 0)).toEqual({ kind: 'fresh', epoch: 1 });

    // The same (warm) processor: its cached epoch-0 fence is stale; the retry stages in epoch 1.
    const report = await processor.processEvent(recreated);
    expect(report.partitions[0]).toMatchObject({ topic: 'orders~1', stagedRows: 6, stagedOffset: 5 });
    await processor.processEvent(mskEvent(secondGeneration(0, 6, 4)));
    await checkpoint(settings);

    expect(await committedByLane(settings)).toEqual({
      'orders#0': range(0, 15),
      'orders~1#0': range(0, 10),
    });
    const rows = await committedOffsets(res.clients, settings);
    // Rows name their record's topic; the epoch-1 rows are the second generation's.
    expect(rows.every((row) => row.partition === 'orders#0')).toBe(true);
    const gen2 = rows.filter((row) => String((row.row as { orderId?: string }).orderId).startsWith('gen2'));
    expect(gen2.map((row) => row.offset).sort((a, b) => a - b)).toEqual(range(0, 10));
    const result = await verifySink({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    });
    expect(result.problems).toEqual([]);
    expect(result.rows.output).toBe(25);
    const status = formatStatus({
      ledger: await readLedgerStatus({
        dynamodb: res.clients.dynamodb,
        table: res.table,
        pipeline: settings.pipelineId,
        clock: clock(),
      }),
    });
    expect(status).toMatch(/^ {2}orders~1 +0 +9 +9 /m);
    expect(status).toMatch(/<topic>~N is epoch N of the topic/);
    const after = (await epochs.partitions())[0]!;
    expect(after.epoch).toBe(1);
    expect(after.epochs.map((e) => [e.lane, e.stagedOffset, e.closedAt !== undefined])).toEqual([
      ['orders', 14, true],
      ['orders~1', 9, false],
    ]);
  });

  it('refuses a partition that is not stopped unless forced; a forced switch opens the epoch', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients, clock: clock() });
    await processor.processEvent(mskEvent(orderRecords(1, 0, 5)));
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, clock());
    expect(await epochs.startNew('orders', 1)).toEqual({ kind: 'not-stopped', epoch: 0, stagedOffset: 4 });
    expect(await epochs.startNew('orders', 9)).toEqual({ kind: 'fresh', epoch: 0 });
    expect(await epochs.startNew('orders', 1, { force: true })).toEqual({
      kind: 'opened',
      epoch: 1,
      closedFence: 4,
    });
  });

  it('a processor still holding the closed epoch stages nothing there; its retry stages in the new one', async () => {
    const settings = settingsFor();
    const first = createProcessor({ settings, clients: res.clients, clock: clock() });
    await first.processEvent(mskEvent(orderRecords(2, 0, 5)));
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, clock());
    expect((await epochs.startNew('orders', 2, { force: true })).kind).toBe('opened');
    // `first` still caches the epoch-0 fence at 4: a batch above it would stage in epoch 0 without the condition.
    const next = mskEvent(orderRecords(2, 5, 3));
    await expect(first.processEvent(next)).rejects.toBeInstanceOf(EpochChangedError);
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    const { Item } = await doc.send(
      new GetCommand({ TableName: res.table, Key: fenceKeys.fence(settings.pipelineId, 'orders', 2) }),
    );
    expect(Item?.stagedOffset).toBe(4);
    const report = await first.processEvent(next);
    expect(report.partitions[0]).toMatchObject({ topic: 'orders~1', stagedRows: 3, stagedOffset: 7 });
    await checkpoint(settings);
    expect(await committedByLane(settings)).toEqual({ 'orders#2': range(0, 5), 'orders~1#2': range(5, 3) });
  });

  it('epoch 1 to 2: the root moves on and lane 1 closes in one transaction', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients, clock: clock() });
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, clock());
    await processor.processEvent(mskEvent(orderRecords(3, 0, 4)));
    expect((await epochs.startNew('orders', 3, { force: true })).kind).toBe('opened');
    await processor.processEvent(mskEvent(secondGeneration(3, 0, 4)));
    // The mapping retries the refused batch: the second invocation confirms the stop.
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(processor.processEvent(mskEvent(orderRecords(3, 0, 2, 'gen3')))).rejects.toBeInstanceOf(
        OffsetsWentBackwardsError,
      );
    }
    expect(await epochs.startNew('orders', 3)).toEqual({ kind: 'opened', epoch: 2, closedFence: 3 });
    await processor.processEvent(mskEvent(orderRecords(3, 0, 2, 'gen3')));
    await checkpoint(settings);
    expect(await committedByLane(settings)).toEqual({
      'orders#3': range(0, 4),
      'orders~1#3': range(0, 4),
      'orders~2#3': range(0, 2),
    });
    const result = await verifySink({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    });
    expect(result.problems).toEqual([]);
  });
});
