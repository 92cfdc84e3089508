/**
 * Protobuf decoding with protobufjs, called directly. Powertools Kafka's Protobuf deserializer (2.35.0) wants a
 * compiled message type from the caller, is not exported, and skips Confluent's message indexes by guessing: it
 * reads the count as int32 (a misread that can still "decode" shifted bytes into a wrong message), then as sint32,
 * and skips that many *bytes*, not varints (wrong once an index takes two bytes, from 64 on), remembering the
 * guess in a module-wide variable; it never checks which message type the indexes name. Here the indexes are read
 * as Confluent writes them (`framing.ts`) and resolved to the type they name, which must be the declared one.
 */
import protobuf from 'protobufjs';
import { DecodeFailureReason as Reason } from './formats.ts';
import { type Failure, failure, messageOf } from './framing.ts';

export type ProtoType = protobuf.Type;

/** A parsed `.proto` file: its root, and its message types in the two orders the registries index them by. */
export interface ProtoFile {
  readonly root: protobuf.Root;
  /** The file's top-level messages, in declaration order (Confluent's first index). */
  readonly topLevel: readonly ProtoType[];
  /** Every message type of the file, nested too, sorted by full name (Glue's index). */
  readonly sorted: readonly ProtoType[];
}

/** Parses `.proto` source; throws with protobufjs's reason when it does not parse. */
export function compileProto(source: string): ProtoFile {
  const parsed = protobuf.parse(source, { keepCase: true });
  parsed.root.resolveAll();
  const container = parsed.package ? parsed.root.lookup(parsed.package) : parsed.root;
  const topLevel = container instanceof protobuf.Namespace ? messagesIn(container) : [];
  const all: ProtoType[] = [];
  const queue = [...topLevel];
  for (let type = queue.shift(); type !== undefined; type = queue.shift()) {
    all.push(type);
    queue.push(...messagesIn(type));
  }
  const name = (type: ProtoType) => type.fullName.replace(/^\./, '');
  const sorted = all.sort((a, b) => (name(a) < name(b) ? -1 : name(a) > name(b) ? 1 : 0));
  return { root: parsed.root, topLevel, sorted };
}

function messagesIn(namespace: protobuf.NamespaceBase): ProtoType[] {
  return namespace.nestedArray.filter((nested): nested is ProtoType => nested instanceof protobuf.Type);
}

/** The message type named `messageType` (with or without a leading dot), or undefined. */
export function findType(file: ProtoFile, messageType: string): ProtoType | undefined {
  try {
    return file.root.lookupType(messageType.startsWith('.') ? messageType : `.${messageType}`);
  } catch {
    return undefined;
  }
}

/** The type Confluent's message indexes name: a path from a top-level message through nested ones. */
export function typeAtConfluentPath(file: ProtoFile, indexes: readonly number[]): ProtoType | undefined {
  let candidates: readonly ProtoType[] = file.topLevel;
  let type: ProtoType | undefined;
  for (const index of indexes) {
    type = candidates[index];
    if (type === undefined) return undefined;
    candidates = messagesIn(type);
  }
  return type;
}

export function sameType(a: ProtoType, b: ProtoType): boolean {
  return a.fullName === b.fullName;
}

/** Conversion to a plain object: int64 as decimal strings, enums by name, absent scalars as their defaults. */
const TO_OBJECT: protobuf.IConversionOptions = { longs: String, enums: String, defaults: true, oneofs: true };

export function decodeProto(type: ProtoType, payload: Buffer): { ok: true; value: unknown } | Failure {
  try {
    return { ok: true, value: type.toObject(type.decode(payload), TO_OBJECT) };
  } catch (error) {
    const truncated = error instanceof RangeError || /index out of range/.test(messageOf(error));
    return truncated
      ? failure(Reason.Truncated, `truncated Protobuf ${type.fullName.slice(1)}: ${messageOf(error)}`)
      : failure(
          Reason.ProtobufDecodeFailed,
          `Protobuf decode of ${type.fullName.slice(1)} failed: ${messageOf(error)}`,
        );
  }
}
