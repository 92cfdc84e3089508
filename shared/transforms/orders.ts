/**
 * The `orders` example transform, written with the public transform API as a user's module would be.
 *
 * Value: JSON `{orderId, customerId, amount, currency, ts}`; `amount` a decimal string converted to integer minor
 * units by the currency's ISO 4217 exponent. Rejected (dead-lettered, never retried): invalid JSON, a missing or
 * mistyped field, a currency that is not an ISO 4217 code, more decimals than the currency allows, a tombstone
 * (a record with no value: an order cannot be deleted by a compacted topic's tombstone).
 * Output row: `{orderId, customerId, currency, amountMinor, ts}` (the processor adds `source`).
 * Keyed state: per (customerId, currency), `count` and `totalMinor`.
 * Idempotency key: the `idempotency-key` header by default; `json:orderId` reads it from the value.
 */

import { toTransform } from './adapter.ts';
import { defineTransform, RejectRecord } from './api.ts';

/** ISO 4217 minor-unit exponents (active codes). */
const CURRENCY_EXPONENTS: Readonly<Record<string, number>> = {
  ...Object.fromEntries(
    'AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BRL BSD BTN BWP BYN BZD CAD CDF CHF CNY COP CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD UYU UZS VES WST XCD YER ZAR ZMW ZWG'
      .split(' ')
      .map((code) => [code, 2]),
  ),
  ...Object.fromEntries(
    'BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF'.split(' ').map((c) => [c, 0]),
  ),
  ...Object.fromEntries('BHD IQD JOD KWD LYD OMR TND'.split(' ').map((c) => [c, 3])),
  CLF: 4,
  UYW: 4,
};

const AMOUNT = /^(\d{1,15})(?:\.(\d+))?$/;

/** "19.99" USD → 1999; throws {@link RejectRecord} when the amount does not fit the currency. */
export function toMinorUnits(amount: string, currency: string): number {
  const exponent = CURRENCY_EXPONENTS[currency];
  if (exponent === undefined) throw new RejectRecord(`currency "${currency}" is not an ISO 4217 code`);
  const match = AMOUNT.exec(amount);
  if (!match) throw new RejectRecord(`amount "${amount}" is not a non-negative decimal string`);
  const fraction = match[2] ?? '';
  if (fraction.length > exponent) {
    throw new RejectRecord(`amount "${amount}" has more decimals than ${currency} allows (${exponent})`);
  }
  const minor = Number(match[1]) * 10 ** exponent + Number(fraction.padEnd(exponent, '0') || '0');
  if (!Number.isSafeInteger(minor)) throw new RejectRecord(`amount "${amount}" is too large`);
  return minor;
}

export interface Order {
  orderId: string;
  customerId: string;
  amount: string;
  currency: string;
  ts: number;
}

/** The decoded JSON value as an {@link Order}, or a rejection naming what is wrong. */
function checkOrder(value: unknown): Order {
  if (value === null) throw new RejectRecord('tombstone: the record has no value (orders are never deleted)');
  if (typeof value !== 'object' || Array.isArray(value)) throw new RejectRecord('value is not a JSON object');
  const o = value as Record<string, unknown>;
  for (const field of ['orderId', 'customerId', 'amount', 'currency'] as const) {
    if (typeof o[field] !== 'string' || o[field] === '')
      throw new RejectRecord(`field "${field}" is missing or not a string`);
  }
  if (typeof o.ts !== 'number' || !Number.isFinite(o.ts))
    throw new RejectRecord('field "ts" is missing or not a number');
  return o as unknown as Order;
}

const orders = defineTransform({
  name: 'orders',
  value: { format: 'json' },
  schema: {
    orderId: 'string',
    customerId: 'string',
    currency: 'string',
    amountMinor: 'long',
    ts: 'timestamp',
  },
  transform({ value }) {
    const { orderId, customerId, amount, currency, ts } = checkOrder(value);
    const amountMinor = toMinorUnits(amount, currency);
    return {
      rows: [{ orderId, customerId, currency, amountMinor, ts }],
      state: [
        {
          key: `${customerId}#${currency}`,
          fields: { customerId, currency },
          add: { count: 1, totalMinor: amountMinor },
        },
      ],
    };
  },
});
export default orders;

/** The processor's form of {@link orders} (what `loadTransform('orders')` gives), for tests of the processor. */
export const ordersTransform = toTransform(orders);
