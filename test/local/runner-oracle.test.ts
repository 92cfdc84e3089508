import { describe, expect, it } from 'vitest';
import {
  type CommittedRow,
  compareOutcome,
  expectOutcome,
  resolveExpectation,
} from '../../local/expectation.ts';
import { generateOrders, IDEMPOTENCY_HEADER, partitionForKey } from '../../local/generator.ts';
import { PartitionedLog } from '../../local/kafka-log.ts';
import { ManualClock } from '../../shared/clock.ts';
import { decodeRecord, strictUtf8 } from '../../shared/kafka/event.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { evaluateRecord } from '../../shared/processor/evaluate.ts';
import { ordersTransform } from '../../shared/transforms/orders.ts';
import { mskRecord, order } from '../support/msk.ts';

function decoded(input: ReturnType<typeof generateOrders>, partitions: number): DecodedRecord[] {
  const log = new PartitionedLog('orders', partitions, new ManualClock());
  for (const record of input) log.append(record.partition, record);
  return Array.from({ length: partitions }, (_, p) =>
    log.entries(p).map((e) => decodeRecord(e.record)),
  ).flat();
}

const header = { kind: 'header', name: IDEMPOTENCY_HEADER } as const;

/** The idempotency-key header's exact bytes (base64), as the processor keys them. */
const keyBytes = (r: DecodedRecord) => r.rawHeaders.findLast((h) => h.name === IDEMPOTENCY_HEADER)?.value;

describe('order generator', () => {
  it('is reproducible from its seed, with producer duplicates and poison the transform rejects', () => {
    const options = { seed: 11, records: 2000, partitions: 4, duplicateRate: 0.1, poisonRate: 0.05 };
    const input = generateOrders(options);
    expect(generateOrders(options)).toEqual(input);
    expect(generateOrders({ ...options, seed: 12 })).not.toEqual(input);
    const records = decoded(input, 4);
    const results = records.map((r) => evaluateRecord(ordersTransform, header, r));
    const poison = results.filter((r) => r.deadLetter).length;
    expect(poison / records.length).toBeGreaterThan(0.03);
    expect(poison / records.length).toBeLessThan(0.07);
    const keys = records.map(keyBytes);
    const duplicates = keys.length - new Set(keys).size;
    expect(duplicates / records.length).toBeGreaterThan(0.07);
    // Resends carry the same value; most go to the same partition as the original, some elsewhere.
    const byKey = new Map<string, DecodedRecord[]>();
    for (const r of records) byKey.set(keyBytes(r)!, [...(byKey.get(keyBytes(r)!) ?? []), r]);
    const resent = [...byKey.values()].filter((group) => group.length > 1);
    expect(resent.every((group) => group.every((r) => r.value === group[0]!.value))).toBe(true);
    expect(resent.some((group) => new Set(group.map((r) => r.partition)).size > 1)).toBe(true);
    expect(partitionForKey('cust-001', 4)).toBe(partitionForKey('cust-001', 4));
  });

  it('mixes in tombstones, lone-surrogate customer ids and binary keys that a lossy decoding would merge', () => {
    const records = decoded(generateOrders({ seed: 7, records: 3000, partitions: 3, poisonRate: 0.05 }), 3);
    const errors = records.map((r) => evaluateRecord(ordersTransform, header, r).deadLetter?.error ?? '');
    expect(errors.filter((e) => e.startsWith('tombstone:')).length).toBeGreaterThan(5);
    expect(errors.filter((e) => e.includes('not well-formed UTF-16')).length).toBeGreaterThan(5);
    const binary = records.filter((r) => strictUtf8(Buffer.from(keyBytes(r)!, 'base64')) === undefined);
    expect(binary.length / records.length).toBeGreaterThan(0.02);
    const lossy = new Set(binary.map((r) => r.headers[IDEMPOTENCY_HEADER]));
    const exact = new Set(binary.map((r) => evaluateRecord(ordersTransform, header, r).idempotencyKey));
    expect(exact.size).toBeGreaterThan(lossy.size);
  });
});

describe('the end-to-end oracle', () => {
  const records = decoded(
    generateOrders({ seed: 5, records: 300, partitions: 3, duplicateRate: 0.2, poisonRate: 0.05 }),
    3,
  );
  const model = expectOutcome(records, ordersTransform, { keySource: header });
  /**
   * The rows exactly-once must commit: every poison record's dead letter, and the first record of each key (the
   * generator's resends carry the same bytes, so no conflicts), in partition order.
   */
  const perfect = (): CommittedRow[] => {
    const seen = new Set<string>();
    return records.flatMap((record): CommittedRow[] => {
      const source = { topic: record.topic, partition: record.partition, offset: record.offset };
      if (evaluateRecord(ordersTransform, header, record).deadLetter)
        return [{ stream: 'deadletter' as const, source }];
      const key = keyBytes(record)!;
      if (seen.has(key)) return [];
      seen.add(key);
      return [{ stream: 'output' as const, source }];
    });
  };
  const expectation = resolveExpectation(model, perfect());

  it('accepts exactly one row per identity with the expected aggregates', () => {
    const outcome = compareOutcome(expectation, perfect(), expectation.aggregates);
    expect(outcome).toEqual({
      lost: 0,
      duplicated: 0,
      unexpected: 0,
      aggregatesMatch: true,
      differences: [],
    });
    expect(expectation.identities.size).toBeLessThan(records.length);
  });

  it('counts lost, duplicated and unexpected rows, and aggregates that differ', () => {
    const rows = perfect();
    const dropped = rows.slice(3);
    const doubled = [...rows, rows[0]!, rows[1]!];
    const stranger = [
      ...rows,
      { stream: 'output' as const, source: { topic: 'orders', partition: 9, offset: 0 } },
    ];
    expect(compareOutcome(expectation, dropped, expectation.aggregates)).toMatchObject({
      lost: 3,
      duplicated: 0,
    });
    expect(compareOutcome(expectation, doubled, expectation.aggregates)).toMatchObject({
      lost: 0,
      duplicated: 2,
    });
    expect(compareOutcome(expectation, stranger, expectation.aggregates)).toMatchObject({ unexpected: 1 });
    const [key, aggregate] = [...expectation.aggregates][0]!;
    const off = new Map(expectation.aggregates).set(key, {
      ...aggregate,
      count: Number(aggregate.count) + 1,
    });
    const outcome = compareOutcome(expectation, rows, off);
    expect(outcome.aggregatesMatch).toBe(false);
    expect(outcome.differences[0]).toMatch(new RegExp(`^aggregate ${key}: expected`));
  });
});

describe('the oracle under idempotencyScope partition', () => {
  it('counts a key on two partitions as two identities, and a key twice on one partition as one', () => {
    const record = (partition: number, offset: number, key: string, id: string): DecodedRecord =>
      decodeRecord(
        mskRecord({
          partition,
          offset,
          key: 'cust-1',
          value: order(id),
          headers: { [IDEMPOTENCY_HEADER]: key },
        }),
      );
    const records = [record(0, 0, 'k1', 'o1'), record(1, 0, 'k1', 'o1'), record(0, 1, 'k1', 'o1')];
    const global = resolveExpectation(expectOutcome(records, ordersTransform, { keySource: header }), []);
    const partition = resolveExpectation(
      expectOutcome(records, ordersTransform, { keySource: header, scope: 'partition' }),
      [],
    );
    expect(global.identities.size).toBe(1);
    expect(partition.identities.size).toBe(2);
    expect(partition.identityOf.get('orders#0#0')).toBe(partition.identityOf.get('orders#0#1'));
    expect(partition.identityOf.get('orders#0#0')).not.toBe(partition.identityOf.get('orders#1#0'));
  });
});
