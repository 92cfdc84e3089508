/**
 * `decode` never throws: whatever bytes a producer wrote, each field decodes to a value or to a named reason, so
 * one bad record is dead-lettered instead of failing (and stalling) its partition. Arbitrary bytes, and real
 * encodings with one byte flipped or cut, for every format and framing that does not need the network.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createFieldDecoder, DecodeFailureReason, type FieldFormat } from '../../shared/decode/index.ts';
import {
  avroBytes,
  b64,
  confluent,
  confluentIndexes,
  fixture,
  glue,
  glueIndex,
  protoBytes,
} from '../fixtures/decode/wire.ts';

const avsc = fixture('payment.avsc');
const proto = fixture('orders.proto');
const versionId = '6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b';
const reasons: readonly string[] = Object.values(DecodeFailureReason);

const formats: [string, FieldFormat, Buffer][] = [
  ['json', { format: 'json' }, Buffer.from('{"a":1}')],
  ['json, Glue-framed', { format: 'json', framing: 'glue' }, glue(versionId, Buffer.from('{"a":1}'), true)],
  [
    'avro, unframed',
    { format: 'avro', schema: avsc },
    avroBytes(avsc, { id: 'p', amountCents: 1, currency: 'GBP', note: null }),
  ],
  [
    'avro, Confluent-framed',
    { format: 'avro', schema: avsc, framing: 'confluent' },
    confluent(1, avroBytes(avsc, { id: 'p', amountCents: 1, currency: 'GBP', note: { string: 'n' } })),
  ],
  [
    'avro, Glue registry with local schemas',
    { format: 'avro', registry: { kind: 'glue', schemas: { [versionId]: avsc } } },
    glue(versionId, avroBytes(avsc, { id: 'p', amountCents: -7, currency: 'USD', note: null }), true),
  ],
  [
    'protobuf, Confluent-framed',
    { format: 'protobuf', schema: proto, messageType: 'shop.v1.Refund', framing: 'confluent' },
    confluent(
      1,
      Buffer.concat([confluentIndexes([1]), protoBytes(proto, 'shop.v1.Refund', { order_id: 'o' })]),
    ),
  ],
  [
    'protobuf, Glue registry with local schemas',
    {
      format: 'protobuf',
      messageType: 'shop.v1.Order',
      registry: { kind: 'glue', schemas: { [versionId]: proto } },
    },
    glue(
      versionId,
      Buffer.concat([
        glueIndex(1),
        protoBytes(proto, 'shop.v1.Order', { order_id: 'o', items: [{ sku: 'a' }] }),
      ]),
    ),
  ],
];

describe('decode never throws', () => {
  for (const [name, format, valid] of formats) {
    it(`returns a value or a named reason for any bytes (${name})`, async () => {
      const decoder = createFieldDecoder(format);
      // The real encoding decodes, so the mutations below start from a field that works.
      await decoder.prepare([b64(valid)]);
      expect(decoder.decode(b64(valid)).ok).toBe(true);
      const mutated = fc.oneof(
        fc.uint8Array({ maxLength: 64 }).map((bytes) => Buffer.from(bytes)),
        fc.tuple(fc.nat(valid.length - 1), fc.integer({ min: 1, max: 255 })).map(([at, xor]) => {
          const copy = Buffer.from(valid);
          copy[at] = (copy[at] ?? 0) ^ xor;
          return copy;
        }),
        fc.nat(valid.length).map((cut) => valid.subarray(0, cut)),
      );
      await fc.assert(
        fc.asyncProperty(mutated, async (bytes) => {
          const field = b64(bytes);
          await decoder.prepare([field]);
          const result = decoder.decode(field);
          if (!result.ok) {
            expect(typeof result.error).toBe('string');
            expect(reasons).toContain(result.reason);
          }
        }),
        { numRuns: 300 },
      );
    });
  }
});
