/**
 * How a record's key or value bytes become the value a transform receives. A transform declares one format for
 * keys and one for values (`defineTransform({ key, value })`); the processor decodes each record before the
 * transform sees it, and a record whose bytes do not decode is dead-lettered with the reason (never retried:
 * the same bytes never decode differently).
 *
 * Registry lookups are the one part that does I/O: they happen in {@link FieldDecoder.prepare}, once per batch and
 * cached per schema id, so that decoding itself stays synchronous and deterministic (P5).
 */

/** Where a schema registry is, and how its framing looks in the record's bytes. */
export type RegistrySpec =
  /**
   * A Confluent-compatible registry (REST: `GET <url>/schemas/ids/<id>`); bytes framed as 0x00 + 4-byte id.
   * Credentials, sent as HTTP Basic auth, only over `https:` (or `http:` on loopback): `basicAuthSecret`, the ARN
   * of a Secrets Manager secret whose string is `user:password` or JSON `{ "username", "password" }` (the
   * construct grants the processor `secretsmanager:GetSecretValue` on it), or `basicAuth`, `user:password` written
   * in the transform (and so in its bundle: for local use). `timeoutMs` bounds each lookup (default 5000).
   */
  | {
      readonly kind: 'confluent';
      readonly url: string;
      readonly basicAuth?: string;
      readonly basicAuthSecret?: string;
      readonly timeoutMs?: number;
    }
  /**
   * AWS Glue Schema Registry; bytes framed as 0x03, compression byte, 16-byte schema version id. `schemas` gives
   * schema definitions by schema version id (a UUID) locally; ids not in it are asked of the `glue` lookup
   * passed to `createFieldDecoder` (`GetSchemaVersion`), when there is one.
   */
  | {
      readonly kind: 'glue';
      readonly registryName?: string;
      readonly schemas?: Readonly<Record<string, string>>;
    };

export type FieldFormat =
  /** UTF-8 text (ill-formed bytes become U+FFFD). The default for keys. */
  | { readonly format: 'string' }
  /**
   * UTF-8 JSON, parsed. The default for values. `framing` strips a registry's framing (Confluent's or Glue's JSON
   * Schema serializers write one) without fetching the schema: the JSON is not validated against it.
   */
  | { readonly format: 'json'; readonly framing?: Framing }
  /** The bytes as received. */
  | { readonly format: 'bytes' }
  /**
   * Avro binary. `schema` (the schema's JSON text) decodes unframed bytes, or framed bytes whose framing is
   * stripped when `framing` says so; `registry` fetches the writer's schema by the id in the framing, and then
   * `schema`, when also given, is the reader's schema (the writer's is resolved into it by Avro's rules).
   * `framing` defaults to the registry's kind, or `none` without a registry.
   */
  | {
      readonly format: 'avro';
      readonly schema?: string;
      readonly registry?: RegistrySpec;
      readonly framing?: Framing;
    }
  /**
   * Protobuf. `schema` is `.proto` source text (fields keep their `.proto` names); `messageType` the fully
   * qualified message to decode. Give `schema` or `registry`, not both: with `schema` the framing's schema id and
   * message index are skipped; with `registry` the message index must select `messageType` in the writer's file.
   */
  | {
      readonly format: 'protobuf';
      readonly schema?: string;
      readonly messageType: string;
      readonly registry?: RegistrySpec;
      readonly framing?: Framing;
    };

/** The wire framing in front of the encoded bytes. `none` when the bytes are the bare encoding. */
export type Framing = 'none' | 'confluent' | 'glue';

/** Why a field did not decode; `error` says the same in words, with the detail. */
export const DecodeFailureReason = {
  /** Not valid JSON (format `json`). */
  InvalidJson: 'invalid-json',
  /** The first byte is not the framing's (0x00 Confluent, 0x03 Glue). */
  BadMagicByte: 'bad-magic-byte',
  /** The bytes end before the framing or the encoding does. */
  Truncated: 'truncated',
  /** Bytes are left after one complete Avro value. */
  TrailingBytes: 'trailing-bytes',
  /** A Glue compression byte other than 0 (none) or 5 (zlib). */
  UnsupportedCompression: 'unsupported-compression',
  /** The zlib stream does not inflate. */
  DecompressionFailed: 'decompression-failed',
  /** The registry does not have the schema id (or the local map the schema version id). */
  UnknownSchemaId: 'unknown-schema-id',
  /** The registry's schema is of another format, does not compile, or cannot be read as the reader's schema. */
  SchemaMismatch: 'schema-mismatch',
  /** The Protobuf message index is malformed or does not select the declared `messageType`. */
  BadMessageIndex: 'bad-message-index',
  AvroDecodeFailed: 'avro-decode-failed',
  ProtobufDecodeFailed: 'protobuf-decode-failed',
} as const;
export type DecodeFailureReason = (typeof DecodeFailureReason)[keyof typeof DecodeFailureReason];

export type DecodeResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: string; readonly reason?: DecodeFailureReason };

/** Decodes one field (key or value) of records. */
export interface FieldDecoder {
  /**
   * Resolves what the batch's fields need (registry schemas), once per batch; cached across batches. Throws only
   * for transient failures (the registry unreachable), so the batch is retried; a schema the registry does not
   * have makes the affected records' `decode` return an error instead.
   */
  prepare(fields: readonly (string | null)[]): Promise<void>;
  /** Decodes one field given as base64 (null when the record has none: a tombstone's value, a null key). */
  decode(field: string | null): DecodeResult;
}
