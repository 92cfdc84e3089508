/**
 * The oracle accepts exactly the outcomes the processor's key rules allow for records sharing an idempotency key,
 * and nothing else: the first keyed record of a lane claims the key (in global scope the first of any lane, as
 * lanes race), its byte-for-byte duplicates leave no row, every record with other bytes is one conflict dead
 * letter; the aggregates are the winner's. A record the key source finds no key for is output (offset-only) or
 * dead-lettered, as `missingIdempotencyKey` says.
 */
import { describe, expect, it } from 'vitest';
import {
  type Aggregate,
  type CommittedRow,
  compareOutcome,
  expectOutcome,
  resolveExpectation,
} from '../../local/expectation.ts';
import { IDEMPOTENCY_HEADER } from '../../local/generator.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { ordersTransform } from '../../shared/transforms/orders.ts';
import { mskRecord, order } from '../support/msk.ts';

const header = { kind: 'header', name: IDEMPOTENCY_HEADER } as const;

/** An order with idempotency key `key`; `amount` tells contents apart. */
const rec = (partition: number, offset: number, key: string, amount: string): DecodedRecord =>
  decodeRecord(
    mskRecord({
      partition,
      offset,
      key: 'cust-1',
      value: order('o-1', 'cust-1', amount, 'USD'),
      headers: { [IDEMPOTENCY_HEADER]: key },
    }),
  );

/** `"0@1:output"` → a committed row. */
const rows = (...specs: string[]): CommittedRow[] =>
  specs.map((spec) => {
    const [, partition, offset, stream] = /^(\d+)@(\d+):(output|deadletter)$/.exec(spec)!;
    return {
      stream: stream as CommittedRow['stream'],
      source: { topic: 'orders', partition: Number(partition), offset: Number(offset) },
    };
  });

/** The aggregate of `count` orders of cust-1 in USD totalling `totalMinor`. */
const state = (count: number, totalMinor: number): Map<string, Aggregate> =>
  new Map([['cust-1#USD', { customerId: 'cust-1', currency: 'USD', count, totalMinor }]]);

function judge(
  records: DecodedRecord[],
  committed: CommittedRow[],
  aggregates: Map<string, Aggregate>,
  scope?: 'partition',
) {
  const model = expectOutcome(records, ordersTransform, { keySource: header, ...(scope ? { scope } : {}) });
  const resolved = resolveExpectation(model, committed);
  const outcome = compareOutcome(resolved, committed, aggregates);
  const ok = outcome.lost + outcome.duplicated + outcome.unexpected === 0 && outcome.aggregatesMatch;
  return { ok, outcome, resolved };
}

describe('the oracle on records sharing an idempotency key', () => {
  it('one partition: the first record claims the key, a later one with other contents is its conflict', () => {
    const input = [rec(0, 0, 'k', '1.00'), rec(0, 1, 'k', '2.00'), rec(0, 2, 'k', '1.00')];
    const accepted = judge(input, rows('0@0:output', '0@1:deadletter'), state(1, 100));
    expect(accepted.ok).toBe(true);
    expect(accepted.resolved.conflicts).toBe(1);
    // The later record cannot win within its partition, not even with the first as its conflict.
    expect(judge(input, rows('0@1:output', '0@0:deadletter', '0@2:deadletter'), state(1, 200)).ok).toBe(
      false,
    );
    // Both output, the conflict left out, the duplicate output, the duplicate dead-lettered: each refused.
    expect(judge(input, rows('0@0:output', '0@1:output'), state(2, 300)).outcome.unexpected).toBe(1);
    expect(judge(input, rows('0@0:output'), state(1, 100)).outcome.lost).toBe(1);
    expect(
      judge(input, rows('0@0:output', '0@1:deadletter', '0@2:output'), state(1, 100)).outcome.duplicated,
    ).toBe(1);
    expect(
      judge(input, rows('0@0:output', '0@1:deadletter', '0@2:deadletter'), state(1, 100)).outcome.unexpected,
    ).toBe(1);
    // The aggregates are the winner's.
    expect(judge(input, rows('0@0:output', '0@1:deadletter'), state(1, 200)).outcome.aggregatesMatch).toBe(
      false,
    );
  });

  it('global scope across partitions: the first of either partition may win, the rest follows from it', () => {
    // 0@0 and 1@1 carry the same bytes; 1@0 other bytes.
    const input = [rec(0, 0, 'k', '1.00'), rec(1, 0, 'k', '2.00'), rec(1, 1, 'k', '1.00')];
    expect(judge(input, rows('0@0:output', '1@0:deadletter'), state(1, 100)).ok).toBe(true);
    expect(judge(input, rows('1@0:output', '0@0:deadletter', '1@1:deadletter'), state(1, 200)).ok).toBe(true);
    // Not the first of its partition: 1@1 never claims the key.
    expect(judge(input, rows('1@1:output', '1@0:deadletter'), state(1, 100)).ok).toBe(false);
    // Two winners, or a winner with the other winner's consequences, or the wrong winner's aggregates.
    expect(judge(input, rows('0@0:output', '1@0:output'), state(2, 300)).ok).toBe(false);
    expect(judge(input, rows('0@0:output', '1@0:deadletter', '1@1:deadletter'), state(1, 100)).ok).toBe(
      false,
    );
    expect(judge(input, rows('1@0:output', '0@0:deadletter'), state(1, 200)).outcome.lost).toBe(1);
    expect(judge(input, rows('1@0:output', '0@0:deadletter', '1@1:deadletter'), state(1, 100)).ok).toBe(
      false,
    );
    // No winner at all: the key is lost.
    expect(judge(input, rows('1@0:deadletter'), new Map()).outcome.lost).toBeGreaterThan(0);
  });

  it('partition scope: each partition claims the key for itself', () => {
    const input = [rec(0, 0, 'k', '1.00'), rec(1, 0, 'k', '2.00'), rec(1, 1, 'k', '3.00')];
    expect(
      judge(input, rows('0@0:output', '1@0:output', '1@1:deadletter'), state(2, 300), 'partition').ok,
    ).toBe(true);
    expect(
      judge(input, rows('0@0:output', '1@0:deadletter', '1@1:output'), state(2, 400), 'partition').ok,
    ).toBe(false);
    expect(judge(input, rows('0@0:output', '1@0:deadletter'), state(1, 100), 'partition').ok).toBe(false);
  });
});

describe('the oracle on records without an idempotency key', () => {
  const keyless = (offset: number) =>
    decodeRecord(
      mskRecord({
        partition: 0,
        offset,
        key: 'cust-1',
        value: order(`o-${offset}`, 'cust-1', '1.00', 'USD'),
      }),
    );
  const input = [keyless(0), keyless(1), rec(0, 2, 'k', '1.00')];

  it('offset-only: output each, counted as missing', () => {
    const model = expectOutcome(input, ordersTransform, {
      keySource: header,
      limits: { maxTransactionItems: 100, missingIdempotencyKey: 'offset-only' },
    });
    expect(model.missingKeys).toBe(2);
    const committed = rows('0@0:output', '0@1:output', '0@2:output');
    expect(compareOutcome(resolveExpectation(model, committed), committed, state(3, 300))).toMatchObject({
      lost: 0,
      unexpected: 0,
      aggregatesMatch: true,
    });
  });

  it('dead-letter: one dead letter each, no state; output rows for them are unexpected', () => {
    const model = expectOutcome(input, ordersTransform, {
      keySource: header,
      limits: { maxTransactionItems: 100, missingIdempotencyKey: 'dead-letter' },
    });
    expect(model.missingKeys).toBe(2);
    expect(model.poison).toBe(0);
    const committed = rows('0@0:deadletter', '0@1:deadletter', '0@2:output');
    expect(compareOutcome(resolveExpectation(model, committed), committed, state(1, 100))).toMatchObject({
      lost: 0,
      unexpected: 0,
      aggregatesMatch: true,
    });
    const wrong = rows('0@0:output', '0@1:output', '0@2:output');
    expect(compareOutcome(resolveExpectation(model, wrong), wrong, state(3, 300)).unexpected).toBe(2);
  });

  it('with the key source none no record misses a key', () => {
    const model = expectOutcome(input, ordersTransform, {
      keySource: { kind: 'none' },
      limits: { maxTransactionItems: 100, missingIdempotencyKey: 'dead-letter' },
    });
    expect(model.missingKeys).toBe(0);
  });
});
