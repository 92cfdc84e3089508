/**
 * The registry wire framings, parsed by hand (neither avro-js nor protobufjs knows them, and Powertools Kafka does
 * not strip them for Avro and guesses them for Protobuf — see `avro.ts`).
 *
 * Confluent: `0x00 | schema id (4 bytes, big-endian) | payload`; for Protobuf the payload starts with the message
 * indexes: a zigzag varint count then that many zigzag varint indexes (the path to the message type in the
 * writer's `.proto` file), with a single `0x00` standing for the common `[0]` (first top-level message).
 *
 * Glue: `0x03 (header version) | compression (0 none, 5 zlib) | schema version id (16 bytes, a UUID) | payload`,
 * the payload zlib-deflated when the compression byte says so; for Protobuf the (inflated) payload starts with
 * one plain (not zigzag) varint: the message's index among all message types of the writer's file, sorted by
 * full name.
 */
import { inflateSync } from 'node:zlib';
import { type DecodeFailureReason, DecodeFailureReason as Reason } from './formats.ts';

export type Failure = { readonly ok: false; readonly error: string; readonly reason: DecodeFailureReason };

export function failure(reason: DecodeFailureReason, error: string): Failure {
  return { ok: false, error, reason };
}

export const CONFLUENT_MAGIC = 0x00;
export const GLUE_HEADER_VERSION = 0x03;
const GLUE_COMPRESSION_NONE = 0x00;
const GLUE_COMPRESSION_ZLIB = 0x05;
const CONFLUENT_HEADER_BYTES = 5;
const GLUE_HEADER_BYTES = 18;
/** An inflated Glue payload larger than this is refused (a record is at most a few MB; this stops a zip bomb). */
export const GLUE_MAX_INFLATED_BYTES = 16 * 1024 * 1024;

export type Framed =
  | { readonly ok: true; readonly framing: 'confluent'; readonly schemaId: number; readonly payload: Buffer }
  | {
      readonly ok: true;
      readonly framing: 'glue';
      readonly schemaVersionId: string;
      readonly payload: Buffer;
    };

/** Splits a Confluent-framed field into its schema id and payload. */
export function readConfluent(bytes: Buffer): Framed | Failure {
  if (bytes.length === 0)
    return failure(Reason.Truncated, 'empty field: no Confluent framing (0x00 + schema id)');
  if (bytes[0] !== CONFLUENT_MAGIC) {
    return failure(
      Reason.BadMagicByte,
      `bad magic byte 0x${hex(bytes[0])}: Confluent framing starts with 0x00`,
    );
  }
  if (bytes.length < CONFLUENT_HEADER_BYTES) {
    return failure(Reason.Truncated, `truncated Confluent framing: ${bytes.length} bytes, the header is 5`);
  }
  return {
    ok: true,
    framing: 'confluent',
    schemaId: bytes.readUInt32BE(1),
    payload: bytes.subarray(CONFLUENT_HEADER_BYTES),
  };
}

/** Splits a Glue-framed field into its schema version id and (inflated) payload. */
export function readGlue(bytes: Buffer): Framed | Failure {
  if (bytes.length === 0) return failure(Reason.Truncated, 'empty field: no Glue framing (0x03 header)');
  if (bytes[0] !== GLUE_HEADER_VERSION) {
    return failure(Reason.BadMagicByte, `bad magic byte 0x${hex(bytes[0])}: Glue framing starts with 0x03`);
  }
  if (bytes.length < GLUE_HEADER_BYTES) {
    return failure(Reason.Truncated, `truncated Glue framing: ${bytes.length} bytes, the header is 18`);
  }
  const schemaVersionId = uuidOf(bytes.subarray(2, GLUE_HEADER_BYTES));
  const body = bytes.subarray(GLUE_HEADER_BYTES);
  const compression = bytes[1];
  if (compression === GLUE_COMPRESSION_NONE)
    return { ok: true, framing: 'glue', schemaVersionId, payload: body };
  if (compression !== GLUE_COMPRESSION_ZLIB) {
    return failure(
      Reason.UnsupportedCompression,
      `unsupported Glue compression byte 0x${hex(compression)} (0x00 none and 0x05 zlib are known)`,
    );
  }
  try {
    const payload = inflateSync(body, { maxOutputLength: GLUE_MAX_INFLATED_BYTES });
    return { ok: true, framing: 'glue', schemaVersionId, payload };
  } catch (error) {
    return failure(Reason.DecompressionFailed, `Glue payload does not inflate (zlib): ${messageOf(error)}`);
  }
}

/** Where the Protobuf message starts, and the message indexes in front of it. */
export type MessageIndexes = {
  readonly ok: true;
  readonly indexes: readonly number[];
  readonly offset: number;
};

/** Reads Confluent's Protobuf message indexes at the start of `payload`. */
export function readConfluentMessageIndexes(payload: Buffer): MessageIndexes | Failure {
  const count = readVarint(payload, 0, true);
  if (!count.ok) return failure(count.reason, `Confluent message indexes: ${count.error}`);
  if (count.value === 0) return { ok: true, indexes: [0], offset: count.next };
  if (count.value < 0 || count.value > payload.length - count.next) {
    return failure(Reason.BadMessageIndex, `Confluent message index count ${count.value} is impossible here`);
  }
  const indexes: number[] = [];
  let next = count.next;
  for (let i = 0; i < count.value; i++) {
    const index = readVarint(payload, next, true);
    if (!index.ok) return failure(index.reason, `Confluent message index ${i}: ${index.error}`);
    if (index.value < 0) return failure(Reason.BadMessageIndex, `Confluent message index ${i} is negative`);
    indexes.push(index.value);
    next = index.next;
  }
  return { ok: true, indexes, offset: next };
}

/** Reads Glue's Protobuf message index (one plain varint) at the start of `payload`. */
export function readGlueMessageIndex(payload: Buffer): MessageIndexes | Failure {
  const index = readVarint(payload, 0, false);
  if (!index.ok) return failure(index.reason, `Glue message index: ${index.error}`);
  return { ok: true, indexes: [index.value], offset: index.next };
}

type Varint = { readonly ok: true; readonly value: number; readonly next: number } | Failure;

/** A base-128 varint of at most 32 bits at `pos`, zigzag-decoded when `zigzag`. */
export function readVarint(bytes: Buffer, pos: number, zigzag: boolean): Varint {
  let raw = 0;
  for (let i = 0; i < 5; i++) {
    const byte = bytes[pos + i];
    if (byte === undefined) return failure(Reason.Truncated, `truncated varint at byte ${pos + i}`);
    raw += (byte & 0x7f) * 2 ** (7 * i);
    if ((byte & 0x80) === 0) {
      if (raw > 0xffff_ffff) break;
      const value = zigzag ? (raw % 2 === 0 ? raw / 2 : -(raw + 1) / 2) : raw;
      return { ok: true, value, next: pos + i + 1 };
    }
  }
  return failure(Reason.BadMessageIndex, `varint at byte ${pos} is longer than 32 bits`);
}

function uuidOf(bytes: Buffer): string {
  const h = bytes.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** The 16 bytes of a UUID written `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (as Glue frames it). */
export function uuidBytes(uuid: string): Buffer {
  return Buffer.from(uuid.replaceAll('-', ''), 'hex');
}

export const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function hex(byte: number | undefined): string {
  return (byte ?? 0).toString(16).padStart(2, '0');
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
