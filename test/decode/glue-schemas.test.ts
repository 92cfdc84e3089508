/**
 * Glue Schema Registry lookups through the AWS SDK (`shared/decode/glue-schemas.ts`), the default the processor
 * handler gives the decoders. Glue cannot run on this machine, so its API is mocked (aws-sdk-client-mock on the
 * real GlueClient); what is real: the Avro bytes (avro-js), their Glue framing, and the decoder that reads them.
 */
import {
  AccessDeniedException,
  EntityNotFoundException,
  GetSchemaVersionCommand,
  GlueClient,
  InvalidInputException,
} from '@aws-sdk/client-glue';
import { mockClient } from 'aws-sdk-client-mock';
import { afterEach, describe, expect, it } from 'vitest';
import { glueSchemaVersionLookup } from '../../shared/decode/glue-schemas.ts';
import { createFieldDecoder } from '../../shared/decode/index.ts';
import { avroBytes, b64, fixture, glue } from '../fixtures/decode/wire.ts';

const schema = fixture('payment.avsc');
const versionId = '6f1d7a64-5b43-4f2a-9a53-2d9b1c0e4a11';
const glueApi = mockClient(GlueClient);

afterEach(() => glueApi.reset());

function decoderWithGlue(onSchemaLookupMiss?: (miss: { outcome: string; detail: string }) => void) {
  const client = new GlueClient({
    region: 'eu-west-1',
    credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
  });
  return createFieldDecoder(
    { format: 'avro', registry: { kind: 'glue', registryName: 'payments' } },
    {
      glueGetSchemaVersion: glueSchemaVersionLookup(async () => client),
      ...(onSchemaLookupMiss && { onSchemaLookupMiss }),
    },
  );
}

describe('Glue schema versions looked up through the SDK', () => {
  // A value of test/fixtures/decode/payment.avsc (the optional note is an Avro union, written as its branch).
  const payment = { id: 'p-1', amountCents: 1250, currency: 'EUR', note: { string: 'lunch' } };

  it('decodes a Glue-framed Avro record with the schema version Glue returns, asking once per id', async () => {
    glueApi
      .on(GetSchemaVersionCommand, { SchemaVersionId: versionId })
      .resolves({ SchemaDefinition: schema, DataFormat: 'AVRO', SchemaVersionId: versionId });
    const decoder = decoderWithGlue();
    const field = b64(glue(versionId, avroBytes(schema, payment), true));
    await decoder.prepare([field, field]);
    await decoder.prepare([field]);
    const result = decoder.decode(field);
    expect(result.ok).toBe(true);
    expect(JSON.parse(JSON.stringify(result.ok ? result.value : null))).toEqual(payment);
    expect(glueApi.commandCalls(GetSchemaVersionCommand)).toHaveLength(1);
  });

  it('dead-letters records whose schema version Glue does not have, naming the id', async () => {
    glueApi
      .on(GetSchemaVersionCommand)
      .rejects(new EntityNotFoundException({ message: 'Schema version is not found.', $metadata: {} }));
    const decoder = decoderWithGlue();
    const field = b64(glue(versionId, avroBytes(schema, payment)));
    await decoder.prepare([field]);
    const result = decoder.decode(field);
    expect(result.ok).toBe(false);
    expect(result.ok ? '' : result.error).toContain(versionId);
  });

  it('throws a transient error from prepare when Glue fails otherwise, so the batch is retried', async () => {
    glueApi
      .on(GetSchemaVersionCommand)
      .rejects(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }));
    const decoder = decoderWithGlue();
    const field = b64(glue(versionId, avroBytes(schema, payment)));
    await expect(decoder.prepare([field])).rejects.toMatchObject({ name: 'SchemaRegistryUnavailableError' });
  });

  const refusals = [
    [
      'AccessDeniedException',
      new AccessDeniedException({
        message: 'not authorized to perform glue:GetSchemaVersion on registry other',
        $metadata: {},
      }),
    ],
    [
      'InvalidInputException',
      new InvalidInputException({ message: 'Schema version id is invalid', $metadata: {} }),
    ],
  ] as const;
  for (const [name, error] of refusals) {
    it(`dead-letters records whose schema version Glue refuses (${name}), naming the answer, and counts it`, async () => {
      glueApi.on(GetSchemaVersionCommand).rejects(error);
      const misses: { outcome: string; detail: string }[] = [];
      const decoder = decoderWithGlue((miss) => misses.push(miss));
      const field = b64(glue(versionId, avroBytes(schema, payment)));
      await decoder.prepare([field]);
      const result = decoder.decode(field);
      expect(result).toMatchObject({ ok: false, reason: 'unknown-schema-id' });
      expect(result.ok ? '' : result.error).toContain(
        `schema version id ${versionId}: Glue answered ${name}`,
      );
      expect(misses.map((m) => m.outcome)).toEqual(['refused']);
    });
  }
});
