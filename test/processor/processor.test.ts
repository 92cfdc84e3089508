/**
 * The processor's invariants P1–P6 against the real local parts (DynamoDB Local and the S3 server).
 */
import { readFileSync } from 'node:fs';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import {
  InjectedCrashError,
  MalformedEventError,
  MissingResourceError,
  TransientAwsError,
} from '../../shared/errors.ts';
import { createProcessor, type ProcessorDeps, type ProcessorStep } from '../../shared/processor/processor.ts';
import { digestsOf } from '../../shared/sink/ndjson.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { ledgerView, readObject, scanPipeline, stagedEntries, stagedRows } from '../support/ledger.ts';
import { mskEvent, order, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('proc');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'p', overrides);
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

async function listKeys(prefix: string): Promise<string[]> {
  const out = await res.clients.s3.send(new ListObjectsV2Command({ Bucket: res.bucket, Prefix: prefix }));
  return (out.Contents ?? []).map((o) => o.Key!);
}

async function snapshot(settings: Settings) {
  return {
    ledger: await ledgerView(res.clients, res.table, settings.pipelineId),
    rows: await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId),
  };
}

const batch = mskEvent([
  ...orderRecords(0, 0, 12),
  { partition: 0, offset: 12, value: '{"orderId":', headers: { 'idempotency-key': 'poison-1' } },
  ...orderRecords(0, 13, 7),
  ...orderRecords(1, 100, 9),
]);

/** Every record its own customer: several chunks per partition whether claims are in the transaction or not. */
const p5batch = mskEvent([
  ...orderRecords(0, 0, 12).map((r) => ({ ...r, value: order(`a${r.offset}`, `c${r.offset}`) })),
  { partition: 0, offset: 12, value: '{"orderId":', headers: { 'idempotency-key': 'poison-1' } },
  { partition: 0, offset: 13, value: order('dup', 'c13'), headers: { 'idempotency-key': 'p0-o3' } },
  ...orderRecords(1, 100, 9).map((r) => ({ ...r, value: order(`b${r.offset}`, `c${r.offset}`) })),
]);

describe('processor', () => {
  it('stages the sample MSK event: rows with lineage, the poison record dead-lettered', async () => {
    const settings = settingsFor();
    const event = JSON.parse(
      readFileSync(new URL('../fixtures/msk-event.sample.json', import.meta.url), 'utf8'),
    );
    const report = await processorFor(settings).processEvent(event);
    expect(report.partitions.map((p) => [p.partition, p.stagedRows, p.deadLettered, p.stagedOffset])).toEqual(
      [
        [0, 2, 0, 42],
        [3, 1, 1, 9],
      ],
    );
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.filter((r) => r.stream === 'output').map((r) => r.row)).toEqual([
      expect.objectContaining({
        source: { topic: 'orders', partition: 0, offset: 41 },
        orderId: 'ord-1',
        amountMinor: 1999,
      }),
      expect.objectContaining({ source: { topic: 'orders', partition: 0, offset: 42 }, orderId: 'ord-2' }),
      expect.objectContaining({
        source: { topic: 'orders', partition: 3, offset: 7 },
        customerId: 'cust-007',
        currency: 'USD',
      }),
    ]);
    const dead = rows.filter((r) => r.stream === 'deadletter');
    expect(dead).toHaveLength(1);
    expect(dead[0]!.row).toMatchObject({
      source: { topic: 'orders', partition: 3, offset: 9 },
      error: expect.stringMatching(/^undecodable value: .*not valid JSON/),
    });
    expect((dead[0]!.row.raw as { value: string }).value).toBe('eyJvcmRlcklkIjoib3JkLTQiLA==');
  });

  it('P1 atomic effect: a crash between chunk transactions leaves exactly the first chunk durable (claims in the transaction)', async () => {
    const settings = settingsFor({ maxTransactionItems: 8, claimWrite: 'in-transaction' });
    const batch = mskEvent(orderRecords(0, 0, 20));
    await expect(
      processorFor(settings, { hooks: crashAt('after-transaction', 1) }).processEvent(batch),
    ).rejects.toThrow(InjectedCrashError);
    const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
    const fence = ledger.fences['orders#0']!;
    const entries = ledger.entries;
    expect(entries).toHaveLength(1);
    expect(fence).toBeGreaterThan(0);
    expect(fence).toBeLessThan(19);
    // Everything durable is covered by the fence, and everything below the fence is durable.
    expect(Math.max(...entries.map((e) => e.lastOffset))).toBe(fence);
    const claimed = Object.values(ledger.claims).filter((c) => c.startsWith('orders#0#'));
    expect(claimed.map((c) => Number(c.split('#')[2])).sort((a, b) => a - b)).toEqual(
      Array.from({ length: fence + 1 }, (_, i) => i),
    );
    const counted = Object.values(ledger.state).reduce((n, s) => n + (s.count as number), 0);
    const partition1Rows = ledger.entries
      .filter((e) => e.partition === 1)
      .reduce((n, e) => n + e.recordCount, 0);
    expect(counted).toBe(fence + 1 + partition1Rows);
  });

  it('P2 fencing: a zombie that resumes after a retry staged the batch applies nothing', async () => {
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
        async onStep(step, context) {
          if (step === 'after-stage-write' && context.partition === 0) {
            paused();
            await resumed;
          }
        },
      },
    });
    const zombieRun = zombie.processEvent(batch);
    await reachedPause;
    await processorFor(settings).processEvent(batch);
    const afterRetry = await snapshot(settings);
    release();
    const zombieReport = await zombieRun;
    expect(zombieReport.partitions.find((p) => p.partition === 0)).toMatchObject({
      chunks: 0,
      duplicatesByOffset: 20,
    });
    expect(await snapshot(settings)).toEqual(afterRetry);
  });

  it('P2 fencing: two concurrent invocations of the same batch give exactly one set of effects', async () => {
    const settings = settingsFor({ maxTransactionItems: 10 });
    const reference = settingsFor({ maxTransactionItems: 10 });
    await processorFor(reference).processEvent(batch);
    const results = await Promise.allSettled([
      processorFor(settings).processEvent(batch),
      processorFor(settings).processEvent(batch),
    ]);
    expect(results.some((r) => r.status === 'fulfilled')).toBe(true);
    // A loser may fail only transiently; its retry must be harmless.
    for (const r of results) if (r.status === 'rejected') await processorFor(settings).processEvent(batch);
    const got = await snapshot(settings);
    const want = await snapshot(reference);
    expect(got.rows).toEqual(want.rows);
    expect(got.ledger.state).toEqual(want.ledger.state);
    expect(got.ledger.fences).toEqual(want.ledger.fences);
  });

  it('P3 staged objects: written under the in-progress prefix before the transaction; entries record size and checksum', async () => {
    const settings = settingsFor();
    const batch = mskEvent([...orderRecords(0, 0, 5), { partition: 0, offset: 5, value: 'not json' }]);
    await expect(
      processorFor(settings, { hooks: crashAt('after-stage-write') }).processEvent(batch),
    ).rejects.toThrow(InjectedCrashError);
    const orphans = await listKeys(`${settings.pipelineId}/_inprogress/`);
    expect(orphans).toHaveLength(2);
    expect(await stagedEntries(res.clients, res.table, settings.pipelineId)).toEqual([]);

    await processorFor(settings).processEvent(batch);
    const entries = await stagedEntries(res.clients, res.table, settings.pipelineId);
    expect(entries.map((e) => [e.stream, e.firstOffset, e.lastOffset, e.recordCount])).toEqual([
      ['deadletter', 0, 5, 1],
      ['output', 0, 5, 5],
    ]);
    for (const entry of entries) {
      expect(entry.key.startsWith(`${settings.pipelineId}/_inprogress/${entry.stream}/`)).toBe(true);
      expect(orphans).not.toContain(entry.key);
      const body = await readObject(res.clients, res.bucket, entry.key);
      expect(body.length).toBe(entry.bytes);
      expect(digestsOf(body)).toEqual({ sha256: entry.sha256, md5: entry.md5 });
    }
    expect(await listKeys(`${settings.pipelineId}/final/`)).toEqual([]);
  });

  it('P4 dedupe: redelivery of a staged batch makes no AWS write at all', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(batch);
    const before = await snapshot(settings);
    const objectsBefore = await listKeys(`${settings.pipelineId}/`);
    const again = await processor.processEvent(batch);
    expect(again.partitions.map((p) => p.duplicatesByOffset)).toEqual([20, 9]);
    expect(await snapshot(settings)).toEqual(before);
    expect(await listKeys(`${settings.pipelineId}/`)).toEqual(objectsBefore);
    // A fresh container (no cached fence) reads the fence and also applies nothing.
    await processorFor(settings).processEvent(batch);
    expect(await snapshot(settings)).toEqual(before);
  });

  it('steady state: a warm batch costs one PutObject and one TransactWriteItems (no fence read)', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const processor = createProcessor({ settings, clients });
    await processor.processEvent(mskEvent(orderRecords(0, 0, 50)));
    // A new partition: its fence shard, then the legacy fence key (fences.ts), both absent.
    expect(calls.snapshot()).toEqual({
      'dynamodb:GetItem': 2,
      'dynamodb:TransactWriteItems': 1,
      's3:PutObject': 1,
    });
    calls.reset();
    await processor.processEvent(mskEvent(orderRecords(0, 50, 50)));
    expect(calls.snapshot()).toEqual({ 'dynamodb:TransactWriteItems': 1, 's3:PutObject': 1 });
    // A cold container reads the sharded fence only, once it exists.
    calls.reset();
    await createProcessor({ settings, clients }).processEvent(mskEvent(orderRecords(0, 100, 50)));
    expect(calls.snapshot()).toEqual({
      'dynamodb:GetItem': 1,
      'dynamodb:TransactWriteItems': 1,
      's3:PutObject': 1,
    });
    // A redelivery costs one fence read: records are dropped only on a fresh fence's word, since the cached one may
    // belong to an epoch an operator closed meanwhile (test/ledger/epochs.adversarial.test.ts). Nothing is written.
    calls.reset();
    await processor.processEvent(mskEvent(orderRecords(0, 50, 50)));
    expect(calls.snapshot()).toEqual({ 'dynamodb:GetItem': 1 });
  });

  it('P1 refinement: claims written ahead name their claimant; a crash after them blocks a duplicate elsewhere, and the retry commits the original', async () => {
    const settings = settingsFor();
    const rec = (partition: number, offset: number) => ({
      partition,
      offset,
      key: 'k',
      value: order('k'),
      headers: { 'idempotency-key': 'k' },
    });
    await expect(
      processorFor(settings, { hooks: crashAt('after-claims') }).processEvent(mskEvent([rec(0, 0)])),
    ).rejects.toThrow(InjectedCrashError);
    const afterCrash = await ledgerView(res.clients, res.table, settings.pipelineId);
    expect(afterCrash.claims).toEqual({ k: 'orders#0#0' });
    expect(afterCrash.fences).toEqual({});
    // A producer duplicate on another partition finds the key taken and is dropped.
    const dup = await processorFor(settings).processEvent(mskEvent([rec(1, 0)]));
    expect(dup.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    // The original's redelivery recognises its own claim and commits the record.
    const retry = await processorFor(settings).processEvent(mskEvent([rec(0, 0)]));
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 0 });
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => r.row.source)).toEqual([{ topic: 'orders', partition: 0, offset: 0 }]);
  });

  it('steady state with idempotency keys written ahead: one small transaction per batch, claims created in batches of 25', async () => {
    const settings = settingsFor();
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const processor = createProcessor({ settings, clients });
    await processor.processEvent(mskEvent(orderRecords(0, 0, 50)));
    calls.reset();
    await processor.processEvent(mskEvent(orderRecords(0, 50, 150)));
    // The fence is read fresh before claims go ahead (a stale cached fence must not claim anything). Absent claims
    // are created by PartiQL INSERTs, 25 per BatchExecuteStatement, each naming this attempt its holder (a release
    // removes only its own attempt); only a key already held would cost an UpdateItem of its own.
    expect(calls.snapshot()).toEqual({
      'dynamodb:GetItem': 1,
      'dynamodb:BatchExecuteStatement': 6,
      'dynamodb:TransactWriteItems': 1,
      's3:PutObject': 1,
    });
  });

  it('P4 dedupe: producer duplicates by idempotency key are dropped within a batch, across batches and partitions', async () => {
    const settings = settingsFor();
    const dup = (partition: number, offset: number, key: string) => ({
      partition,
      offset,
      // A producer resend: the same Kafka key and value (same digest), so a duplicate, not a key conflict.
      key,
      value: order(key),
      headers: { 'idempotency-key': key },
    });
    const processor = processorFor(settings);
    const first = await processor.processEvent(mskEvent([dup(0, 0, 'a'), dup(0, 1, 'b'), dup(0, 2, 'a')]));
    expect(first.partitions[0]).toMatchObject({ stagedRows: 2, duplicatesByKey: 1, stagedOffset: 2 });
    const second = await processor.processEvent(mskEvent([dup(0, 3, 'b'), dup(1, 0, 'a'), dup(1, 1, 'c')]));
    expect(
      second.partitions.map((p) => [p.partition, p.stagedRows, p.duplicatesByKey, p.stagedOffset]),
    ).toEqual([
      [0, 0, 1, 3],
      [1, 1, 1, 1],
    ]);
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => r.row.orderId).sort()).toEqual(['a', 'b', 'c']);
  });

  it('P4 dedupe: an expired claim no longer blocks its key', async () => {
    const clock = new ManualClock();
    const settings = settingsFor({ idempotencyTtlSeconds: 86_400 });
    const processor = processorFor(settings, { clock });
    const rec = (offset: number) => ({
      partition: 0,
      offset,
      key: 'x',
      value: order('x'),
      headers: { 'idempotency-key': 'x' },
    });
    await processor.processEvent(mskEvent([rec(0)]));
    const blocked = await processor.processEvent(mskEvent([rec(1)]));
    expect(blocked.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    clock.advance(86_401_000);
    const after = await processor.processEvent(mskEvent([rec(2)]));
    expect(after.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 0 });
  });

  it('P4 dedupe: a redelivery to a container with a stale cached fence cannot take over an expired claim of a record still waiting for its retry', async () => {
    // Claims written ahead against a stale fence would let an invocation that applies nothing steal a key.
    const clock = new ManualClock();
    const settings = settingsFor({ idempotencyTtlSeconds: 86_400 });
    const make = (hooks?: ProcessorDeps['hooks']) => processorFor(settings, { clock, hooks });
    const rec = (partition: number, offset: number, key: string) => ({
      partition,
      offset,
      // A producer resend: the same Kafka key and value (same digest), so a duplicate, not a key conflict.
      key,
      value: order(key),
      headers: { 'idempotency-key': key },
    });
    const warm = make();
    await warm.processEvent(mskEvent([0, 1, 2, 3].map((o) => rec(0, o, `a${o}`))));
    // q = 1:7 claims K ahead, then crashes before its transaction.
    await expect(make(crashAt('after-claims')).processEvent(mskEvent([rec(1, 7, 'K')]))).rejects.toThrow(
      InjectedCrashError,
    );
    // Another container stages 0:[4..6]; 0:5 (key K) is a duplicate of the claimed key; it crashes before returning.
    const redelivered = mskEvent([rec(0, 4, 'a4'), rec(0, 5, 'K'), rec(0, 6, 'a6')]);
    await expect(make(crashAt('before-return')).processEvent(redelivered)).rejects.toThrow(
      InjectedCrashError,
    );
    clock.advance(2 * 86_400_000); // q's claim expires while q waits for its retry
    // The mapping redelivers 0:[4..6] to the warm container, whose cached fence is still 3.
    const again = await warm.processEvent(redelivered);
    expect(again.partitions[0]).toMatchObject({ chunks: 0, stagedRows: 0 });
    await make().processEvent(mskEvent([rec(1, 7, 'K')]));
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => r.row.orderId).sort()).toEqual(['K', 'a0', 'a1', 'a2', 'a3', 'a4', 'a6']);
  });

  it('P6: a record whose idempotency key or state key is too long for a ledger key is dead-lettered, not retried forever', async () => {
    for (const claimWrite of ['ahead', 'in-transaction'] as const) {
      const settings = settingsFor({ claimWrite });
      const report = await processorFor(settings).processEvent(
        mskEvent([
          { partition: 0, offset: 0, value: order('ok'), headers: { 'idempotency-key': 'ok' } },
          { partition: 0, offset: 1, value: order('big'), headers: { 'idempotency-key': 'x'.repeat(3000) } },
          {
            partition: 0,
            offset: 2,
            value: order('c', 'c'.repeat(3000)),
            headers: { 'idempotency-key': 'c' },
          },
        ]),
      );
      expect(report.partitions[0], claimWrite).toMatchObject({
        stagedRows: 1,
        deadLettered: 2,
        stagedOffset: 2,
      });
      const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
      expect(rows.filter((r) => r.stream === 'deadletter').map((r) => r.row.error)).toEqual([
        'idempotency key longer than 1024 bytes',
        'state key longer than 1024 bytes',
      ]);
    }
  });

  describe('P5 restartable: a crash at any step, then redelivery, ends as a run without the crash', async () => {
    const cases: Array<readonly [ProcessorStep, number, 'ahead' | 'in-transaction']> = (
      [
        ['after-claims', 1],
        ['before-stage-write', 1],
        ['after-stage-write', 1],
        ['after-transaction', 1],
        ['before-stage-write', 3],
        ['after-stage-write', 3],
        ['after-transaction', 3],
        ['before-return', 1],
      ] as const
    ).flatMap(([step, nth]) => [
      [step, nth, 'ahead'],
      // Claims inside the transaction have no step of their own.
      ...(step === 'after-claims' ? [] : [[step, nth, 'in-transaction'] as const]),
    ]);
    it.each(cases)('P5 crash at %s #%i (claims %s)', async (step, nth, claimWrite) => {
      const reference = settingsFor({ maxTransactionItems: 10, claimWrite });
      await processorFor(reference).processEvent(p5batch);
      const settings = settingsFor({ maxTransactionItems: 10, claimWrite });
      await expect(
        processorFor(settings, { hooks: crashAt(step, nth) }).processEvent(p5batch),
      ).rejects.toThrow(InjectedCrashError);
      await processorFor(settings).processEvent(p5batch);
      const [got, want] = await Promise.all([snapshot(settings), snapshot(reference)]);
      expect(got.rows).toEqual(want.rows);
      expect(got.ledger.state).toEqual(want.ledger.state);
      expect(got.ledger.fences).toEqual(want.ledger.fences);
      expect(got.ledger.claims).toEqual(want.ledger.claims);
    });
  });

  it('P5 transient AWS errors fail the invocation; the retry is harmless', async () => {
    const settings = settingsFor();
    const clients = createAwsClients();
    let failures = 1;
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand' && failures-- > 0) {
          throw Object.assign(new Error('Transaction cancelled'), {
            name: 'TransactionCanceledException',
            CancellationReasons: [{ Code: 'TransactionConflict' }],
            $metadata: { httpStatusCode: 400 },
          });
        }
        return next(args);
      },
      { step: 'initialize', name: 'injectConflict' },
    );
    const processor = createProcessor({ settings, clients });
    const event = mskEvent(orderRecords(0, 0, 5));
    await expect(processor.processEvent(event)).rejects.toThrow(TransientAwsError);
    await processor.processEvent(event);
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows).toHaveLength(5);
  });

  it('P6 poison records: one dead-letter row mid-batch, the rest staged, the partition moves on', async () => {
    const settings = settingsFor();
    const report = await processorFor(settings).processEvent(batch);
    expect(report.partitions[0]).toMatchObject({ stagedRows: 19, deadLettered: 1, stagedOffset: 19 });
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    const dead = rows.filter((r) => r.stream === 'deadletter');
    expect(dead.map((r) => r.row.source)).toEqual([{ topic: 'orders', partition: 0, offset: 12 }]);
    expect(rows.filter((r) => r.stream === 'output')).toHaveLength(28);
  });

  it('P6 poison rules of the orders transform: decimals, currency, missing field', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const values = [
      order('a', 'c', '1000', 'KRW'),
      order('b', 'c', '10.5', 'KRW'),
      order('c', 'c', '1.234', 'USD'),
      order('d', 'c', '1.00', 'XYZ'),
      JSON.stringify({ orderId: 'e', amount: '1', currency: 'EUR', ts: 1 }),
      order('f', 'c', '7.5', 'GBP'),
    ];
    await processorFor(settings).processEvent(
      mskEvent(values.map((value, offset) => ({ partition: 0, offset, value }))),
    );
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.filter((r) => r.stream === 'output').map((r) => [r.row.orderId, r.row.amountMinor])).toEqual([
      ['a', 1000],
      ['f', 750],
    ]);
    expect(rows.filter((r) => r.stream === 'deadletter').map((r) => r.row.error)).toEqual([
      'amount "10.5" has more decimals than KRW allows (0)',
      'amount "1.234" has more decimals than USD allows (2)',
      'currency "XYZ" is not an ISO 4217 code',
      'field "customerId" is missing or not a string',
    ]);
  });

  it('rejects a malformed event naming the field, and writes nothing', async () => {
    const settings = settingsFor();
    const event = mskEvent(orderRecords(0, 0, 2)) as unknown as {
      records: Record<string, Array<Record<string, unknown>>>;
    };
    event.records['orders-0']![1]!.offset = 'seven';
    await expect(processorFor(settings).processEvent(event)).rejects.toThrow(
      new MalformedEventError(
        'event.records.orders-0[1].offset',
        'Invalid input: expected number, received string',
      ),
    );
    await expect(
      processorFor(settings).processEvent({ eventSource: 'aws:sqs', records: {} }),
    ).rejects.toThrow(/event\.eventSource/);
    const unordered = mskEvent([...orderRecords(0, 5, 1), ...orderRecords(0, 3, 1)]);
    await expect(processorFor(settings).processEvent(unordered)).rejects.toThrow(/offsets must increase/);
    expect(await scanPipeline(res.clients, res.table, settings.pipelineId)).toEqual([]);
    expect(await listKeys(`${settings.pipelineId}/`)).toEqual([]);
  });

  it('fails clearly on a missing table or bucket, and stages nothing', async () => {
    const noTable = settingsFor({ ledgerTable: 'no-such-table' });
    await expect(processorFor(noTable).processEvent(batch)).rejects.toThrow(
      new MissingResourceError('table no-such-table', 'does not exist'),
    );
    expect(await listKeys(`${noTable.pipelineId}/`)).toEqual([]);
    const noBucket = settingsFor({ bucket: 'no-such-bucket' });
    await expect(processorFor(noBucket).processEvent(batch)).rejects.toThrow(MissingResourceError);
    // Claims ahead come before the first staged write; the failed attempt released every one it took.
    const left = await scanPipeline(res.clients, res.table, noBucket.pipelineId);
    expect(left.length).toBeGreaterThan(0);
    for (const item of left) {
      expect(item).toMatchObject({ sk: 'CLAIM', expiresAt: 0 });
      expect(String(item.pk)).toContain('#CLAIM#');
    }
  });

  it('at-least-once writes final objects directly and duplicates after a retry; none loses under a crash', async () => {
    const alo = settingsFor({ deliveryGuarantee: 'at-least-once' });
    const event = mskEvent(orderRecords(0, 0, 4));
    await expect(
      processorFor(alo, { hooks: crashAt('after-transaction') }).processEvent(event),
    ).rejects.toThrow();
    await processorFor(alo).processEvent(event);
    const finals = await listKeys(`${alo.pipelineId}/final/output/`);
    expect(finals).toHaveLength(2);
    const aloState = await ledgerView(res.clients, res.table, alo.pipelineId);
    expect(Object.values(aloState.state).reduce((n, s) => n + (s.count as number), 0)).toBe(8);

    const none = settingsFor({ deliveryGuarantee: 'none' });
    const report = await processorFor(none, { hooks: crashAt('before-stage-write') }).processEvent(event);
    expect(report.partitions).toEqual([]);
    expect(await listKeys(`${none.pipelineId}/`)).toEqual([]);
  });
});
