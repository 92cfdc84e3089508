/**
 * The benchmark's workload: `orders` records of about 1 KB (a padded `note`), customers from a fixed pool so
 * that a batch touches a bounded number of keyed-state items, each record with its own idempotency key.
 */
import type { MskEvent, MskRecord } from '../shared/kafka/event.ts';

export const CUSTOMER_POOL = 40;
const NOTE = 'x'.repeat(860);

function record(partition: number, offset: number): MskRecord {
  const value = JSON.stringify({
    orderId: `o-${partition}-${offset}`,
    customerId: `cust-${offset % CUSTOMER_POOL}`,
    amount: `${(offset % 997) + 1}.${String(offset % 100).padStart(2, '0')}`,
    currency: offset % 5 === 0 ? 'EUR' : 'USD',
    ts: 1764374400000 + offset,
    note: NOTE,
  });
  return {
    topic: 'orders',
    partition,
    offset,
    timestamp: 1764374400000 + offset,
    timestampType: 'CREATE_TIME',
    key: Buffer.from(`cust-${offset % CUSTOMER_POOL}`).toString('base64'),
    value: Buffer.from(value).toString('base64'),
    headers: [{ 'idempotency-key': [...Buffer.from(`o-${partition}-${offset}`)] }],
  };
}

/** One event holding `size` records of one partition, starting at `from`. */
export function batchEvent(partition: number, from: number, size: number): MskEvent {
  return {
    eventSource: 'aws:kafka',
    eventSourceArn:
      'arn:aws:kafka:us-east-1:123456789012:cluster/bench/00000000-0000-0000-0000-000000000000-1',
    records: { [`orders-${partition}`]: Array.from({ length: size }, (_, i) => record(partition, from + i)) },
  };
}

/** Average JSON size of one record's value, for the report. */
export function recordBytes(): number {
  return Buffer.from(record(0, 12345).value ?? '', 'base64').length;
}
