/**
 * Avro decoding with avro-js, calling it directly rather than through Powertools Kafka's Avro deserializer. Read
 * from `@aws-lambda-powertools/kafka` 2.35.0 (`lib/esm/deserializer/avro.js`) and measured (`bench/decode.ts`):
 * - it parses the schema again for every message (`avro.parse(schema)` then `fromBuffer`); a parsed type cached
 *   per schema decodes a small record 30-60x faster (`npx tsx bench/decode.ts 50000`, 2026-12-01, loaded 2-core
 *   machine: ~330 µs per record parsing per message, ~7 µs bare avro-js with a cached type, ~5-10 µs through
 *   `createFieldDecoder` with its framing and length checks);
 * - it is not exported (the package exports only the `kafkaConsumer` handler wrapper, `errors` and `types`), and
 *   the wrapper replaces the handler, while the processor owns the handler and needs a per-record result to
 *   dead-letter one record instead of failing the batch;
 * - it imports the avro-js package root, which with avro-js 1.12.2 fails to load (`underscore` is required and
 *   not declared), so its Avro path cannot run at all as installed; we import `avro-js/lib/schemas.js`;
 * - it does not strip Confluent or Glue framing for Avro and has no registry client.
 * So framing, registry and the cached types are ours, the Avro binary decoding is avro-js's.
 */
import avro from 'avro-js/lib/schemas.js';
import { AvroBlockTooLongError, boundAvroType } from './avro-bounds.ts';
import { DecodeFailureReason as Reason } from './formats.ts';
import { type Failure, failure, messageOf } from './framing.ts';

type AvroType = ReturnType<typeof avro.createType>;
type Resolver = ReturnType<AvroType['createResolver']>;

/** A compiled writer schema, with the resolver into the reader's schema when one was given. */
export interface AvroReader {
  readonly type: AvroType;
  readonly resolver?: Resolver;
}

/**
 * Parses an Avro schema's JSON text; throws with avro-js's reason when it is not a schema, and
 * `UnboundedAvroSchemaError` when its values' decoding could not be bounded by their size (`avro-bounds.ts`).
 */
export function compileAvro(text: string): AvroType {
  // Not avro-js's `parse`, which treats a string that is not JSON as a file path and reads that file.
  const type = avro.createType(JSON.parse(text));
  boundAvroType(type);
  return type;
}

/** The reader for bytes written with `writer`, read as `reader` (Avro schema resolution) when it is given. */
export function avroReader(writer: AvroType, reader?: AvroType): AvroReader {
  return reader === undefined ? { type: writer } : { type: reader, resolver: reader.createResolver(writer) };
}

/** One complete Avro value, exactly filling `payload`. */
export function decodeAvro(reader: AvroReader, payload: Buffer): { ok: true; value: unknown } | Failure {
  let decoded: { value: unknown; offset: number };
  try {
    decoded = reader.type.decode(payload, 0, reader.resolver);
  } catch (error) {
    if (error instanceof AvroBlockTooLongError) {
      return failure(Reason.Truncated, `truncated Avro value: ${error.message}`);
    }
    return failure(Reason.AvroDecodeFailed, `Avro decode failed: ${messageOf(error)}`);
  }
  if (decoded.offset < 0) {
    return failure(
      Reason.Truncated,
      `truncated Avro value: ${payload.length} bytes end before the value does`,
    );
  }
  if (decoded.offset < payload.length) {
    return failure(
      Reason.TrailingBytes,
      `trailing bytes after the Avro value: ${payload.length - decoded.offset} of ${payload.length}`,
    );
  }
  return { ok: true, value: decoded.value };
}
