/**
 * A field format spec that can never decode anything fails when the decoder is created — at synth and at the
 * start of `eos local` — with an error naming the setting, never per record. Also the schema-less formats.
 */
import { describe, expect, it } from 'vitest';
import {
  createFieldDecoder,
  DecodeFailureReason,
  type FieldFormat,
  InvalidFieldFormatError,
} from '../../shared/decode/index.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import { b64, confluent, fixture, glue } from '../fixtures/decode/wire.ts';

const avsc = fixture('payment.avsc');
const proto = fixture('orders.proto');
const registry = { kind: 'confluent', url: 'https://registry.example.com' } as const;

describe('format specs rejected at createFieldDecoder', () => {
  const bad: [string, FieldFormat, string, RegExp][] = [
    [
      'an Avro schema that is not JSON',
      { format: 'avro', schema: '{"type": "record"' },
      'value.schema',
      /not an Avro schema/,
    ],
    [
      'an Avro schema avro-js rejects',
      {
        format: 'avro',
        schema: '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuch"}]}',
      },
      'value.schema',
      /not an Avro schema/,
    ],
    [
      'Avro with neither schema nor registry',
      { format: 'avro' },
      'value.schema',
      /needs a schema or a registry/,
    ],
    [
      'a .proto that does not parse',
      { format: 'protobuf', schema: 'message {', messageType: 'X' },
      'value.schema',
      /does not parse/,
    ],
    [
      'a messageType not in the .proto',
      { format: 'protobuf', schema: proto, messageType: 'shop.v1.Invoice' },
      'value.schema',
      /"shop\.v1\.Invoice" is not in the \.proto \(its messages: shop\.v1\.LineItem, shop\.v1\.Order/,
    ],
    [
      'an empty messageType',
      { format: 'protobuf', schema: proto, messageType: ' ' },
      'value.messageType',
      /needs/,
    ],
    [
      'Protobuf with both schema and registry',
      { format: 'protobuf', schema: proto, messageType: 'shop.v1.Order', registry },
      'value.schema',
      /not both/,
    ],
    [
      'a registry URL that is not http(s)',
      { format: 'avro', registry: { kind: 'confluent', url: 'ftp://registry.example.com' } },
      'value.registry.url',
      /"ftp:" is not http: or https:/,
    ],
    [
      'a registry URL that is no URL',
      { format: 'avro', registry: { kind: 'confluent', url: 'registry:8081' } },
      'value.registry.url',
      /not http: or https:|not a URL/,
    ],
    [
      'credentials in the registry URL',
      { format: 'avro', registry: { kind: 'confluent', url: 'https://u:p@registry.example.com' } },
      'value.registry.url',
      /basicAuth/,
    ],
    [
      'basic auth without a colon',
      { format: 'avro', registry: { ...registry, basicAuth: 'token' } },
      'value.registry.basicAuth',
      /user:password/,
    ],
    [
      'a zero timeout',
      { format: 'avro', registry: { ...registry, timeoutMs: 0 } },
      'value.registry.timeoutMs',
      /positive integer/,
    ],
    [
      'a framing the registry cannot have written',
      { format: 'avro', registry, framing: 'glue' },
      'value.framing',
      /cannot carry a confluent registry's schema id/,
    ],
    [
      'a registry with framing none',
      { format: 'avro', registry, framing: 'none' },
      'value.framing',
      /use "confluent"/,
    ],
    [
      'a Glue schema map keyed by something other than a UUID',
      { format: 'avro', registry: { kind: 'glue', schemas: { 'payments-v1': avsc } } },
      'value.registry.schemas',
      /"payments-v1" is not a schema version id/,
    ],
    [
      'a Glue schema map with a schema that does not compile',
      {
        format: 'avro',
        registry: { kind: 'glue', schemas: { '6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b': '{}' } },
      },
      'value.registry.schemas',
      /does not compile/,
    ],
  ];
  for (const [what, format, setting, message] of bad) {
    it(`rejects ${what}, naming ${setting}`, () => {
      let thrown: unknown;
      try {
        createFieldDecoder(format, { setting: 'value' });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidFieldFormatError);
      expect(thrown).toBeInstanceOf(InvalidSettingError);
      expect((thrown as InvalidFieldFormatError).setting).toBe(setting);
      expect((thrown as Error).message).toMatch(message);
    });
  }

  it('rejects an unknown format and an unknown framing given from untyped configuration', () => {
    const untyped = (spec: unknown) => () => createFieldDecoder(spec as FieldFormat);
    expect(untyped({ format: 'xml' })).toThrow(/unknown format "xml"/);
    expect(untyped({ format: 'json', framing: 'magic' })).toThrow(/unknown framing "magic"/);
    expect(untyped({ format: 'avro', schema: avsc, registry: { kind: 'karapace', url: 'x' } })).toThrow(
      /unknown registry "karapace"/,
    );
  });
});

describe('schema-less formats', () => {
  it('decodes strings, bytes and JSON, with nulls passed through', () => {
    const text = b64(Buffer.from('héllo'));
    expect(createFieldDecoder({ format: 'string' }).decode(text)).toEqual({ ok: true, value: 'héllo' });
    expect(createFieldDecoder({ format: 'bytes' }).decode(text)).toEqual({
      ok: true,
      value: new Uint8Array(Buffer.from('héllo')),
    });
    expect(createFieldDecoder({ format: 'json' }).decode(b64(Buffer.from('{"a":[1]}')))).toEqual({
      ok: true,
      value: { a: [1] },
    });
    expect(createFieldDecoder({ format: 'json' }).decode(null)).toEqual({ ok: true, value: null });
  });

  it('names invalid JSON', () => {
    expect(createFieldDecoder({ format: 'json' }).decode(b64(Buffer.from('{nope')))).toMatchObject({
      ok: false,
      reason: DecodeFailureReason.InvalidJson,
    });
  });

  it('strips Confluent and Glue framing from JSON (JSON Schema serializers) without a registry', () => {
    const json = Buffer.from('{"page":"/home"}');
    expect(
      createFieldDecoder({ format: 'json', framing: 'confluent' }).decode(b64(confluent(4, json))),
    ).toEqual({
      ok: true,
      value: { page: '/home' },
    });
    const glued = b64(glue('6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b', json, true));
    expect(createFieldDecoder({ format: 'json', framing: 'glue' }).decode(glued)).toEqual({
      ok: true,
      value: { page: '/home' },
    });
    expect(createFieldDecoder({ format: 'json', framing: 'confluent' }).decode(b64(json))).toMatchObject({
      ok: false,
      reason: DecodeFailureReason.BadMagicByte,
    });
  });
});
