/** Builds MSK events in the documented event-source-mapping format (base64 key/value, byte-array headers). */
import type { MskEvent, MskRecord } from '../../shared/kafka/event.ts';

export interface RecordSpec {
  readonly topic?: string;
  readonly partition: number;
  readonly offset: number;
  readonly key?: string | null;
  /** null: a tombstone. */
  readonly value: string | null;
  /** A string is sent as its UTF-8 bytes; an array as those byte values (signed, as the mapping sends them). */
  readonly headers?: Record<string, string | readonly number[]>;
  /** The record's Kafka timestamp (ms); default 2025-11-29T00:00Z plus the offset. */
  readonly timestamp?: number;
}

/** Bytes as the event source mapping serializes them: Java's signed bytes (0xff → -1). */
export function signedBytes(bytes: Uint8Array): number[] {
  return [...bytes].map((byte) => (byte > 127 ? byte - 256 : byte));
}

export function mskRecord(spec: RecordSpec): MskRecord {
  const topic = spec.topic ?? 'orders';
  return {
    topic,
    partition: spec.partition,
    offset: spec.offset,
    timestamp: spec.timestamp ?? 1764374400000 + spec.offset,
    timestampType: 'CREATE_TIME',
    key: spec.key === null ? null : Buffer.from(spec.key ?? `k-${spec.offset}`).toString('base64'),
    value: spec.value === null ? null : Buffer.from(spec.value).toString('base64'),
    headers: Object.entries(spec.headers ?? {}).map(([name, value]) => ({
      [name]: typeof value === 'string' ? signedBytes(Buffer.from(value)) : [...value],
    })),
  };
}

export function mskEvent(specs: readonly RecordSpec[]): MskEvent {
  const records: Record<string, MskRecord[]> = {};
  for (const spec of specs) {
    const record = mskRecord(spec);
    const batchKey = `${record.topic}-${record.partition}`;
    records[batchKey] ??= [];
    records[batchKey].push(record);
  }
  return mskEventOf(records);
}

/** The event around records already in its form, keyed `<topic>-<partition>`. */
export function mskEventOf(records: Record<string, MskRecord[]>): MskEvent {
  return {
    eventSource: 'aws:kafka',
    eventSourceArn:
      'arn:aws:kafka:us-east-1:123456789012:cluster/test/00000000-0000-0000-0000-000000000000-1',
    bootstrapServers: 'b-1.test:9098',
    records,
  };
}

/** An `orders` value; `amount` a decimal string. */
export function order(id: string, customerId = 'cust-1', amount = '10.00', currency = 'USD'): string {
  return JSON.stringify({ orderId: id, customerId, amount, currency, ts: 1764374400000 });
}

/** Orders at offsets [from, from + count) on one partition, each with its own idempotency key. */
export function orderRecords(
  partition: number,
  from: number,
  count: number,
  keyPrefix = `p${partition}`,
): RecordSpec[] {
  return Array.from({ length: count }, (_, i) => ({
    partition,
    offset: from + i,
    value: order(`${keyPrefix}-o${from + i}`, `cust-${(from + i) % 3}`, `${from + i}.25`),
    headers: { 'idempotency-key': `${keyPrefix}-o${from + i}` },
  }));
}
