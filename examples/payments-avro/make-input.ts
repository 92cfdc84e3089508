/**
 * Writes `payments.jsonl`, the example's input for `eos local --input`: payment events as a producer with
 * Confluent's Avro serializer writes them — 0x00, the 4-byte big-endian schema id, the Avro binary (by avro-js) —
 * as `valueBase64` lines, keyed by merchant on 2 partitions. Older producers write schema id 1, newer ones id 2
 * (with `method`). Mixed in: producer retries (the same bytes again), events the transform rejects (too many
 * decimals, zero, not a number), and records that do not decode (an id the registry does not have, a value that is
 * JSON and not framed Avro, a cut-off record, a tombstone).
 *
 *   npx tsx examples/payments-avro/make-input.ts > examples/payments-avro/payments.jsonl
 *
 * Deterministic (a fixed seed): the committed file is this script's output.
 */
import avro from 'avro-js/lib/schemas.js';
import { SCHEMAS } from './registry.ts';

export interface InputLine {
  readonly partition: number;
  readonly key: string;
  readonly valueBase64: string | null;
  readonly timestamp: number;
}

const types = new Map([...SCHEMAS].map(([id, text]) => [id, avro.createType(JSON.parse(text))]));

/** Confluent's wire format: magic byte 0, the schema id, the Avro binary of `event`. */
export function confluentAvro(schemaId: number, event: Record<string, unknown>): Buffer {
  const type = types.get(schemaId) ?? types.get(2)!; // an unregistered id still frames real bytes
  const header = Buffer.alloc(5);
  header.writeUInt32BE(schemaId, 1);
  return Buffer.concat([header, type.toBuffer(event)]);
}

function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MERCHANTS = ['m-01', 'm-02', 'm-03', 'm-04', 'm-05'];
const CURRENCIES = ['EUR', 'USD', 'GBP', 'JPY'] as const;
const METHODS = ['CARD', 'SEPA', 'WALLET'];
const START = Date.UTC(2026, 10, 30, 9); // 2026-11-30T09:00:00Z
const partitionOf = (merchant: string): number => Number(merchant.slice(2)) % 2;

export function makePayments(events = 150, seed = 11): InputLine[] {
  const next = random(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const lines: InputLine[] = [];
  const captures: { paymentId: string; merchantId: string; currency: string; minor: number }[] = [];
  let clock = START;
  /** Advances the clock; events are recorded up to 2 s before they are produced. */
  const tick = (): number => {
    clock += 1_000 + Math.floor(next() * 60_000);
    return clock - Math.floor(next() * 2_000);
  };
  const line = (merchantId: string, value: Buffer | null): InputLine => ({
    partition: partitionOf(merchantId),
    key: merchantId,
    valueBase64: value === null ? null : value.toString('base64'),
    timestamp: clock,
  });
  const amountText = (minor: number, currency: string) =>
    currency === 'JPY' ? String(minor) : `${Math.floor(minor / 100)}.${String(minor % 100).padStart(2, '0')}`;

  for (let n = 1; n <= events; n++) {
    const schemaId = n <= events / 2 ? 1 : 2; // the producers upgrade halfway
    const eventId = `ev-${String(n).padStart(4, '0')}`;
    const roll = next();
    if (roll < 0.08 && lines.length > 0) {
      // A producer retry: the last accepted bytes again (same eventId, so the same idempotency key).
      const again = lines.findLast((l) => l.valueBase64 !== null)!;
      lines.push({ ...again, timestamp: again.timestamp + 500 });
      continue;
    }
    const refund = roll > 0.8 && captures.length > 0;
    const base = refund ? pick(captures) : undefined;
    const merchantId = base?.merchantId ?? pick(MERCHANTS);
    const currency = base?.currency ?? pick(CURRENCIES);
    const minor = base
      ? 1 + Math.floor(next() * base.minor)
      : currency === 'JPY'
        ? 100 + Math.floor(next() * 20_000)
        : 50 + Math.floor(next() * 50_000);
    const paymentId = base?.paymentId ?? `pay-${String(n).padStart(4, '0')}`;
    const event: Record<string, unknown> = {
      eventId,
      paymentId,
      merchantId,
      kind: refund ? 'REFUND' : 'CAPTURE',
      amount: amountText(minor, currency),
      currency,
      createdAt: tick(),
      ...(schemaId === 2 ? { method: next() < 0.2 ? null : { string: pick(METHODS) } } : {}),
    };
    if (!refund) captures.push({ paymentId, merchantId, currency, minor });
    lines.push(line(merchantId, confluentAvro(schemaId, event)));
  }

  // Records that must be dead-lettered, each kind once: rejected by the transform…
  const bad = (n: number, amount: string, currency: string) => ({
    eventId: `bad-${n}`,
    paymentId: `pay-bad-${n}`,
    merchantId: MERCHANTS[n % MERCHANTS.length]!,
    kind: 'CAPTURE',
    amount,
    currency,
    createdAt: tick(),
    method: null,
  });
  for (const [n, amount, currency] of [
    [1, '12.345', 'EUR'],
    [2, '150.5', 'JPY'],
    [3, '0.00', 'USD'],
    [4, 'twelve', 'GBP'],
  ] as const) {
    const event = bad(n, amount, currency);
    lines.push(line(event.merchantId, confluentAvro(2, event)));
  }
  // …and undecodable: an unregistered schema id, unframed JSON, a cut-off record, a tombstone.
  lines.push(line('m-01', confluentAvro(99, bad(5, '1.00', 'EUR'))));
  lines.push(line('m-02', Buffer.from(JSON.stringify(bad(6, '1.00', 'EUR')))));
  const whole = confluentAvro(2, bad(7, '1.00', 'EUR'));
  lines.push(line('m-03', whole.subarray(0, whole.length - 4)));
  tick();
  lines.push(line('m-04', null));
  return lines;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const entry of makePayments()) process.stdout.write(`${JSON.stringify(entry)}\n`);
}
