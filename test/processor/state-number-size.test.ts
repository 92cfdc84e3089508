/**
 * The size the state-size judgement gives a number (L1, L3): an upper bound of DynamoDB's (about one byte per two
 * significant digits plus one), counted from the digits, so that an item of small counters is not taken for one
 * over the limit. Pure.
 */
import { describe, expect, it } from 'vitest';
import { numberBytes, significantDigits } from '../../shared/processor/state-size.ts';

describe('a number in a state item', () => {
  it('is counted by its significant digits, leading and trailing zeroes not stored', () => {
    expect(significantDigits(0)).toBe(1);
    expect(significantDigits(1)).toBe(1);
    expect(significantDigits(-1200)).toBe(2);
    expect(significantDigits(0.00012)).toBe(2);
    expect(significantDigits(1e21)).toBe(1);
    expect(significantDigits(123.456)).toBe(6);
    expect(significantDigits(12345678901234567890n)).toBe(19);
    expect(significantDigits(10n ** 50n + 1n)).toBe(38);
  });

  it('takes at most one byte per two digits plus two, and never more than a 38-digit negative number', () => {
    expect(numberBytes(1, false)).toBe(2);
    expect(numberBytes(2, false)).toBe(3);
    expect(numberBytes(38)).toBe(22);
    expect(numberBytes(100)).toBe(numberBytes(38));
  });
});
