/**
 * The transform API (`shared/transforms/api.ts`) through the processor's evaluation: definitions are validated
 * when made, records are decoded before the user's function sees them, rows are checked against the declared
 * schema, and every rejection, throw or undecodable field is one dead letter with its reason. Pure: no I/O.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  formatIdempotencyKeySource,
  type IdempotencyKeySource,
  parseIdempotencyKeySource,
} from '../../shared/config/settings.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import { checkKeySource, type EvaluatedRecord, evaluateRecord } from '../../shared/processor/evaluate.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import {
  type AnyTransformDefinition,
  type Column,
  defineTransform,
  InvalidTransformDefinitionError,
  isTransformDefinition,
  RejectRecord,
  type RowOf,
  type TransformInput,
} from '../../shared/transforms/api.ts';
import { mskRecord, type RecordSpec } from '../support/msk.ts';

const none: IdempotencyKeySource = { kind: 'none' };
const fromTransform: IdempotencyKeySource = { kind: 'transform' };
const headerKey: IdempotencyKeySource = { kind: 'header', name: 'idempotency-key' };

const spec = (overrides: Partial<RecordSpec> = {}): RecordSpec => ({
  partition: 0,
  offset: 5,
  value: '{"n":1}',
  ...overrides,
});

function run(
  definition: AnyTransformDefinition,
  record: Partial<RecordSpec> = {},
  keySource: IdempotencyKeySource = none,
): EvaluatedRecord {
  return evaluateRecord(toTransform(definition), keySource, decodeRecord(mskRecord(spec(record))));
}

/** A transform with one column of `column` whose row is `row` for every record. */
function rowOf(column: Column, row: Record<string, unknown>) {
  return defineTransform({
    name: 'rows',
    schema: { c: column },
    transform: () => ({ rows: [row as RowOf<{ c: Column }>] }),
  });
}

function expectDeadLetter(record: EvaluatedRecord, reason: RegExp | string): void {
  expect(record.deadLetter?.error).toMatch(reason);
  expect(record.output).toEqual([]);
  expect(record.state).toEqual([]);
  expect(record.idempotencyKey).toBeUndefined();
}

describe('defineTransform', () => {
  it('defaults key to string and value to json, and normalises the schema in declaration order', () => {
    const t = defineTransform({
      name: 't',
      schema: { a: 'long', b: { type: 'string', nullable: true }, c: { type: 'json' } },
      transform: () => ({}),
    });
    expect(t.key).toEqual({ format: 'string' });
    expect(t.value).toEqual({ format: 'json' });
    expect(t.columns).toEqual([
      { name: 'a', type: 'long', nullable: false },
      { name: 'b', type: 'string', nullable: true },
      { name: 'c', type: 'json', nullable: false },
    ]);
    expect(isTransformDefinition(t)).toBe(true);
    expect(isTransformDefinition({ ...t })).toBe(true);
    expect(isTransformDefinition({ name: 't', schema: {}, transform: () => ({}) })).toBe(false);
    expect(Object.isFrozen(t)).toBe(true);
  });

  it('refuses a reserved or unknown column, an empty name and a missing function when the module loads', () => {
    expect(() => defineTransform({ name: 'x', schema: { source: 'string' }, transform: () => ({}) })).toThrow(
      InvalidTransformDefinitionError,
    );
    expect(() =>
      defineTransform({ name: 'x', schema: { a: 'varchar' as 'string' }, transform: () => ({}) }),
    ).toThrow(/column "a" has type "varchar" \(known: string, int, long, double, boolean, timestamp, json\)/);
    expect(() => defineTransform({ name: '', schema: {}, transform: () => ({}) })).toThrow(/name must be/);
    expect(() =>
      defineTransform({ name: 'x', schema: {}, transform: undefined as unknown as () => object }),
    ).toThrow(/transform must be a function/);
  });

  it('types value by its first type argument and rows by the schema (checked by tsc)', () => {
    interface Click {
      userId: string;
      at: number;
    }
    const typed = defineTransform<Click>({
      name: 'typed',
      schema: { userId: 'string' },
      transform: (record) => {
        expectTypeOf(record.value).toEqualTypeOf<Click | null>();
        expectTypeOf(record.key).toEqualTypeOf<string | null>();
        return { rows: [{ userId: record.value?.userId ?? 'none' }] };
      },
    });
    expectTypeOf(typed.transform).parameter(0).toEqualTypeOf<TransformInput<Click, string>>();
    const inferred = defineTransform({
      name: 'inferred',
      schema: { n: 'long', note: { type: 'string', nullable: true } },
      transform: () => ({ rows: [{ n: 1 }, { n: 2, note: null }] }),
    });
    expectTypeOf<RowOf<typeof inferred.schema>>().toEqualTypeOf<{ n: number } & { note?: string | null }>();
    defineTransform({
      name: 'wrong',
      schema: { n: 'long' },
      // @ts-expect-error a string in a long column does not compile
      transform: () => ({ rows: [{ n: 'one' }] }),
    });
    defineTransform({
      name: 'missing',
      schema: { n: 'long' },
      // @ts-expect-error a required column missing does not compile
      transform: () => ({ rows: [{}] }),
    });
  });
});

describe('rows against the declared schema: one dead letter, naming the column', () => {
  it('accepts a row that matches, nullable columns null or absent, and adds the lineage', () => {
    const t = defineTransform({
      name: 'ok',
      schema: {
        s: 'string',
        i: 'int',
        l: 'long',
        d: 'double',
        b: 'boolean',
        t: 'timestamp',
        j: 'json',
        n: { type: 'string', nullable: true },
        absent: { type: 'long', nullable: true },
      },
      transform: () => ({
        rows: [
          {
            s: 'x',
            i: -(2 ** 31),
            l: 2 ** 53 - 1,
            d: 0.5,
            b: false,
            t: 1764374400000,
            j: [1, { a: 2 }],
            n: null,
          },
        ],
      }),
    });
    const evaluated = run(t);
    expect(evaluated.deadLetter).toBeUndefined();
    expect(evaluated.output).toEqual([
      {
        s: 'x',
        i: -(2 ** 31),
        l: 2 ** 53 - 1,
        d: 0.5,
        b: false,
        t: 1764374400000,
        j: [1, { a: 2 }],
        n: null,
        source: { topic: 'orders', partition: 0, offset: 5 },
      },
    ]);
  });

  it.each([
    ['a required column missing', 'string', {}, /row 0: required column "c" is missing/],
    [
      'an undeclared column',
      'string',
      { c: 'x', extra: 1 },
      /row 0: column "extra" is not declared in the schema/,
    ],
    ['null in a column that is not nullable', 'string', { c: null }, /column "c" is null but not nullable/],
    ['a number in a string column', 'string', { c: 7 }, /column "c" must be a string \(string\), got 7/],
    ['an int out of range', 'int', { c: 2 ** 31 }, /column "c" must be an integer within the 32-bit/],
    [
      'a fraction in a long column',
      'long',
      { c: 1.5 },
      /column "c" must be an integer within ±\(2\^53 - 1\)/,
    ],
    ['an unsafe long', 'long', { c: 2 ** 53 }, /column "c" must be an integer/],
    ['NaN in a double column', 'double', { c: Number.NaN }, /column "c" must be a finite number/],
    [
      'a string in a boolean column',
      'boolean',
      { c: 'true' },
      /column "c" must be a boolean \(boolean\), got "true"/,
    ],
    ['a Date in a timestamp column', 'timestamp', { c: new Date(0) }, /column "c" must be milliseconds/],
    ['undefined in a json column', 'json', { c: undefined }, /column "c" is undefined but not nullable/],
  ] as const)('%s', (_, column, row, reason) => {
    expectDeadLetter(run(rowOf(column, row)), reason);
  });

  it('names the row: the second row of a record is checked too', () => {
    const t = defineTransform({
      name: 'two',
      schema: { c: 'long' },
      transform: () => ({ rows: [{ c: 1 }, { c: 'two' as unknown as number }] }),
    });
    expectDeadLetter(run(t), /^transform two: row 1: column "c"/);
  });
});

describe('rejections, throws and undecodable fields: one dead letter with the reason', () => {
  it('a thrown RejectRecord is the reason as written; a returned one too', () => {
    const thrown = defineTransform({
      name: 'r',
      schema: {},
      transform: () => {
        throw new RejectRecord('not for us');
      },
    });
    expectDeadLetter(run(thrown), /^not for us$/);
    const returned = defineTransform({ name: 'r', schema: {}, transform: () => new RejectRecord('nope') });
    expectDeadLetter(run(returned), /^nope$/);
  });

  it('a RejectRecord from another copy of the API module is still a rejection', () => {
    // What a bundled copy of api.ts throws: a different class carrying the same global brand.
    const foreign = Object.assign(new Error('foreign rejection'), {
      [Symbol.for('msk-exactly-once-pipeline.reject-record')]: true,
    });
    expect(foreign).toBeInstanceOf(RejectRecord);
    const t = defineTransform({
      name: 'f',
      schema: {},
      transform: () => {
        throw foreign;
      },
    });
    expectDeadLetter(run(t), /^foreign rejection$/);
  });

  it('any other throw names the transform and the error; a returned Error too', () => {
    const thrower = defineTransform({
      name: 'buggy',
      schema: {},
      transform: () => {
        throw new TypeError('x is undefined');
      },
    });
    expectDeadLetter(run(thrower), 'transform buggy threw TypeError: x is undefined');
    const returner = defineTransform({ name: 'ret', schema: {}, transform: () => new RangeError('too big') });
    expectDeadLetter(run(returner), 'transform ret returned RangeError: too big');
  });

  it('a Promise, a non-object or a non-string idempotencyKey is a dead letter, not a stall', () => {
    const asyncOne = defineTransform({
      name: 'async',
      schema: {},
      transform: (async () => ({})) as unknown as () => object,
    });
    expectDeadLetter(run(asyncOne), /returned a Promise: transforms are synchronous/);
    const numberOne = defineTransform({
      name: 'num',
      schema: {},
      transform: (() => 42) as unknown as () => object,
    });
    expectDeadLetter(run(numberOne), /returned neither an object nor an Error/);
    const badKey = defineTransform({
      name: 'k',
      schema: {},
      transform: () => ({ idempotencyKey: 7 as unknown as string }),
    });
    expectDeadLetter(run(badKey, {}, fromTransform), /idempotencyKey that is not a string/);
  });

  it('an undecodable value is one dead letter with the decoder reason; the function never runs', () => {
    let calls = 0;
    const t = defineTransform({
      name: 'counted',
      schema: {},
      transform: () => {
        calls++;
        return {};
      },
    });
    const evaluated = run(t, { value: '{"n":' });
    expectDeadLetter(evaluated, /^undecodable value: .*not valid JSON/);
    expect(evaluated.deadLetter?.raw.value).toBe(Buffer.from('{"n":').toString('base64'));
    expect(calls).toBe(0);
  });

  it('an undecodable key (json key format) is a dead letter naming the key', () => {
    const t = defineTransform({ name: 'jk', key: { format: 'json' }, schema: {}, transform: () => ({}) });
    expectDeadLetter(run(t, { key: 'not json' }), /^undecodable key: /);
    expect(run(t, { key: '{"id":1}' }).deadLetter).toBeUndefined();
  });

  it('the function receives the decoded record: lineage, timestamp, key, value and text headers', () => {
    const seen: TransformInput<unknown, unknown>[] = [];
    const t = defineTransform({
      name: 'spy',
      schema: {},
      transform: (record) => {
        seen.push(record);
        return {};
      },
    });
    run(t, { key: 'k-1', value: '{"n":[1,2]}', headers: { trace: 'abc' } });
    run(t, { offset: 6, key: null, value: null });
    expect(seen[0]).toMatchObject({
      topic: 'orders',
      partition: 0,
      offset: 5,
      timestamp: 1764374400005,
      key: 'k-1',
      value: { n: [1, 2] },
    });
    expect({ ...seen[0]!.headers }).toEqual({ trace: 'abc' });
    expect(seen[1]).toMatchObject({ offset: 6, key: null, value: null });
  });
});

describe('idempotency keys from the transform', () => {
  const keyed = defineTransform({
    name: 'keyed',
    schema: {},
    transform: ({ value }) => ({ idempotencyKey: (value as { id?: string } | null)?.id }),
  });

  it('the "transform" source takes the key the transform returns; none returned means no key', () => {
    expect(run(keyed, { value: '{"id":"view-9"}' }, fromTransform).idempotencyKey).toBe('view-9');
    expect(run(keyed, { value: '{}' }, fromTransform).idempotencyKey).toBeUndefined();
  });

  it('the key is checked as every key: an empty one is a dead letter', () => {
    expectDeadLetter(run(keyed, { value: '{"id":""}' }, fromTransform), /idempotency key is empty/);
  });

  it('other sources ignore the returned key: header and json keep their behaviour', () => {
    const withHeader = run(keyed, { value: '{"id":"v"}', headers: { 'idempotency-key': 'h-1' } }, headerKey);
    expect(withHeader.idempotencyKey).toBe('h-1');
    expect(run(keyed, { value: '{"id":"v"}' }, { kind: 'json', field: 'id' }).idempotencyKey).toBe('v');
    expect(run(keyed, { value: '{"id":"v"}' }, none).idempotencyKey).toBeUndefined();
  });

  it('json:<field> with a transform that does not decode JSON values is a bad setting, found at start', () => {
    const bytes = toTransform(
      defineTransform({ name: 'raw', value: { format: 'bytes' }, schema: {}, transform: () => ({}) }),
    );
    expect(() => checkKeySource(bytes, { kind: 'json', field: 'id' })).toThrow(InvalidSettingError);
    expect(() => checkKeySource(bytes, { kind: 'json', field: 'id' })).toThrow(/decodes values as bytes/);
    expect(() => checkKeySource(bytes, fromTransform)).not.toThrow();
    expect(() => checkKeySource(toTransform(keyed), { kind: 'json', field: 'id' })).not.toThrow();
  });

  it('the setting reads and writes "transform"', () => {
    expect(parseIdempotencyKeySource('transform')).toEqual({ kind: 'transform' });
    for (const text of ['transform', 'none', 'header:idempotency-key', 'json:orderId']) {
      expect(formatIdempotencyKeySource(parseIdempotencyKeySource(text))).toBe(text);
    }
    expect(() => parseIdempotencyKeySource('transformer')).toThrow(/"transform"/);
  });
});
