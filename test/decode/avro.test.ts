/**
 * Avro fields: real avro-js encodings of a real schema, unframed with a local schema, Confluent-framed with the
 * writer's schema from a registry served over loopback HTTP, and Glue-framed (plain and zlib) with the schema
 * given locally. Every malformed input decodes to a named reason, never a throw.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFieldDecoder, DecodeFailureReason, type DecodeResult } from '../../shared/decode/index.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import { avroBytes, b64, confluent, fixture, glue } from '../fixtures/decode/wire.ts';

const schema = fixture('payment.avsc');
const schemaV2 = fixture('payment-v2.avsc');
const payment = { id: 'p-1', amountCents: 1250, currency: 'EUR', note: { string: 'lunch' } };
// avro-js gives unions in Avro's JSON shape: { branch: value }, null as null.
const expected = { id: 'p-1', amountCents: 1250, currency: 'EUR', note: { string: 'lunch' } };
const versionId = '6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b';

function failed(result: DecodeResult): { error: string; reason: string | undefined } {
  if (result.ok) throw new Error(`expected a failure, decoded ${JSON.stringify(result.value)}`);
  return { error: result.error, reason: result.reason };
}

function plain(result: DecodeResult): unknown {
  if (!result.ok) throw new Error(`expected a value, failed: ${result.error}`);
  return JSON.parse(JSON.stringify(result.value));
}

describe('Avro without framing (local schema)', () => {
  const decoder = createFieldDecoder({ format: 'avro', schema });

  it('decodes a real Avro encoding into the record', () => {
    expect(plain(decoder.decode(b64(avroBytes(schema, payment))))).toEqual(expected);
  });

  it('passes a null field (tombstone) through as null', () => {
    expect(decoder.decode(null)).toEqual({ ok: true, value: null });
  });

  it('names trailing bytes after a complete value', () => {
    const bytes = Buffer.concat([avroBytes(schema, payment), Buffer.from([1, 2])]);
    const { reason, error } = failed(decoder.decode(b64(bytes)));
    expect(reason).toBe(DecodeFailureReason.TrailingBytes);
    expect(error).toMatch(/trailing bytes.*2 of/);
  });

  it('names a value cut short as truncated', () => {
    const bytes = avroBytes(schema, payment);
    expect(failed(decoder.decode(b64(bytes.subarray(0, bytes.length - 3)))).reason).toBe(
      DecodeFailureReason.Truncated,
    );
  });

  it('names bytes that are no Avro of this schema (an enum index out of range) as an Avro decode failure', () => {
    // id "" (length 0), amountCents 0, currency index 9 (zigzag 18): only 3 symbols exist.
    const { reason, error } = failed(decoder.decode(b64(Buffer.from([0, 0, 18, 0]))));
    expect(reason).toBe(DecodeFailureReason.AvroDecodeFailed);
    expect(error).toMatch(/^Avro decode failed/);
  });
});

describe('Avro with Glue framing and the schema given locally', () => {
  it('decodes a Glue-framed record, uncompressed and zlib-compressed', () => {
    const decoder = createFieldDecoder({ format: 'avro', schema, framing: 'glue' });
    for (const compress of [false, true]) {
      const field = b64(glue(versionId, avroBytes(schema, payment), compress));
      expect(plain(decoder.decode(field))).toEqual(expected);
    }
  });

  it('decodes through a Glue registry spec whose schema versions are given locally, by version id', () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'glue', schemas: { [versionId]: schema } },
    });
    const fields = [b64(glue(versionId, avroBytes(schema, payment), true))];
    return decoder
      .prepare(fields)
      .then(() => expect(plain(decoder.decode(fields[0] ?? null))).toEqual(expected));
  });

  it('names a schema version id not given locally (and no Glue lookup) as unknown', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'glue', schemas: { [versionId]: schema } },
    });
    const field = b64(glue('00000000-0000-4000-8000-000000000000', avroBytes(schema, payment)));
    await decoder.prepare([field]);
    const { reason, error } = failed(decoder.decode(field));
    expect(reason).toBe(DecodeFailureReason.UnknownSchemaId);
    expect(error).toContain('00000000-0000-4000-8000-000000000000');
  });

  it('asks the injected Glue GetSchemaVersion for ids not given locally, once per id', async () => {
    const asked: string[] = [];
    const decoder = createFieldDecoder(
      { format: 'avro', registry: { kind: 'glue', registryName: 'payments' } },
      {
        glueGetSchemaVersion: async (id) => {
          asked.push(id);
          return id === versionId ? { schemaDefinition: schema, dataFormat: 'AVRO' } : undefined;
        },
      },
    );
    const field = b64(glue(versionId, avroBytes(schema, payment)));
    await decoder.prepare([field, field]);
    await decoder.prepare([field]);
    expect(plain(decoder.decode(field))).toEqual(expected);
    expect(asked).toEqual([versionId]);
  });

  const malformed: [string, Buffer, string, RegExp][] = [
    [
      'a Confluent magic byte',
      Buffer.from([0, 0, 0, 0, 1, 2]),
      DecodeFailureReason.BadMagicByte,
      /bad magic byte 0x00/,
    ],
    [
      'a header cut short',
      Buffer.from([3, 0, 1, 2]),
      DecodeFailureReason.Truncated,
      /truncated Glue framing/,
    ],
    [
      'an unknown compression byte',
      glueWith(7),
      DecodeFailureReason.UnsupportedCompression,
      /compression byte 0x07/,
    ],
    [
      'a zlib body that does not inflate',
      glueWith(5),
      DecodeFailureReason.DecompressionFailed,
      /does not inflate/,
    ],
    ['an empty field', Buffer.alloc(0), DecodeFailureReason.Truncated, /empty field/],
  ];
  for (const [what, bytes, reason, message] of malformed) {
    it(`names ${what}`, () => {
      const decoder = createFieldDecoder({ format: 'avro', schema, framing: 'glue' });
      const result = failed(decoder.decode(b64(bytes)));
      expect(result.reason).toBe(reason);
      expect(result.error).toMatch(message);
    });
  }
});

function glueWith(compression: number): Buffer {
  const framed = glue(versionId, Buffer.from('not zlib at all'));
  framed[1] = compression;
  return framed;
}

describe('Avro with Confluent framing and a registry over HTTP', () => {
  let registry: TestRegistry;
  beforeAll(async () => {
    registry = await startRegistry({
      7: { schema },
      8: { schema: schemaV2, schemaType: 'AVRO' },
      9: { schema: '{"type": "fixed", "name": "F"}' },
    });
  });
  afterAll(() => registry.close());

  it('decodes with the writer schema the registry has for the framed id', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
    });
    const field = b64(confluent(7, avroBytes(schema, payment)));
    await decoder.prepare([field]);
    expect(plain(decoder.decode(field))).toEqual(expected);
  });

  it('reads old and new writers into the given reader schema (Avro schema resolution)', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      schema: schemaV2,
      registry: { kind: 'confluent', url: registry.url },
    });
    const v1 = b64(confluent(7, avroBytes(schema, payment)));
    const v2 = b64(confluent(8, avroBytes(schemaV2, { ...payment, channel: 'pos' })));
    await decoder.prepare([v1, v2]);
    expect(plain(decoder.decode(v1))).toEqual({ ...expected, channel: 'web' });
    expect(plain(decoder.decode(v2))).toEqual({ ...expected, channel: 'pos' });
  });

  it('names a registry schema that does not compile, and a writer the reader schema cannot read', async () => {
    const plainDecoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
    });
    const broken = b64(confluent(9, Buffer.from([0])));
    await plainDecoder.prepare([broken]);
    expect(failed(plainDecoder.decode(broken))).toEqual({
      reason: DecodeFailureReason.SchemaMismatch,
      error: expect.stringMatching(/^Avro schema of schema id 9 does not compile/),
    });
    // A reader field without a default that the v1 writer does not have: Avro resolution refuses it.
    const reader = JSON.stringify({
      ...JSON.parse(schemaV2),
      fields: [...JSON.parse(schemaV2).fields.slice(0, 4), { name: 'channel', type: 'string' }],
    });
    const strict = createFieldDecoder({
      format: 'avro',
      schema: reader,
      registry: { kind: 'confluent', url: registry.url },
    });
    const v1 = b64(confluent(7, avroBytes(schema, payment)));
    await strict.prepare([v1]);
    expect(failed(strict.decode(v1))).toEqual({
      reason: DecodeFailureReason.SchemaMismatch,
      error: expect.stringMatching(/^Avro schema of schema id 7 cannot be read as the given schema/),
    });
  });

  it('decodes Confluent framing with a local schema and no registry, ignoring the id', () => {
    const decoder = createFieldDecoder({ format: 'avro', schema, framing: 'confluent' });
    expect(plain(decoder.decode(b64(confluent(12345, avroBytes(schema, payment)))))).toEqual(expected);
  });

  it('names a Glue header where Confluent framing is expected as a bad magic byte', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
    });
    const field = b64(glue(versionId, avroBytes(schema, payment)));
    await decoder.prepare([field]);
    const { reason, error } = failed(decoder.decode(field));
    expect(reason).toBe(DecodeFailureReason.BadMagicByte);
    expect(error).toMatch(/bad magic byte 0x03/);
  });

  it('names a Confluent header cut short as truncated', () => {
    const decoder = createFieldDecoder({ format: 'avro', schema, framing: 'confluent' });
    expect(failed(decoder.decode(b64(Buffer.from([0, 0, 7])))).reason).toBe(DecodeFailureReason.Truncated);
  });
});
