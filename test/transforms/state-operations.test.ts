/**
 * Keyed state beyond `add`: `min`, `max` and `latest` through the transform API and the processor's evaluation.
 * What a record may ask for (one-line dead-letter reasons for wrong types, reserved names, values DynamoDB cannot
 * hold exactly), how one record's and one chunk's deltas fold per key, and the order `latest` resolves ties by.
 * Pure: no I/O (the ledger's side is test/ledger/state-operations.test.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { IdempotencyKeySource } from '../../shared/config/settings.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import { planChunk } from '../../shared/processor/chunks.ts';
import { type EvaluatedRecord, evaluateRecord, foldState } from '../../shared/processor/evaluate.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import { defineTransform, type StateUpdate } from '../../shared/transforms/api.ts';
import { MAX_ORDERED_FIELDS } from '../../shared/transforms/state-delta.ts';
import { latestOrderKey, latestWins } from '../../shared/transforms/state-order.ts';
import type { StateDelta, Transform, TransformResult } from '../../shared/transforms/types.ts';
import { mskRecord } from '../support/msk.ts';

const none: IdempotencyKeySource = { kind: 'none' };

function evaluated(result: unknown, offset = 0): EvaluatedRecord {
  const transform: Transform = { name: 't', apply: () => result as TransformResult };
  return evaluateRecord(transform, none, decodeRecord(mskRecord({ partition: 0, offset, value: '{}' })));
}

const withState = (state: unknown[]) => ({ kind: 'ok', rows: [], state });
const delta = (ops: Record<string, unknown>): Record<string, unknown> => ({
  key: 'k',
  fields: {},
  add: {},
  ...ops,
});

function reasonOf(state: unknown[]): string | undefined {
  return evaluated(withState(state)).deadLetter?.error;
}

describe('min, max and latest: what a record may ask for', () => {
  it('passes well-formed operations through evaluation as they are, fractions and negative numbers included', () => {
    const record = evaluated(
      withState([
        delta({
          min: { low: -4.25 },
          max: { high: 0.1 },
          latest: { last: { value: 'ok', at: 1796029200000 }, reading: { value: 21.5, at: 5 } },
        }),
      ]),
    );
    expect(record.deadLetter).toBeUndefined();
    expect(record.state).toEqual([
      {
        key: 'k',
        fields: {},
        add: {},
        min: { low: -4.25 },
        max: { high: 0.1 },
        latest: { last: { value: 'ok', at: 1796029200000 }, reading: { value: 21.5, at: 5 } },
      },
    ]);
  });

  it('a delta built with defineTransform needs only its key and the operations it uses', () => {
    const state: StateUpdate[] = [{ key: 'sensor', max: { peak: 3 }, latest: { last: { value: 3, at: 9 } } }];
    const definition = defineTransform({ name: 'sparse', schema: {}, transform: () => ({ state }) });
    const record = evaluateRecord(
      toTransform(definition),
      none,
      decodeRecord(mskRecord({ partition: 0, offset: 1, value: '{}' })),
    );
    expect(record.deadLetter).toBeUndefined();
    expect(record.state).toEqual([
      { key: 'sensor', fields: {}, add: {}, max: { peak: 3 }, latest: { last: { value: 3, at: 9 } } },
    ]);
  });

  it.each([
    [{ min: 5 }, /^state delta "k": min must map names to numbers$/],
    [{ max: { a: '5' } }, /^state delta "k": max must map names to numbers$/],
    [{ latest: [] }, /^state delta "k": latest must map names to \{ value, at \}$/],
    [{ latest: { a: 5 } }, /^state delta "k": latest must map names to \{ value, at \}$/],
    [
      { min: { a: Number.NaN } },
      /^state delta "k": min "a" must be 0 or a number from 1e-130 to 2\^53 - 1 in size, got NaN$/,
    ],
    [{ max: { a: Number.POSITIVE_INFINITY } }, /max "a" must be 0 or a number .*, got Infinity$/],
    [{ max: { a: 2 ** 53 } }, /max "a" must be 0 or a number .*, got 9007199254740992$/],
    [{ min: { a: 1e-200 } }, /min "a" must be 0 or a number .*, got 1e-200$/],
    [
      { latest: { a: { value: 1 } } },
      /latest "a": at must be an integer from 0 to 2\^53 - 1, got undefined$/,
    ],
    [
      { latest: { a: { value: 1, at: -1 } } },
      /latest "a": at must be an integer from 0 to 2\^53 - 1, got -1$/,
    ],
    [
      { latest: { a: { value: 1, at: 1.5 } } },
      /latest "a": at must be an integer from 0 to 2\^53 - 1, got 1\.5$/,
    ],
    [{ latest: { a: { value: null, at: 1 } } }, /latest "a": value must be a string or a number, got null$/],
    [
      { latest: { a: { value: { x: 1 }, at: 1 } } },
      /latest "a": value must be a string or a number, got an object$/,
    ],
    [{ latest: { a: { value: 1e300, at: 1 } } }, /latest "a": value must be 0 or a number .*, got 1e\+300$/],
    [
      { latest: { a: { value: 'x'.repeat(1025), at: 1 } } },
      /latest "a": value must be at most 1024 bytes of well-formed text$/,
    ],
    [
      { latest: { a: { value: 'x', at: 1, extra: 2 } } },
      /latest "a" must be \{ value, at \}, got the field "extra"$/,
    ],
  ])('dead-letters %j with one line naming the field', (ops, reason) => {
    const error = reasonOf([delta(ops)]);
    expect(error).toMatch(reason);
    expect(error).not.toContain('\n');
  });

  it('reserves the ledger’s names and every name starting with @ (where the ledger keeps an operation’s order)', () => {
    for (const name of ['pk', 'expiresAt', 'stateKey', '@peak', '@']) {
      expect(reasonOf([delta({ max: { [name]: 1 } })])).toBe(
        `state delta "k": field name "${name}" is reserved`,
      );
    }
    expect(reasonOf([delta({ add: { '@n': 1 } })])).toBe('state delta "k": field name "@n" is reserved');
  });

  it('refuses a field that takes two operations, in one delta and across one record’s deltas on a key', () => {
    expect(reasonOf([delta({ add: { a: 1 }, max: { a: 1 } })])).toBe(
      'state delta "k": field "a" takes two operations (add and max)',
    );
    expect(reasonOf([delta({ fields: { a: 'x' }, add: { a: 1 } })])).toBe(
      'state delta "k": field "a" is both set and added',
    );
    expect(reasonOf([delta({ min: { a: 1 } }), delta({ max: { a: 2 } })])).toBe(
      'state key "k": field "a" takes two operations (min and max) in this record',
    );
    // Two deltas of one operation on one field fold (their min): not a conflict.
    expect(reasonOf([delta({ min: { a: 1 } }), delta({ min: { a: -1 } })])).toBeUndefined();
  });

  it(`takes at most ${MAX_ORDERED_FIELDS} min, max and latest fields on one key (their conditions fit one update)`, () => {
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`m${i}`, i]));
    expect(reasonOf([delta({ max: many(MAX_ORDERED_FIELDS) })])).toBeUndefined();
    expect(reasonOf([delta({ max: many(MAX_ORDERED_FIELDS + 1) })])).toBe(
      `state delta "k" has more than ${MAX_ORDERED_FIELDS} min, max and latest fields`,
    );
    const named = (prefix: string, n: number) =>
      Object.fromEntries(Array.from({ length: n }, (_, i) => [`${prefix}${i}`, i]));
    expect(
      reasonOf([delta({ max: named('x', 10) }), delta({ min: named('n', MAX_ORDERED_FIELDS - 9) })]),
    ).toBe(
      `state key "k": this record's deltas take more than ${MAX_ORDERED_FIELDS} min, max and latest fields`,
    );
  });
});

describe('folding: one update per key, whatever the order', () => {
  const latest = (value: string | number, at: number) => ({ value, at });

  it('folds min, max and latest per key, and keeps adds and sets as before', () => {
    const folded = foldState([
      {
        key: 'k',
        fields: { s: 'a' },
        add: { n: 1 },
        min: { lo: 3 },
        max: { hi: 3 },
        latest: { l: latest('x', 5) },
      },
      { key: 'k', fields: {}, add: { n: 2 }, min: { lo: -1 }, max: { hi: 2 }, latest: { l: latest('y', 4) } },
      {
        key: 'k',
        fields: { s: 'b' },
        add: {},
        min: { lo: 0 },
        max: { hi: 7.5 },
        latest: { l: latest('z', 5) },
      },
    ]);
    expect(folded).toEqual([
      {
        key: 'k',
        fields: { s: 'b' },
        add: { n: 3 },
        min: { lo: -1 },
        max: { hi: 7.5 },
        latest: { l: latest('z', 5) },
      },
    ]);
  });

  it('latest: the greatest time wins; at equal times a number beats a string, the larger number a smaller one, strings by their UTF-8 bytes', () => {
    expect(latestWins(latest('a', 2), latest('z', 1))).toBe(true);
    expect(latestWins(latest(1, 1), latest('z', 1))).toBe(true);
    expect(latestWins(latest(-1, 1), latest(-2, 1))).toBe(true);
    expect(latestWins(latest('b', 1), latest('a', 1))).toBe(true);
    // UTF-16 order would put U+FFFF after U+1F600 (a surrogate pair); UTF-8, which DynamoDB compares, does not.
    expect(latestWins(latest('\u{1F600}', 1), latest('\uFFFF', 1))).toBe(true);
    expect(latestWins(latest('\uFFFF', 1), latest('\u{1F600}', 1))).toBe(false);
    expect(latestWins(latest('a', 1), latest('a', 1))).toBe(false);
    // -0 and 0 are one number to DynamoDB.
    expect(latestOrderKey(latest(-0, 3))).toBe(latestOrderKey(latest(0, 3)));
  });

  it('the order key sorts as the rule does, as bytes (how DynamoDB compares strings)', () => {
    const value = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 8 }),
      fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e15, max: 1e15 }),
    );
    fc.assert(
      fc.property(
        value,
        value,
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 0, max: 3 }),
        (a, b, ta, tb) => {
          const x = { value: a, at: ta };
          const y = { value: b, at: tb };
          const bytes = Buffer.compare(Buffer.from(latestOrderKey(x)), Buffer.from(latestOrderKey(y)));
          expect(bytes > 0).toBe(latestWins(x, y));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('any order of the same deltas folds to the same update (replays and chunking cannot change the result)', () => {
    const op = fc.record({
      min: fc.dictionary(fc.constantFrom('a', 'b'), fc.integer({ min: -50, max: 50 }), { maxKeys: 2 }),
      max: fc.dictionary(fc.constantFrom('c', 'd'), fc.double({ noNaN: true, min: -5, max: 5 }), {
        maxKeys: 2,
      }),
      latest: fc.dictionary(
        fc.constantFrom('e', 'f'),
        fc.record({
          value: fc.oneof(fc.string({ maxLength: 3 }), fc.integer()),
          at: fc.integer({ min: 0, max: 4 }),
        }),
        { maxKeys: 2 },
      ),
    });
    fc.assert(
      fc.property(fc.array(op, { minLength: 1, maxLength: 8 }), fc.nat(), (ops, seed) => {
        const deltas: StateDelta[] = ops.map((o) => ({ key: 'k', fields: {}, add: {}, ...o }));
        const shuffled = [...deltas].sort(
          (x, y) => ((deltas.indexOf(x) * 7919 + seed) % 13) - ((deltas.indexOf(y) * 7919 + seed) % 13),
        );
        const once = foldState(deltas);
        expect(foldState(shuffled)).toEqual(once);
        // Folding a folded update with the same deltas again (a replay) changes nothing.
        expect(foldState([...once, ...deltas])).toEqual(once);
      }),
      { numRuns: 500 },
    );
  });

  it('the chunk planner ends a chunk before a field would take two operations or one key too many ordered fields', () => {
    const records = [
      evaluated(withState([delta({ min: { a: 1 } })]), 0),
      evaluated(withState([delta({ max: { a: 2 } })]), 1),
      evaluated(withState([delta({ min: { a: 0 } })]), 2),
    ];
    expect(records.every((record) => record.deadLetter === undefined)).toBe(true);
    expect(planChunk(records, new Set(), 100).records.map((r) => r.offset)).toEqual([0]);
    expect(planChunk(records.slice(1), new Set(), 100).records.map((r) => r.offset)).toEqual([1]);
    const wide = (from: number) =>
      Object.fromEntries(Array.from({ length: MAX_ORDERED_FIELDS / 2 + 1 }, (_, i) => [`f${from + i}`, i]));
    const two = [
      evaluated(withState([delta({ max: wide(0) })]), 0),
      evaluated(withState([delta({ max: wide(MAX_ORDERED_FIELDS) })]), 1),
    ];
    expect(planChunk(two, new Set(), 100).records.map((r) => r.offset)).toEqual([0]);
    const same = [
      evaluated(withState([delta({ max: wide(0) })]), 0),
      evaluated(withState([delta({ max: wide(0) })]), 1),
    ];
    expect(planChunk(same, new Set(), 100).records.map((r) => r.offset)).toEqual([0, 1]);
  });
});
