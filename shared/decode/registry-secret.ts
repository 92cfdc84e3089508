/**
 * Secrets Manager reads for a Confluent registry's `basicAuthSecret` (`RegistrySecretReader`). Imported only by the
 * processor entry of a transform that names such a secret (the construct's generated entry), so no other bundle
 * carries the Secrets Manager client; the client module itself is loaded on the first read. Each secret is read once
 * per container and kept; `refresh` (the registry refused the credentials: the secret may have been rotated) reads
 * it again, sharing a read already in flight. A failed read is not kept, so the retried batch reads again. The
 * secret's value is returned to the decoder only, never logged nor put in an error.
 */
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { regionFromEnv } from '../aws/clients.ts';
import type { RegistrySecretReader } from './registry-credentials.ts';

export function registrySecretLookup(
  clientOf: () => Promise<SecretsManagerClient> = defaultSecretsClient,
): RegistrySecretReader {
  let client: Promise<SecretsManagerClient> | undefined;
  const kept = new Map<string, { readonly value: Promise<string>; settled: boolean }>();
  const read = async (secretArn: string): Promise<string> => {
    client ??= clientOf();
    const { GetSecretValueCommand } = await import('@aws-sdk/client-secrets-manager');
    const secret = await (await client).send(new GetSecretValueCommand({ SecretId: secretArn }));
    if (secret.SecretString === undefined) throw new Error(`secret ${secretArn} has no string value`);
    return secret.SecretString;
  };
  return (secretArn, { refresh }) => {
    const current = kept.get(secretArn);
    if (current !== undefined && (!refresh || !current.settled)) return current.value;
    const entry = { value: read(secretArn), settled: false };
    kept.set(secretArn, entry);
    entry.value.then(
      () => {
        entry.settled = true;
      },
      () => {
        if (kept.get(secretArn) === entry) kept.delete(secretArn);
      },
    );
    return entry.value;
  };
}

async function defaultSecretsClient(): Promise<SecretsManagerClient> {
  const { SecretsManagerClient } = await import('@aws-sdk/client-secrets-manager');
  const region = regionFromEnv();
  return new SecretsManagerClient({ ...(region === undefined ? {} : { region }), maxAttempts: 3 });
}
