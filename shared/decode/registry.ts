/**
 * Schema lookups by the id in a record's framing, cached. Hand-written: Powertools Kafka has no registry client
 * (it decodes with a schema the caller supplies), and neither has avro-js nor protobufjs.
 *
 * Ids are immutable in both registries (a Confluent schema id, a Glue schema version id), so a found schema is
 * cached for the life of the process. A schema not found (Confluent 404, a Glue id not known) is cached only for
 * `negativeTtlMs`: a producer may have registered it a moment before the registry replica we ask has it, and the
 * records are dead-lettered meanwhile, but later batches recover. Anything else (network error, timeout, 5xx, 429,
 * refused credentials) throws {@link SchemaRegistryUnavailableError}, so the batch is retried rather than its
 * records dead-lettered for a fault that is not theirs.
 */
import { SchemaRegistryUnavailableError } from './errors.ts';
import type { RegistrySpec } from './formats.ts';
import { messageOf } from './framing.ts';

/** The schema formats a registry can hold. */
export type SchemaType = 'AVRO' | 'PROTOBUF' | 'JSON';

export interface RegisteredSchema {
  readonly schemaType: SchemaType;
  /** The schema's text: Avro JSON, `.proto` source or JSON Schema. */
  readonly schema: string;
}

/** A found schema, or "not found" as of `at` (milliseconds, from the injected clock). */
type Entry =
  | { readonly found: true; readonly schema: RegisteredSchema }
  | { readonly found: false; readonly at: number };

/** The outcome of {@link SchemaCache.get}. */
export type Lookup =
  | { readonly state: 'found'; readonly schema: RegisteredSchema }
  | { readonly state: 'not-found' }
  | { readonly state: 'not-fetched' };

/** Loads one schema: `undefined` when the registry does not have it; throws when the registry cannot say. */
export type SchemaLoader<K> = (id: K) => Promise<RegisteredSchema | undefined>;

export const DEFAULT_NEGATIVE_TTL_MS = 30_000;
export const DEFAULT_REGISTRY_TIMEOUT_MS = 5_000;

/** Cache in front of a {@link SchemaLoader}: positive forever, negative for `negativeTtlMs`. */
export class SchemaCache<K extends string | number> {
  private readonly entries = new Map<K, Entry>();

  constructor(
    private readonly load: SchemaLoader<K>,
    private readonly now: () => number = Date.now,
    private readonly negativeTtlMs: number = DEFAULT_NEGATIVE_TTL_MS,
  ) {}

  /** Fetches the ids not cached (or whose "not found" expired), concurrently; throws if any lookup fails. */
  async fetch(ids: Iterable<K>): Promise<void> {
    const missing = [...new Set(ids)].filter((id) => this.stale(id));
    const loaded = await Promise.all(missing.map(async (id) => [id, await this.load(id)] as const));
    const at = this.now();
    for (const [id, schema] of loaded) {
      this.entries.set(id, schema === undefined ? { found: false, at } : { found: true, schema });
    }
  }

  get(id: K): Lookup {
    const entry = this.entries.get(id);
    if (entry === undefined) return { state: 'not-fetched' };
    return entry.found ? { state: 'found', schema: entry.schema } : { state: 'not-found' };
  }

  private stale(id: K): boolean {
    const entry = this.entries.get(id);
    return entry === undefined || (!entry.found && this.now() - entry.at >= this.negativeTtlMs);
  }
}

/** Injected so tests (and a custom transport) can stand in for the global `fetch`. */
export type Fetch = (
  url: string,
  init: { headers: Record<string, string>; signal: AbortSignal },
) => Promise<Response>;

/**
 * `GET <url>/schemas/ids/<id>` of a Confluent-compatible registry → `{ schema, schemaType? }` (absent means AVRO).
 * 404 is "not found"; any other non-2xx, a timeout, a network error or a body of another shape throws
 * {@link SchemaRegistryUnavailableError}.
 */
export function confluentLoader(
  spec: Extract<RegistrySpec, { kind: 'confluent' }>,
  fetchImpl: Fetch = fetch,
): SchemaLoader<number> {
  const base = spec.url.replace(/\/+$/, '');
  const headers: Record<string, string> = {
    accept: 'application/vnd.schemaregistry.v1+json, application/json',
  };
  if (spec.basicAuth !== undefined) {
    headers.authorization = `Basic ${Buffer.from(spec.basicAuth, 'utf8').toString('base64')}`;
  }
  const timeoutMs = spec.timeoutMs ?? DEFAULT_REGISTRY_TIMEOUT_MS;
  return async (id) => {
    const url = `${base}/schemas/ids/${id}`;
    const where = `GET ${redact(url)}`;
    let response: Response;
    let body: unknown;
    try {
      response = await fetchImpl(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
      if (response.status === 404) {
        await response.body?.cancel();
        return undefined;
      }
      if (!response.ok) {
        await response.body?.cancel();
        throw new Error(`HTTP ${response.status}`);
      }
      body = await response.json();
    } catch (error) {
      throw new SchemaRegistryUnavailableError(where, { cause: error });
    }
    return registeredSchema(body, where);
  };
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

/** Glue schema versions: the locally given ones first, then the injected `GetSchemaVersion`, if any. */
export function glueLoader(
  spec: Extract<RegistrySpec, { kind: 'glue' }>,
  local: ReadonlyMap<string, RegisteredSchema>,
  getSchemaVersion: GlueGetSchemaVersion | undefined,
): SchemaLoader<string> {
  return async (id) => {
    const known = local.get(id);
    if (known !== undefined || getSchemaVersion === undefined) return known;
    try {
      const version = await getSchemaVersion(id);
      return version && { schemaType: version.dataFormat, schema: version.schemaDefinition };
    } catch (error) {
      const where = `GetSchemaVersion ${id}${spec.registryName ? ` (registry ${spec.registryName})` : ''}`;
      throw new SchemaRegistryUnavailableError(`${where}: ${messageOf(error)}`, { cause: error });
    }
  };
}
