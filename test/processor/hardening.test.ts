/**
 * The processor's structural rules (L2) against DynamoDB Local and the S3 server: offsets that go
 * backwards stop a partition loudly and stage nothing, while every genuine redelivery (crash retry, split retry,
 * zombie, stale cache) still passes; fence jumps are reported; events from other sources are rejected; claims
 * carry their record's digest (conflicts dead-lettered); claims ahead do not outlive a batch that fails for good;
 * an item over a DynamoDB limit is a named structural error.
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';

import { DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import {
  EventSourceRejectedError,
  InjectedCrashError,
  ItemLimitExceededError,
  MalformedEventError,
  MalformedLedgerItemError,
  OffsetsWentBackwardsError,
  TransientAwsError,
} from '../../shared/errors.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { IDENTITY_ATTRIBUTE, unpackIdentity } from '../../shared/ledger/fence-identity.ts';
import { keys } from '../../shared/ledger/layout.ts';
import {
  EpochChangedError,
  RELEASED,
  StagingLedger,
  StateItemTooLargeError,
} from '../../shared/ledger/staging-ledger.ts';
import {
  createProcessor,
  type FenceJump,
  judgeBatch,
  type KeyConflict,
  type PartitionStoppedError,
  type ProcessorDeps,
} from '../../shared/processor/processor.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { StateDelta, Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { ledgerView, scanPipeline, stagedRows } from '../support/ledger.ts';
import { mskEvent, order, orderRecords, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('hard');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'h', overrides);
}

/** Everything the processor told its observer. */
function recorder() {
  const seen = {
    stopped: [] as PartitionStoppedError[],
    rejected: [] as Error[],
    jumps: [] as FenceJump[],
    conflicts: [] as KeyConflict[],
  };
  const observer: NonNullable<ProcessorDeps['observer']> = {
    partitionStopped: (error) => seen.stopped.push(error),
    eventRejected: (error) => seen.rejected.push(error),
    fenceJumped: (jump) => seen.jumps.push(jump),
    keyConflicts: (conflicts) => seen.conflicts.push(...conflicts),
  };
  return { seen, observer };
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/** Records of one topic generation: `gen` changes every value, so the same offset holds another record. */
function generation(gen: string, partition: number, from: number, count: number): RecordSpec[] {
  return Array.from({ length: count }, (_, i) => ({
    partition,
    offset: from + i,
    key: `${gen}-${from + i}`,
    value: order(`${gen}-o${from + i}`, `cust-${(from + i) % 3}`),
    headers: { 'idempotency-key': `${gen}-o${from + i}` },
  }));
}

/**
 * Every ledger item and object of the pipeline. A stop writes why onto the fence (`stoppedBy`, shown by `eos
 * epoch`) and nothing else: that attribute is left out, so that "stages nothing" compares everything else.
 */
async function everything(settings: Settings) {
  const objects = await res.clients.s3.send(
    new ListObjectsV2Command({ Bucket: res.bucket, Prefix: `${settings.pipelineId}/` }),
  );
  const items = await scanPipeline(res.clients, res.table, settings.pipelineId);
  return {
    items: items.map(({ stoppedBy: _stop, ...item }) => item),
    objects: (objects.Contents ?? []).map((o) => o.Key).sort(),
  };
}

/** The stop record on a partition's fence. */
async function stopOf(settings: Settings, partition: number) {
  const items = await scanPipeline(res.clients, res.table, settings.pipelineId);
  return items.find(
    (item) => item.topic === 'orders' && item.partition === partition && 'stagedOffset' in item,
  )?.stoppedBy;
}

describe('L2 offsets that go backwards stop the partition loudly', () => {
  it('a recreated topic (new records from offset 0 below a fence at 5000 of the old generation) stops the partition and stages nothing, on every retry', async () => {
    const settings = settingsFor();
    const { seen, observer } = recorder();
    const warm = processorFor(settings, { observer });
    await warm.processEvent(mskEvent(generation('old', 0, 4900, 101)));
    const before = await everything(settings);
    const recreated = mskEvent(generation('new', 0, 0, 100));
    for (const processor of [warm, processorFor(settings, { observer })]) {
      const failure = await processor.processEvent(recreated).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(OffsetsWentBackwardsError);
      expect(failure).toMatchObject({
        topic: 'orders',
        partition: 0,
        fence: 5000,
        firstOffset: 0,
        lastOffset: 99,
      });
      expect(String(failure)).toMatch(/orders-0.*0\.\.99.*fence 5000/);
    }
    expect(seen.stopped).toHaveLength(2);
    expect(await everything(settings)).toEqual(before);
    expect(await stopOf(settings, 0)).toMatchObject({ fence: 5000, firstOffset: 0, lastOffset: 99 });
  });

  it('a recreated topic whose batch reaches the old fingerprinted offsets stops on the fingerprint; other partitions of the event go on', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent(generation('old', 0, 0, 10)));
    await processor.processEvent(mskEvent(generation('old', 0, 10, 10)));
    const event = mskEvent([...generation('new', 0, 0, 40), ...orderRecords(1, 0, 5)]);
    await expect(processor.processEvent(event)).rejects.toThrow(
      /record at offset (19|10) .* is not the one staged there/,
    );
    const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
    expect(ledger.fences).toEqual({ 'orders#0': 19, 'orders#1': 4 });
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.filter((r) => (r.row.source as { partition: number }).partition === 0)).toHaveLength(20);
  });

  it('a consumer-group reset to an earlier offset (below the last staged batch) stops loudly', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent(orderRecords(0, 0, 50)));
    await processor.processEvent(mskEvent(orderRecords(0, 50, 50)));
    const before = await everything(settings);
    await expect(processor.processEvent(mskEvent(orderRecords(0, 10, 20)))).rejects.toThrow(
      OffsetsWentBackwardsError,
    );
    await expect(processorFor(settings).processEvent(mskEvent(orderRecords(0, 10, 20)))).rejects.toThrow(
      /starts below 50, where the last staged batch started/,
    );
    expect(await everything(settings)).toEqual(before);
    expect(await stopOf(settings, 0)).toMatchObject({ fence: 99, firstOffset: 10, lastOffset: 29 });
  });

  it('genuine redeliveries pass: a crash before returning, a split retry, a lost commit that rewinds to the last batch', async () => {
    const settings = settingsFor();
    const batch = orderRecords(0, 10, 20);
    await processorFor(settings).processEvent(mskEvent(orderRecords(0, 0, 10)));
    await expect(
      processorFor(settings, { hooks: crashAt('before-return') }).processEvent(mskEvent(batch)),
    ).rejects.toThrow(InjectedCrashError);
    const staged = await everything(settings);
    // "Split batch on error": the retry comes as two halves, [10..19] then [20..29].
    const first = await processorFor(settings).processEvent(mskEvent(batch.slice(0, 10)));
    const second = await processorFor(settings).processEvent(mskEvent(batch.slice(10)));
    expect([first.partitions[0]!.duplicatesByOffset, second.partitions[0]!.duplicatesByOffset]).toEqual([
      10, 10,
    ]);
    // The whole batch again, and a longer one from the same start that goes on past the fence.
    await processorFor(settings).processEvent(mskEvent(batch));
    expect(await everything(settings)).toEqual(staged);
    const longer = await processorFor(settings).processEvent(mskEvent(orderRecords(0, 10, 25)));
    expect(longer.partitions[0]).toMatchObject({ duplicatesByOffset: 20, stagedOffset: 34 });
  });

  it('a zombie whose batch lies wholly below the last staged batch applies nothing and does not stop the partition', async () => {
    const settings = settingsFor();
    let release!: () => void;
    let paused!: () => void;
    const resumed = new Promise<void>((r) => {
      release = r;
    });
    const reachedPause = new Promise<void>((r) => {
      paused = r;
    });
    const zombie = processorFor(settings, {
      hooks: {
        async onStep(step) {
          if (step !== 'after-stage-write') return;
          paused();
          await resumed;
        },
      },
    });
    const zombieRun = zombie.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await reachedPause;
    // The mapping's retry stages the batch, then two later batches are staged.
    const live = processorFor(settings);
    await live.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await live.processEvent(mskEvent(orderRecords(0, 10, 10)));
    await live.processEvent(mskEvent(orderRecords(0, 20, 10)));
    const before = await ledgerView(res.clients, res.table, settings.pipelineId);
    release();
    const report = await zombieRun;
    expect(report.partitions[0]).toMatchObject({ chunks: 0, duplicatesByOffset: 10 });
    expect(await ledgerView(res.clients, res.table, settings.pipelineId)).toEqual(before);
  });

  it('a container whose cached fence is stale takes a redelivery of a batch another container staged for what it is', async () => {
    const settings = settingsFor();
    const stale = processorFor(settings, { settings: { ...settings, idempotencyKey: { kind: 'none' } } });
    const other = processorFor(settings, { settings: { ...settings, idempotencyKey: { kind: 'none' } } });
    await stale.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await other.processEvent(mskEvent(orderRecords(0, 10, 10)));
    await other.processEvent(mskEvent(orderRecords(0, 20, 10)));
    const before = await everything(settings);
    // Its cache says 9; the batch [20..29] was staged by the other container: a redelivery, not new records.
    const again = await stale.processEvent(mskEvent(orderRecords(0, 20, 10)));
    expect(again.partitions[0]).toMatchObject({ chunks: 0, duplicatesByOffset: 10, stagedOffset: 29 });
    const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
    expect(ledger.fences).toEqual({ 'orders#0': 29 });
    expect((await everything(settings)).items).toEqual(before.items);
  });

  it('a fence written before identities: only the distance rule applies (maxFenceJump below the fence)', async () => {
    const settings = settingsFor({ maxFenceJump: 1000 });
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    const key = keys.fence(settings.pipelineId, 'orders', 0);
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: { ...key, topic: 'orders', partition: 0, stagedOffset: 5000, updatedAt: 1 },
      }),
    );
    await expect(processorFor(settings).processEvent(mskEvent(orderRecords(0, 0, 10)))).rejects.toThrow(
      /more than 1000 offsets below the fence/,
    );
    const report = await processorFor(settings).processEvent(mskEvent(orderRecords(0, 4995, 10)));
    expect(report.partitions[0]).toMatchObject({ duplicatesByOffset: 6, stagedOffset: 5004 });
    // The write gave the fence its identity (packed: fence-identity.ts).
    const { Item } = await doc.send(new GetCommand({ TableName: res.table, Key: key }));
    const identity = unpackIdentity(Item?.[IDENTITY_ATTRIBUTE]);
    expect(identity?.fenceRecord.offset).toBe(5004);
    expect(identity?.batchStart.offset).toBe(4995);
  });

  it('a fence whose staged offset is not an offset (forged or corrupted) stops the partition with a named error', async () => {
    const settings = settingsFor();
    const { seen, observer } = recorder();
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    const key = keys.fence(settings.pipelineId, 'orders', 0);
    for (const stagedOffset of [1.5, '9000000000000000', undefined]) {
      await doc.send(new PutCommand({ TableName: res.table, Item: { ...key, stagedOffset, updatedAt: 1 } }));
      await expect(
        processorFor(settings, { observer }).processEvent(mskEvent(orderRecords(0, 0, 2))),
      ).rejects.toThrow(MalformedLedgerItemError);
    }
    expect(seen.stopped).toHaveLength(3);
  });

  it('judgeBatch: the rule table of the module doc', () => {
    const p = (offset: number, digest = `d${offset}`) => ({ offset, digest, timestamp: offset });
    const fence = {
      stagedOffset: 20,
      identity: { fenceRecord: p(20), batchStart: p(10), recentStarts: [p(10)] },
    };
    const range = (from: number, to: number, digest?: string) =>
      Array.from({ length: to - from + 1 }, (_, i) => p(from + i, digest && `${digest}${from + i}`));
    expect(judgeBatch(range(21, 30), fence, 1e6, 'start')).toEqual({ kind: 'new' });
    expect(judgeBatch(range(10, 25), fence, 1e6, 'start')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch(range(15, 18), fence, 1e6, 'start')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch(range(0, 12), fence, 1e6, 'start')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch(range(0, 12, 'x'), fence, 1e6, 'start').kind).toBe('backwards');
    expect(judgeBatch(range(0, 5), fence, 1e6, 'start').kind).toBe('backwards');
    // The fence moved while the invocation ran: below B without a fingerprint nothing proves a redelivery.
    expect(judgeBatch(range(0, 5), fence, 1e6, 'moved')).toEqual({ kind: 'unproven' });
    expect(judgeBatch(range(12, 15), fence, 1e6, 'moved')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch(range(5, 12), fence, 1e6, 'moved')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch([p(15), p(25)], fence, 1e6, 'moved').kind).toBe('backwards');
    expect(judgeBatch(range(0, 5), { stagedOffset: 20, identity: undefined }, 10, 'start').kind).toBe(
      'backwards',
    );
    expect(judgeBatch(range(12, 15), { stagedOffset: 20, identity: undefined }, 10, 'start')).toEqual({
      kind: 'redelivery',
    });
  });

  it('judgeBatch: a batch starting at a remembered earlier batch start is a redelivery with the same record there, backwards with another', () => {
    const p = (offset: number, digest = `d${offset}`) => ({ offset, digest, timestamp: offset });
    const fence = {
      stagedOffset: 29,
      identity: { fenceRecord: p(29), batchStart: p(20), recentStarts: [p(0), p(10), p(20)] },
    };
    const range = (from: number, to: number, digest?: string) =>
      Array.from({ length: to - from + 1 }, (_, i) => p(from + i, digest && `${digest}${from + i}`));
    // Two and three batches back, same records: redelivery (rule 4 alone would say backwards).
    expect(judgeBatch(range(10, 19), fence, 1e6, 'start')).toEqual({ kind: 'redelivery' });
    expect(judgeBatch(range(0, 9), fence, 1e6, 'start')).toEqual({ kind: 'redelivery' });
    // The same offsets with other records: another generation.
    expect(judgeBatch(range(10, 19, 'x'), fence, 1e6, 'start').kind).toBe('backwards');
    // Not a remembered start and below B: still backwards.
    expect(judgeBatch(range(5, 9), fence, 1e6, 'start').kind).toBe('backwards');
  });
});

describe('fence jumps and source checks', () => {
  it('a batch starting more than maxFenceJump above the fence is staged and reported once, naming the partition and offsets', async () => {
    const settings = settingsFor({ maxFenceJump: 1000 });
    const { seen, observer } = recorder();
    const processor = processorFor(settings, { observer });
    await processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await processor.processEvent(mskEvent(orderRecords(0, 10, 10)));
    const report = await processor.processEvent(mskEvent(orderRecords(0, 5000, 5)));
    expect(report.partitions[0]).toMatchObject({ fenceJumps: 1, stagedOffset: 5004 });
    expect(seen.jumps).toEqual([{ topic: 'orders', partition: 0, fence: 19, firstOffset: 5000 }]);
  });

  it('rejects, before any effect, an event from another source or holding a topic it is not configured for', async () => {
    const arn = mskEvent([]).eventSourceArn;
    const settings = settingsFor({ eventSourceArn: arn, topics: 'orders,payments' });
    const { seen, observer } = recorder();
    const processor = processorFor(settings, { observer });
    const foreign = { ...mskEvent(orderRecords(0, 0, 3)), eventSourceArn: `${arn}-other` };
    await expect(processor.processEvent(foreign)).rejects.toThrow(EventSourceRejectedError);
    const otherTopic = mskEvent([
      ...orderRecords(0, 0, 3),
      { topic: 'audit', partition: 0, offset: 0, value: '{}' },
    ]);
    await expect(processor.processEvent(otherTopic)).rejects.toThrow(
      /topic "audit" is not one of the configured/,
    );
    expect(seen.rejected.map((error) => (error as EventSourceRejectedError).check)).toEqual([
      'event-source',
      'topic',
    ]);
    expect(await everything(settings)).toEqual({ items: [], objects: [] });
    const ok = await processor.processEvent(mskEvent(orderRecords(0, 0, 3)));
    expect(ok.partitions[0]).toMatchObject({ stagedOffset: 2 });
  });
});

describe('self-managed Apache Kafka events (eventSource SelfManagedKafka, bootstrapServers, no ARN)', () => {
  const servers = 'b-1.kafka.example.internal:9096,b-2.kafka.example.internal:9096';
  const selfManaged = (records: Parameters<typeof mskEvent>[0], bootstrapServers = servers) => {
    const { eventSourceArn: _arn, ...event } = mskEvent(records);
    return { ...event, eventSource: 'SelfManagedKafka', bootstrapServers };
  };

  it('stages a self-managed event from the configured servers (in any order) and rejects any other source first', async () => {
    const settings = settingsFor({ bootstrapServers: servers });
    const { seen, observer } = recorder();
    const processor = processorFor(settings, { observer });
    await expect(
      processor.processEvent(selfManaged(orderRecords(0, 0, 3), 'evil.example.com:9092')),
    ).rejects.toThrow(/event-source "SelfManagedKafka evil\.example\.com:9092" is not one of the configured/);
    // An MSK event has an ARN but not these servers: rejected as well.
    await expect(processor.processEvent(mskEvent(orderRecords(0, 0, 3)))).rejects.toThrow(
      EventSourceRejectedError,
    );
    expect(seen.rejected).toHaveLength(2);
    expect(await everything(settings)).toEqual({ items: [], objects: [] });
    const reordered = servers.split(',').reverse().join(',');
    const ok = await processor.processEvent(selfManaged(orderRecords(0, 0, 3), reordered));
    expect(ok.partitions[0]).toMatchObject({ stagedOffset: 2, stagedRows: 3 });
  });

  it('refuses as malformed a self-managed event without bootstrapServers or an MSK event without an ARN', async () => {
    const processor = processorFor(settingsFor());
    const { bootstrapServers: _servers, ...noServers } = selfManaged(orderRecords(0, 0, 1));
    await expect(processor.processEvent(noServers)).rejects.toThrow(MalformedEventError);
    const { eventSourceArn: _arn, ...noArn } = mskEvent(orderRecords(0, 0, 1));
    await expect(processor.processEvent(noArn)).rejects.toThrow(MalformedEventError);
  });
});

describe('claims that cannot be abused', () => {
  for (const claimWrite of ['ahead', 'in-transaction'] as const) {
    it(`a same-key record with another payload is dead-lettered as a conflict naming the key and claimant; the same payload is a duplicate (claims ${claimWrite})`, async () => {
      const settings = settingsFor({ claimWrite });
      const { seen, observer } = recorder();
      const processor = processorFor(settings, { observer });
      const real = {
        partition: 0,
        offset: 0,
        key: 'c-1',
        value: order('order-42'),
        headers: { 'idempotency-key': 'order-42' },
      };
      await processor.processEvent(mskEvent([real]));
      const forged = {
        partition: 1,
        offset: 0,
        key: 'x',
        value: order('forged'),
        headers: { 'idempotency-key': 'order-42' },
      };
      const resend = { ...real, partition: 1, offset: 1 };
      // Within one batch too: a later record of the batch with the first one's key and another payload.
      const within = [
        { partition: 2, offset: 0, key: 'k', value: order('w1'), headers: { 'idempotency-key': 'w' } },
        { partition: 2, offset: 1, key: 'k', value: order('w2'), headers: { 'idempotency-key': 'w' } },
      ];
      const report = await processor.processEvent(mskEvent([forged, resend, ...within]));
      expect(
        report.partitions.map((p) => [p.partition, p.keyConflicts, p.duplicatesByKey, p.deadLettered]),
      ).toEqual([
        [1, 1, 1, 1],
        [2, 1, 0, 1],
      ]);
      const dead = (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId)).filter(
        (r) => r.stream === 'deadletter',
      );
      expect(dead.map((r) => r.row.error)).toEqual([
        'idempotency key "order-42" is already claimed by orders#0#0 with a different payload',
        'idempotency key "w" is already claimed by orders#2#0 with a different payload',
      ]);
      // Partitions run concurrently: the order of their reports is not fixed.
      expect(seen.conflicts.map((c) => [c.idempotencyKey, c.claimant, c.offset]).sort()).toEqual([
        ['order-42', 'orders#0#0', 0],
        ['w', 'orders#2#0', 1],
      ]);
      const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
      expect(ledger.claims).toEqual({ 'order-42': 'orders#0#0', w: 'orders#2#0' });
    });
  }

  it('a retry of the same record recognises its own claim (claims ahead, crash after the claims)', async () => {
    const settings = settingsFor();
    const record = {
      partition: 0,
      offset: 0,
      key: 'a',
      value: order('a'),
      headers: { 'idempotency-key': 'a' },
    };
    await expect(
      processorFor(settings, { hooks: crashAt('after-claims') }).processEvent(mskEvent([record])),
    ).rejects.toThrow(InjectedCrashError);
    const retry = await processorFor(settings).processEvent(mskEvent([record]));
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 1, keyConflicts: 0, duplicatesByKey: 0 });
  });
});

/** Every record sets 100 descriptive fields of 1 KB with names of its own: the customer's state item grows. */
const growing: Transform = {
  name: 'growing',
  apply(record) {
    return { kind: 'ok', rows: [{ offset: record.offset }], state: [growth(record.offset)] };
  },
};

function growth(offset: number): StateDelta {
  const fields: Record<string, string> = {};
  for (let i = 0; i < 99; i++) fields[`r${offset}f${i}`] = 'v'.repeat(1000);
  return { key: 'customer', fields, add: { n: 1 } };
}

/** The pipeline's claim items as stored, by idempotency key. */
async function claimItems(pipeline: string): Promise<Map<string, Record<string, unknown>>> {
  const items = await scanPipeline(res.clients, res.table, pipeline);
  return new Map(
    items
      .filter((item) => String(item.pk).includes('#CLAIM#'))
      .map((item) => [String(item.idempotencyKey), item]),
  );
}

describe('structural limits and claims ahead of a batch that fails for good', () => {
  it("DynamoDB's refusal of a state item over 400 KB is a named structural error naming the partition and the state key, not a transient retry", async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    // Four records fill the item to just under 400 KB (each its own chunk: at most 100 fields per item per chunk).
    await processorFor(settings, { transform: growing }).processEvent(
      mskEvent([0, 1, 2, 3].map((offset) => ({ partition: 0, offset, value: '-' }))),
    );
    // The ledger alone (the processor dead-letters such a record: test/processor/state-item-limit.test.ts).
    const prints = { offset: 4, digest: 'd', timestamp: 4 };
    const failure = await new StagingLedger(res.clients.dynamodb, res.table)
      .stage({
        pipeline: settings.pipelineId,
        topic: 'orders',
        partition: 0,
        expectedOffset: 3,
        newOffset: 4,
        entries: [],
        claims: [],
        state: [growth(4)],
        identity: { fenceRecord: prints, batchStart: prints, recentStarts: [prints] },
        now: Date.now(),
        attemptId: 'a',
      })
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(StateItemTooLargeError);
    expect(failure).toBeInstanceOf(ItemLimitExceededError);
    expect(failure).not.toBeInstanceOf(TransientAwsError);
    expect(failure).toMatchObject({
      topic: 'orders',
      partition: 0,
      items: ['state customer'],
      stateKeys: ['customer'],
    });
    // Nothing applied: the fence did not move.
    expect((await ledgerView(res.clients, res.table, settings.pipelineId)).fences).toEqual({ 'orders#0': 3 });
  });

  it('claims written ahead by a batch that then fails deterministically are released, so a duplicate elsewhere is staged', async () => {
    const settings = settingsFor();
    const keyed = (partition: number, offset: number, key: string): RecordSpec => ({
      partition,
      offset,
      key,
      value: order(key),
      headers: { 'idempotency-key': key },
    });
    const transform = builtinTransform('orders');
    const processor = processorFor(settings, { transform });
    await processor.processEvent(
      mskEvent([keyed(0, 0, 'a'), keyed(0, 1, 'b'), keyed(0, 2, 'c'), keyed(0, 3, 'd')]),
    );
    // Once its claims are written, an operator opens a new epoch for the partition (--force): the batch can never
    // stage in the lane it claimed for, and fails for good.
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, systemClock);
    const switching = processorFor(settings, {
      transform,
      hooks: {
        async onStep(step) {
          if (step === 'after-claims') await epochs.startNew('orders', 0, { force: true });
        },
      },
    });
    await expect(switching.processEvent(mskEvent([keyed(0, 4, 'K'), keyed(0, 5, 'L')]))).rejects.toThrow(
      EpochChangedError,
    );
    // The staged records keep their claims; the failed batch's claims (written ahead) are released: marked
    // expired (the processor role has no DeleteItem), so the next record with their key takes them over.
    const claims = await claimItems(settings.pipelineId);
    expect(claims.get('a')).toMatchObject({ claimant: 'orders#0#0', expiresAt: expect.any(Number) });
    expect(claims.get('a')?.expiresAt).toBeGreaterThan(Date.now() / 1000);
    expect(claims.get('K')).toMatchObject({ claimant: 'orders#0#4', expiresAt: RELEASED });
    expect(claims.get('K')).not.toHaveProperty('holders');
    const elsewhere = await processor.processEvent(mskEvent([keyed(1, 0, 'K'), keyed(1, 1, 'a')]));
    expect(elsewhere.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1 });
    expect((await claimItems(settings.pipelineId)).get('K')).toMatchObject({ claimant: 'orders#1#0' });
  });

  it('a transient failure after claims ahead keeps them: the retry reuses them', async () => {
    const settings = settingsFor();
    const clients = (await import('../../shared/aws/clients.ts')).createAwsClients();
    let failures = 1;
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand' && failures-- > 0) {
          throw Object.assign(new Error('throttled'), {
            name: 'ThrottlingException',
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: 'initialize', name: 'injectThrottle' },
    );
    const processor = createProcessor({ settings, clients });
    const event = mskEvent(orderRecords(0, 0, 3));
    await expect(processor.processEvent(event)).rejects.toThrow(TransientAwsError);
    expect(Object.keys((await ledgerView(res.clients, res.table, settings.pipelineId)).claims)).toHaveLength(
      3,
    );
    const retry = await processor.processEvent(event);
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 3, duplicatesByKey: 0 });
  });
});

describe('every deterministic stop of a partition is reported (L2, metric PartitionsStopped)', () => {
  /** A processor whose staging transactions fail with `name` before reaching DynamoDB. */
  function refusing(settings: Settings, name: string, observer: ProcessorDeps['observer']) {
    const clients = createAwsClients();
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') {
          throw Object.assign(new Error(`${name} (test)`), { name });
        }
        return next(args);
      },
      { step: 'initialize', name: 'refuseTransaction' },
    );
    return createProcessor({ settings, clients, observer });
  }

  it('a batch refused for good (AccessDenied) reports partitionStopped; a throttled one does not (its retry passes)', async () => {
    const settings = settingsFor();
    const batch = mskEvent(orderRecords(0, 0, 2));
    const denied = recorder();
    await expect(
      refusing(settings, 'AccessDeniedException', denied.observer).processEvent(batch),
    ).rejects.toMatchObject({ name: 'AccessDeniedException' });
    expect(denied.seen.stopped.map((error) => error.name)).toEqual(['AccessDeniedException']);

    const throttled = recorder();
    await expect(
      refusing(settings, 'ThrottlingException', throttled.observer).processEvent(batch),
    ).rejects.toBeDefined();
    expect(throttled.seen.stopped).toEqual([]);
    // The refusals staged nothing: the retry stages the batch.
    const retry = await processorFor(settings).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 1, stagedRows: 2 });
  });
});
