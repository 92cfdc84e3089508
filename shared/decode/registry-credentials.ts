/**
 * The Authorization header of a Confluent registry's lookups: `basicAuth` as given, or the credentials of the
 * Secrets Manager secret `basicAuthSecret` names, read through the injected {@link RegistrySecretReader} (the
 * processor's reads each secret once per container, `registry-secret.ts`). The secret's string is `user:password`
 * or JSON `{ "username", "password" }`. Neither the secret nor the header ever appears in an error message.
 */
import { SchemaRegistryUnavailableError } from './errors.ts';
import type { RegistrySpec } from './formats.ts';

/**
 * Reads a Secrets Manager secret's string by ARN; `refresh` asks for a fresh read (after the registry refused the
 * cached credentials: the secret may have been rotated). Throws when the secret cannot be read.
 */
export type RegistrySecretReader = (
  secretArn: string,
  options: { readonly refresh: boolean },
) => Promise<string>;

/** The header for a lookup; `refresh` when the registry refused the last one. `undefined` without credentials. */
export type Authorization = (refresh: boolean) => Promise<string | undefined>;

export function registryAuthorization(
  spec: Extract<RegistrySpec, { kind: 'confluent' }>,
  readSecret: RegistrySecretReader | undefined,
): Authorization {
  const { basicAuth, basicAuthSecret } = spec;
  if (basicAuth !== undefined) {
    const header = basicHeader(basicAuth);
    return async () => header;
  }
  if (basicAuthSecret === undefined) return async () => undefined;
  if (readSecret === undefined) {
    // createFieldDecoder refuses this spec without a reader; a direct caller of the loader gets the same reason.
    throw new Error('basicAuthSecret needs a secret reader (registrySecret)');
  }
  return async (refresh) => {
    let secret: string;
    try {
      secret = await readSecret(basicAuthSecret, { refresh });
    } catch (error) {
      throw new SchemaRegistryUnavailableError(`reading secret ${basicAuthSecret}`, { cause: error });
    }
    const credentials = credentialsOf(secret);
    if (credentials === undefined) {
      // A transient error: the batch is retried, and the secret read again, until an operator fixes it.
      throw new SchemaRegistryUnavailableError(
        `secret ${basicAuthSecret}: its value is neither "user:password" nor JSON { "username", "password" }`,
      );
    }
    return basicHeader(credentials);
  };
}

/** `user:password` from a secret's string, or undefined when it is in neither accepted form. */
export function credentialsOf(secret: string): string | undefined {
  const text = secret.trim();
  if (text.startsWith('{')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return undefined;
    }
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    const { username, password } = parsed as { username?: unknown; password?: unknown };
    return typeof username === 'string' && typeof password === 'string' && username !== ''
      ? `${username}:${password}`
      : undefined;
  }
  return text.indexOf(':') > 0 ? text : undefined;
}

function basicHeader(credentials: string): string {
  return `Basic ${Buffer.from(credentials, 'utf8').toString('base64')}`;
}
