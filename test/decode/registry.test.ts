/**
 * The Confluent registry client behind Avro/Protobuf decoding, against a registry served over loopback HTTP that
 * counts requests: one lookup per schema id across batches, a 404 dead-letters only the records that need it and
 * is asked again after the negative TTL, and a registry that is down, failing, hanging or answering garbage
 * throws a transient error from `prepare` (the batch is retried), never a per-record error.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isTransient } from '../../shared/aws/classify.ts';
import {
  createFieldDecoder,
  DecodeFailureReason,
  type DecodeResult,
  SchemaRegistryUnavailableError,
} from '../../shared/decode/index.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import { avroBytes, b64, confluent, fixture } from '../fixtures/decode/wire.ts';

const schema = fixture('payment.avsc');
const payment = { id: 'p-1', amountCents: 1250, currency: 'USD', note: null };
const field = (schemaId: number) => b64(confluent(schemaId, avroBytes(schema, payment)));

function decodedId(result: DecodeResult): unknown {
  if (!result.ok) throw new Error(`expected a value, failed: ${result.error}`);
  return (result.value as { id: unknown }).id;
}

describe('Confluent registry lookups', () => {
  let registry: TestRegistry;
  beforeAll(async () => {
    registry = await startRegistry({ 1: { schema }, 2: { schema, schemaType: 'AVRO' } });
  });
  afterAll(() => registry.close());
  beforeEach(() => {
    registry.requests.length = 0;
    registry.mode = 'serve';
    registry.schemas.delete(3);
  });

  it('fetches each schema id once across batches and decoders keep decoding from the cache', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: `${registry.url}/` },
    });
    const batch = [field(1), field(2), field(1), null, field(2)];
    await decoder.prepare(batch);
    await decoder.prepare(batch);
    await decoder.prepare([field(1)]);
    expect(registry.requests.map((r) => r.path).sort()).toEqual(['/schemas/ids/1', '/schemas/ids/2']);
    // Down after the first lookups: the cached ids still decode, prepare needs no registry for them.
    registry.mode = 'fail-500';
    await decoder.prepare(batch);
    expect(
      batch.map((f) => decoder.decode(f)).map((r) => (r.ok && r.value === null ? null : decodedId(r))),
    ).toEqual(['p-1', 'p-1', 'p-1', null, 'p-1']);
  });

  it('sends basic auth when given', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url, basicAuth: 'reader:s3cret' },
    });
    await decoder.prepare([field(1)]);
    expect(registry.requests[0]?.authorization).toBe(
      `Basic ${Buffer.from('reader:s3cret').toString('base64')}`,
    );
  });

  it('dead-letters only the records of an id the registry does not have, and asks again after the TTL', async () => {
    let now = 1_000_000;
    const decoder = createFieldDecoder(
      { format: 'avro', registry: { kind: 'confluent', url: registry.url } },
      { now: () => now, negativeTtlMs: 10_000 },
    );
    const batch = [field(1), field(3)];
    await decoder.prepare(batch);
    expect(decodedId(decoder.decode(field(1)))).toBe('p-1');
    const missing = decoder.decode(field(3));
    expect(missing).toMatchObject({ ok: false, reason: DecodeFailureReason.UnknownSchemaId });
    expect(!missing.ok && missing.error).toContain('unknown schema id 3: the registry does not have it');

    // The producer registers id 3; within the TTL the "not found" holds (no new request), after it the id resolves.
    registry.schemas.set(3, { schema });
    now += 9_999;
    await decoder.prepare(batch);
    expect(registry.requests.filter((r) => r.path === '/schemas/ids/3')).toHaveLength(1);
    expect(decoder.decode(field(3)).ok).toBe(false);
    now += 1;
    await decoder.prepare(batch);
    expect(registry.requests.filter((r) => r.path === '/schemas/ids/3')).toHaveLength(2);
    expect(decodedId(decoder.decode(field(3)))).toBe('p-1');
  });

  const down: [string, TestRegistry['mode']][] = [
    ['answers 500', 'fail-500'],
    ['answers a body that is not a schema', 'garbage'],
    ['does not answer within the timeout', 'hang'],
  ];
  for (const [what, mode] of down) {
    it(`throws a transient error from prepare when the registry ${what}`, async () => {
      registry.mode = mode;
      const decoder = createFieldDecoder({
        format: 'avro',
        registry: { kind: 'confluent', url: registry.url, timeoutMs: 300 },
      });
      const error = await decoder.prepare([field(1)]).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(SchemaRegistryUnavailableError);
      expect(isTransient(error)).toBe(true);
      expect((error as Error).message).toContain(`GET ${registry.url}/schemas/ids/1`);
      // Nothing was cached: once the registry is back, the same decoder resolves the id.
      registry.mode = 'serve';
      await decoder.prepare([field(1)]);
      expect(decodedId(decoder.decode(field(1)))).toBe('p-1');
    });
  }

  it('throws a transient error from prepare when nothing listens at the registry URL', async () => {
    const gone = await startRegistry();
    const url = gone.url;
    await gone.close();
    const decoder = createFieldDecoder({ format: 'avro', registry: { kind: 'confluent', url } });
    await expect(decoder.prepare([field(1)])).rejects.toBeInstanceOf(SchemaRegistryUnavailableError);
  });

  it('reports a field decoded without prepare as not looked up, rather than throwing', () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
    });
    expect(decoder.decode(field(1))).toMatchObject({
      ok: false,
      reason: DecodeFailureReason.UnknownSchemaId,
    });
    expect(registry.requests).toHaveLength(0);
  });

  it('skips fields whose framing is malformed when collecting ids, and decodes them to the framing error', async () => {
    const decoder = createFieldDecoder({
      format: 'avro',
      registry: { kind: 'confluent', url: registry.url },
    });
    const bad = b64(Buffer.from([9, 0, 0, 0, 1]));
    await decoder.prepare([bad]);
    expect(registry.requests).toHaveLength(0);
    expect(decoder.decode(bad)).toMatchObject({ ok: false, reason: DecodeFailureReason.BadMagicByte });
  });
});
