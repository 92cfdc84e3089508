/**
 * The per-record rules (L1) at the evaluation boundary, and the event's shape at the parser: tombstones and null
 * keys parse, header bytes are exact, ill-formed keys and misbehaving transforms become one dead letter each,
 * effects that could not fit a transaction or an item are dead-lettered before they could stall a partition, and
 * an event whose topic or shape is wrong is rejected whole with a named error.
 */
import { describe, expect, it } from 'vitest';
import { parseInputText } from '../../local/input.ts';
import { toEventRecord } from '../../local/kafka-log.ts';
import type { IdempotencyKeySource } from '../../shared/config/settings.ts';
import { InvalidTopicNameError, MalformedEventError } from '../../shared/errors.ts';
import { decodeRecord, parseMskEvent, partitionBatches } from '../../shared/kafka/event.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { planChunk } from '../../shared/processor/chunks.ts';
import {
  type EvaluatedRecord,
  evaluateRecord,
  foldState,
  keyFromBytes,
  MAX_ERROR_CHARS,
  MAX_STATE_FIELDS,
} from '../../shared/processor/evaluate.ts';
import { ordersTransform } from '../../shared/transforms/orders.ts';
import type { StateDelta, Transform, TransformResult } from '../../shared/transforms/types.ts';
import { mskEvent, mskRecord, order, type RecordSpec } from '../support/msk.ts';

const headerKey: IdempotencyKeySource = { kind: 'header', name: 'idempotency-key' };
const jsonKey: IdempotencyKeySource = { kind: 'json', field: 'orderId' };

const decoded = (spec: RecordSpec): DecodedRecord => decodeRecord(mskRecord(spec));
const evaluate = (
  spec: RecordSpec,
  source: IdempotencyKeySource = headerKey,
  transform: Transform = ordersTransform,
) => evaluateRecord(transform, source, decoded(spec));

/** A transform that returns whatever `make` gives (for the result shapes a buggy transform can produce). */
function transformReturning(make: (record: DecodedRecord) => unknown): Transform {
  return { name: 'test', apply: (record) => make(record) as TransformResult };
}

const okWith = (state: StateDelta[], rows: Record<string, unknown>[] = [{ a: 1 }]) =>
  transformReturning(() => ({ kind: 'ok', rows, state }));

function expectDeadLetter(record: EvaluatedRecord, reason: RegExp | string): void {
  expect(record.deadLetter?.error).toMatch(reason);
  expect(record.output).toEqual([]);
  expect(record.state).toEqual([]);
  expect(record.idempotencyKey).toBeUndefined();
}

describe('the MSK event shape', () => {
  it('a tombstone and an unkeyed record parse and reach the transform as value null and key null', () => {
    const event = mskEvent([
      { partition: 0, offset: 0, key: null, value: null },
      { partition: 0, offset: 1, key: null, value: order('o-1') },
    ]);
    const absent = structuredClone(event) as unknown as {
      records: Record<string, Record<string, unknown>[]>;
    };
    delete absent.records['orders-0']![0]!.value;
    delete absent.records['orders-0']![0]!.key;
    delete absent.records['orders-0']![0]!.headers;
    for (const input of [event, absent]) {
      const [batch] = partitionBatches(parseMskEvent(JSON.parse(JSON.stringify(input))));
      expect(batch!.records.map((r) => [r.key, r.value === null ? null : 'json'])).toEqual([
        [null, null],
        [null, 'json'],
      ]);
    }
  });

  it('the orders transform dead-letters a tombstone with an error that says so', () => {
    const record = evaluate({ partition: 0, offset: 0, value: null, headers: { 'idempotency-key': 'o-1' } });
    expectDeadLetter(record, /^tombstone: /);
    expect(record.raw.value).toBeNull();
  });

  it('header bytes arrive as the signed Java bytes MSK sends, and are decoded losslessly', () => {
    const bytes = Uint8Array.of(0x6b, 0xc3, 0xab, 0xff);
    const record = decoded({ partition: 0, offset: 0, value: 'x', headers: { h: [107, -61, -85, -1] } });
    expect(record.rawHeaders).toEqual([{ name: 'h', value: Buffer.from(bytes).toString('base64') }]);
    expect(record.headers.h).toBe('kë\ufffd');
    const unsigned = decoded({ partition: 0, offset: 0, value: 'x', headers: { h: [107, 195, 171, 255] } });
    expect(unsigned.rawHeaders).toEqual(record.rawHeaders);
  });

  it('a header named like an Object.prototype member is a header like any other', () => {
    const record = decoded({
      partition: 0,
      offset: 0,
      value: 'x',
      headers: Object.fromEntries([
        ['__proto__', 'p'],
        ['constructor', 'c'],
      ]),
    });
    expect(Object.hasOwn(record.headers, '__proto__')).toBe(true);
    expect(Object.getOwnPropertyDescriptor(record.headers, '__proto__')?.value).toBe('p');
    expect(record.headers.constructor).toBe('c');
    const none = decoded({ partition: 0, offset: 0, value: order('o') });
    expect(
      evaluateRecord(ordersTransform, { kind: 'header', name: 'constructor' }, none).idempotencyKey,
    ).toBeUndefined();
  });

  it('rejects an event whose topic is not a Kafka topic name, naming it, before any effect', () => {
    for (const topic of ['..', '.', 'a/b#c', '', 'x'.repeat(250), 'ümlaut']) {
      const event = mskEvent([{ topic, partition: 0, offset: 0, value: order('o') }]);
      expect(() => parseMskEvent(event)).toThrow(InvalidTopicNameError);
    }
    const ok = mskEvent([{ topic: `a.b_c-D${'x'.repeat(241)}`, partition: 0, offset: 0, value: order('o') }]);
    expect(() => parseMskEvent(ok)).not.toThrow();
  });

  it('rejects a malformed event shape whole with a named error', () => {
    const base = mskEvent([{ partition: 0, offset: 0, value: order('o') }]);
    const mutate = (change: (r: Record<string, unknown>) => void) => {
      const copy = structuredClone(base) as unknown as { records: Record<string, Record<string, unknown>[]> };
      change(copy.records['orders-0']![0]!);
      return copy;
    };
    const cases = [
      mutate((r) => (r.value = 'not base64!')),
      mutate((r) => (r.key = 12)),
      mutate((r) => (r.headers = [{ h: [300] }])),
      mutate((r) => (r.headers = [{ h: 'text' }])),
      mutate((r) => (r.offset = -1)),
      { ...base, records: { 'orders-0': [] } },
      null,
    ];
    for (const event of cases) expect(() => parseMskEvent(event)).toThrow(MalformedEventError);
  });
});

describe('idempotency keys from exact bytes', () => {
  it('two header keys that differ only in bytes that are not UTF-8 stay two keys', () => {
    const a = evaluate({
      partition: 0,
      offset: 0,
      value: order('o'),
      headers: { 'idempotency-key': [0x6b, -1] },
    });
    const b = evaluate({
      partition: 0,
      offset: 1,
      value: order('o'),
      headers: { 'idempotency-key': [0x6b, -2] },
    });
    expect(a.idempotencyKey).toBeDefined();
    expect(b.idempotencyKey).toBeDefined();
    expect(a.idempotencyKey).not.toBe(b.idempotencyKey);
  });

  it('no binary key equals a text key: the byte-to-key map is one-to-one', () => {
    const binary = Uint8Array.of(0x6b, 0xff);
    const asText = keyFromBytes(binary);
    expect(keyFromBytes(Buffer.from(asText))).not.toBe(asText);
    expect(keyFromBytes(Buffer.from('order-42'))).toBe('order-42');
    expect(keyFromBytes(Buffer.from('~x'))).toBe('~~x');
    const keys = ['~', '~~', 'a', '', '~a'].map((t) => keyFromBytes(Buffer.from(t)));
    keys.push(keyFromBytes(Uint8Array.of(0xff)), keyFromBytes(Uint8Array.of(0xfe)));
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('a json: key from a value that is not well-formed UTF-8 is dead-lettered, not guessed', () => {
    const bytes = Buffer.concat([
      Buffer.from('{"orderId":"k'),
      Buffer.of(0xff),
      Buffer.from('","customerId":"c","amount":"1","currency":"USD","ts":1}'),
    ]);
    const record = decodeRecord({
      ...mskRecord({ partition: 0, offset: 0, value: '' }),
      value: bytes.toString('base64'),
    });
    const evaluated = evaluateRecord(ordersTransform, jsonKey, record);
    expectDeadLetter(evaluated, /not well-formed UTF-8/);
  });
});

describe('ill-formed keys are poison', () => {
  it('lone-surrogate customer ids are dead-lettered instead of merging two customers in DynamoDB', () => {
    for (const customer of ['\ud800', '\udbff', 'a\udc00b']) {
      const record = evaluate({ partition: 0, offset: 0, value: order('o', customer) }, jsonKey);
      expectDeadLetter(record, /state key is not well-formed UTF-16/);
    }
    expect(
      evaluate({ partition: 0, offset: 0, value: order('o', 'cust-😀') }, jsonKey).deadLetter,
    ).toBeUndefined();
  });

  it('lone-surrogate and empty json: idempotency keys are dead-lettered', () => {
    const value = (id: string) =>
      JSON.stringify({ orderId: id, customerId: 'c', amount: '1', currency: 'USD', ts: 1 });
    expectDeadLetter(
      evaluate({ partition: 0, offset: 0, value: value('\ud800') }, jsonKey),
      /idempotency key is not well-formed/,
    );
    const empty = evaluateRecord(okWith([]), jsonKey, decoded({ partition: 0, offset: 0, value: 'x' }));
    expect(empty.idempotencyKey).toBeUndefined();
    const bodyEmpty = evaluateRecord(
      transformReturning(() => ({ kind: 'ok', rows: [], state: [], body: { orderId: '' } })),
      jsonKey,
      decoded({ partition: 0, offset: 0, value: 'x' }),
    );
    expectDeadLetter(bodyEmpty, /idempotency key is empty/);
  });

  it('a state key with # is kept: the ledger key prefix is fixed, so it cannot collide', () => {
    const record = evaluate({
      partition: 0,
      offset: 0,
      value: order('o', 'a#b'),
      headers: { 'idempotency-key': 'o' },
    });
    expect(record.deadLetter).toBeUndefined();
    expect(record.state.map((d) => d.key)).toEqual(['a#b#USD']);
  });

  it('oversized keys are dead-lettered', () => {
    expectDeadLetter(
      evaluate({ partition: 0, offset: 0, value: order('o', 'c'.repeat(2000)) }),
      /longer than 1024 bytes/,
    );
    expectDeadLetter(
      evaluate({
        partition: 0,
        offset: 0,
        value: order('o'),
        headers: { 'idempotency-key': 'k'.repeat(1025) },
      }),
      /idempotency key longer than 1024 bytes/,
    );
  });
});

describe('misbehaving transforms', () => {
  it('a transform that throws makes one dead letter with its message, truncated to a bound', () => {
    const thrower = transformReturning(() => {
      throw new TypeError('boom');
    });
    expectDeadLetter(
      evaluateRecord(thrower, headerKey, decoded({ partition: 0, offset: 0, value: 'x' })),
      'transform test threw TypeError: boom',
    );
    const long = transformReturning(() => {
      throw new Error('x'.repeat(10_000));
    });
    const record = evaluateRecord(long, headerKey, decoded({ partition: 0, offset: 0, value: 'x' }));
    expect(record.deadLetter!.error.length).toBe(MAX_ERROR_CHARS + 1);
    const notError = transformReturning(() => {
      throw 42;
    });
    expectDeadLetter(
      evaluateRecord(notError, headerKey, decoded({ partition: 0, offset: 0, value: 'x' })),
      /threw 42/,
    );
  });

  it('a transform returning something that is not a result is dead-lettered with what was wrong', () => {
    const cases: Array<[unknown, RegExp]> = [
      [undefined, /no result object/],
      [{ kind: 'maybe' }, /neither "ok" nor "poison"/],
      [{ kind: 'poison' }, /without an error string/],
      [{ kind: 'ok', rows: 'x', state: [] }, /rows that are not an array/],
      [
        { kind: 'ok', rows: [], state: [{ key: 'k', fields: { a: 1 }, add: {} }] },
        /fields must map names to strings/,
      ],
      [
        { kind: 'ok', rows: [], state: [{ key: 'k', fields: {}, add: { a: '1' } }] },
        /add must map names to numbers/,
      ],
      [{ kind: 'ok', rows: [{ big: 1n }], state: [] }, /cannot be serialized as JSON/],
    ];
    for (const [result, reason] of cases) {
      const record = evaluateRecord(
        transformReturning(() => result),
        headerKey,
        decoded({ partition: 0, offset: 0, value: 'x' }),
      );
      expectDeadLetter(record, reason);
    }
  });
});

describe('effects that could not be applied', () => {
  const input = decoded({ partition: 0, offset: 0, value: 'x', headers: { 'idempotency-key': 'k' } });
  const delta = (
    key: string,
    fields: Record<string, string> = {},
    add: Record<string, number> = { n: 1 },
  ) => ({
    key,
    fields,
    add,
  });

  it('a record whose effects alone need more transaction items than allowed is dead-lettered, so planChunk never throws', () => {
    const many = Array.from({ length: 10 }, (_, i) => delta(`s${i}`));
    const record = evaluateRecord(okWith(many), headerKey, input, { maxTransactionItems: 12 });
    expectDeadLetter(record, /13 transaction items, more than maxTransactionItems \(12\)/);
    expect(planChunk([record], new Set(), 12).records).toEqual([record]);
    expect(
      evaluateRecord(okWith(many.slice(0, 9)), headerKey, input, { maxTransactionItems: 12 }).deadLetter,
    ).toBeUndefined();
  });

  it('reserved and prototype-breaking state field names are dead-lettered', () => {
    for (const name of ['pk', 'sk', 'expiresAt', 'stateKey', 'constructor', '__proto__', 'prototype']) {
      const add = Object.defineProperty({}, name, { value: 1, enumerable: true });
      expectDeadLetter(evaluateRecord(okWith([delta('s', {}, add)]), headerKey, input), /is reserved/);
    }
  });

  it('a field both set and added, too many fields, huge values and non-finite numbers are dead-lettered', () => {
    const cases: Array<[StateDelta, RegExp]> = [
      [delta('s', { n: 'x' }, { n: 1 }), /field "n" is both set and added/],
      [
        delta(
          's',
          {},
          Object.fromEntries(Array.from({ length: MAX_STATE_FIELDS + 1 }, (_, i) => [`f${i}`, 1])),
        ),
        /more than 100 fields/,
      ],
      [delta('s', { big: 'v'.repeat(5000) }, {}), /at most 1024 bytes/],
      [delta('s', {}, { n: Number.NaN }), /must be an integer/],
      [delta('s', {}, { n: 1e16 }), /must be an integer within/],
      [delta('s', {}, { n: 0.1 }), /must be an integer/],
      [delta('s', {}, { '': 1 }), /field name must be/],
    ];
    for (const [bad, reason] of cases)
      expectDeadLetter(evaluateRecord(okWith([bad]), headerKey, input), reason);
  });

  it('an output row larger than the bound is dead-lettered', () => {
    const record = evaluateRecord(okWith([], [{ blob: 'x'.repeat(1024 * 1024) }]), headerKey, input);
    expectDeadLetter(record, /larger than 1048576 bytes/);
  });

  it('the chunk planner ends a chunk before the folded state of one key would break its item', () => {
    const wide = (offset: number, from: number) =>
      evaluateRecord(
        okWith([
          delta('s', {}, Object.fromEntries(Array.from({ length: 60 }, (_, i) => [`f${from + i}`, 1]))),
        ]),
        { kind: 'none' },
        decoded({ partition: 0, offset, value: 'x' }),
      );
    const records = [wide(0, 0), wide(1, 60), wide(2, 0)];
    const first = planChunk(records, new Set(), 100);
    expect(first.records.map((r) => r.offset)).toEqual([0]);
    const setThenAdd = [
      evaluateRecord(
        okWith([delta('s', { x: 'a' }, {})]),
        { kind: 'none' },
        decoded({ partition: 0, offset: 0, value: 'x' }),
      ),
      evaluateRecord(
        okWith([delta('s', {}, { x: 1 })]),
        { kind: 'none' },
        decoded({ partition: 0, offset: 1, value: 'x' }),
      ),
    ];
    expect(planChunk(setThenAdd, new Set(), 100).records).toHaveLength(1);
  });

  it('the chunk planner ends a chunk before a folded sum would leave the safe integers (the client refuses it)', () => {
    const big = (offset: number) =>
      evaluateRecord(
        okWith([delta('s', {}, { n: 9e15 })]),
        { kind: 'none' },
        decoded({ partition: 0, offset, value: 'x' }),
      );
    expect(big(0).deadLetter).toBeUndefined();
    expect(planChunk([big(0), big(1)], new Set(), 100).records).toHaveLength(1);
  });

  it('a numeric json: key beyond 2^53 is dead-lettered: two ids JSON.parse rounds alike must not read as one', () => {
    const passthrough = transformReturning((record) => {
      const body = JSON.parse(record.value ?? 'null') as Record<string, unknown>;
      return { kind: 'ok', rows: [{}], state: [], body };
    });
    const id = { kind: 'json', field: 'id' } as const;
    const of = (value: string) =>
      evaluateRecord(passthrough, id, decoded({ partition: 0, offset: 0, value }));
    expectDeadLetter(of('{"id":12345678901234567890}'), /cannot be read exactly/);
    expect(of('{"id":42}').idempotencyKey).toBe('42');
  });

  it('folding never reaches Object.prototype', () => {
    const folded = foldState([
      { key: 'a', fields: { toString: 'x' }, add: { valueOf: 2 } },
      { key: 'a', fields: {}, add: { valueOf: 3, hasOwnProperty: 1 } },
    ]);
    expect(folded).toHaveLength(1);
    expect({ ...folded[0]!.add }).toEqual({ valueOf: 5, hasOwnProperty: 1 });
    expect({ ...folded[0]!.fields }).toEqual({ toString: 'x' });
  });
});

describe('eos local --input', () => {
  it('reads tombstones, null keys and header bytes, and the emulator sends them as MSK does', () => {
    const text = [
      '{"partition": 0, "key": null, "value": null, "headers": {"idempotency-key": [107, -1]}}',
      '{"partition": 1, "key": "c", "value": "v", "headers": {"h": "ë"}}',
    ].join('\n');
    const records = parseInputText('in.jsonl', text, 2);
    expect(records).toEqual([
      { partition: 0, key: null, value: null, headers: { 'idempotency-key': [107, -1] } },
      { partition: 1, key: 'c', value: 'v', headers: { h: 'ë' } },
    ]);
    const sent = records.map((r, i) => toEventRecord('orders', r.partition, i, r, 0));
    expect(sent[0]).not.toHaveProperty('key');
    expect(sent[0]!.value).toBeNull();
    expect(sent.map((r) => r.headers)).toEqual([[{ 'idempotency-key': [107, -1] }], [{ h: [-61, -85] }]]);
    const [tombstone] = sent.map((r) => evaluateRecord(ordersTransform, headerKey, decodeRecord(r)));
    expectDeadLetter(tombstone!, /^tombstone: /);
    expect(() =>
      parseInputText('in.jsonl', '{"partition": 0, "key": null, "value": "v", "headers": {"h": [256]}}', 1),
    ).toThrow(/^in\.jsonl:1: "headers\.h\.0"/);
  });
});
