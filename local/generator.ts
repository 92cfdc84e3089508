/**
 * A seeded generator of `orders` input: the same options and seed always give the same records.
 *
 * - Orders `{orderId, customerId, amount, currency, ts}` with the amount written with exactly the currency's
 *   ISO 4217 decimals (KRW 0; USD, EUR, GBP 2), keyed by customer, partitioned by a hash of the key (as Kafka's
 *   default partitioner does), each with an `idempotency-key` header equal to its order id.
 * - Producer duplicates: a resend of an earlier order (same value, same `idempotency-key`), usually to the same
 *   partition (a producer retry), sometimes to another one (an application-level resend).
 * - Poison records: invalid JSON, a currency that is not an ISO code, too many decimals, a missing field, a
 *   tombstone (value null), a customer id that is a lone surrogate (a state key DynamoDB would merge with others).
 *   Each has its own idempotency key and is never duplicated, so its expected fate (one dead-letter
 *   row) is unambiguous.
 * - Binary idempotency keys: some orders carry an `idempotency-key` header that is not UTF-8 (the order's id, then
 *   one byte 0xfc-0xff); neighbouring orders share the id prefix, so a lossy decoding would merge them and drop
 *   one as a duplicate. Their resends carry the same bytes and must still be deduplicated.
 */
import type { InputRecord } from './input.ts';
import { type Random, seededRandom } from './prng.ts';

export interface GeneratorOptions {
  readonly seed: number;
  /** Total records, duplicates and poison included. */
  readonly records: number;
  readonly partitions: number;
  /** Fraction of records that resend an earlier order; default 0.05. */
  readonly duplicateRate?: number;
  /** Fraction of records that are poison; default 0.01. */
  readonly poisonRate?: number;
  /** Fraction of orders whose idempotency-key header is binary (not UTF-8); default 0.05. */
  readonly binaryKeyRate?: number;
  /** Distinct customers; default 50. */
  readonly customers?: number;
  /** Timestamp of the first order (epoch ms). */
  readonly startTs?: number;
}

export const IDEMPOTENCY_HEADER = 'idempotency-key';
const CURRENCIES = [
  { code: 'USD', decimals: 2 },
  { code: 'EUR', decimals: 2 },
  { code: 'GBP', decimals: 2 },
  { code: 'KRW', decimals: 0 },
] as const;

const POISON_KINDS = [
  'invalid-json',
  'unknown-currency',
  'too-many-decimals',
  'missing-field',
  'tombstone',
  'ill-formed-customer',
] as const;

/** A stable string hash (FNV-1a), standing in for Kafka's murmur2 key partitioner. */
export function partitionForKey(key: string, partitions: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
  return (h >>> 0) % partitions;
}

function amountFor(random: Random, decimals: number): string {
  const whole = 1 + random.int(decimals === 0 ? 200_000 : 2_000);
  if (decimals === 0) return String(whole);
  return `${whole}.${String(random.int(10 ** decimals)).padStart(decimals, '0')}`;
}

/** A header that is not UTF-8: the ids of four neighbouring orders share a prefix, then one byte 0xfc-0xff. */
function binaryKey(index: number, options: GeneratorOptions): number[] {
  return [...Buffer.from(`bin-${options.seed >>> 0}-${Math.floor(index / 4)}-`), 0xfc + (index % 4)];
}

function order(random: Random, index: number, options: GeneratorOptions): InputRecord {
  const customerId = `cust-${String(1 + random.int(options.customers ?? 50)).padStart(3, '0')}`;
  const currency = random.pick(CURRENCIES);
  const orderId = `ord-${options.seed >>> 0}-${index}`;
  const value = {
    orderId,
    customerId,
    amount: amountFor(random, currency.decimals),
    currency: currency.code,
    ts: (options.startTs ?? Date.UTC(2026, 10, 29)) + index * 10,
  };
  return {
    partition: partitionForKey(customerId, options.partitions),
    key: customerId,
    value: JSON.stringify(value),
    headers: {
      [IDEMPOTENCY_HEADER]: random.chance(options.binaryKeyRate ?? 0.05)
        ? binaryKey(index, options)
        : orderId,
    },
  };
}

function poison(random: Random, index: number, options: GeneratorOptions): InputRecord {
  const kind = random.pick(POISON_KINDS);
  const customerId = `cust-${String(1 + random.int(options.customers ?? 50)).padStart(3, '0')}`;
  const base = {
    orderId: `poison-${options.seed >>> 0}-${index}`,
    customerId,
    amount: '10.00',
    currency: 'USD',
    ts: 0,
  };
  const value =
    kind === 'invalid-json'
      ? `{"orderId":"${base.orderId}",`
      : kind === 'unknown-currency'
        ? JSON.stringify({ ...base, currency: 'XYZ' })
        : kind === 'too-many-decimals'
          ? JSON.stringify({ ...base, amount: '10.001' })
          : kind === 'missing-field'
            ? JSON.stringify({ ...base, customerId: undefined })
            : kind === 'tombstone'
              ? null
              : // JSON.stringify escapes the lone surrogate: the value's bytes are ASCII, the parsed id is not.
                JSON.stringify({ ...base, customerId: `\ud800${customerId}` });
  return {
    partition: partitionForKey(customerId, options.partitions),
    key: customerId,
    value,
    headers: { [IDEMPOTENCY_HEADER]: base.orderId, 'poison-kind': kind },
  };
}

export function generateOrders(options: GeneratorOptions): InputRecord[] {
  const random = seededRandom(options.seed).fork('generator');
  const duplicateRate = options.duplicateRate ?? 0.05;
  const poisonRate = options.poisonRate ?? 0.01;
  const records: InputRecord[] = [];
  const originals: InputRecord[] = [];
  for (let index = 0; index < options.records; index++) {
    const roll = random.next();
    if (roll < poisonRate) {
      records.push(poison(random, index, options));
    } else if (roll < poisonRate + duplicateRate && originals.length > 0) {
      const original = random.pick(originals);
      const partition = random.chance(0.3) ? random.int(options.partitions) : original.partition;
      records.push({ ...original, partition });
    } else {
      const fresh = order(random, index, options);
      originals.push(fresh);
      records.push(fresh);
    }
  }
  return records;
}
