/**
 * Protobuf fields: real protobufjs encodings of a real `.proto`, unframed and Glue-framed with the schema given
 * locally, and Confluent-framed with the writer's `.proto` from a registry over loopback HTTP, where the message
 * indexes (the single-0 shortcut, a second top-level message, a nested path, an index that takes two varint bytes)
 * are read and must name the declared message type.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFieldDecoder, DecodeFailureReason, type DecodeResult } from '../../shared/decode/index.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import {
  b64,
  confluent,
  confluentIndexes,
  fixture,
  glue,
  glueIndex,
  protoBytes,
} from '../fixtures/decode/wire.ts';

const proto = fixture('orders.proto');
const order = {
  order_id: 'o-1',
  amount_cents: '9007199254740993',
  items: [{ sku: 'A', quantity: 2 }],
  status: 2,
};
const decodedOrder = {
  order_id: 'o-1',
  amount_cents: '9007199254740993',
  items: [{ sku: 'A', quantity: 2 }],
  status: 'SHIPPED',
};
const versionId = '0b6f7a8e-1c2d-4e3f-9a0b-1c2d3e4f5a6b';

/** A `.proto` with 70 top-level messages, so Confluent's index for M66 (zigzag 132) takes two varint bytes. */
const manyMessages = `syntax = "proto3";\npackage many;\n${Array.from(
  { length: 70 },
  (_, i) => `message M${i} { string tag = 1; int32 n = ${i + 2}; }`,
).join('\n')}\n`;

function value(result: DecodeResult): unknown {
  if (!result.ok) throw new Error(`expected a value, failed: ${result.error}`);
  return result.value;
}

function failed(result: DecodeResult): { error: string; reason: string | undefined } {
  if (result.ok) throw new Error(`expected a failure, decoded ${JSON.stringify(result.value)}`);
  return { error: result.error, reason: result.reason };
}

describe('Protobuf with a local schema', () => {
  it('decodes unframed bytes as the declared message, int64 as a decimal string and enums by name', () => {
    const decoder = createFieldDecoder({ format: 'protobuf', schema: proto, messageType: 'shop.v1.Order' });
    expect(value(decoder.decode(b64(protoBytes(proto, 'shop.v1.Order', order))))).toEqual(decodedOrder);
  });

  it('fills absent proto3 scalars with their defaults', () => {
    const decoder = createFieldDecoder({ format: 'protobuf', schema: proto, messageType: 'shop.v1.Order' });
    expect(value(decoder.decode(b64(Buffer.alloc(0))))).toEqual({
      order_id: '',
      amount_cents: '0',
      items: [],
      status: 'STATUS_UNSPECIFIED',
    });
  });

  it('decodes a Glue-framed record (zlib-compressed) after its message index', () => {
    const decoder = createFieldDecoder({
      format: 'protobuf',
      schema: proto,
      messageType: 'shop.v1.Order',
      framing: 'glue',
    });
    const payload = Buffer.concat([glueIndex(3), protoBytes(proto, 'shop.v1.Order', order)]);
    expect(value(decoder.decode(b64(glue(versionId, payload, true))))).toEqual(decodedOrder);
  });

  it('names a message cut inside a field as truncated', () => {
    const decoder = createFieldDecoder({ format: 'protobuf', schema: proto, messageType: 'shop.v1.Order' });
    const bytes = protoBytes(proto, 'shop.v1.Order', order);
    // The last field is `status` (tag 0x20, value 0x02): dropping the value leaves a tag with nothing after it.
    // (A cut at a field boundary is a shorter valid message: Protobuf has no length of its own to check against.)
    expect([...bytes.subarray(-2)]).toEqual([0x20, 0x02]);
    const { reason, error } = failed(decoder.decode(b64(bytes.subarray(0, bytes.length - 1))));
    expect(reason).toBe(DecodeFailureReason.Truncated);
    expect(error).toContain('shop.v1.Order');
  });

  it('names bytes with an invalid wire type as a Protobuf decode failure', () => {
    const decoder = createFieldDecoder({ format: 'protobuf', schema: proto, messageType: 'shop.v1.Order' });
    // Field 1 with wire type 7, which does not exist.
    const { reason } = failed(decoder.decode(b64(Buffer.from([0x0f, 0x00]))));
    expect(reason).toBe(DecodeFailureReason.ProtobufDecodeFailed);
  });
});

describe('Protobuf with Confluent framing and a registry over HTTP', () => {
  let registry: TestRegistry;
  beforeAll(async () => {
    registry = await startRegistry({
      21: { schema: proto, schemaType: 'PROTOBUF' },
      22: { schema: manyMessages, schemaType: 'PROTOBUF' },
      23: { schema: fixture('payment.avsc') },
    });
  });
  afterAll(() => registry.close());

  const decoderFor = (messageType: string) =>
    createFieldDecoder({
      format: 'protobuf',
      messageType,
      registry: { kind: 'confluent', url: registry.url },
    });

  async function decodeWith(messageType: string, schemaId: number, indexes: Buffer, message: Buffer) {
    const decoder = decoderFor(messageType);
    const field = b64(confluent(schemaId, Buffer.concat([indexes, message])));
    await decoder.prepare([field]);
    return decoder.decode(field);
  }

  it('decodes the first message through the single-0 shortcut and through the explicit [0]', async () => {
    const message = protoBytes(proto, 'shop.v1.Order', order);
    expect(value(await decodeWith('shop.v1.Order', 21, confluentIndexes([0]), message))).toEqual(
      decodedOrder,
    );
    expect(value(await decodeWith('shop.v1.Order', 21, confluentIndexes([0], false), message))).toEqual(
      decodedOrder,
    );
  });

  it('decodes a second top-level message [1] and a nested one [1, 0]', async () => {
    const refund = protoBytes(proto, 'shop.v1.Refund', {
      order_id: 'o-1',
      reason: { code: 'DUP', text: 'twice' },
    });
    expect(value(await decodeWith('shop.v1.Refund', 21, confluentIndexes([1]), refund))).toEqual({
      order_id: 'o-1',
      reason: { code: 'DUP', text: 'twice' },
    });
    const reason = protoBytes(proto, 'shop.v1.Refund.Reason', { code: 'DUP', text: 'twice' });
    expect(value(await decodeWith('shop.v1.Refund.Reason', 21, confluentIndexes([1, 0]), reason))).toEqual({
      code: 'DUP',
      text: 'twice',
    });
  });

  it('reads an index that takes two varint bytes (message 66 of 70)', async () => {
    const message = protoBytes(manyMessages, 'many.M66', { tag: 'x', n: 5 });
    expect(confluentIndexes([66]).length).toBe(3);
    expect(value(await decodeWith('many.M66', 22, confluentIndexes([66]), message))).toEqual({
      tag: 'x',
      n: 5,
    });
  });

  it('names indexes that select another message than the declared one', async () => {
    const refund = protoBytes(proto, 'shop.v1.Refund', { order_id: 'o-1' });
    const { reason, error } = failed(await decodeWith('shop.v1.Order', 21, confluentIndexes([1]), refund));
    expect(reason).toBe(DecodeFailureReason.BadMessageIndex);
    expect(error).toMatch(/names shop\.v1\.Refund .* not shop\.v1\.Order/);
  });

  it("names indexes past the file's messages and an impossible index count", async () => {
    const empty = Buffer.alloc(0);
    expect(failed(await decodeWith('shop.v1.Order', 21, confluentIndexes([9]), empty)).reason).toBe(
      DecodeFailureReason.BadMessageIndex,
    );
    // Count 50 (zigzag 100) with one byte left.
    expect(failed(await decodeWith('shop.v1.Order', 21, Buffer.from([100, 0]), empty)).reason).toBe(
      DecodeFailureReason.BadMessageIndex,
    );
  });

  it('names a registry schema of another format as a schema mismatch', async () => {
    const { reason, error } = failed(
      await decodeWith('shop.v1.Order', 23, confluentIndexes([0]), Buffer.alloc(0)),
    );
    expect(reason).toBe(DecodeFailureReason.SchemaMismatch);
    expect(error).toContain('schema id 23 is a AVRO schema, not PROTOBUF');
  });

  it("names a declared message type missing from the writer's schema as a schema mismatch", async () => {
    const { reason } = failed(
      await decodeWith('shop.v1.Invoice', 21, confluentIndexes([0]), Buffer.alloc(0)),
    );
    expect(reason).toBe(DecodeFailureReason.SchemaMismatch);
  });
});

describe('Protobuf with a Glue registry whose schemas are given locally', () => {
  it("checks the Glue message index against the file's messages sorted by full name", async () => {
    const decoder = createFieldDecoder({
      format: 'protobuf',
      messageType: 'shop.v1.Refund.Reason',
      registry: { kind: 'glue', schemas: { [versionId]: proto } },
    });
    // Sorted by full name: LineItem 0, Order 1, Refund 2, Refund.Reason 3.
    const message = protoBytes(proto, 'shop.v1.Refund.Reason', { code: 'X', text: 'y' });
    const right = b64(glue(versionId, Buffer.concat([glueIndex(3), message])));
    const wrong = b64(glue(versionId, Buffer.concat([glueIndex(1), message])));
    await decoder.prepare([right, wrong]);
    expect(value(decoder.decode(right))).toEqual({ code: 'X', text: 'y' });
    expect(failed(decoder.decode(wrong)).reason).toBe(DecodeFailureReason.BadMessageIndex);
  });
});
