/**
 * Schema ids are the producer's choice, so a batch cannot make the processor flood the registry or stall on it:
 * at most 8 lookups in flight and 50 uncached ids looked up per batch (the rest dead-lettered as unknown), each
 * answer cached on its own (one failure does not throw the others away), a registry refusing an id (a 4xx other
 * than 408 and 429) dead-letters its records with the answer and counts it, while 408, 429 and 5xx stay transient
 * (the batch is retried), and the ids remembered as missing are bounded. Against a registry on loopback HTTP that
 * counts requests and the most in flight.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isTransient } from '../../shared/aws/classify.ts';
import {
  createFieldDecoder,
  type DecodeDependencies,
  DecodeFailureReason,
  type DecodeResult,
  SchemaRegistryUnavailableError,
} from '../../shared/decode/index.ts';
import { avroBytes, b64, confluent, fixture } from '../fixtures/decode/wire.ts';
import { type CountingRegistry, startCountingRegistry } from './counting-registry.ts';

const schema = fixture('payment.avsc');
const payment = { id: 'p-1', amountCents: 1250, currency: 'USD', note: null };
const field = (schemaId: number) => b64(confluent(schemaId, avroBytes(schema, payment)));

interface Miss {
  readonly id: string | number;
  readonly outcome: string;
  readonly detail: string;
}

function errorOf(result: DecodeResult): string {
  if (result.ok) throw new Error('expected a failure, decoded a value');
  return result.error;
}

describe('registry lookups are bounded and each answer counts on its own', () => {
  let registry: CountingRegistry;
  beforeAll(async () => {
    registry = await startCountingRegistry(schema);
  });
  afterAll(() => registry.close());
  beforeEach(() => registry.reset());

  function decoder(deps: DecodeDependencies = {}) {
    return createFieldDecoder(
      { format: 'avro', registry: { kind: 'confluent', url: registry.url, timeoutMs: 2_000 } },
      deps,
    );
  }

  it('looks up at most 50 uncached ids of a batch, 8 at a time, and dead-letters the rest as unknown', async () => {
    const misses: Miss[] = [];
    const fields = Array.from({ length: 500 }, (_, i) => field(1000 + i));
    const decode = decoder({ onSchemaLookupMiss: (miss) => misses.push(miss) });
    await decode.prepare(fields);
    expect(registry.maxInFlight).toBeLessThanOrEqual(8);
    expect(registry.maxInFlight).toBeGreaterThan(1);
    // The first 50 ids in the batch's order, each once.
    expect([...registry.requested].sort((a, b) => a - b)).toEqual(
      Array.from({ length: 50 }, (_, i) => 1000 + i),
    );
    expect(decode.decode(fields[49]!).ok).toBe(true);
    const skipped = decode.decode(fields[50]!);
    expect(skipped).toMatchObject({ ok: false, reason: DecodeFailureReason.UnknownSchemaId });
    expect(errorOf(skipped)).toContain('unknown schema id 1050: not looked up');
    expect(misses.filter((m) => m.outcome === 'over-limit')).toHaveLength(450);
    // The next batch looks up the next 50 only.
    registry.requested.length = 0;
    await decode.prepare(fields);
    expect(Math.min(...registry.requested)).toBe(1050);
    expect(registry.requested).toHaveLength(50);
  });

  it('keeps the answers it got when another lookup of the batch fails: the retry asks only for that one', async () => {
    registry.answers.set(3, 500);
    const decode = decoder();
    const batch = [1, 2, 3, 4, 5].map(field);
    const error = await decode.prepare(batch).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(SchemaRegistryUnavailableError);
    registry.answers.clear();
    registry.requested.length = 0;
    await decode.prepare(batch);
    expect(registry.requested).toEqual([3]);
    expect(batch.map((f) => decode.decode(f).ok)).toEqual([true, true, true, true, true]);
  });

  for (const status of [400, 401, 403, 410, 422]) {
    it(`dead-letters the records of an id the registry answers ${status} for, naming the answer, and counts it`, async () => {
      registry.answers.set(77, status);
      const misses: Miss[] = [];
      const decode = decoder({ onSchemaLookupMiss: (miss) => misses.push(miss) });
      await decode.prepare([field(77), field(78)]);
      const refused = decode.decode(field(77));
      expect(refused).toMatchObject({ ok: false, reason: DecodeFailureReason.UnknownSchemaId });
      expect(errorOf(refused)).toContain(`schema id 77: registry answered ${status}`);
      expect(decode.decode(field(78)).ok).toBe(true);
      expect(misses).toEqual([{ id: 77, outcome: 'refused', detail: `registry answered ${status}` }]);
    });
  }

  it('counts an id the registry does not have (404) as not found', async () => {
    registry.answers.set(404_404, 404);
    const misses: Miss[] = [];
    const decode = decoder({ onSchemaLookupMiss: (miss) => misses.push(miss) });
    await decode.prepare([field(404_404)]);
    expect(errorOf(decode.decode(field(404_404)))).toContain('the registry does not have it');
    expect(misses).toEqual([{ id: 404_404, outcome: 'not-found', detail: 'the registry does not have it' }]);
  });

  for (const status of [408, 429, 500, 503]) {
    it(`throws a transient error from prepare when the registry answers ${status}`, async () => {
      registry.answers.set(9, status);
      const error = await decoder()
        .prepare([field(9)])
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(SchemaRegistryUnavailableError);
      expect(isTransient(error)).toBe(true);
    });
  }

  it('stops starting lookups once one failed transiently, so a throttling registry is not hammered', async () => {
    for (let id = 1; id <= 40; id++) registry.answers.set(id, 429);
    const decode = decoder();
    await expect(decode.prepare(Array.from({ length: 40 }, (_, i) => field(i + 1)))).rejects.toBeInstanceOf(
      SchemaRegistryUnavailableError,
    );
    expect(registry.requested.length).toBeLessThanOrEqual(8);
  });

  it('remembers a bounded number of missing ids, the oldest forgotten first', async () => {
    let now = 1_000_000;
    const decode = decoder({ now: () => now, negativeCacheSize: 3 });
    for (const id of [1, 2, 3, 4, 5]) registry.answers.set(id, 404);
    for (const id of [1, 2, 3, 4, 5]) await decode.prepare([field(id)]);
    registry.requested.length = 0;
    now += 1_000; // well within the negative TTL
    await decode.prepare([1, 2, 3, 4, 5].map(field));
    // 3, 4 and 5 are still remembered as missing; 1 and 2 were forgotten and are asked again.
    expect([...registry.requested].sort()).toEqual([1, 2]);
  });
});
