/**
 * A partitioned, append-only log: the topic the local MSK event-source emulator reads. Offsets are positions within
 * a partition, from 0. Each record is kept in the exact form the event carries (base64 key and value, headers as
 * byte arrays), so that batching can measure the payload an invocation would really receive.
 */
import type { Clock } from '../shared/clock.ts';
import { signedHeaderBytes } from '../shared/kafka/event.ts';
import {
  type OffsetsAtTime,
  type OffsetsByTime,
  OffsetsByTimeError,
} from '../shared/kafka/offsets-by-time.ts';
import { UnknownPartitionError } from './errors.ts';

/**
 * A header value as a producer sends it: text (sent as its UTF-8 bytes) or the exact bytes, as byte values
 * (-128..255; the MSK event carries Java's signed bytes).
 */
export type HeaderValue = string | readonly number[];

/** What a producer sends. */
export interface ProducerRecord {
  /** Text (sent as UTF-8) or the exact bytes (Avro, Protobuf, anything binary). */
  readonly key: string | Uint8Array | null;
  /** null: a tombstone. */
  readonly value: string | Uint8Array | null;
  readonly headers?: Readonly<Record<string, HeaderValue>>;
  /** Epoch ms; the log's clock when omitted. */
  readonly timestamp?: number;
}

/** A record exactly as it appears in an MSK event. */
export interface MskEventRecord {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly timestamp: number;
  readonly timestampType: 'CREATE_TIME';
  /** Absent for a record without a key. */
  readonly key?: string;
  /** null for a tombstone. */
  readonly value: string | null;
  /** Each header's bytes as Java's signed bytes (-128..127), as the event source mapping serializes them. */
  readonly headers: Array<Record<string, number[]>>;
}

/** An MSK invocation event, as the event source mapping sends it. */
export interface MskEvent {
  readonly eventSource: 'aws:kafka';
  readonly eventSourceArn: string;
  readonly bootstrapServers: string;
  readonly records: Record<string, MskEventRecord[]>;
}

export interface LogEntry {
  readonly record: MskEventRecord;
  /** The record as the producer sent it (decoded). */
  readonly produced: ProducerRecord;
  /** UTF-8 length of the record's JSON in the event. */
  readonly eventBytes: number;
  /** The log's clock when appended: starts the batching window. */
  readonly appendedAt: number;
}

/** A key or value as the event carries it: base64 of its bytes (text as UTF-8). */
function base64Of(field: string | Uint8Array): string {
  return (typeof field === 'string' ? Buffer.from(field, 'utf8') : Buffer.from(field)).toString('base64');
}

/** A header's bytes as the mapping sends them: Java's signed bytes (0xff → -1). */
export function signedBytes(value: HeaderValue): number[] {
  return signedHeaderBytes(
    typeof value === 'string' ? Buffer.from(value, 'utf8') : Uint8Array.from(value, (b) => b & 0xff),
  );
}

export function toEventRecord(
  topic: string,
  partition: number,
  offset: number,
  r: ProducerRecord,
  now: number,
): MskEventRecord {
  const record: MskEventRecord = {
    topic,
    partition,
    offset,
    timestamp: r.timestamp ?? now,
    timestampType: 'CREATE_TIME',
    ...(r.key === null ? {} : { key: base64Of(r.key) }),
    value: r.value === null ? null : base64Of(r.value),
    headers: Object.entries(r.headers ?? {}).map(([name, value]) => ({ [name]: signedBytes(value) })),
  };
  return record;
}

export class PartitionedLog implements OffsetsByTime {
  private readonly partitionsData: LogEntry[][];
  private closed = false;

  constructor(
    readonly topic: string,
    readonly partitions: number,
    private readonly clock: Clock,
  ) {
    if (!Number.isInteger(partitions) || partitions < 1)
      throw new RangeError('a topic needs at least one partition');
    this.partitionsData = Array.from({ length: partitions }, () => []);
  }

  /** Appends a record and returns its offset. */
  append(partition: number, produced: ProducerRecord): number {
    const entries = this.entries(partition);
    if (this.closed) throw new RangeError('the log is closed to producers');
    const offset = entries.length;
    const record = toEventRecord(this.topic, partition, offset, produced, this.clock.now());
    entries.push({
      record,
      produced,
      eventBytes: Buffer.byteLength(JSON.stringify(record)),
      appendedAt: this.clock.now(),
    });
    return offset;
  }

  /** The producers are done: the batching window no longer holds back a partition's tail. */
  close(): void {
    this.closed = true;
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The offset the next append to this partition gets. */
  endOffset(partition: number): number {
    return this.entries(partition).length;
  }

  /** The bytes a record would take in an event if appended now (before appending it). */
  measure(partition: number, produced: ProducerRecord): number {
    const offset = this.endOffset(partition);
    return Buffer.byteLength(
      JSON.stringify(toEventRecord(this.topic, partition, offset, produced, this.clock.now())),
    );
  }

  entry(partition: number, offset: number): LogEntry {
    const entry = this.entries(partition)[offset];
    if (!entry) throw new RangeError(`no record at ${this.topic}-${partition}@${offset}`);
    return entry;
  }

  /** Every record of a partition, in offset order. */
  entries(partition: number): LogEntry[] {
    const entries = this.partitionsData[partition];
    if (!Number.isInteger(partition) || !entries) throw new UnknownPartitionError(partition, this.partitions);
    return entries;
  }

  /**
   * Per partition, the earliest offset whose record's timestamp is at or after `timestamp`, else the partition's end
   * (Kafka's ListOffsets by time: timestamps need not grow with offsets, so a later record may be older).
   */
  async offsetsForTimes(topic: string, timestamp: number): Promise<OffsetsAtTime> {
    if (topic !== this.topic) throw new OffsetsByTimeError(`the local log holds ${this.topic}, not ${topic}`);
    return new Map(
      this.partitionsData.map((entries, partition) => {
        const offset = entries.find((entry) => entry.record.timestamp >= timestamp)?.record.offset;
        return [partition, { offset: offset ?? entries.length, found: offset !== undefined }];
      }),
    );
  }

  get size(): number {
    return this.partitionsData.reduce((sum, entries) => sum + entries.length, 0);
  }
}
