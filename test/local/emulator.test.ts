import { KafkaMskEventSchema } from '@aws-lambda-powertools/parser/schemas/kafka';
import { describe, expect, it } from 'vitest';
import { RecordTooLargeError, UnknownPartitionError } from '../../local/errors.ts';
import { PartitionedLog } from '../../local/kafka-log.ts';
import {
  type Delivery,
  MAX_PAYLOAD_BYTES,
  MskEmulator,
  type MskEmulatorOptions,
} from '../../local/msk-emulator.ts';
import { seededRandom } from '../../local/prng.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseMskEvent, partitionBatches } from '../../shared/kafka/event.ts';

function setup(partitions: number, options: Partial<MskEmulatorOptions> = {}) {
  const clock = new ManualClock();
  const log = new PartitionedLog('orders', partitions, clock);
  const emulator = new MskEmulator({ log, clock, ...options });
  return { clock, log, emulator };
}

function fill(emulator: MskEmulator, partition: number, count: number, value = (i: number) => `v${i}`): void {
  for (let i = 0; i < count; i++) emulator.produce(partition, { key: `k${i}`, value: value(i) });
}

function offsetsOf(delivery: Delivery, partition: number): number[] {
  return (delivery.event.records[`orders-${partition}`] ?? []).map((r) => r.offset);
}

describe('MSK event-source emulator', () => {
  it('emits events in the exact MSK format that pass Powertools KafkaMskEventSchema', () => {
    const { emulator, log } = setup(2, { maxPartitionsPerEvent: 2 });
    emulator.produce(0, {
      key: 'cust-007',
      value: '{"orderId":"ord-1"}',
      headers: { 'idempotency-key': 'ord-1' },
    });
    emulator.produce(1, { key: null, value: 'ünïcode', headers: {} });
    log.close();
    const delivery = emulator.poll()!;
    const parsed = KafkaMskEventSchema.parse(delivery.event);
    expect(parsed.eventSource).toBe('aws:kafka');
    expect(Object.keys(delivery.event.records).sort()).toEqual(['orders-0', 'orders-1']);
    const [first] = delivery.event.records['orders-0']!;
    expect(first).toMatchObject({ topic: 'orders', partition: 0, offset: 0, timestampType: 'CREATE_TIME' });
    expect(Buffer.from(first!.key!, 'base64').toString()).toBe('cust-007');
    expect(Buffer.from(first!.value!, 'base64').toString()).toBe('{"orderId":"ord-1"}');
    expect(first!.headers).toEqual([{ 'idempotency-key': [...Buffer.from('ord-1')] }]);
    const [keyless] = delivery.event.records['orders-1']!;
    expect(keyless).not.toHaveProperty('key');
    expect(Buffer.from(keyless!.value!, 'base64').toString()).toBe('ünïcode');
    expect(delivery.payloadBytes).toBe(Buffer.byteLength(JSON.stringify(delivery.event)));
    // And the processor's own validation and decoding (the schema plus its offset and key checks) agree.
    const batches = partitionBatches(parseMskEvent(JSON.parse(JSON.stringify(delivery.event))));
    expect(batches.map((b) => [b.partition, b.records[0]!.key, b.records[0]!.value])).toEqual([
      [0, 'cust-007', '{"orderId":"ord-1"}'],
      [1, null, 'ünïcode'],
    ]);
    expect(batches[0]!.records[0]!.headers).toEqual({ 'idempotency-key': 'ord-1' });
  });

  it('delivers tombstones, unkeyed records and binary headers in the shape MSK sends, and the processor parses them', () => {
    const { emulator, log } = setup(1);
    emulator.produce(0, { key: 'cust-1', value: null, headers: { 'idempotency-key': [0x6b, 0xff] } });
    emulator.produce(0, { key: null, value: null, headers: { h: 'ë' } });
    log.close();
    const delivery = emulator.poll()!;
    const [tombstone, bare] = delivery.event.records['orders-0']!;
    expect(tombstone!.value).toBeNull();
    // Java's signed bytes, as the event source mapping serializes header values.
    expect(tombstone!.headers).toEqual([{ 'idempotency-key': [107, -1] }]);
    expect(bare!.headers).toEqual([{ h: [-61, -85] }]);
    const [batch] = partitionBatches(parseMskEvent(JSON.parse(JSON.stringify(delivery.event))));
    expect(batch!.records.map((r) => [r.key, r.value, r.rawHeaders])).toEqual([
      ['cust-1', null, [{ name: 'idempotency-key', value: Buffer.of(0x6b, 0xff).toString('base64') }]],
      [null, null, [{ name: 'h', value: Buffer.from('ë').toString('base64') }]],
    ]);
  });

  it('cuts per-partition ordered batches of at most batchSize records', () => {
    const { emulator, log } = setup(1, { batchSize: 100 });
    fill(emulator, 0, 250);
    log.close();
    const sizes: number[] = [];
    let expectedNext = 0;
    for (let d = emulator.poll(); d; d = emulator.poll()) {
      const offsets = offsetsOf(d, 0);
      expect(offsets[0]).toBe(expectedNext);
      expect(offsets).toEqual(offsets.map((_, i) => expectedNext + i));
      expectedNext += offsets.length;
      sizes.push(offsets.length);
      emulator.commit(d);
    }
    expect(sizes).toEqual([100, 100, 50]);
    expect(emulator.isDrained()).toBe(true);
  });

  it('holds a partial batch for the batching window, and releases a full one at once', () => {
    const { emulator, clock } = setup(1, { batchSize: 10, maxBatchingWindowMs: 500 });
    fill(emulator, 0, 4);
    expect(emulator.poll()).toBeUndefined();
    expect(emulator.nextReadyAt()).toBe(clock.now() + 500);
    clock.advance(499);
    expect(emulator.poll()).toBeUndefined();
    clock.advance(1);
    const partial = emulator.poll()!;
    expect(offsetsOf(partial, 0)).toEqual([0, 1, 2, 3]);
    emulator.commit(partial);
    fill(emulator, 0, 10);
    const full = emulator.poll()!;
    expect(offsetsOf(full, 0)).toHaveLength(10);
  });

  it('keeps every event within the 6 MB payload limit, cutting batches short when needed', () => {
    const { emulator, log } = setup(1, { batchSize: 100 });
    const big = 'x'.repeat(200_000); // ~267 KB per record once base64-encoded
    fill(emulator, 0, 60, () => big);
    expect(() => emulator.produce(0, { key: null, value: 'y'.repeat(5_000_000) })).toThrow(
      RecordTooLargeError,
    );
    expect(log.endOffset(0)).toBe(60);
    log.close();
    const sizes: number[] = [];
    for (let d = emulator.poll(); d; d = emulator.poll()) {
      expect(d.payloadBytes).toBeLessThanOrEqual(MAX_PAYLOAD_BYTES);
      expect(Buffer.byteLength(JSON.stringify(d.event))).toBe(d.payloadBytes);
      sizes.push(d.recordCount);
      emulator.commit(d);
    }
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(60);
    expect(Math.max(...sizes)).toBeLessThan(100);
    // The cut is tight: one more record would not have fitted.
    expect(sizes[0]).toBe(Math.floor((MAX_PAYLOAD_BYTES - 300) / 266_700));
  });

  it('carries several partitions in one event when allowed, each in offset order', () => {
    const { emulator, log } = setup(3, { batchSize: 5, maxPartitionsPerEvent: 3 });
    for (let p = 0; p < 3; p++) fill(emulator, p, 7);
    log.close();
    const first = emulator.poll()!;
    expect(Object.keys(first.event.records).sort()).toEqual(['orders-0', 'orders-1', 'orders-2']);
    for (let p = 0; p < 3; p++) expect(offsetsOf(first, p)).toEqual([0, 1, 2, 3, 4]);
    emulator.commit(first);
    const second = emulator.poll()!;
    for (let p = 0; p < 3; p++) expect(offsetsOf(second, p)).toEqual([5, 6]);
  });

  it('never has two batches of one partition in flight, and retries a failed batch whole and unchanged', () => {
    const { emulator, log } = setup(2, { batchSize: 3 });
    fill(emulator, 0, 5);
    fill(emulator, 1, 2);
    log.close();
    const a = emulator.poll()!;
    const b = emulator.poll()!;
    expect(a.slices[0]!.partition).not.toBe(b.slices[0]!.partition);
    expect(emulator.poll()).toBeUndefined();
    const p0 = a.slices[0]!.partition === 0 ? a : b;
    emulator.release(p0);
    expect(emulator.committedOffset(0)).toBe(0);
    const retry = emulator.poll()!;
    expect(retry.event.records).toEqual(p0.event.records);
    expect(retry.slices[0]).toMatchObject({ partition: 0, firstOffset: 0, lastOffset: 2, attempt: 2 });
    emulator.commit(retry);
    expect(emulator.committedOffset(0)).toBe(3);
    expect(() => emulator.commit(retry)).toThrow(/does not hold partition 0/);
    expect(() => emulator.produce(5, { key: null, value: 'x' })).toThrow(UnknownPartitionError);
  });

  it('delivers every record, in order per partition, under random failures (whole-batch retry)', () => {
    const { emulator, log } = setup(3, { batchSize: 7, maxPartitionsPerEvent: 2 });
    const random = seededRandom(42);
    for (let i = 0; i < 300; i++) emulator.produce(random.int(3), { key: null, value: `r${i}` });
    log.close();
    const acknowledged: number[][] = [[], [], []];
    let failures = 0;
    for (let d = emulator.poll(); d; d = emulator.poll()) {
      if (random.chance(0.3)) {
        failures++;
        emulator.release(d);
        continue;
      }
      for (const slice of d.slices) {
        for (let o = slice.firstOffset; o <= slice.lastOffset; o++) acknowledged[slice.partition]!.push(o);
      }
      emulator.commit(d);
    }
    expect(failures).toBeGreaterThan(5);
    for (let p = 0; p < 3; p++) {
      expect(acknowledged[p]).toEqual(Array.from({ length: log.endOffset(p) }, (_, i) => i));
    }
    expect(emulator.isDrained()).toBe(true);
  });
});
