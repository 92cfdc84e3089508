/**
 * A committed dead letter as redrive reads it: which rows are one, and the record it was made from, so that a round
 * sends the record again as the processor decoded it then.
 */
import { decodeRecord, type MskRecord, signedHeaderBytes } from '../kafka/event.ts';
import type { DecodedRecord } from '../kafka/record.ts';

/** A dead-letter row as committed. */
export interface DeadLetter {
  readonly offset: number;
  readonly topic: string;
  readonly error: string;
  readonly raw: {
    readonly key: string | null;
    readonly value: string | null;
    readonly headers: ReadonlyArray<{ readonly name: string; readonly value: string }>;
    readonly timestamp?: number;
  };
  /** The round whose lane holds it (0: the original lane). */
  readonly round: number;
  /** The checkpoint that committed it. */
  readonly checkpointId: number;
}

export function isDeadLetterRow(row: Record<string, unknown>): row is Record<string, unknown> & {
  source: { topic: string; partition: number; offset: number };
  error: string;
  raw: DeadLetter['raw'];
} {
  const source = row.source as { topic?: unknown; partition?: unknown; offset?: unknown } | undefined;
  const raw = row.raw as { key?: unknown; value?: unknown; headers?: unknown } | undefined;
  return (
    typeof source?.topic === 'string' &&
    Number.isSafeInteger(source.partition) &&
    Number.isSafeInteger(source.offset) &&
    typeof row.error === 'string' &&
    typeof raw === 'object' &&
    raw !== null &&
    (raw.key === null || typeof raw.key === 'string') &&
    (raw.value === null || typeof raw.value === 'string') &&
    Array.isArray(raw.headers)
  );
}

/**
 * Dead letters written before headers were kept in order carry them as an object (`{name: base64}`): listed here
 * as `[{name, value}]`, in the object's order, so such a row is redriven too.
 */
export function withHeadersListed(row: Record<string, unknown>): void {
  const raw = row.raw as { headers?: unknown } | undefined;
  const headers = raw?.headers;
  if (typeof headers !== 'object' || headers === null || Array.isArray(headers)) return;
  const entries = Object.entries(headers as Record<string, unknown>);
  if (entries.every(([, value]) => typeof value === 'string')) {
    raw!.headers = entries.map(([name, value]) => ({ name, value }));
  }
}

/** The record a dead letter was made from, as the processor decoded it then. */
export function recordOf(letter: DeadLetter, partition: number): DecodedRecord {
  const record: MskRecord = {
    topic: letter.topic,
    partition,
    offset: letter.offset,
    // Dead letters written before redrive existed carry no timestamp: 0 (the epoch) then.
    timestamp: letter.raw.timestamp ?? 0,
    timestampType: 'CREATE_TIME',
    key: letter.raw.key,
    value: letter.raw.value,
    headers: letter.raw.headers.map((header) => ({
      [header.name]: signedHeaderBytes(Buffer.from(header.value, 'base64')),
    })),
  };
  return decodeRecord(record);
}
