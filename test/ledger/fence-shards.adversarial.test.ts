/**
 * Adversarial interleavings of the move of legacy fences (`<pl>#FENCE`) to their shards (`<pl>#FENCE#NN`,
 * shared/ledger/fences.ts), against DynamoDB Local and the S3 server. Each case's comment gives its
 * interleaving and why the property holds.
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { fenceKeys } from '../../shared/ledger/fences.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { createProcessor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { spiedClients } from '../support/claims.ts';
import { gate } from '../support/hooks.ts';
import { asLegacyRelease, ledgerItem } from '../support/legacy-fence.ts';
import { mskEvent, order, orderRecords, type RecordSpec } from '../support/msk.ts';
import { committedOffsetsOf, defaultRows } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rfs');
});

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rfs', overrides);
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/**
 * A processor of the release before the shards stages [first, last] of a partition: its object first, then one
 * transaction of its fence under the legacy key (created on "absent", else moved on "stagedOffset = expected")
 * and its staged entry. Throws what DynamoDB throws (a cancelled transaction when its condition fails).
 */
async function oldReleaseStage(
  settings: Settings,
  partition: number,
  first: number,
  last: number,
  expected: number | 'absent',
): Promise<void> {
  const range = {
    stream: 'output' as const,
    topic: 'orders',
    partition,
    firstOffset: first,
    lastOffset: last,
  };
  const encoded = encodeNdjson(
    defaultRows({ partition, firstOffset: first, lastOffset: last }),
    settings.gzip,
  );
  const attemptId = `old-${first}-${last}`;
  const key = stagedObjectKey(settings.pipelineId, range, attemptId, settings.gzip);
  await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: encoded.body }));
  const legacy = fenceKeys.legacyFence(settings.pipelineId, 'orders', partition);
  const fence =
    expected === 'absent'
      ? {
          Put: {
            TableName: res.table,
            Item: { ...legacy, topic: 'orders', partition, stagedOffset: last, updatedAt: Date.now() },
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        }
      : {
          Update: {
            TableName: res.table,
            Key: legacy,
            UpdateExpression: 'SET stagedOffset = :new, updatedAt = :now',
            ConditionExpression: 'stagedOffset = :expected',
            ExpressionAttributeValues: { ':new': last, ':now': Date.now(), ':expected': expected },
          },
        };
  await doc().send(
    new TransactWriteCommand({
      TransactItems: [
        fence,
        {
          Put: {
            TableName: res.table,
            Item: {
              ...keys.staged(settings.pipelineId, 'orders', partition, last, 'output'),
              pipeline: settings.pipelineId,
              ...range,
              key,
              recordCount: encoded.recordCount,
              bytes: encoded.bytes,
              sha256: encoded.sha256,
              md5: encoded.md5,
              gzip: settings.gzip,
              attemptId,
              stagedAt: Date.now(),
            },
            ConditionExpression: 'attribute_not_exists(pk)',
          },
        },
      ],
    }),
  );
}

/** Committed output offsets of a partition, sorted (duplicates kept: each must appear once). */
const committed = (settings: Settings, partition: number) =>
  committedOffsetsOf(res.clients, settings, partition);

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

/** The partition key of a DynamoDB request's `Key`, whether still in document form or marshalled. */
function pkOf(input: unknown): string | undefined {
  const pk = (input as { Key?: { pk?: unknown } } | undefined)?.Key?.pk;
  if (typeof pk === 'string') return pk;
  const s = (pk as { S?: unknown } | undefined)?.S;
  return typeof s === 'string' ? s : undefined;
}

/** Orders of `count` distinct customers: one keyed-state item each (state key: customer and currency). */
function distinctCustomers(partition: number, from: number, count: number): RecordSpec[] {
  return Array.from({ length: count }, (_, i) => ({
    partition,
    offset: from + i,
    value: order(`dc${partition}-o${from + i}`, `cust-${partition}-${from + i}`, '1.00'),
    headers: { 'idempotency-key': `dc${partition}-o${from + i}` },
  }));
}

describe('the legacy item is one more transaction item than the chunk planner counts', () => {
  it('a new partition whose first chunk would fill 100 items keeps a slot for the moved marker', async () => {
    // Hazard (stall, L2/L3, P6 "the partition never stalls"). shared/processor/chunks.ts plans a chunk of at
    // most `maxTransactionItems` (default 100) items: 1 fence + 1 entry per stream + claims + key-window buckets +
    // state keys. The commit adds the legacy fence item (`legacyItem` in shared/ledger/staging-items.ts) to
    // every transaction that creates a sharded fence: the first staging of EVERY new partition (NO_FENCE → moved
    // marker) and the first staging after the upgrade of every legacy fence. The planner does not count it, so a first chunk of 98
    // records with 98 distinct state keys (1 fence + 1 output entry + 98 state = 100, fine before) is a
    // 101-item TransactWriteItems: DynamoDB refuses it (ValidationException, "Member must have length less than
    // or equal to 100") on every retry, since the retry plans the same chunk: the partition is stopped for good.
    // The same with claimWrite in-transaction (98 keyed records) or with key-window buckets.
    const settings = settingsFor();
    let largest = 0;
    const clients = spiedClients(res.clients, 'fenceSpy', async (command, input, call) => {
      if (command.startsWith('TransactWrite')) {
        const items = (input as { TransactItems?: unknown[] }).TransactItems ?? [];
        largest = Math.max(largest, items.length);
      }
      return call();
    });
    const stopped: unknown[] = [];
    const attempt = () =>
      createProcessor({ settings, clients, observer: { partitionStopped: (error) => stopped.push(error) } })
        .processEvent(mskEvent(distinctCustomers(5, 0, 98)))
        .then((report) => report.partitions[0])
        .catch((error: unknown) => error);
    // The first attempt and the mapping's retry (a fresh container) plan the same 101-item transaction:
    // DynamoDB (Local too) answers "ValidationException: Member must have length less than or equal to 100".
    // Guard: the planner keeps the legacy item's slot; the first attempt stages everything, the retry is a
    // redelivery.
    expect(await attempt()).toMatchObject({ stagedRows: 98, stagedOffset: 97 });
    expect(await attempt()).toMatchObject({ stagedRows: 0, duplicatesByOffset: 98, stagedOffset: 97 });
    expect(stopped).toEqual([]);
    expect(largest).toBeLessThanOrEqual(100);
  });

  it('a legacy fence whose first chunk after the upgrade would fill 100 items moves', async () => {
    // The same hazard, the upgrade case: a partition of the previous release whose next batch has 98 records of
    // distinct state keys. The chunk is planned at 100 items; the move adds the legacy item (101). Every retry
    // fails the same way: the partition stops at the upgrade. The same guard as above.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(6, 0, 3)));
    await asLegacyRelease(res, settings, 6);
    let largest = 0;
    const clients = spiedClients(res.clients, 'fenceSpy', async (command, input, call) => {
      if (command.startsWith('TransactWrite')) {
        largest = Math.max(largest, ((input as { TransactItems?: unknown[] }).TransactItems ?? []).length);
      }
      return call();
    });
    const outcome = await createProcessor({ settings, clients })
      .processEvent(mskEvent(distinctCustomers(6, 3, 98)))
      .then((report) => report.partitions[0])
      .catch((error: unknown) => error);
    expect(outcome).toMatchObject({ stagedRows: 98, stagedOffset: 100 });
    expect(largest).toBeLessThanOrEqual(100);
  });
});

describe('readFence reads the shard, then the legacy key', () => {
  it("a new partition staged by a retry between the zombie's shard read and legacy read: the zombie reads the shard again", async () => {
    // Hazard (false stop, L2 noise; no exactly-once break). StagingLedger.readFence reads the sharded fence,
    // then (absent) the legacy key, and takes a moved legacy item as malformed ("the move creates the sharded
    // fence in the same transaction: it cannot be missing"). But the two reads are not atomic:
    //   A (zombie)  GetItem shard  → absent
    //   B (retry)   stages the same batch: creates the shard fence and the moved marker
    //   A           GetItem legacy → moved marker → MalformedLedgerItemError
    // A is not transient, so A reports partitionStopped (metric PartitionsStopped, alarm) and fails the batch,
    // for the ordinary race of a zombie and its retry on a new partition (or on any partition at its first
    // staging after the upgrade). The mapping's retry then succeeds, but the alarm is false, and a claim-holding
    // reread (FenceMovedError → movedFence → readFence) fails the same way.
    const settings = settingsFor();
    const batch = mskEvent(orderRecords(7, 0, 5));
    const shardPk = fenceKeys.fence(settings.pipelineId, 'orders', 7).pk;
    let fired = false;
    const clients = spiedClients(res.clients, 'fenceSpy', async (command, input, call) => {
      const out = await call();
      if (!fired && command.startsWith('GetItem') && pkOf(input) === shardPk) {
        fired = true;
        await processorFor(settings).processEvent(batch); // B, the retry, between A's two reads
      }
      return out;
    });
    const stopped: unknown[] = [];
    const a = createProcessor({
      settings,
      clients,
      observer: { partitionStopped: (error) => stopped.push(error) },
    });
    const outcome = await a
      .processEvent(batch)
      .then((report) => report.partitions[0])
      .catch((error: unknown) => error);
    expect(fired).toBe(true);
    expect(stopped).toEqual([]);
    expect(outcome).toMatchObject({ stagedRows: 0, duplicatesByOffset: 5, stagedOffset: 4 });
  });

  it('a legacy fence moved by another container between the shard read and the legacy read: the reader reads the shard again', async () => {
    // The same hazard, the upgrade case: partition of the previous release at 9.
    //   A  GetItem shard → absent
    //   B  stages 10..14: shard fence 14, legacy marked moved
    //   A  GetItem legacy → moved → MalformedLedgerItemError, partitionStopped
    // The same guard as above.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(8, 0, 10)));
    await asLegacyRelease(res, settings, 8);
    const batch = mskEvent(orderRecords(8, 10, 5));
    const shardPk = fenceKeys.fence(settings.pipelineId, 'orders', 8).pk;
    let fired = false;
    const clients = spiedClients(res.clients, 'fenceSpy', async (command, input, call) => {
      const out = await call();
      if (!fired && command.startsWith('GetItem') && pkOf(input) === shardPk) {
        fired = true;
        await processorFor(settings).processEvent(batch);
      }
      return out;
    });
    const stopped: unknown[] = [];
    const outcome = await createProcessor({
      settings,
      clients,
      observer: { partitionStopped: (error) => stopped.push(error) },
    })
      .processEvent(batch)
      .then((report) => report.partitions[0])
      .catch((error: unknown) => error);
    expect(fired).toBe(true);
    expect(stopped).toEqual([]);
    expect(outcome).toMatchObject({ stagedRows: 0, duplicatesByOffset: 5, stagedOffset: 14 });
  });
});

describe('the legacy fence and its shards under concurrency and upgrades', () => {
  it('the coordinator reads the legacy key, a fence moves, then it reads the shards: the moved fence is in the cut', async () => {
    // readFenceItems reads the legacy key first; a move committed after that read is in the shard read after it.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(9, 0, 10)));
    await asLegacyRelease(res, settings, 9);
    const legacyPk = fenceKeys.legacyPk(settings.pipelineId);
    let fired = false;
    const clients = spiedClients(res.clients, 'fenceSpy', async (command, input, call) => {
      const out = await call();
      const pk = (input as { ExpressionAttributeValues?: Record<string, unknown> })
        .ExpressionAttributeValues?.[':pk'];
      const pkText = typeof pk === 'string' ? pk : (pk as { S?: string } | undefined)?.S;
      if (!fired && command.startsWith('Query') && pkText === legacyPk) {
        fired = true;
        await processorFor(settings).processEvent(mskEvent(orderRecords(9, 10, 5)));
      }
      return out;
    });
    const ledger = new StagedEntries(clients.dynamodb, res.table, settings.pipelineId);
    expect(await ledger.readFences()).toEqual({ 'orders#9': 14 });
    expect(fired).toBe(true);
    const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
    expect(outcome.status).toBe('committed');
    expect(await committed(settings, 9)).toEqual(range(0, 15));
  });

  it('a processor of the previous release creates the legacy fence while a new one stages the new partition: one wins, each record once', async () => {
    // New A reads NO_FENCE (shard and legacy absent) and waits before its transaction; the old release creates
    // the legacy fence (attribute_not_exists) with 0..4; A's moved-marker condition (absent) fails →
    // FenceMovedError → A reads the legacy fence at 4, drops 0..4, stages 5..9 and moves the fence.
    const settings = settingsFor();
    const aWrote = gate();
    const oldDone = gate();
    const a = processorFor(settings, {
      hooks: {
        async onStep(step, context) {
          if (step === 'after-stage-write' && context.chunk === 0) {
            aWrote.open();
            await oldDone.opened;
          }
        },
      },
    });
    const running = a.processEvent(mskEvent(orderRecords(10, 0, 10)));
    await aWrote.opened;
    await oldReleaseStage(settings, 10, 0, 4, 'absent');
    oldDone.open();
    const report = await running;
    expect(report.partitions[0]).toMatchObject({ stagedRows: 5, duplicatesByOffset: 5, stagedOffset: 9 });
    expect(await ledgerItem(res, fenceKeys.legacyFence(settings.pipelineId, 'orders', 10))).toMatchObject({
      movedFrom: 4,
    });
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    expect(await committed(settings, 10)).toEqual(range(0, 10));
  });

  it('a processor of the previous release stages on the legacy fence while a new one is about to move it: each record once', async () => {
    // A (new) reads the legacy fence at 4 and waits before its transaction; the old release moves it 4 → 9;
    // A's move ("stagedOffset = 4") fails → it reads the legacy fence at 9, drops 5..9, moves the fence with
    // 10..14. The old release, retried afterwards on its own view (9), is refused.
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(11, 0, 5)));
    await asLegacyRelease(res, settings, 11);
    const aWrote = gate();
    const oldDone = gate();
    const a = processorFor(settings, {
      hooks: {
        async onStep(step, context) {
          if (step === 'after-stage-write' && context.chunk === 0) {
            aWrote.open();
            await oldDone.opened;
          }
        },
      },
    });
    const running = a.processEvent(mskEvent(orderRecords(11, 5, 10)));
    await aWrote.opened;
    await oldReleaseStage(settings, 11, 5, 9, 4);
    oldDone.open();
    const report = await running;
    expect(report.partitions[0]).toMatchObject({ stagedRows: 5, duplicatesByOffset: 5, stagedOffset: 14 });
    await expect(oldReleaseStage(settings, 11, 10, 12, 9)).rejects.toThrow();
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    expect(await committed(settings, 11)).toEqual(range(0, 15));
  });

  it('with the legacy item at index 1, a claim taken in the transaction is still named (ClaimsTakenError) and the record dropped as a duplicate', async () => {
    // claimWrite in-transaction: partition 12 (new) claims K; partition 13 (new: fence, moved marker, entry,
    // claim K) fails on the claim at index 3, not on the legacy item: explainCancellation names the holder and
    // the record is a duplicate by key, not a moved fence.
    const settings = settingsFor({ claimWrite: 'in-transaction' });
    const keyed = (partition: number, offset: number): RecordSpec => ({
      partition,
      offset,
      value: order('K'),
      headers: { 'idempotency-key': 'K' },
    });
    await processorFor(settings).processEvent(mskEvent([keyed(12, 0)]));
    const report = await processorFor(settings).processEvent(
      mskEvent([keyed(13, 0), ...orderRecords(13, 1, 2)]),
    );
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 2, stagedOffset: 2 });
  });

  it('a batch of several chunks on a legacy fence moves it with its first chunk and stages the rest on the shard', async () => {
    // Chunk 1 carries fromLegacy (shard absent, legacy = 2 and not moved); setFence then drops `legacy`, so
    // chunk 2 conditions on the shard only ("stagedOffset = last of chunk 1").
    const settings = settingsFor({ maxTransactionItems: 8 });
    await processorFor(settings).processEvent(mskEvent(orderRecords(16, 0, 3)));
    await asLegacyRelease(res, settings, 16);
    const report = await processorFor(settings).processEvent(mskEvent(distinctCustomers(16, 3, 20)));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 20, stagedOffset: 22 });
    expect(report.partitions[0]!.chunks).toBeGreaterThan(2);
    expect(await ledgerItem(res, fenceKeys.legacyFence(settings.pipelineId, 'orders', 16))).toMatchObject({
      movedFrom: 2,
    });
    expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
      'committed',
    );
    expect(await committed(settings, 16)).toEqual(range(0, 23));
  });

  it('partition-scoped keys of the previous release still catch a repeated key in the move to the shard', async () => {
    // idempotencyScope partition: the key window is read at the legacy fence's value (not NO_FENCE), so a key
    // staged before the upgrade is a duplicate in the transaction that moves the fence.
    const settings = settingsFor({ idempotencyScope: 'partition' });
    const keyedAt = (offset: number, key: string): RecordSpec => ({
      partition: 17,
      offset,
      value: order(key),
      headers: { 'idempotency-key': key },
    });
    await processorFor(settings).processEvent(mskEvent([keyedAt(0, 'W1'), keyedAt(1, 'W2')]));
    await asLegacyRelease(res, settings, 17);
    const report = await processorFor(settings).processEvent(mskEvent([keyedAt(2, 'W1'), keyedAt(3, 'W3')]));
    // W1 is caught by the window (a key-conflict dead letter, as without the upgrade: the window's digest is the
    // record's, which differs at another offset), W3 is staged.
    const caught = report.partitions[0]!;
    expect(caught).toMatchObject({ stagedRows: 1, stagedOffset: 3 });
    expect(caught.duplicatesByKey + caught.keyConflicts).toBe(1);
    expect(await ledgerItem(res, fenceKeys.fence(settings.pipelineId, 'orders', 17))).toMatchObject({
      stagedOffset: 3,
    });
  });

  it('eos status shows a new partition once (the moved marker is not a partition) and a moved legacy fence at its shard offset', async () => {
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(orderRecords(14, 0, 3)));
    await processorFor(settings).processEvent(mskEvent(orderRecords(15, 0, 3)));
    await asLegacyRelease(res, settings, 15);
    await processorFor(settings).processEvent(mskEvent(orderRecords(15, 3, 2)));
    const status = await readLedgerStatus({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock: new ManualClock(Date.now()),
    });
    expect(status.partitions.map((p) => [p.partition, p.stagedOffset])).toEqual([
      [14, 2],
      [15, 4],
    ]);
  });
});
