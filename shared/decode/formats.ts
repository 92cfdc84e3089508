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
  /** A Confluent-compatible registry (REST: `GET <url>/schemas/ids/<id>`); bytes framed as 0x00 + 4-byte id. */
  | { readonly kind: 'confluent'; readonly url: string; readonly basicAuth?: string }
  /** AWS Glue Schema Registry; bytes framed as 0x03, compression byte, 16-byte schema version id. */
  | { readonly kind: 'glue'; readonly registryName?: string };

export type FieldFormat =
  /** UTF-8 text (ill-formed bytes become U+FFFD). The default for keys. */
  | { readonly format: 'string' }
  /** UTF-8 JSON, parsed. The default for values. */
  | { readonly format: 'json' }
  /** The bytes as received. */
  | { readonly format: 'bytes' }
  /**
   * Avro binary. `schema` (the schema's JSON text) decodes unframed bytes, or framed bytes whose framing is
   * stripped when `framing` says so; `registry` fetches the writer's schema by the id in the framing.
   */
  | {
      readonly format: 'avro';
      readonly schema?: string;
      readonly registry?: RegistrySpec;
      readonly framing?: Framing;
    }
  /** Protobuf. `schema` is `.proto` source text; `messageType` the fully qualified message to decode. */
  | {
      readonly format: 'protobuf';
      readonly schema?: string;
      readonly messageType: string;
      readonly registry?: RegistrySpec;
      readonly framing?: Framing;
    };

/** The wire framing in front of the encoded bytes. `none` when the bytes are the bare encoding. */
export type Framing = 'none' | 'confluent' | 'glue';

export type DecodeResult =
  | { readonly ok: true; readonly value: unknown }
  | { readonly ok: false; readonly error: string };

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
