/**
 * Partition-scoped idempotency (`idempotencyScope: partition`): keys remembered in a window of buckets
 * owned by the partition's staging transactions (shared/ledger/key-window.ts). Real DynamoDB Local and S3 server.
 */
import { DeleteCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { BUCKET_ENTRIES } from '../../shared/ledger/key-window.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { createProcessor, type ProcessorDeps, type ProcessorStep } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { keyWindowBuckets, stagedOutputCounts } from '../support/ledger.ts';
import { mskEvent, order, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('kp');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'kp', { idempotencyScope: 'partition', ...overrides });
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/** A record whose idempotency key (header) is `key`; `variant` changes its payload (a conflict, not a duplicate). */
const keyed = (partition: number, offset: number, key: string, variant = ''): RecordSpec => ({
  partition,
  offset,
  key,
  // A customer per key: each record's state is an item of its own, so small transactions cut chunks.
  value: order(key, `cust-${key}`, variant ? '99.00' : '10.00'),
  headers: { 'idempotency-key': key },
});

/** Clients that count the commands they send, by name. */
function countingClients(): { clients: AwsClients; commands: string[] } {
  const clients = createAwsClients();
  const commands: string[] = [];
  for (const client of [clients.dynamodb, clients.s3] as const) {
    (client.middlewareStack as AwsClients['dynamodb']['middlewareStack']).add(
      (next, context) => async (args) => {
        commands.push(String(context.commandName));
        return next(args);
      },
      { step: 'initialize', name: 'countCommands' },
    );
  }
  return { clients, commands };
}

/** Output rows per orderId over everything the ledger references (staged output). */
function outputCounts(settings: Settings): Promise<Record<string, number>> {
  return stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
}

/** The partition's key-window buckets as stored: seq and how many keys each holds. */
function buckets(settings: Settings, partition = 0): Promise<Array<[number, number]>> {
  return keyWindowBuckets(res.clients, res.table, settings.pipelineId, 'orders', partition);
}

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

describe('partition-scoped idempotency', () => {
  it('drops a later duplicate, dead-letters a reused key with another payload, and costs two calls per batch', async () => {
    const settings = settingsFor();
    const { clients, commands } = countingClients();
    const processor = processorFor(settings, { clients });
    const first = await processor.processEvent(mskEvent(range(0, 10).map((o) => keyed(0, o, `K${o}`))));
    expect(first.partitions[0]).toMatchObject({ stagedRows: 10, duplicatesByKey: 0, stagedOffset: 9 });
    const second = await processor.processEvent(
      mskEvent([keyed(0, 10, 'K3'), keyed(0, 11, 'K5', 'other'), keyed(0, 12, 'K20'), keyed(0, 13, 'K20')]),
    );
    expect(second.partitions[0]).toMatchObject({
      stagedRows: 1,
      duplicatesByKey: 2,
      keyConflicts: 1,
      deadLettered: 1,
      stagedOffset: 13,
    });
    commands.length = 0;
    const third = await processor.processEvent(
      mskEvent([keyed(0, 14, 'K30'), keyed(0, 15, 'K31'), keyed(0, 16, 'K7')]),
    );
    expect(third.partitions[0]).toMatchObject({ stagedRows: 2, duplicatesByKey: 1 });
    // The steady state: the staged object and one transaction, as with offset-only dedupe.
    expect(commands.sort()).toEqual(['PutObjectCommand', 'TransactWriteItemsCommand']);
    const counts = await outputCounts(settings);
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
    expect(Object.keys(counts).sort()).toEqual(
      [...range(0, 10).map((o) => `K${o}`), 'K20', 'K30', 'K31'].sort(),
    );
    // No claim items: the keys live in the partition's window.
    expect(await buckets(settings)).toEqual([[1, 13]]);
  });

  it('a new container reads the window once and drops what another container staged', async () => {
    const settings = settingsFor();
    await processorFor(settings).processEvent(mskEvent(range(0, 5).map((o) => keyed(0, o, `A${o}`))));
    const { clients, commands } = countingClients();
    const cold = processorFor(settings, { clients });
    const report = await cold.processEvent(mskEvent([keyed(0, 5, 'A1'), keyed(0, 6, 'A9')]));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1 });
    expect(commands.sort()).toEqual([
      'GetItemCommand',
      'PutObjectCommand',
      'QueryCommand',
      'TransactWriteItemsCommand',
    ]);
    expect(await outputCounts(settings)).toEqual({ A0: 1, A1: 1, A2: 1, A3: 1, A4: 1, A9: 1 });
  });

  it('a container with a stale fence and window finds the keys another container staged meanwhile', async () => {
    const settings = settingsFor();
    const a = processorFor(settings);
    const b = processorFor(settings);
    // b stages offset 0: its copy of the window (S0) belongs to fence 0.
    await b.processEvent(mskEvent([keyed(0, 0, 'S0')]));
    await a.processEvent(mskEvent([keyed(0, 1, 'S1'), keyed(0, 2, 'S2')]));
    // b's cache says fence 0 and a window without S1: its transaction is refused, it reads both again.
    const report = await b.processEvent(mskEvent([keyed(0, 3, 'S1'), keyed(0, 4, 'S3')]));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1, stagedOffset: 4 });
    expect(await outputCounts(settings)).toEqual({ S0: 1, S1: 1, S2: 1, S3: 1 });
  });

  const steps: ProcessorStep[] = ['before-stage-write', 'after-stage-write', 'after-transaction'];
  for (const step of steps) {
    it(`a crash at ${step} and the retry stage each key once`, async () => {
      // maxTransactionItems 8: the fence, the output entry, two buckets and four state items per chunk.
      const settings = settingsFor({ maxTransactionItems: 8 });
      const warm = processorFor(settings);
      await warm.processEvent(mskEvent([keyed(0, 0, 'C0'), keyed(0, 1, 'C1')]));
      // Two chunks: offsets 2-7 (C2 C3 C4 C5 kept, C1 and the second C2 dropped) and 8-9.
      const batch = mskEvent(
        ['C2', 'C1', 'C3', 'C4', 'C5', 'C2', 'C6', 'C7'].map((key, i) => keyed(0, 2 + i, key)),
      );
      // A crash in the second chunk (after the first committed), or right after the first commit.
      const crashing = processorFor(settings, {
        hooks: crashAt(step, step === 'after-transaction' ? 1 : 2),
      });
      await expect(crashing.processEvent(batch)).rejects.toThrow(InjectedCrashError);
      // The retry: the same warm container (cache as of before the crash) and a cold one, one after the other.
      const retry = await warm.processEvent(batch);
      expect(retry.partitions[0]).toMatchObject({ stagedOffset: 9, chunks: 1 });
      await processorFor(settings).processEvent(batch);
      const all = ['C0', 'C1', 'C2', 'C3', 'C4', 'C5', 'C6', 'C7'];
      expect(await outputCounts(settings)).toEqual(Object.fromEntries(all.map((key) => [key, 1])));
      const stored = await buckets(settings);
      expect(stored.reduce((sum, [, n]) => sum + n, 0)).toBe(all.length);
    });
  }

  it('remembers at least the last idempotencyWindowKeys keys, in buckets of 1,000', {
    timeout: 60_000,
  }, async () => {
    const settings = settingsFor({ idempotencyWindowKeys: 1_000 });
    const processor = processorFor(settings);
    const count = 2 * BUCKET_ENTRIES + 1;
    const staged = await processor.processEvent(mskEvent(range(0, count).map((o) => keyed(0, o, `W${o}`))));
    expect(staged.partitions[0]).toMatchObject({ stagedRows: count, duplicatesByKey: 0 });
    expect(await buckets(settings)).toEqual([
      [1, 1000],
      [2, 1000],
      [3, 1],
    ]);
    // Buckets 2 and 3 count (1,001 keys, at least the last 1,000); bucket 1 no longer does.
    const cold = processorFor(settings);
    const report = await cold.processEvent(
      mskEvent([keyed(0, count, 'W0'), keyed(0, count + 1, 'W999'), keyed(0, count + 2, 'W1000')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, duplicatesByKey: 1 });
    expect((await outputCounts(settings)).W1000).toBe(1);
    expect((await outputCounts(settings)).W0).toBe(2);
  });

  it('blocks a key for at least the TTL, at most an eighth longer', async () => {
    const ttl = 86_400;
    const clock = new ManualClock();
    const settings = settingsFor({ idempotencyTtlSeconds: ttl });
    const processor = processorFor(settings, { clock });
    await processor.processEvent(mskEvent([keyed(0, 0, 'T0')]));
    clock.advance(ttl * 1000 - 1000);
    const within = await processor.processEvent(mskEvent([keyed(0, 1, 'T0'), keyed(0, 2, 'T1')]));
    expect(within.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1 });
    // T1 went into a new bucket: the first one stopped taking keys an eighth of the TTL after it opened.
    expect((await buckets(settings)).map(([seq]) => seq)).toEqual([1, 2]);
    clock.advance(ttl * 125 + 2000);
    const after = await processor.processEvent(mskEvent([keyed(0, 3, 'T0'), keyed(0, 4, 'T1')]));
    expect(after.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1 });
    expect(await outputCounts(settings)).toEqual({ T0: 2, T1: 1 });
  });

  it('a window changed behind its fence is read again, not overwritten', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent([keyed(0, 0, 'X0'), keyed(0, 1, 'X1')]));
    // Outside the protocol: the bucket is removed while the fence stays.
    await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
      new DeleteCommand({
        TableName: res.table,
        Key: keys.keyWindowBucket(settings.pipelineId, 'orders', 0, 1),
      }),
    );
    const report = await processor.processEvent(mskEvent([keyed(0, 2, 'X2')]));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 1, stagedOffset: 2 });
    // The container's copy (2 keys) was not written back over the store: the bucket holds X2 alone.
    expect(await buckets(settings)).toEqual([[1, 1]]);
  });

  it('global scope is unchanged: one claim item per key, and no window', async () => {
    const settings = settingsFor({ idempotencyScope: 'global' });
    const report = await processorFor(settings).processEvent(
      mskEvent([keyed(0, 0, 'G0'), keyed(0, 1, 'G0'), keyed(0, 2, 'G1')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, duplicatesByKey: 1 });
    expect(await buckets(settings)).toEqual([]);
  });
});
