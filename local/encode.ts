/**
 * Test input for binary formats: a JSON value encoded as a producer's serializer writes it, Avro (avro-js) or
 * Protobuf (protobufjs), bare or in a registry's framing (`shared/decode/framing.ts` reads the same layouts):
 *
 * - Confluent: `0x00 | schema id (4 bytes, big-endian) | payload`; a Protobuf payload starts with the message
 *   indexes (a single `0x00` for the file's first message, else the zigzag varint count and path).
 * - Glue: `0x03 | 0x00 (no compression) | schema version id (16 bytes) | payload`; a Protobuf payload starts with
 *   one plain varint, the message's index among all the file's message types sorted by full name.
 *
 * The framings are written by hand for the same reason they are read by hand: neither library knows them.
 */
import avro from 'avro-js/lib/schemas.js';
import {
  compileProto,
  findType,
  type ProtoFile,
  type ProtoType,
  sameType,
} from '../shared/decode/protobuf.ts';

export type EncodeFraming = 'none' | 'confluent' | 'glue';

export type EncoderSpec =
  | { readonly format: 'avro'; readonly schema: string }
  | { readonly format: 'protobuf'; readonly schema: string; readonly messageType: string };

export interface FramingSpec {
  readonly framing: EncodeFraming;
  /** Confluent: the registry's schema id. */
  readonly schemaId?: number;
  /** Glue: the schema version id, a UUID. */
  readonly schemaVersionId?: string;
}

/** Bad input to the encoder: the message says what and where, in one line. */
export class EncodeInputError extends Error {
  override name = 'EncodeInputError';
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A function from one JSON value to the field's bytes: the payload in the framing asked for. */
export function createEncoder(spec: EncoderSpec, framing: FramingSpec): (value: unknown) => Buffer {
  checkFraming(framing);
  if (spec.format === 'avro') {
    let type: ReturnType<typeof avro.createType>;
    try {
      type = avro.createType(JSON.parse(spec.schema));
    } catch (error) {
      throw new EncodeInputError(`the Avro schema does not parse: ${(error as Error).message}`);
    }
    return (value) => {
      if (!type.isValid(value)) throw new EncodeInputError('the value does not match the Avro schema');
      return frame(framing, type.toBuffer(value));
    };
  }
  let file: ProtoFile;
  try {
    file = compileProto(spec.schema);
  } catch (error) {
    throw new EncodeInputError(`the .proto does not compile: ${(error as Error).message}`);
  }
  const type = findType(file, spec.messageType);
  if (!type) throw new EncodeInputError(`the .proto has no message ${spec.messageType}`);
  const index = protobufIndex(file, type, framing.framing);
  return (value) => {
    const problem =
      value !== null && typeof value === 'object'
        ? type.verify(value as Record<string, unknown>)
        : 'not an object';
    if (problem) throw new EncodeInputError(`the value does not match ${spec.messageType}: ${problem}`);
    const payload = Buffer.from(type.encode(type.fromObject(value as Record<string, unknown>)).finish());
    return frame(framing, Buffer.concat([index, payload]));
  };
}

function checkFraming(framing: FramingSpec): void {
  if (framing.framing === 'confluent') {
    const id = framing.schemaId;
    if (id === undefined || !Number.isInteger(id) || id < 0 || id > 0xffffffff)
      throw new EncodeInputError('Confluent framing needs --schema-id, an integer from 0 to 4294967295');
  }
  if (framing.framing === 'glue' && !UUID.test(framing.schemaVersionId ?? ''))
    throw new EncodeInputError('Glue framing needs --schema-version-id, a UUID');
}

function frame(framing: FramingSpec, payload: Buffer): Buffer {
  if (framing.framing === 'confluent') {
    const header = Buffer.alloc(5);
    header.writeUInt32BE(framing.schemaId!, 1);
    return Buffer.concat([header, payload]);
  }
  if (framing.framing === 'glue') {
    const id = Buffer.from(framing.schemaVersionId!.replaceAll('-', ''), 'hex');
    return Buffer.concat([Buffer.from([0x03, 0x00]), id, payload]);
  }
  return payload;
}

/** The message-index prefix a framing puts before a Protobuf payload (none unframed). */
function protobufIndex(file: ProtoFile, type: ProtoType, framing: EncodeFraming): Buffer {
  if (framing === 'none') return Buffer.alloc(0);
  if (framing === 'glue') return varint(file.sorted.findIndex((t) => sameType(t, type)));
  const path = confluentPath(file.topLevel, type) ?? [];
  if (path.length === 1 && path[0] === 0) return Buffer.from([0x00]);
  return Buffer.concat([path.length, ...path].map((n) => varint(zigzag(n))));
}

/** The type's path of indexes from the file's top-level messages down through nested ones. */
function confluentPath(level: readonly ProtoType[], type: ProtoType): number[] | undefined {
  for (const [index, candidate] of level.entries()) {
    if (sameType(candidate, type)) return [index];
    const nested = candidate.nestedArray.filter((n): n is ProtoType => 'fieldsArray' in n);
    const below = confluentPath(nested, type);
    if (below) return [index, ...below];
  }
  return undefined;
}

function zigzag(n: number): number {
  return n >= 0 ? n * 2 : -n * 2 - 1;
}

function varint(n: number): Buffer {
  const bytes: number[] = [];
  let v = n;
  while (v > 0x7f) {
    bytes.push((v & 0x7f) | 0x80);
    v = Math.floor(v / 128);
  }
  bytes.push(v);
  return Buffer.from(bytes);
}
