/**
 * Field decoders by format (see `formats.ts`). `createFieldDecoder` validates the whole spec up front — schemas
 * compile, the message type exists, the registry URL is http(s), the framing is one the registry writes — and
 * throws {@link InvalidFieldFormatError} otherwise, so a bad spec fails synth and `eos local`, not each record.
 *
 * What is whose: the Avro binary decoding is avro-js's and the Protobuf decoding protobufjs's (why not through
 * Powertools Kafka: `avro.ts`, `protobuf.ts`); the framing parse (`framing.ts`) and the registry client with its
 * cache (`registry.ts`) are hand-written, as Powertools Kafka has neither.
 *
 * This module does not import the two schema'd formats' codecs (`schema-codecs.ts`: avro-js and protobufjs, a
 * third of the processor's bundle and ~20 ms of its cold start): they are installed by importing `index.ts` (every
 * format ready, what tests, tools and a user module's processor use), or loaded on demand by
 * {@link loadSchemaCodecs}, which the stock processor awaits at init only when its transform decodes Avro or
 * Protobuf. Asked for one of those formats before either, `createFieldDecoder` throws
 * {@link SchemaCodecsNotLoadedError}: a wiring mistake, never a record's fault.
 */
import { InvalidFieldFormatError, SchemaCodecsNotLoadedError } from './errors.ts';
import {
  type DecodeResult,
  type FieldDecoder,
  type FieldFormat,
  type Framing,
  DecodeFailureReason as Reason,
  type RegistrySpec,
} from './formats.ts';
import { type Failure, failure, messageOf, readConfluent, readGlue, UUID_PATTERN } from './framing.ts';
import {
  confluentLoader,
  type Fetch,
  type GlueGetSchemaVersion,
  glueLoader,
  type RegisteredSchema,
} from './registry.ts';
import type { RegistrySecretReader } from './registry-credentials.ts';
import { type CacheOptions, type Lookup, SchemaCache, type SchemaLookupMiss } from './schema-cache.ts';
import type { Codec } from './schema-codecs.ts';

export {
  InvalidFieldFormatError,
  SchemaCodecsNotLoadedError,
  SchemaRegistryUnavailableError,
} from './errors.ts';
export type { DecodeResult, FieldDecoder, FieldFormat, Framing, RegistrySpec } from './formats.ts';
export { DecodeFailureReason } from './formats.ts';
export type { Fetch, GlueGetSchemaVersion, SchemaType } from './registry.ts';
export type { RegistrySecretReader } from './registry-credentials.ts';
export {
  DEFAULT_MAX_LOOKUPS_IN_FLIGHT,
  DEFAULT_MAX_LOOKUPS_PER_FETCH,
  DEFAULT_NEGATIVE_CACHE_SIZE,
  DEFAULT_NEGATIVE_TTL_MS,
  type SchemaLookupMiss,
} from './schema-cache.ts';

/** What decoding reaches outside itself through; every member optional (defaults: global `fetch`, `Date.now`). */
export interface DecodeDependencies {
  /** Names the spec in error messages the way the user wrote it (`value`, `key`, `EOS_VALUE_FORMAT`…). */
  readonly setting?: string;
  readonly fetch?: Fetch;
  readonly now?: () => number;
  /** How long a schema id the registry did not have stays "not found" before it is asked again (default 30 s). */
  readonly negativeTtlMs?: number;
  /** How many ids not found or refused are remembered at most, the oldest forgotten first (default 1000). */
  readonly negativeCacheSize?: number;
  /** Registry lookups in flight at once, per decoder (default 8). */
  readonly maxLookupsInFlight?: number;
  /** Uncached ids looked up per `prepare` (a batch); records naming the others dead-letter as unknown (default 50). */
  readonly maxLookupsPerBatch?: number;
  /**
   * Told of every lookup that found no schema: not found, refused by the registry, or over the batch's limit; once
   * per id and lookup, not per record. The processor counts them as a metric.
   */
  readonly onSchemaLookupMiss?: (miss: SchemaLookupMiss) => void;
  /** Glue `GetSchemaVersion`, for schema version ids not given locally in the registry spec's `schemas`. */
  readonly glueGetSchemaVersion?: GlueGetSchemaVersion;
  /**
   * Reads the secret a Confluent registry's `basicAuthSecret` names (`registrySecretLookup()` of
   * `registry-secret.ts`, which the construct's generated entry passes); a spec naming a secret needs it.
   */
  readonly registrySecret?: RegistrySecretReader;
}

/** The Avro and Protobuf codecs (`schema-codecs.ts`), once installed or loaded. */
export type SchemaCodecs = Pick<typeof import('./schema-codecs.ts'), 'avroCodec' | 'protobufCodec'>;

let schemaCodecs: SchemaCodecs | undefined;

/** Makes Avro and Protobuf decodable by the codecs given (`index.ts` installs the statically imported ones). */
export function installSchemaCodecs(codecs: SchemaCodecs): void {
  schemaCodecs = codecs;
}

/** True when decoding `format` needs the schema codecs (Avro, Protobuf). */
export function needsSchemaCodecs(format: FieldFormat): boolean {
  return format.format === 'avro' || format.format === 'protobuf';
}

/** Loads the schema codecs once (a dynamic import, its own chunk in a bundle); later calls return at once. */
export async function loadSchemaCodecs(): Promise<void> {
  schemaCodecs ??= await import('./schema-codecs.ts');
}

function codecs(): SchemaCodecs {
  if (schemaCodecs === undefined) throw new SchemaCodecsNotLoadedError();
  return schemaCodecs;
}

const utf8 = new TextDecoder('utf-8');

function syncDecoder(decode: (bytes: Buffer) => DecodeResult): FieldDecoder {
  return {
    prepare: async () => {},
    decode: (field) => (field === null ? { ok: true, value: null } : decode(Buffer.from(field, 'base64'))),
  };
}

function parseJson(bytes: Buffer): DecodeResult {
  try {
    return { ok: true, value: JSON.parse(utf8.decode(bytes)) as unknown };
  } catch (error) {
    return failure(Reason.InvalidJson, `value is not valid JSON: ${messageOf(error)}`);
  }
}

export function createFieldDecoder(format: FieldFormat, deps: DecodeDependencies = {}): FieldDecoder {
  const setting = deps.setting ?? 'format';
  switch (format.format) {
    case 'string':
      return syncDecoder((bytes) => ({ ok: true, value: utf8.decode(bytes) }));
    case 'bytes':
      return syncDecoder((bytes) => ({ ok: true, value: new Uint8Array(bytes) }));
    case 'json': {
      const framing = format.framing ?? 'none';
      checkFraming(setting, framing, undefined);
      return syncDecoder((bytes) => {
        if (framing === 'none') return parseJson(bytes);
        const framed = framing === 'confluent' ? readConfluent(bytes) : readGlue(bytes);
        return framed.ok ? parseJson(framed.payload) : framed;
      });
    }
    case 'avro':
      return schemaDecoder(setting, format, codecs().avroCodec(setting, format), deps);
    case 'protobuf':
      return schemaDecoder(setting, format, codecs().protobufCodec(setting, format), deps);
    default: {
      const unknown: { format?: unknown } = format;
      throw new InvalidFieldFormatError(
        `${setting}.format`,
        `unknown format ${JSON.stringify(unknown.format)} (string, json, bytes, avro or protobuf)`,
      );
    }
  }
}

/** The decoder of a schema'd format: framing, then the local schema or the registry's by the framing's id. */
function schemaDecoder<C>(
  setting: string,
  format: Extract<FieldFormat, { format: 'avro' | 'protobuf' }>,
  codec: Codec<C>,
  deps: DecodeDependencies,
): FieldDecoder {
  const { registry } = format;
  const framing = format.framing ?? registry?.kind ?? 'none';
  checkFraming(setting, framing, registry);
  const local = codec.local;
  if (registry === undefined || (local !== undefined && !codec.readsWithRegistry)) {
    if (local === undefined) {
      throw new InvalidFieldFormatError(
        `${setting}.schema`,
        `a ${format.format} format needs a schema or a registry`,
      );
    }
    return syncDecoder((bytes) => {
      if (framing === 'none') return codec.decode(local, bytes, 'none');
      const framed = framing === 'confluent' ? readConfluent(bytes) : readGlue(bytes);
      return framed.ok ? codec.decode(local, framed.payload, framing) : framed;
    });
  }
  const lookups = registryLookups(setting, registry, codec, deps);
  const compiled = new Map<string | number, C | Failure>();
  const idOf = (bytes: Buffer) => {
    const framed = registry.kind === 'confluent' ? readConfluent(bytes) : readGlue(bytes);
    return framed.ok
      ? { ...framed, id: framed.framing === 'confluent' ? framed.schemaId : framed.schemaVersionId }
      : framed;
  };
  return {
    async prepare(fields) {
      const ids: (string | number)[] = [];
      for (const field of fields) {
        if (field === null) continue;
        const framed = idOf(Buffer.from(field, 'base64'));
        if (framed.ok) ids.push(framed.id);
      }
      await lookups.fetch(ids);
    },
    decode(field) {
      if (field === null) return { ok: true, value: null };
      const framed = idOf(Buffer.from(field, 'base64'));
      if (!framed.ok) return framed;
      const idText =
        framed.framing === 'confluent' ? `schema id ${framed.id}` : `schema version id ${framed.id}`;
      let reader = compiled.get(framed.id);
      if (reader === undefined) {
        const found = lookups.get(framed.id);
        if (found.state !== 'found')
          return failure(Reason.UnknownSchemaId, `unknown ${idText}: ${whyNot(found)}`);
        reader = codec.compile(found.schema, idText);
        compiled.set(framed.id, reader);
      }
      return isFailure(reader) ? reader : codec.decode(reader, framed.payload, framing, true);
    },
  };
}

function whyNot(lookup: Exclude<Lookup, { state: 'found' }>): string {
  switch (lookup.state) {
    case 'not-found':
      return lookup.detail;
    case 'over-limit':
      return 'not looked up, the batch names more schema ids not yet cached than one batch looks up';
    default:
      return 'not looked up (prepare was not called with this field)';
  }
}

function isFailure<C>(compiled: C | Failure): compiled is Failure {
  return typeof compiled === 'object' && compiled !== null && 'ok' in compiled && compiled.ok === false;
}

/** One lookup surface over both registries, keyed by the framing's id. */
interface Lookups {
  fetch(ids: readonly (string | number)[]): Promise<void>;
  get(id: string | number): Lookup;
}

function cacheOptions(deps: DecodeDependencies): CacheOptions {
  return {
    ...(deps.now && { now: deps.now }),
    ...(deps.negativeTtlMs !== undefined && { negativeTtlMs: deps.negativeTtlMs }),
    ...(deps.negativeCacheSize !== undefined && { negativeCacheSize: deps.negativeCacheSize }),
    ...(deps.maxLookupsInFlight !== undefined && { maxInFlight: deps.maxLookupsInFlight }),
    ...(deps.maxLookupsPerBatch !== undefined && { maxLookupsPerFetch: deps.maxLookupsPerBatch }),
    ...(deps.onSchemaLookupMiss && { onMiss: deps.onSchemaLookupMiss }),
  };
}

function registryLookups<C>(
  setting: string,
  registry: RegistrySpec,
  codec: Codec<C>,
  deps: DecodeDependencies,
): Lookups {
  if (registry.kind === 'confluent') {
    if (registry.basicAuthSecret !== undefined && deps.registrySecret === undefined) {
      throw new InvalidFieldFormatError(
        `${setting}.registry.basicAuthSecret`,
        'needs a secret reader: give registrySecret (registrySecretLookup()) to the decoder; the construct does',
      );
    }
    const loader = confluentLoader(registry, deps.fetch, deps.registrySecret);
    const cache = new SchemaCache(loader, cacheOptions(deps));
    return {
      fetch: (ids) => cache.fetch(ids.filter((id): id is number => typeof id === 'number')),
      get: (id) => (typeof id === 'number' ? cache.get(id) : { state: 'not-fetched' }),
    };
  }
  const local = new Map<string, RegisteredSchema>();
  for (const [id, schema] of Object.entries(registry.schemas ?? {})) {
    const key = id.toLowerCase();
    if (!UUID_PATTERN.test(key)) {
      throw new InvalidFieldFormatError(
        `${setting}.registry.schemas`,
        `"${id}" is not a schema version id (a UUID)`,
      );
    }
    const registered: RegisteredSchema = { schemaType: codec.schemaType, schema };
    const compiled = codec.compile(registered, `schema version id ${key}`);
    if (isFailure(compiled)) throw new InvalidFieldFormatError(`${setting}.registry.schemas`, compiled.error);
    local.set(key, registered);
  }
  const cache = new SchemaCache(glueLoader(registry, local, deps.glueGetSchemaVersion), cacheOptions(deps));
  return {
    fetch: (ids) => cache.fetch(ids.filter((id): id is string => typeof id === 'string')),
    get: (id) => (typeof id === 'string' ? cache.get(id) : { state: 'not-fetched' }),
  };
}

function checkFraming(setting: string, framing: Framing, registry: RegistrySpec | undefined): void {
  if (registry !== undefined && registry.kind !== 'confluent' && registry.kind !== 'glue') {
    const unknown: { kind?: unknown } = registry;
    throw new InvalidFieldFormatError(
      `${setting}.registry.kind`,
      `unknown registry ${JSON.stringify(unknown.kind)}`,
    );
  }
  if (framing !== 'none' && framing !== 'confluent' && framing !== 'glue') {
    throw new InvalidFieldFormatError(`${setting}.framing`, `unknown framing ${JSON.stringify(framing)}`);
  }
  if (registry === undefined) return;
  if (framing !== registry.kind) {
    throw new InvalidFieldFormatError(
      `${setting}.framing`,
      `framing "${framing}" cannot carry a ${registry.kind} registry's schema id (use "${registry.kind}")`,
    );
  }
  if (registry.kind === 'confluent') checkConfluent(setting, registry);
}

function checkConfluent(setting: string, registry: Extract<RegistrySpec, { kind: 'confluent' }>): void {
  let url: URL;
  try {
    url = new URL(registry.url);
  } catch {
    throw new InvalidFieldFormatError(`${setting}.registry.url`, `"${registry.url}" is not a URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidFieldFormatError(`${setting}.registry.url`, `"${url.protocol}" is not http: or https:`);
  }
  if (url.username || url.password) {
    throw new InvalidFieldFormatError(
      `${setting}.registry.url`,
      'put credentials in basicAuth, not in the URL',
    );
  }
  if (registry.basicAuth !== undefined && !registry.basicAuth.includes(':')) {
    throw new InvalidFieldFormatError(`${setting}.registry.basicAuth`, 'expected "user:password"');
  }
  checkCredentials(setting, registry, url);
  const timeout = registry.timeoutMs;
  if (timeout !== undefined && !(Number.isInteger(timeout) && timeout > 0)) {
    throw new InvalidFieldFormatError(
      `${setting}.registry.timeoutMs`,
      `${timeout} is not a positive integer`,
    );
  }
}

/** A Secrets Manager secret's ARN (the construct grants the processor read access to it by this ARN). */
const SECRET_ARN = /^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+$/;

function checkCredentials(
  setting: string,
  registry: Extract<RegistrySpec, { kind: 'confluent' }>,
  url: URL,
): void {
  const { basicAuth, basicAuthSecret } = registry;
  if (basicAuthSecret !== undefined && basicAuth !== undefined) {
    throw new InvalidFieldFormatError(
      `${setting}.registry.basicAuth`,
      'give basicAuth or basicAuthSecret, not both',
    );
  }
  if (
    basicAuthSecret !== undefined &&
    !(typeof basicAuthSecret === 'string' && SECRET_ARN.test(basicAuthSecret))
  ) {
    throw new InvalidFieldFormatError(
      `${setting}.registry.basicAuthSecret`,
      `${JSON.stringify(basicAuthSecret)} is not a Secrets Manager secret ARN (arn:aws:secretsmanager:<region>:<account>:secret:<name>)`,
    );
  }
  if (
    (basicAuth !== undefined || basicAuthSecret !== undefined) &&
    url.protocol === 'http:' &&
    !isLoopback(url)
  ) {
    throw new InvalidFieldFormatError(
      `${setting}.registry.url`,
      `credentials over http: would cross the network in clear text; use https: (http: only on loopback)`,
    );
  }
}

function isLoopback(url: URL): boolean {
  const host = url.hostname;
  return host === 'localhost' || host === '[::1]' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}
