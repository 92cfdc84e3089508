/**
 * Schema lookups by the id in a record's framing, one id at a time (the cache and its limits: `schema-cache.ts`).
 * Hand-written: Powertools Kafka has no registry client (it decodes with a schema the caller supplies), and
 * neither has avro-js nor protobufjs.
 *
 * An answer about the id is the id's: not found (Confluent 404, Glue EntityNotFound) or refused (any other 4xx
 * but 408 and 429; Glue AccessDenied or InvalidInput, as for a schema version in a registry the processor may not
 * read) makes a {@link SchemaMiss}, and the records naming the id are dead-lettered with it. Anything else (network
 * error, timeout, 408, 429, 5xx, a body that is not a schema) throws {@link SchemaRegistryUnavailableError}, so the
 * batch is retried rather than its records dead-lettered for a fault that is not theirs.
 */
import { SchemaRegistryUnavailableError } from './errors.ts';
import type { RegistrySpec } from './formats.ts';
import { messageOf } from './framing.ts';
import { type RegistrySecretReader, registryAuthorization } from './registry-credentials.ts';

/** The schema formats a registry can hold. */
export type SchemaType = 'AVRO' | 'PROTOBUF' | 'JSON';

export interface RegisteredSchema {
  readonly schemaType: SchemaType;
  /** The schema's text: Avro JSON, `.proto` source or JSON Schema. */
  readonly schema: string;
}

/** Why a registry gave no schema for an id: it does not have it, or refused to say (`detail` names the answer). */
export interface SchemaMiss {
  readonly miss: 'not-found' | 'refused';
  readonly detail: string;
}

/** Loads one schema: the schema, or why there is none; throws when the registry cannot say (transient). */
export type SchemaLoader<K> = (id: K) => Promise<RegisteredSchema | SchemaMiss>;

const NOT_FOUND: SchemaMiss = { miss: 'not-found', detail: 'the registry does not have it' };

export const DEFAULT_REGISTRY_TIMEOUT_MS = 5_000;

/** Injected so tests (and a custom transport) can stand in for the global `fetch`. */
export type Fetch = (
  url: string,
  init: { headers: Record<string, string>; signal: AbortSignal },
) => Promise<Response>;

/**
 * `GET <url>/schemas/ids/<id>` of a Confluent-compatible registry → `{ schema, schemaType? }` (absent means AVRO).
 * 404 is "not found", another 4xx but 408 and 429 "refused"; any other non-2xx, a timeout, a network error or a
 * body of another shape throws {@link SchemaRegistryUnavailableError}.
 */
export function confluentLoader(
  spec: Extract<RegistrySpec, { kind: 'confluent' }>,
  fetchImpl: Fetch = fetch,
  readSecret?: RegistrySecretReader,
): SchemaLoader<number> {
  const base = spec.url.replace(/\/+$/, '');
  const authorization = registryAuthorization(spec, readSecret);
  const timeoutMs = spec.timeoutMs ?? DEFAULT_REGISTRY_TIMEOUT_MS;
  const get = async (url: string, refresh: boolean): Promise<Response> => {
    const headers: Record<string, string> = {
      accept: 'application/vnd.schemaregistry.v1+json, application/json',
    };
    const header = await authorization(refresh);
    if (header !== undefined) headers.authorization = header;
    return fetchImpl(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  };
  return async (id) => {
    const url = `${base}/schemas/ids/${id}`;
    const where = `GET ${redact(url)}`;
    let response: Response;
    let body: unknown;
    try {
      response = await get(url, false);
      if ((response.status === 401 || response.status === 403) && spec.basicAuthSecret !== undefined) {
        // The secret may have been rotated since it was read: read it again once before believing the refusal.
        await response.body?.cancel();
        response = await get(url, true);
      }
      const miss = missOf(response.status);
      if (miss !== undefined) {
        await response.body?.cancel();
        return miss;
      }
      if (!response.ok) {
        await response.body?.cancel();
        throw new Error(`HTTP ${response.status}`);
      }
      body = await response.json();
    } catch (error) {
      if (error instanceof SchemaRegistryUnavailableError) throw error;
      throw new SchemaRegistryUnavailableError(where, { cause: error });
    }
    return registeredSchema(body, where);
  };
}

/** What a status says about the id itself: 404 not found, a 4xx other than 408 and 429 refused. */
function missOf(status: number): SchemaMiss | undefined {
  if (status === 404) return NOT_FOUND;
  if (status >= 400 && status < 500 && status !== 408 && status !== 429) {
    return { miss: 'refused', detail: `registry answered ${status}` };
  }
  return undefined;
}

function registeredSchema(body: unknown, where: string): RegisteredSchema {
  if (typeof body === 'object' && body !== null && 'schema' in body && typeof body.schema === 'string') {
    const type = 'schemaType' in body ? body.schemaType : undefined;
    if (type === undefined || type === null) return { schemaType: 'AVRO', schema: body.schema };
    if (type === 'AVRO' || type === 'PROTOBUF' || type === 'JSON')
      return { schemaType: type, schema: body.schema };
  }
  // A proxy's error page or a registry of another API: not the records' fault, so retried, never dead-lettered.
  throw new SchemaRegistryUnavailableError(where, {
    cause: new Error(`unexpected response body: ${JSON.stringify(body)?.slice(0, 200)}`),
  });
}

/** The URL without credentials, for error messages and logs. */
function redact(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    return parsed.toString();
  } catch {
    return url;
  }
}

/**
 * Glue's `GetSchemaVersion` by `SchemaVersionId`, injected (the project does not bundle `@aws-sdk/client-glue`):
 * returns the definition and data format, `undefined` for `EntityNotFoundException`, and throws anything else.
 */
export type GlueGetSchemaVersion = (
  schemaVersionId: string,
) => Promise<{ readonly schemaDefinition: string; readonly dataFormat: SchemaType } | undefined>;

/** Glue's answers about the id itself (a version in a registry the processor may not read, a malformed id). */
const GLUE_REFUSALS = new Set(['AccessDeniedException', 'InvalidInputException']);

/** Glue schema versions: the locally given ones first, then the injected `GetSchemaVersion`, if any. */
export function glueLoader(
  spec: Extract<RegistrySpec, { kind: 'glue' }>,
  local: ReadonlyMap<string, RegisteredSchema>,
  getSchemaVersion: GlueGetSchemaVersion | undefined,
): SchemaLoader<string> {
  return async (id) => {
    const known = local.get(id);
    if (known !== undefined) return known;
    if (getSchemaVersion === undefined) return NOT_FOUND;
    try {
      const version = await getSchemaVersion(id);
      return version ? { schemaType: version.dataFormat, schema: version.schemaDefinition } : NOT_FOUND;
    } catch (error) {
      const name = error instanceof Error ? error.name : '';
      if (GLUE_REFUSALS.has(name)) {
        return { miss: 'refused', detail: `Glue answered ${name}: ${messageOf(error).slice(0, 200)}` };
      }
      const where = `GetSchemaVersion ${id}${spec.registryName ? ` (registry ${spec.registryName})` : ''}`;
      throw new SchemaRegistryUnavailableError(`${where}: ${messageOf(error)}`, { cause: error });
    }
  };
}
