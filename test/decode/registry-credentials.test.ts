/**
 * A Confluent registry's credentials never cross the network in clear text and need not live in the bundle:
 * `basicAuth` or `basicAuthSecret` over `http:` is refused when the decoder is made (loopback excepted), and
 * `basicAuthSecret` names a Secrets Manager secret (`user:password` or JSON `{ username, password }`) whose
 * credentials go out as Basic auth, read once per container and again when the registry refuses them (rotation).
 * Secrets Manager cannot run here: its API is mocked (aws-sdk-client-mock on the real client, through the real
 * `registrySecretLookup`); the registry is a real HTTP server on loopback that checks the header.
 */
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { isTransient } from '../../shared/aws/classify.ts';
import {
  createFieldDecoder,
  type FieldFormat,
  InvalidFieldFormatError,
  SchemaRegistryUnavailableError,
} from '../../shared/decode/index.ts';
import { registrySecretLookup } from '../../shared/decode/registry-secret.ts';
import { avroBytes, b64, confluent, fixture } from '../fixtures/decode/wire.ts';
import { type CountingRegistry, startCountingRegistry } from './counting-registry.ts';

const schema = fixture('payment.avsc');
const payment = { id: 'p-1', amountCents: 1250, currency: 'USD', note: null };
const field = (schemaId: number) => b64(confluent(schemaId, avroBytes(schema, payment)));
const SECRET = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:registry/reader-AbCdEf';
const basic = (credentials: string) => `Basic ${Buffer.from(credentials).toString('base64')}`;
const noSecret = async (): Promise<string> => 'unused:unused';

function avroWith(registry: Record<string, unknown>): FieldFormat {
  return { format: 'avro', registry: { kind: 'confluent', url: '', ...registry } as never };
}

function refusal(make: () => unknown): string {
  try {
    make();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidFieldFormatError);
    return (error as Error).message;
  }
  throw new Error('expected the spec to be refused');
}

describe('registry credentials over http', () => {
  for (const credentials of [{ basicAuth: 'reader:s3cret' }, { basicAuthSecret: SECRET }]) {
    const what = Object.keys(credentials)[0];
    it(`refuses ${what} over http: to a host that is not loopback, in one line`, () => {
      const message = refusal(() =>
        createFieldDecoder(avroWith({ url: 'http://registry.internal:8081', ...credentials }), {
          registrySecret: noSecret,
        }),
      );
      expect(message).toContain('https:');
      expect(message).not.toContain('\n');
      expect(message).not.toContain('s3cret');
    });
  }

  it('accepts credentials over https: and over http: on loopback', () => {
    for (const url of [
      'https://registry.internal',
      'http://127.0.0.1:8081',
      'http://localhost:8081',
      'http://[::1]:8081',
    ]) {
      expect(() => createFieldDecoder(avroWith({ url, basicAuth: 'reader:s3cret' }))).not.toThrow();
      expect(() =>
        createFieldDecoder(avroWith({ url, basicAuthSecret: SECRET }), { registrySecret: noSecret }),
      ).not.toThrow();
    }
  });

  it('refuses a basicAuthSecret that is not a secret ARN, one given with basicAuth, or one without a reader', () => {
    const url = 'https://registry.internal';
    expect(
      refusal(() =>
        createFieldDecoder(avroWith({ url, basicAuthSecret: 'reader' }), { registrySecret: noSecret }),
      ),
    ).toContain('not a Secrets Manager secret ARN');
    expect(
      refusal(() =>
        createFieldDecoder(avroWith({ url, basicAuthSecret: SECRET, basicAuth: 'a:b' }), {
          registrySecret: noSecret,
        }),
      ),
    ).toContain('not both');
    expect(refusal(() => createFieldDecoder(avroWith({ url, basicAuthSecret: SECRET })))).toContain(
      'needs a secret reader',
    );
  });
});

describe('registry credentials from a Secrets Manager secret', () => {
  const secrets = mockClient(SecretsManagerClient);
  let registry: CountingRegistry;
  beforeAll(async () => {
    registry = await startCountingRegistry(schema);
  });
  afterAll(() => registry.close());
  beforeEach(() => registry.reset());
  afterEach(() => secrets.reset());

  const reader = () => {
    const client = new SecretsManagerClient({
      region: 'eu-west-1',
      credentials: { accessKeyId: 'x', secretAccessKey: 'y' },
    });
    return registrySecretLookup(async () => client);
  };
  const decoderWith = (registrySecret: ReturnType<typeof reader>) =>
    createFieldDecoder(avroWith({ url: registry.url, basicAuthSecret: SECRET }), { registrySecret });

  for (const [form, secretString] of [
    ['user:password', 'reader:pa:ss'],
    ['JSON', JSON.stringify({ username: 'reader', password: 'pa:ss' })],
  ] as const) {
    it(`sends the secret's credentials (${form}) as Basic auth, reading the secret once for both decoders`, async () => {
      secrets.on(GetSecretValueCommand, { SecretId: SECRET }).resolves({ SecretString: secretString });
      registry.requiredAuthorization = basic('reader:pa:ss');
      const registrySecret = reader();
      const keys = decoderWith(registrySecret);
      const values = decoderWith(registrySecret);
      await Promise.all([keys.prepare([field(1), field(2)]), values.prepare([field(3)])]);
      await values.prepare([field(4)]);
      expect([1, 2].map((id) => keys.decode(field(id)).ok)).toEqual([true, true]);
      expect(values.decode(field(4)).ok).toBe(true);
      expect(new Set(registry.authorizations)).toEqual(new Set([basic('reader:pa:ss')]));
      expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(1);
    });
  }

  it('reads the secret again when the registry refuses its credentials (rotated), then decodes', async () => {
    secrets
      .on(GetSecretValueCommand)
      .resolvesOnce({ SecretString: 'reader:old' })
      .resolves({ SecretString: 'reader:new' });
    registry.requiredAuthorization = basic('reader:new');
    const decoder = decoderWith(reader());
    await decoder.prepare([field(1)]);
    expect(decoder.decode(field(1)).ok).toBe(true);
    expect(secrets.commandCalls(GetSecretValueCommand)).toHaveLength(2);
  });

  it('fails the batch transiently, naming the secret but never its value, when the secret is malformed', async () => {
    secrets.on(GetSecretValueCommand).resolves({ SecretString: 'no-colon-here' });
    const error = await decoderWith(reader())
      .prepare([field(1)])
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(SchemaRegistryUnavailableError);
    expect(isTransient(error)).toBe(true);
    expect((error as Error).message).toContain(SECRET);
    expect(JSON.stringify(error, Object.getOwnPropertyNames(error))).not.toContain('no-colon-here');
    expect(registry.requested).toEqual([]);
  });

  it('reads the secret again on the next batch after a failed read', async () => {
    secrets
      .on(GetSecretValueCommand)
      .rejectsOnce(Object.assign(new Error('Rate exceeded'), { name: 'ThrottlingException' }))
      .resolves({ SecretString: 'reader:pw' });
    const decoder = decoderWith(reader());
    await expect(decoder.prepare([field(1)])).rejects.toBeInstanceOf(SchemaRegistryUnavailableError);
    await decoder.prepare([field(1)]);
    expect(decoder.decode(field(1)).ok).toBe(true);
    expect(registry.authorizations).toEqual([basic('reader:pw')]);
  });
});
