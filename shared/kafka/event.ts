/**
 * The MSK event at the processor's boundary: validated whole, before anything is written, with errors naming the
 * bad field. A problem with the event's shape (a field of the wrong type, bytes that are not base64, a topic that
 * is not a Kafka topic name, offsets not increasing) rejects the event: it is not a per-record problem, and
 * nothing of it is staged. Everything a record may legitimately carry passes: a null or absent key (unkeyed
 * records), a null or absent value (tombstones of compacted and CDC topics), any header bytes.
 *
 * The shape, as the event source mapping sends it (AWS Lambda's MSK event; the Java, Go and .NET event libraries):
 * key and value are base64 strings; headers are an array of single-entry objects whose value is the header's
 * bytes as a JSON array of numbers. The mapping serializes Java's signed bytes, so a byte arrives as -128..127
 * (0xC3 as -61); unsigned 0..255 is accepted too. Decoding keeps every byte: `rawHeaders` holds each header's
 * exact bytes (base64), in order, repeats included.
 *
 * Powertools' `KafkaMskEventSchema` is not used: it requires a value and a non-null key (a tombstone would fail
 * the whole event) and decodes header bytes as code points, throwing a RangeError on a negative byte.
 */
import { z } from 'zod';
import { InvalidTopicNameError, MalformedEventError } from '../errors.ts';
import type { DecodedRecord, PartitionBatch, RawHeader } from './record.ts';

/** The raw record as the event source mapping sends it. */
export interface MskRecord {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly timestamp: number;
  readonly timestampType: string;
  /** Base64; null or absent for an unkeyed record. */
  readonly key?: string | null;
  /** Base64; null or absent for a tombstone. */
  readonly value?: string | null;
  /** One single-entry object per header: name → bytes (signed or unsigned byte values). */
  readonly headers?: ReadonlyArray<Record<string, number[]>>;
}

/**
 * A Kafka event as Lambda delivers it: from Amazon MSK (`aws:kafka`, with the cluster's ARN) or from a self-managed
 * Apache Kafka cluster (`SelfManagedKafka`, with its bootstrap servers and no ARN). The records are the same.
 */
export type MskEvent =
  | {
      readonly eventSource: 'aws:kafka';
      readonly eventSourceArn: string;
      readonly bootstrapServers?: string | null;
      readonly records: Record<string, MskRecord[]>;
    }
  | {
      readonly eventSource: 'SelfManagedKafka';
      readonly eventSourceArn?: undefined;
      /** Comma-separated `host:port` list, as the event source mapping was configured. */
      readonly bootstrapServers: string;
      readonly records: Record<string, MskRecord[]>;
    };

/** Kafka's own rule for topic names (`Topic.validate`): 1–249 of `[a-zA-Z0-9._-]`, and not `.` or `..`. */
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

export function isValidTopicName(topic: string): boolean {
  return TOPIC_NAME.test(topic) && topic !== '.' && topic !== '..';
}

/** Canonical, padded base64 (what the mapping sends); anything else is a malformed event, not a record. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const base64 = z.string().regex(BASE64, 'expected base64');
const headerByte = z.number().int().min(-128).max(255);

const recordSchema = z.object({
  topic: z.string(),
  partition: z.number(),
  offset: z.number(),
  timestamp: z.number(),
  timestampType: z.string(),
  key: base64.nullish(),
  value: base64.nullish(),
  headers: z.array(z.record(z.string(), z.array(headerByte))).optional(),
});

const recordsSchema = z.record(z.string(), z.array(recordSchema).min(1));
const eventSchema = z.discriminatedUnion('eventSource', [
  z.object({
    eventSource: z.literal('aws:kafka'),
    eventSourceArn: z.string(),
    bootstrapServers: z.string().nullish(),
    records: recordsSchema,
  }),
  z.object({
    eventSource: z.literal('SelfManagedKafka'),
    eventSourceArn: z.undefined().optional(),
    bootstrapServers: z.string().min(1),
    records: recordsSchema,
  }),
]);

function pathOf(path: ReadonlyArray<PropertyKey>): string {
  return path.reduce<string>(
    (text, part) => (typeof part === 'number' ? `${text}[${part}]` : `${text}.${String(part)}`),
    'event',
  );
}

function assertRecords(batchKey: string, records: readonly MskRecord[]): void {
  let previous = -1;
  records.forEach((record, index) => {
    const at = `event.records["${batchKey}"][${index}]`;
    if (!isValidTopicName(record.topic)) throw new InvalidTopicNameError(`${at}.topic`, record.topic);
    if (`${record.topic}-${record.partition}` !== batchKey) {
      throw new MalformedEventError(
        `${at}.partition`,
        `record of ${record.topic}-${record.partition} filed under "${batchKey}"`,
      );
    }
    if (!Number.isSafeInteger(record.partition) || record.partition < 0) {
      throw new MalformedEventError(
        `${at}.partition`,
        `expected a non-negative integer, got ${record.partition}`,
      );
    }
    if (!Number.isSafeInteger(record.offset) || record.offset < 0) {
      throw new MalformedEventError(`${at}.offset`, `expected a non-negative integer, got ${record.offset}`);
    }
    if (record.offset <= previous) {
      throw new MalformedEventError(
        `${at}.offset`,
        `offsets must increase within a partition (${previous} then ${record.offset})`,
      );
    }
    previous = record.offset;
  });
}

/**
 * Validates an incoming event; throws {@link MalformedEventError} naming the first bad field
 * ({@link InvalidTopicNameError} for a topic that is not a Kafka topic name: topics end up in S3 and ledger keys).
 */
export function parseMskEvent(input: unknown): MskEvent {
  const result = eventSchema.safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new MalformedEventError(pathOf(issue.path), issue.message, { cause: result.error });
  }
  // The raw input, not zod's copy: a header named `__proto__` must stay a header (zod rebuilds records).
  const event = input as MskEvent;
  for (const [batchKey, records] of Object.entries(event.records)) assertRecords(batchKey, records);
  return event;
}

const UTF8 = new TextDecoder('utf-8', { fatal: false });
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes as UTF-8 text, or undefined when they are not well-formed UTF-8. */
export function strictUtf8(bytes: Uint8Array): string | undefined {
  try {
    return STRICT_UTF8.decode(bytes);
  } catch {
    return undefined;
  }
}

function bytesOf(base64Text: string | null | undefined): Buffer | null {
  return base64Text === undefined || base64Text === null ? null : Buffer.from(base64Text, 'base64');
}

/** A header's byte values as sent (signed Java bytes or unsigned) → the bytes. */
export function headerBytes(values: readonly number[]): Uint8Array {
  return Uint8Array.from(values, (value) => value & 0xff);
}

/** Bytes as the mapping sends a header's value: Java's signed bytes (0xff → -1). The inverse of {@link headerBytes}. */
export function signedHeaderBytes(bytes: Uint8Array): number[] {
  return Array.from(bytes, (byte) => (byte > 127 ? byte - 256 : byte));
}

function decodeHeaders(headers: MskRecord['headers']): {
  text: Record<string, string>;
  raw: RawHeader[];
} {
  // Null prototype: a header named `constructor` or `__proto__` is a header like any other.
  const text: Record<string, string> = Object.create(null);
  const raw: RawHeader[] = [];
  for (const header of headers ?? []) {
    for (const [name, values] of Object.entries(header)) {
      const bytes = headerBytes(values);
      text[name] = UTF8.decode(bytes);
      raw.push({ name, value: Buffer.from(bytes).toString('base64') });
    }
  }
  return { text, raw };
}

export function decodeRecord(record: MskRecord): DecodedRecord {
  const key = bytesOf(record.key);
  const value = bytesOf(record.value);
  const headers = decodeHeaders(record.headers);
  const valueText = value === null ? null : strictUtf8(value);
  return {
    topic: record.topic,
    partition: record.partition,
    offset: record.offset,
    timestamp: record.timestamp,
    key: key === null ? null : UTF8.decode(key),
    value: value === null ? null : (valueText ?? UTF8.decode(value)),
    valueIsUtf8: value === null || valueText !== undefined,
    headers: headers.text,
    rawKey: record.key ?? null,
    rawValue: record.value ?? null,
    rawHeaders: headers.raw,
  };
}

/** One batch per partition, records in offset order. */
export function partitionBatches(event: MskEvent): PartitionBatch[] {
  return Object.values(event.records).map((records) => ({
    topic: records[0]!.topic,
    partition: records[0]!.partition,
    records: records.map(decodeRecord),
  }));
}
