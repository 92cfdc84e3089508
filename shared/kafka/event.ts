/**
 * The MSK event at the processor's boundary: validated with Powertools' `KafkaMskEventSchema` (a well-kept
 * schema of the documented event-source-mapping format), plus the few facts the protocol relies on that the
 * schema leaves open (integer offsets, records filed under their own `<topic>-<partition>`, offsets increasing).
 * A malformed event fails with an error naming the bad field, before anything is written.
 *
 * Decoding is done from the raw event rather than the schema's output: the schema decodes header bytes as code
 * points (not UTF-8) and drops the base64 that dead-letter rows must keep.
 */
import { KafkaMskEventSchema } from '@aws-lambda-powertools/parser/schemas/kafka';
import { MalformedEventError } from '../errors.ts';
import type { DecodedRecord, PartitionBatch } from './record.ts';

/** The raw record as the event source mapping sends it. */
export interface MskRecord {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly timestamp: number;
  readonly timestampType: string;
  readonly key?: string | null;
  readonly value: string;
  readonly headers: ReadonlyArray<Record<string, number[]>>;
}

export interface MskEvent {
  readonly eventSource: 'aws:kafka';
  readonly eventSourceArn: string;
  readonly bootstrapServers?: string;
  readonly records: Record<string, MskRecord[]>;
}

function pathOf(path: ReadonlyArray<PropertyKey>): string {
  return path.reduce<string>(
    (text, part) => (typeof part === 'number' ? `${text}[${part}]` : `${text}.${String(part)}`),
    'event',
  );
}

function assertOffsets(batchKey: string, records: readonly MskRecord[]): void {
  let previous = -1;
  records.forEach((record, index) => {
    const at = `event.records["${batchKey}"][${index}]`;
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

/** Validates an incoming event; throws {@link MalformedEventError} naming the first bad field. */
export function parseMskEvent(input: unknown): MskEvent {
  const result = KafkaMskEventSchema.safeParse(input);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new MalformedEventError(pathOf(issue.path), issue.message, { cause: result.error });
  }
  const event = input as MskEvent;
  for (const [batchKey, records] of Object.entries(event.records)) assertOffsets(batchKey, records);
  return event;
}

function decodeBase64(text: string | null | undefined): string | null {
  return text === undefined || text === null ? null : Buffer.from(text, 'base64').toString('utf8');
}

function decodeHeaders(headers: MskRecord['headers']): Record<string, string> {
  const decoded: Record<string, string> = {};
  for (const header of headers) {
    for (const [name, bytes] of Object.entries(header)) decoded[name] = Buffer.from(bytes).toString('utf8');
  }
  return decoded;
}

export function decodeRecord(record: MskRecord): DecodedRecord {
  return {
    topic: record.topic,
    partition: record.partition,
    offset: record.offset,
    timestamp: record.timestamp,
    key: decodeBase64(record.key),
    value: decodeBase64(record.value),
    headers: decodeHeaders(record.headers),
    rawKey: record.key ?? null,
    rawValue: record.value,
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
