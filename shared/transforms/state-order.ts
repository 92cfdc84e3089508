/**
 * The order `latest` keeps: of two values, the one with the greater time wins; at equal times a number beats a
 * string, the larger number a smaller one, and of two strings the greater as UTF-8 bytes. A total order on
 * (time, value), so the value kept is the same whatever order, chunking or repetition the values arrive in.
 *
 * The ledger compares values itself, in the condition of the update that writes them, and DynamoDB compares
 * strings as UTF-8 bytes, not as JavaScript does (UTF-16 code units: U+FFFF after U+1F600). So the order is one
 * string, the {@link latestOrderKey}, compared as bytes on both sides: the fold here and the condition there agree
 * by construction.
 */
import type { LatestValue } from './types.ts';

/** Width of a time in the order key: 14 hex digits hold every integer up to 2^53 - 1. */
const TIME_DIGITS = 14;
const SIGN = 1n << 63n;
const BITS = (1n << 64n) - 1n;

/** Compares two strings as their UTF-8 bytes (DynamoDB's order of strings). */
export function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/**
 * A number as 16 hex digits whose byte order is the numbers' order: the IEEE 754 bits with the sign bit flipped
 * for a positive number and every bit flipped for a negative one. -0 is 0 (DynamoDB stores one zero).
 */
function sortableNumber(value: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, value === 0 ? 0 : value);
  const bits = view.getBigUint64(0);
  const sortable = (bits & SIGN) === 0n ? bits | SIGN : ~bits & BITS;
  return sortable.toString(16).padStart(16, '0');
}

/**
 * The value's place in the order, as a string compared by its bytes: the time (fixed-width hex), then `1` and the
 * sortable bits of a number or `0` and the text of a string.
 */
export function latestOrderKey({ value, at }: LatestValue): string {
  const time = at.toString(16).padStart(TIME_DIGITS, '0');
  return typeof value === 'number' ? `${time}1${sortableNumber(value)}` : `${time}0${value}`;
}

/** The time an order key holds. */
export function timeOfOrderKey(key: string): number {
  return Number.parseInt(key.slice(0, TIME_DIGITS), 16);
}

/** Whether `candidate` takes the place of `current` (strictly later in the order). */
export function latestWins(candidate: LatestValue, current: LatestValue): boolean {
  return compareUtf8(latestOrderKey(candidate), latestOrderKey(current)) > 0;
}
