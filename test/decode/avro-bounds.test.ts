/**
 * An Avro value cannot make decoding run long: the writer's schema is the producer's choice (by its schema id), and
 * an array's block count is a varint of a few bytes. A writer schema whose array items encode to no bytes at all
 * (null, an empty record, a record of only such fields; avro-js itself refuses fixed(0)) is refused when it is looked up, so its records
 * are dead-lettered with the reason; any other array or map block declaring more items than there are bytes left
 * is a truncated value, dead-lettered at once instead of looping over billions of phantom items. Real values —
 * ordinary arrays and maps, blocks with byte sizes, recursive records, maps of nulls — still decode.
 */
import { performance } from 'node:perf_hooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createFieldDecoder,
  DecodeFailureReason,
  type DecodeResult,
  type FieldDecoder,
  InvalidFieldFormatError,
} from '../../shared/decode/index.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import { avroBytes, b64, confluent } from '../fixtures/decode/wire.ts';

/** Avro's long: zigzag, then base-128 little-endian groups. */
function long(n: number): number[] {
  let rest = n >= 0 ? 2 * n : -2 * n - 1;
  const out: number[] = [];
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
  return out;
}

/** Decoding must end, with a value or a reason, well within this: the unguarded loops take seconds. */
const BOUND_MS = 50;

/** The decode's result and its fastest time of three (the machine is shared: one run may be paused). */
function timed(decoder: FieldDecoder, field: string): { result: DecodeResult; ms: number } {
  let fastest = Number.POSITIVE_INFINITY;
  let result: DecodeResult = { ok: false, error: 'not decoded' };
  for (let run = 0; run < 3; run++) {
    const start = performance.now();
    result = decoder.decode(field);
    fastest = Math.min(fastest, performance.now() - start);
  }
  return { result, ms: fastest };
}

const schemas = {
  nulls: { type: 'array', items: 'null' },
  emptyRecords: { type: 'array', items: { type: 'record', name: 'Empty', fields: [] } },
  zeroFixed: { type: 'array', items: { type: 'fixed', name: 'Nothing', size: 0 } },
  nestedZero: {
    type: 'record',
    name: 'Outer',
    fields: [
      {
        name: 'inner',
        type: {
          type: 'array',
          items: {
            type: 'record',
            name: 'AllZero',
            fields: [
              { name: 'a', type: 'null' },
              { name: 'b', type: { type: 'record', name: 'Void', fields: [{ name: 'n', type: 'null' }] } },
            ],
          },
        },
      },
    ],
  },
  ints: { type: 'array', items: 'int' },
  nullValues: { type: 'map', values: 'null' },
  optionalInts: { type: 'array', items: ['null', 'int'] },
  listNode: {
    type: 'record',
    name: 'Node',
    fields: [
      { name: 'value', type: 'int' },
      { name: 'next', type: ['null', 'Node'] },
    ],
  },
  nestedInts: { type: 'array', items: { type: 'array', items: 'int' } },
  longs: { type: 'array', items: 'long' },
};
type SchemaName = keyof typeof schemas;
const ids: Record<SchemaName, number> = {
  nulls: 1,
  emptyRecords: 2,
  zeroFixed: 3,
  nestedZero: 4,
  ints: 5,
  nullValues: 6,
  optionalInts: 7,
  listNode: 8,
  nestedInts: 9,
  longs: 10,
};

describe('Avro decoding ends in bounded time whatever the writer schema and bytes', () => {
  let registry: TestRegistry;
  beforeAll(async () => {
    registry = await startRegistry(
      Object.fromEntries(
        Object.entries(schemas).map(([name, schema]) => [
          ids[name as SchemaName],
          { schema: JSON.stringify(schema) },
        ]),
      ),
    );
  });
  afterAll(() => registry.close());

  async function decodeFromRegistry(name: SchemaName, payload: readonly number[], reader?: object) {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
      ...(reader === undefined ? {} : { schema: JSON.stringify(reader) }),
    });
    const field = b64(confluent(ids[name], Buffer.from(payload)));
    await decoder.prepare([field]);
    return timed(decoder, field);
  }

  const zeroSize: [string, SchemaName, number[]][] = [
    ['an array of nulls', 'nulls', [...long(20_000_000), 0]],
    ['an array of empty records', 'emptyRecords', [...long(20_000_000), 0]],
    ['an array of records whose fields are all zero-size', 'nestedZero', [...long(20_000_000), 0]],
    // The 18-byte field (5 of framing) declaring 5·10^8 items, and a 6-byte count.
    ['an array of nulls, 5e8 items in 18 bytes', 'nulls', [...long(500_000_000), 0, ...Array(8).fill(0)]],
    ['an array of nulls, a 6-byte count', 'nulls', [...long(2 ** 40), 0]],
  ];
  for (const [what, name, payload] of zeroSize) {
    it(`refuses a writer schema with ${what}: the record is dead-lettered with the reason`, async () => {
      const { result, ms } = await decodeFromRegistry(name, payload);
      expect(ms).toBeLessThan(BOUND_MS);
      expect(result).toMatchObject({ ok: false, reason: DecodeFailureReason.SchemaMismatch });
      expect(!result.ok && result.error).toMatch(
        new RegExp(`schema id ${ids[name]} is refused: .*items that encode to no bytes`),
      );
    });
  }

  const overlong: [string, SchemaName, number[]][] = [
    ['an array of ints declaring 2e7 items in 4 bytes', 'ints', [...long(20_000_000), 0]],
    ['an array of ints with a 6-byte count', 'ints', [...long(2 ** 40), 0]],
    ['an array of ints with a negative (sized) block of 2e7', 'ints', [...long(-20_000_000), 2, 0]],
    ['a map of nulls declaring 2e7 entries', 'nullValues', [...long(20_000_000), 0]],
    ['an array of optional ints declaring 2e7 items', 'optionalInts', [...long(20_000_000), 0]],
    ['an inner array declaring 2e7 items', 'nestedInts', [...long(1), ...long(20_000_000), 0, 0]],
    [
      'a second block declaring 2e7 items after a valid one',
      'ints',
      [...long(2), ...long(7), ...long(8), ...long(20_000_000), 0],
    ],
  ];
  for (const [what, name, payload] of overlong) {
    it(`dead-letters ${what} as truncated, at once`, async () => {
      const { result, ms } = await decodeFromRegistry(name, payload);
      expect(ms).toBeLessThan(BOUND_MS);
      expect(result).toMatchObject({ ok: false, reason: DecodeFailureReason.Truncated });
      expect(!result.ok && result.error).toContain('bytes left');
    });
  }

  it('bounds the block count when the writer schema is resolved into a reader schema too', async () => {
    const { result, ms } = await decodeFromRegistry('ints', [...long(20_000_000), 0], schemas.longs);
    expect(ms).toBeLessThan(BOUND_MS);
    expect(result).toMatchObject({ ok: false, reason: DecodeFailureReason.Truncated });
  });

  it('still decodes real arrays, maps, sized blocks and recursive records', async () => {
    const ints = Array.from({ length: 1000 }, (_, i) => i * 7 - 500);
    const encoded = [...avroBytes(JSON.stringify(schemas.ints), ints)];
    expect((await decodeFromRegistry('ints', encoded)).result).toEqual({ ok: true, value: ints });
    // Two blocks, the first with its byte size (a negative count): 2 items in 2 bytes, then 1.
    const sized = [...long(-2), ...long(2), ...long(5), ...long(-6), ...long(1), ...long(9), 0];
    expect((await decodeFromRegistry('ints', sized)).result).toEqual({ ok: true, value: [5, -6, 9] });
    const nullMap = { a: null, bb: null, ccc: null };
    const mapBytes = [...avroBytes(JSON.stringify(schemas.nullValues), nullMap)];
    expect((await decodeFromRegistry('nullValues', mapBytes)).result).toEqual({ ok: true, value: nullMap });
    const optional = Array.from({ length: 200 }, (_, i) => (i % 3 === 0 ? null : { int: i }));
    const optionalBytes = [...avroBytes(JSON.stringify(schemas.optionalInts), optional)];
    const decodedOptional = (await decodeFromRegistry('optionalInts', optionalBytes)).result;
    expect(decodedOptional.ok && (decodedOptional.value as unknown[]).length).toBe(200);
    const list = { value: 1, next: { Node: { value: 2, next: { Node: { value: 3, next: null } } } } };
    const listBytes = [...avroBytes(JSON.stringify(schemas.listNode), list)];
    const decodedList = (await decodeFromRegistry('listNode', listBytes)).result;
    expect(JSON.parse(JSON.stringify(decodedList))).toEqual({ ok: true, value: list });
    const widened = await decodeFromRegistry('ints', encoded, schemas.longs);
    expect(widened.result).toEqual({ ok: true, value: ints });
  });

  it('refuses a writer schema with an array of fixed(0) (avro-js has no fixed of size 0)', async () => {
    const { result, ms } = await decodeFromRegistry('zeroFixed', [...long(20_000_000), 0]);
    expect(ms).toBeLessThan(BOUND_MS);
    expect(result).toMatchObject({ ok: false, reason: DecodeFailureReason.SchemaMismatch });
    expect(!result.ok && result.error).toContain('schema id 3 does not compile');
  });

  it('refuses a local schema with an array of zero-size items when the decoder is made', () => {
    expect(() => createFieldDecoder({ format: 'avro', schema: JSON.stringify(schemas.nestedZero) })).toThrow(
      InvalidFieldFormatError,
    );
    expect(() => createFieldDecoder({ format: 'avro', schema: JSON.stringify(schemas.nulls) })).toThrow(
      /items that encode to no bytes/,
    );
  });
});
