/**
 * Payments: Avro payment events from a Confluent-compatible schema registry, one output row per event and, per
 * merchant and currency, the captured, refunded and net amounts in minor units.
 *
 * Values are Confluent-framed Avro (0x00, the 4-byte schema id, the Avro binary). The processor fetches each
 * schema id it meets from the registry once (per container; batches are decoded after the fetch, so `transform`
 * stays synchronous) and decodes the record with the schema it was written with: version 1 and version 2 records
 * mix on the topic. A record that does not decode — not framed, an id the registry does not have, bytes that do
 * not match the schema — is dead-lettered with the decoder's reason before `transform` sees it.
 *
 * Run locally (starts a registry on loopback and `eos local`): npx tsx examples/payments-avro/run.ts
 */
import { defineTransform, RejectRecord } from 'msk-exactly-once-pipeline/transform';

/** A payment event as avro-js decodes it: enums as their symbol, a `["null", "string"]` union as null or `{ string }`. */
export interface PaymentEvent {
  readonly eventId: string;
  readonly paymentId: string;
  readonly merchantId: string;
  readonly kind: 'CAPTURE' | 'REFUND';
  readonly amount: string;
  readonly currency: 'EUR' | 'USD' | 'GBP' | 'JPY';
  /** Epoch milliseconds (`timestamp-millis`: avro-js gives the long as a number). */
  readonly createdAt: number;
  /** Absent in version 1 records. */
  readonly method?: { readonly string: string } | null;
}

/** Minor-unit digits by currency (ISO 4217), for the currencies the schema's enum allows. */
const EXPONENT: Readonly<Record<PaymentEvent['currency'], number>> = { EUR: 2, USD: 2, GBP: 2, JPY: 0 };

/** "12.50" EUR → 1250; rejects what is not an exact positive amount in the currency. */
export function minorUnits(amount: string, currency: PaymentEvent['currency']): number {
  const match = /^(\d{1,12})(?:\.(\d+))?$/.exec(amount);
  if (match === null) throw new RejectRecord(`amount "${amount}" is not a decimal number`);
  const exponent = EXPONENT[currency];
  const fraction = match[2] ?? '';
  if (fraction.length > exponent) {
    throw new RejectRecord(`amount "${amount}" has more decimals than ${currency} allows (${exponent})`);
  }
  const minor = Number(match[1]) * 10 ** exponent + Number(fraction.padEnd(exponent, '0') || '0');
  if (minor === 0) throw new RejectRecord('amount is zero');
  return minor;
}

export default defineTransform<PaymentEvent>({
  name: 'payments',
  value: {
    format: 'avro',
    registry: { kind: 'confluent', url: process.env.SCHEMA_REGISTRY_URL ?? 'http://127.0.0.1:8081' },
  },
  schema: {
    eventId: 'string',
    paymentId: 'string',
    merchantId: 'string',
    kind: 'string',
    currency: 'string',
    amountMinor: 'long',
    method: { type: 'string', nullable: true },
    createdAt: 'timestamp',
    producedAt: 'timestamp',
  },
  transform({ value, timestamp }) {
    if (value === null) throw new RejectRecord('tombstone: a payment event cannot be deleted');
    const { eventId, paymentId, merchantId, kind, currency } = value;
    const amountMinor = minorUnits(value.amount, currency);
    const add: Record<string, number> =
      kind === 'CAPTURE'
        ? { captures: 1, capturedMinor: amountMinor, netMinor: amountMinor }
        : { refunds: 1, refundedMinor: amountMinor, netMinor: -amountMinor };
    return {
      rows: [
        {
          eventId,
          paymentId,
          merchantId,
          kind,
          currency,
          amountMinor,
          method: value.method?.string ?? null,
          createdAt: value.createdAt,
          producedAt: timestamp, // the Kafka timestamp
        },
      ],
      state: [
        {
          key: `${merchantId}#${currency}`,
          fields: { merchantId, currency },
          add,
        },
      ],
      // Avro values have no JSON field to read a key from: the transform names it (--idempotency-key transform).
      idempotencyKey: eventId,
    };
  },
});
