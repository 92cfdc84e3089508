/**
 * Adversarial interleavings of partition-scoped idempotency (`idempotencyScope: partition`, the key window)
 * against DynamoDB Local and the S3 server: what the window remembers (keys, not buckets; a bucket opened under a
 * shorter TTL), what a cached window costs, and the window under eviction, races and conflicts.
 */
import { randomBytes } from 'node:crypto';
import v8 from 'node:v8';
import vm from 'node:vm';
import { DeleteCommand, DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError, MalformedLedgerItemError } from '../../shared/errors.ts';
import { BUCKET_ENTRIES, ENTRY_BYTES, KeyWindow, maxBuckets } from '../../shared/ledger/key-window.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { keyWindowBuckets, stagedOutputCounts } from '../support/ledger.ts';
import { mskEvent, order, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rkp');
});

const DAY_S = 86_400;
const DAY_MS = DAY_S * 1000;

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rkp', { idempotencyScope: 'partition', ...overrides });
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/** A record whose idempotency key (header) is `key`; `variant` changes its payload (a conflict, not a duplicate). */
const keyed = (partition: number, offset: number, key: string, variant = ''): RecordSpec => ({
  partition,
  offset,
  key,
  value: order(key, `cust-${key}`, variant ? '99.00' : '10.00'),
  headers: { 'idempotency-key': key },
});

/** A keyed record sharing one customer with its kind: a chunk of many of them is one transaction of few items. */
const filler = (partition: number, offset: number, key: string): RecordSpec => ({
  partition,
  offset,
  key,
  value: order(key, 'cust-fill'),
  headers: { 'idempotency-key': key },
});

const unkeyed = (partition: number, offset: number): RecordSpec => ({
  partition,
  offset,
  value: order(`U${partition}-${offset}`, `cust-U${offset}`),
});

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

const doc = () => DynamoDBDocumentClient.from(res.clients.dynamodb);

/** Output rows per orderId over everything the ledger references (staged output). */
function outputCounts(settings: Settings): Promise<Record<string, number>> {
  return stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
}

/** The partition's key-window buckets as stored: seq and how many keys each holds. */
function buckets(settings: Settings, partition = 0, topic = 'orders'): Promise<Array<[number, number]>> {
  return keyWindowBuckets(res.clients, res.table, settings.pipelineId, topic, partition);
}

describe('what the key window remembers (docs: at least the TTL, or at least the last windowKeys keys)', () => {
  it('a key is forgotten within the TTL after only two newer keys when time-rotated buckets are partial', async () => {
    // Interleaving (one container, sparse traffic): idempotencyWindowKeys 1,000, so maxBuckets() = 2.
    //   t0            K0 staged: bucket 1 = [K0]
    //   t0 + TTL/8    K1 staged: bucket 1 no longer takes keys (older than TTL/8): bucket 2 = [K1]
    //   t0 + 2·TTL/8  K2 staged: bucket 3 = [K2]; only the newest 2 buckets count: bucket 1 (K0) drops out
    //   t0 + 2·TTL/8  K0 again (a producer retry): 2 keys since, 6 hours < TTL: the docs promise it is blocked
    //                 ("at least idempotencyTtlSeconds ... and for at least the last idempotencyWindowKeys"),
    //                 yet it is staged a second time.
    const clock = new ManualClock(Date.now());
    const settings = settingsFor({ idempotencyWindowKeys: 1_000, idempotencyTtlSeconds: DAY_S });
    const processor = processorFor(settings, { clock });
    await processor.processEvent(mskEvent([keyed(0, 0, 'K0')]));
    clock.advance(DAY_MS / 8 + 1000);
    await processor.processEvent(mskEvent([keyed(0, 1, 'K1')]));
    clock.advance(DAY_MS / 8 + 1000);
    await processor.processEvent(mskEvent([keyed(0, 2, 'K2')]));
    expect(await buckets(settings)).toEqual([
      [1, 1],
      [2, 1],
      [3, 1],
    ]);
    const report = await processor.processEvent(mskEvent([keyed(0, 3, 'K0')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect((await outputCounts(settings)).K0).toBe(1);
  });

  it('with a clock skew of seconds between two containers, a key is forgotten after two newer keys', {
    timeout: 60_000,
  }, async () => {
    // Interleaving (heavy traffic, seconds of real time): idempotencyWindowKeys 1,000 (maxBuckets 2).
    //   container A (clock 10 s ahead) stages 999 keys then K0: bucket 1 full, K0 its last key
    //   A stages K1: bucket 2 = [K1], createdAt = A's clock (10 s in B's future)
    //   container B (correct clock) stages K2: accepts() refuses bucket 2 (now < createdAt): bucket 3 = [K2]
    //   B gets K0 again: the newest 2 buckets are 3 and 2: K0 (2 keys ago, seconds ago) is staged twice.
    // The same cause as the case above (the window counts buckets, not keys; skew closes buckets partially).
    const base = Date.now();
    const ahead = new ManualClock(base + 10_000);
    const correct = new ManualClock(base);
    const settings = settingsFor({ idempotencyWindowKeys: 1_000, idempotencyTtlSeconds: DAY_S });
    const a = processorFor(settings, { clock: ahead });
    const b = processorFor(settings, { clock: correct });
    await a.processEvent(mskEvent([...range(0, 999).map((o) => filler(0, o, `F${o}`)), keyed(0, 999, 'K0')]));
    await a.processEvent(mskEvent([keyed(0, 1000, 'K1')]));
    await b.processEvent(mskEvent([keyed(0, 1001, 'K2')]));
    // Guard: B takes A's bucket although it opened 10 s in B's future (and the window counts keys, not buckets).
    expect(await buckets(settings)).toEqual([
      [1, 1000],
      [2, 2],
    ]);
    const report = await b.processEvent(mskEvent([keyed(0, 1002, 'K0')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect((await outputCounts(settings)).K0).toBe(1);
  });

  it('after idempotencyTtlSeconds is raised, a key joins a bucket that expires under the old TTL', async () => {
    // Interleaving (a configuration change, rolled out as usual):
    //   t0          TTL 1 day: K0 staged, bucket 1 opens with expiresAt = t0 + 1.125 days
    //   t0 + 0.9 d  TTL now 8 days (redeploy): accepts() judges bucket 1 by the *current* TTL (it takes keys
    //               for 8/8 = 1 day), so K1 is appended to bucket 1, which still expires at t0 + 1.125 days
    //   t0 + 1.2 d  K1 again, 0.3 days after it was staged: blocked neither for the new TTL (8 days) nor the old
    //               (1 day): staged twice. (Global-scope claims carry their own expiresAt: unaffected.)
    const clock = new ManualClock(Date.now());
    const oneDay = settingsFor({ idempotencyTtlSeconds: DAY_S });
    await processorFor(oneDay, { clock }).processEvent(mskEvent([keyed(0, 0, 'K0')]));
    clock.advance(0.9 * DAY_MS);
    const eightDays = { ...oneDay, idempotencyTtlSeconds: 8 * DAY_S };
    const redeployed = processorFor(eightDays, { clock });
    await redeployed.processEvent(mskEvent([keyed(0, 1, 'K1')]));
    // Guard: K1 opens a bucket of its own (the one opened under the one-day TTL would not outlive it by 8 days).
    expect(await buckets(oneDay)).toEqual([
      [1, 1],
      [2, 1],
    ]);
    clock.advance(0.3 * DAY_MS);
    const report = await redeployed.processEvent(mskEvent([keyed(0, 2, 'K1')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect((await outputCounts(oneDay)).K1).toBe(1);
  });
});

describe('resources of the window cache', () => {
  it('a cached window costs ~100 bytes of heap per key, not 16: 16 windows at the maximum setting exceed the default 1,024 MB', {
    timeout: 60_000,
  }, () => {
    // Not an interleaving: the processor keeps the windows of its last 16 partitions "each up to
    // idempotencyWindowKeys × 16 bytes" (key-windows.ts WINDOW_CACHE_PARTITIONS, docs "Idempotency scope"), but
    // KeyWindow.indexOf builds a Map<string, string> of hex strings per bucket on the first lookup of a key not
    // held (every bucket is indexed). Measured here: ~90 bytes of retained heap per key on top of the 16 bytes
    // of entries. At idempotencyWindowKeys 1,000,000 (allowed) 16 windows are ~1.7 GB: the default processor
    // (1,024 MB) dies of OOM, and so does its retry, a stall until retention. The live windows of one event
    // are not bounded by the cache either (every partition of the event holds its window while it stages).
    v8.setFlagsFromString('--expose-gc');
    const expose = vm.runInNewContext('gc') as (() => void) | undefined;
    const gc = () => {
      expose?.();
      expose?.();
    };
    const limits = { ttlSeconds: DAY_S, windowKeys: 100_000 };
    const now = Date.now();
    const stored = Array.from({ length: maxBuckets(limits) }, (_, i) => ({
      seq: i + 1,
      createdAt: now,
      expiresAt: Math.ceil(now / 1000) + DAY_S,
      entries: new Uint8Array(randomBytes(BUCKET_ENTRIES * ENTRY_BYTES)),
    }));
    gc();
    const before = process.memoryUsage().heapUsed;
    const window = new KeyWindow(stored, limits);
    expect(window.lookup('a key no bucket holds', now)).toBeUndefined();
    gc();
    const perKey = (process.memoryUsage().heapUsed - before) / (stored.length * BUCKET_ENTRIES);
    expect(window.lookup('still held', now)).toBeUndefined(); // keep the window alive until measured
    const cacheAtMaximum = 16 * 1_000_000 * (perKey + ENTRY_BYTES);
    expect(cacheAtMaximum).toBeLessThan(1024 * 1024 * 1024);
  });
});

describe('the key window under eviction, races, conflicts and scope switches', () => {
  it('a partition with window buckets but no fence (fence deleted by hand) fails loudly and overwrites nothing', async () => {
    // Out of protocol (operations.md: never delete a fence). With fence shards the legacy key holds a moved
    // marker for the partition, so the missing sharded fence is a malformed ledger (MalformedLedgerItemError)
    // before any window is read: the partition stops loudly (PartitionsStopped) and overwrites nothing. (Before
    // the shards: KeyWindowChangedError after 3 re-reads, also loud.)
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent([keyed(0, 0, 'N0')]));
    await doc().send(
      new DeleteCommand({ TableName: res.table, Key: keys.fence(settings.pipelineId, 'orders', 0) }),
    );
    const cold = processorFor(settings);
    await expect(cold.processEvent(mskEvent([keyed(0, 1, 'N1')]))).rejects.toThrow(MalformedLedgerItemError);
    expect(await buckets(settings)).toEqual([[1, 1]]);
  });

  it('a window read pages past DynamoDB 1 MB and returns exactly the newest maxBuckets buckets', async () => {
    // 102 full buckets (16 KB each, ~1.6 MB): the Query with Limit pages (1 MB) and stops at 101, newest first.
    const settings = settingsFor();
    const limits = { ttlSeconds: DAY_S, windowKeys: settings.idempotencyWindowKeys };
    const wanted = maxBuckets(limits);
    const now = Date.now();
    const client = doc();
    for (let start = 1; start <= wanted + 1; start += 10) {
      await Promise.all(
        range(start, Math.min(10, wanted + 2 - start)).map((seq) =>
          client.send(
            new PutCommand({
              TableName: res.table,
              Item: {
                ...keys.keyWindowBucket(settings.pipelineId, 'orders', 7, seq),
                seq,
                createdAt: now,
                expiresAt: Math.ceil(now / 1000) + DAY_S,
                entries: new Uint8Array(randomBytes(BUCKET_ENTRIES * ENTRY_BYTES)),
              },
            }),
          ),
        ),
      );
    }
    const ledger = new StagingLedger(res.clients.dynamodb, res.table);
    const read = await ledger.readKeyWindow(settings.pipelineId, 'orders', 7, wanted);
    expect(read.map((bucket) => bucket.seq)).toEqual(range(2, wanted).reverse());
  });

  it('a chunk that fills the open bucket exactly, and one that spans two buckets, keep every key once', {
    timeout: 60_000,
  }, async () => {
    const settings = settingsFor({ idempotencyWindowKeys: 3_000 });
    const processor = processorFor(settings);
    // 500 keys, then 500 more: bucket 1 exactly full; one more opens bucket 2.
    await processor.processEvent(mskEvent(range(0, 500).map((o) => filler(0, o, `E${o}`))));
    await processor.processEvent(mskEvent(range(500, 500).map((o) => filler(0, o, `E${o}`))));
    expect(await buckets(settings)).toEqual([[1, 1000]]);
    await processor.processEvent(mskEvent([filler(0, 1000, 'E1000')]));
    // 1,000 keys in one chunk on an open bucket of 1: 999 fill bucket 2, the last opens bucket 3.
    await processor.processEvent(mskEvent(range(1001, 1000).map((o) => filler(0, o, `E${o}`))));
    expect(await buckets(settings)).toEqual([
      [1, 1000],
      [2, 1000],
      [3, 1],
    ]);
    // Every key is held, by a cold container and by the warm one.
    const probe = [0, 999, 1000, 1001, 1999, 2000].map((n, i) => filler(0, 2001 + i, `E${n}`));
    const warm = await processor.processEvent(mskEvent(probe));
    expect(warm.partitions[0]).toMatchObject({ duplicatesByKey: probe.length, stagedRows: 0 });
    const again = probe.map((spec, i) => ({ ...spec, offset: 3000 + i }));
    const cold = await processorFor(settings).processEvent(mskEvent(again));
    expect(cold.partitions[0]).toMatchObject({ duplicatesByKey: probe.length, stagedRows: 0 });
    const counts = await outputCounts(settings);
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
    expect(Object.keys(counts)).toHaveLength(2001);
  });

  it('a window evicted from the LRU cache is read again, newer than the cached fence, and the stale fence fails', async () => {
    const settings = settingsFor();
    const a = processorFor(settings);
    const b = processorFor(settings);
    await a.processEvent(mskEvent([keyed(0, 0, 'L0')]));
    // 16 other partitions push partition 0's window out of a's cache (its fence stays cached).
    await a.processEvent(mskEvent(range(1, 16).map((p) => keyed(p, 0, `L-p${p}`))));
    // b stages L1 on partition 0: a's cached fence (0) is stale.
    await b.processEvent(mskEvent([keyed(0, 1, 'L1')]));
    const report = await a.processEvent(mskEvent([keyed(0, 2, 'L1'), keyed(0, 3, 'L0'), keyed(0, 4, 'L2')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 2, stagedRows: 1, stagedOffset: 4 });
    expect(await outputCounts(settings)).toMatchObject({ L0: 1, L1: 1, L2: 1 });
  });

  it('a window carried across a batch without keys still fails its fence when another container staged', async () => {
    const settings = settingsFor();
    const a = processorFor(settings);
    const b = processorFor(settings);
    await a.processEvent(mskEvent([keyed(0, 0, 'U0')]));
    // A batch without keys: a carries its window (fence 0) to fence 2 without reading.
    await a.processEvent(mskEvent([unkeyed(0, 1), unkeyed(0, 2)]));
    // b (cold) stages U1 and another batch without keys; a's window copy belongs to fence 2, the store is at 5.
    await b.processEvent(mskEvent([keyed(0, 3, 'U1')]));
    await b.processEvent(mskEvent([unkeyed(0, 4), unkeyed(0, 5)]));
    const report = await a.processEvent(mskEvent([keyed(0, 6, 'U1'), keyed(0, 7, 'U0'), keyed(0, 8, 'U2')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 2, stagedRows: 1, stagedOffset: 8 });
    // And b, whose window copy (fence 5) is stale now, finds U2.
    const later = await b.processEvent(mskEvent([keyed(0, 9, 'U2')]));
    expect(later.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect(await outputCounts(settings)).toMatchObject({ U0: 1, U1: 1, U2: 1 });
  });

  it('a zombie with a cache from after its own first chunk, racing a cold retry of the same batch, stages nothing twice', async () => {
    // maxTransactionItems 8: the fence, the output entry, two buckets and four state items per chunk.
    const settings = settingsFor({ maxTransactionItems: 8 });
    const batch = mskEvent(['Z0', 'Z1', 'Z2', 'Z3', 'Z0', 'Z4', 'Z5', 'Z1'].map((k, i) => keyed(0, i, k)));
    // The zombie commits chunk 1 (offsets 0-4; its cache: fence 4, window Z0..Z3), then "crashes" before chunk 2.
    const zombie = processorFor(settings, { hooks: crashAt('before-stage-write', 2) });
    await expect(zombie.processEvent(batch)).rejects.toThrow(InjectedCrashError);
    // The retry on a cold container finishes the batch; then the zombie, its cache one fence behind, runs it
    // again (the mapping's next retry), and once more a batch that repeats keys of both chunks.
    const retry = await processorFor(settings).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 7 });
    const late = await zombie.processEvent(batch);
    expect(late.partitions[0]).toMatchObject({ stagedRows: 0, stagedOffset: 7 });
    const more = await zombie.processEvent(
      mskEvent([keyed(0, 8, 'Z5'), keyed(0, 9, 'Z2'), keyed(0, 10, 'Z6')]),
    );
    expect(more.partitions[0]).toMatchObject({ duplicatesByKey: 2, stagedRows: 1 });
    const all = ['Z0', 'Z1', 'Z2', 'Z3', 'Z4', 'Z5', 'Z6'];
    expect(await outputCounts(settings)).toEqual(Object.fromEntries(all.map((k) => [k, 1])));
    expect((await buckets(settings)).reduce((sum, [, n]) => sum + n, 0)).toBe(all.length);
  });

  it('an add refused by a text field (StateTypeConflictError re-plan) keeps the dead letter out of the window', async () => {
    const settings = settingsFor();
    const transform: Transform = {
      name: 'typed',
      apply(record) {
        const state =
          record.value === 'set'
            ? [{ key: 'c', fields: { label: 'gold' }, add: { count: 1 } }]
            : record.value === 'bad'
              ? [{ key: 'c', fields: {}, add: { label: 5 } }]
              : [{ key: 'c', fields: {}, add: { count: 2 } }];
        return { kind: 'ok', rows: [{ offset: record.offset, value: record.value }], state };
      },
    };
    const withKey = (offset: number, key: string, value: string): RecordSpec => ({
      partition: 0,
      offset,
      key,
      value,
      headers: { 'idempotency-key': key },
    });
    const processor = processorFor(settings, { transform });
    await processor.processEvent(mskEvent([withKey(0, 'S0', 'set')]));
    const report = await processor.processEvent(
      mskEvent([withKey(1, 'S1', 'good'), withKey(2, 'S2', 'bad'), withKey(3, 'S3', 'good')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, deadLettered: 1, stagedOffset: 3 });
    // The window holds S0, S1, S3 (the dead letter never claims its key): a corrected S2 is staged, a resent S1
    // is a duplicate.
    expect(await buckets(settings)).toEqual([[1, 3]]);
    const fixed = await processorFor(settings, { transform }).processEvent(
      mskEvent([withKey(4, 'S2', 'good'), withKey(5, 'S1', 'good')]),
    );
    expect(fixed.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1, keyConflicts: 0 });
  });

  it('a container whose cached fence is NO_FENCE (its first attempt failed) finds what another container staged', async () => {
    const settings = settingsFor();
    // a reads "no fence" and an empty window (no Query at NO_FENCE), then crashes before its transaction.
    const a = processorFor(settings, { hooks: crashAt('after-stage-write', 1) });
    await expect(a.processEvent(mskEvent([keyed(0, 0, 'Q0'), keyed(0, 1, 'Q1')]))).rejects.toThrow(
      InjectedCrashError,
    );
    await processorFor(settings).processEvent(mskEvent([keyed(0, 0, 'Q0'), keyed(0, 1, 'Q1')]));
    // a's copy says NO_FENCE and an empty window: its transaction (fence absent) is refused, it reads both.
    const report = await a.processEvent(mskEvent([keyed(0, 2, 'Q1'), keyed(0, 3, 'Q2')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 1, stagedOffset: 3 });
    expect(await outputCounts(settings)).toEqual({ Q0: 1, Q1: 1, Q2: 1 });
  });

  it('switching scope while containers of both run applies no offset twice; only keys the other scope remembered pass', async () => {
    const partition = settingsFor();
    const global = { ...partition, idempotencyScope: 'global' as const };
    const a = processorFor(partition);
    await a.processEvent(mskEvent([keyed(0, 0, 'W0')]));
    // A global-scope container (the new deployment) stages W1 with a claim; the window does not learn it.
    await processorFor(global).processEvent(mskEvent([keyed(0, 1, 'W1')]));
    // a (partition scope, cache at fence 0) is refused, reads fence and window again: W0 is held, W1 is not
    // (docs: "duplicates of keys remembered only by the other scope are not caught for one TTL").
    // (A redelivery of offset 1 in the same batch would also drop offset 2: the batch's first W1 holds it.)
    const report = await a.processEvent(mskEvent([keyed(0, 2, 'W1'), keyed(0, 3, 'W0')]));
    expect(report.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 1, stagedOffset: 3 });
    expect(await outputCounts(partition)).toEqual({ W0: 1, W1: 2 });
    // Back to global: the claim of W1 still catches it; W0 (window only) passes, as documented.
    const back = await processorFor(global).processEvent(mskEvent([keyed(0, 4, 'W1'), keyed(0, 5, 'W0')]));
    expect(back.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 1, stagedOffset: 5 });
  });

  it('a key conflict (same key, other payload) in one batch and across batches is dead-lettered, never staged', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    const first = await processor.processEvent(
      mskEvent([keyed(0, 0, 'C0'), keyed(0, 1, 'C0', 'other'), keyed(0, 2, 'C0')]),
    );
    expect(first.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1, keyConflicts: 1 });
    const second = await processorFor(settings).processEvent(
      mskEvent([keyed(0, 3, 'C0', 'other'), keyed(0, 4, 'C0'), keyed(0, 5, 'C0', 'other')]),
    );
    expect(second.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 1, keyConflicts: 2 });
    expect(await outputCounts(settings)).toEqual({ C0: 1 });
    expect(await buckets(settings)).toEqual([[1, 1]]);
  });
});
