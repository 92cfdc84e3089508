/**
 * The two schema'd formats behind one shape, so `index.ts` handles framing and registry once for both: what a
 * compiled schema is, how a registry's schema compiles (checked for format once per id, cached), and how a
 * payload after the framing header decodes.
 */
import { type AvroReader, avroReader, compileAvro, decodeAvro } from './avro.ts';
import { UnboundedAvroSchemaError } from './avro-bounds.ts';
import { InvalidFieldFormatError } from './errors.ts';
import {
  type DecodeResult,
  type FieldFormat,
  type Framing,
  DecodeFailureReason as Reason,
} from './formats.ts';
import {
  type Failure,
  failure,
  messageOf,
  readConfluentMessageIndexes,
  readGlueMessageIndex,
} from './framing.ts';
import {
  compileProto,
  decodeProto,
  findType,
  type ProtoFile,
  type ProtoType,
  sameType,
  typeAtConfluentPath,
} from './protobuf.ts';
import type { RegisteredSchema, SchemaType } from './registry.ts';

export interface Codec<C> {
  /** The registry schema type this format reads. */
  readonly schemaType: SchemaType;
  /** The compiled local schema, when the spec gives one. */
  readonly local: C | undefined;
  /** True when a local schema is still read together with the registry's (Avro: it is the reader's schema). */
  readonly readsWithRegistry: boolean;
  /** A registry's schema compiled, or why it cannot be used (another format, does not compile, incompatible). */
  compile(schema: RegisteredSchema, idText: string): C | Failure;
  /** Decodes the payload after the framing header; `fromRegistry` when `compiled` is the writer's own schema. */
  decode(compiled: C, payload: Buffer, framing: Framing, fromRegistry?: boolean): DecodeResult;
}

function wrongType(schema: RegisteredSchema, idText: string, expected: SchemaType): Failure | undefined {
  return schema.schemaType === expected
    ? undefined
    : failure(Reason.SchemaMismatch, `${idText} is a ${schema.schemaType} schema, not ${expected}`);
}

export function avroCodec(
  setting: string,
  format: Extract<FieldFormat, { format: 'avro' }>,
): Codec<AvroReader> {
  let reader: ReturnType<typeof compileAvro> | undefined;
  if (format.schema !== undefined) {
    try {
      reader = compileAvro(format.schema);
    } catch (error) {
      const what = error instanceof UnboundedAvroSchemaError ? 'refused' : 'not an Avro schema';
      throw new InvalidFieldFormatError(`${setting}.schema`, `${what}: ${messageOf(error)}`);
    }
  }
  return {
    schemaType: 'AVRO',
    local: reader && avroReader(reader),
    readsWithRegistry: true,
    compile(schema, idText) {
      const mismatch = wrongType(schema, idText, 'AVRO');
      if (mismatch) return mismatch;
      try {
        return avroReader(compileAvro(schema.schema), reader);
      } catch (error) {
        if (error instanceof UnboundedAvroSchemaError) {
          return failure(Reason.SchemaMismatch, `Avro schema of ${idText} is refused: ${messageOf(error)}`);
        }
        const what = reader === undefined ? 'does not compile' : 'cannot be read as the given schema';
        return failure(Reason.SchemaMismatch, `Avro schema of ${idText} ${what}: ${messageOf(error)}`);
      }
    },
    decode: (compiled, payload) => decodeAvro(compiled, payload),
  };
}

/** A parsed `.proto` file and the declared message type in it. */
export interface ProtoReader {
  readonly file: ProtoFile;
  readonly type: ProtoType;
}

export function protobufCodec(
  setting: string,
  format: Extract<FieldFormat, { format: 'protobuf' }>,
): Codec<ProtoReader> {
  const { messageType } = format;
  if (typeof messageType !== 'string' || messageType.trim() === '') {
    throw new InvalidFieldFormatError(
      `${setting}.messageType`,
      'a protobuf format needs the message type to decode',
    );
  }
  if (format.schema !== undefined && format.registry !== undefined) {
    throw new InvalidFieldFormatError(
      `${setting}.schema`,
      'give a protobuf schema or a registry, not both (Protobuf reads any compatible writer with the local schema)',
    );
  }
  const readerOf = (source: string): ProtoReader | string => {
    let file: ProtoFile;
    try {
      file = compileProto(source);
    } catch (error) {
      return `the .proto does not parse: ${messageOf(error)}`;
    }
    const type = findType(file, messageType);
    if (type === undefined) {
      const known = file.sorted.map((t) => t.fullName.slice(1)).join(', ') || 'none';
      return `message type "${messageType}" is not in the .proto (its messages: ${known})`;
    }
    return { file, type };
  };
  let local: ProtoReader | undefined;
  if (format.schema !== undefined) {
    const compiled = readerOf(format.schema);
    if (typeof compiled === 'string') throw new InvalidFieldFormatError(`${setting}.schema`, compiled);
    local = compiled;
  }
  return {
    schemaType: 'PROTOBUF',
    local,
    readsWithRegistry: false,
    compile(schema, idText) {
      const mismatch = wrongType(schema, idText, 'PROTOBUF');
      if (mismatch) return mismatch;
      const compiled = readerOf(schema.schema);
      return typeof compiled === 'string'
        ? failure(Reason.SchemaMismatch, `${idText}: ${compiled}`)
        : compiled;
    },
    decode(compiled, payload, framing, fromRegistry = false) {
      if (framing === 'none') return decodeProto(compiled.type, payload);
      const read =
        framing === 'confluent' ? readConfluentMessageIndexes(payload) : readGlueMessageIndex(payload);
      if (!read.ok) return read;
      if (fromRegistry) {
        // The indexes name the writer's message type in the writer's file, so they can be checked only against it.
        const named =
          framing === 'confluent'
            ? typeAtConfluentPath(compiled.file, read.indexes)
            : compiled.file.sorted[read.indexes[0] ?? -1];
        if (named === undefined || !sameType(named, compiled.type)) {
          return failure(
            Reason.BadMessageIndex,
            `message index [${read.indexes.join(', ')}] names ${named ? named.fullName.slice(1) : 'no message'}` +
              ` in the writer's schema, not ${compiled.type.fullName.slice(1)}`,
          );
        }
      }
      return decodeProto(compiled.type, payload.subarray(read.offset));
    },
  };
}
