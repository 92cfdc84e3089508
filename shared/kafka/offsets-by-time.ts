/**
 * A point in time as offsets of a topic (Kafka's ListOffsets by timestamp, what `kafka-get-offsets.sh --time` and
 * an event source mapping's `AT_TIMESTAMP` start use): per partition, the earliest offset whose record's timestamp
 * is at or after the time. `eos replay --from-timestamp` turns the time into the offsets its plan holds, so the
 * replay's protocol only ever sees offset ranges (`shared/replay/plan.ts`).
 *
 * One port, two adapters: the brokers through kafkajs (`kafkajs-offsets.ts`, the `eos` CLI) and the local runner's
 * emulated log (`local/kafka-log.ts`, tests and `eos local`).
 */
import { PipelineError } from '../errors.ts';

/** One partition's answer for a time (ListOffsets by timestamp). */
export interface OffsetAtTime {
  /**
   * The earliest offset whose record's timestamp is at or after the time, or, when no record is, the partition's end
   * at the lookup (the offset its next record gets): either way every record before it is older than the time, so it
   * is both where a replay from the time starts and where one until the time ends (exclusive).
   */
  readonly offset: number;
  /**
   * A record at or after the time is at `offset`. False: the time is after every record the partition held when the
   * lookup began (records appended during it are left out: a plan is a snapshot).
   */
  readonly found: boolean;
}

/** Per partition of the topic. */
export type OffsetsAtTime = ReadonlyMap<number, OffsetAtTime>;

export interface OffsetsByTime {
  /** Throws {@link OffsetsByTimeError} when the topic is unknown or the brokers cannot answer. */
  offsetsForTimes(topic: string, timestamp: number): Promise<OffsetsAtTime>;
}

/** How the CLI connects to the brokers (`kafkajs-offsets.ts`): as the event source mapping's authentication. */
export const KAFKA_AUTHS = ['iam', 'scram-sha-512', 'scram-sha-256', 'tls', 'plaintext'] as const;
export type KafkaAuth = (typeof KAFKA_AUTHS)[number];

/** The brokers could not turn a time into offsets (unknown topic, unreachable, refused). */
export class OffsetsByTimeError extends PipelineError {}

/**
 * The brokers cannot be used: unreachable, or refusing the credentials or the topic (not authorized). The CLI's
 * "AWS cannot be reached or used" (exit 3), as an unreachable table is.
 */
export class BrokersUnavailableError extends OffsetsByTimeError {}

/** The latest instant a JavaScript `Date` holds (epoch ms): a later "time" is no time. */
export const MAX_TIMESTAMP = 8_640_000_000_000_000;

/** Whether a number is an instant a `Date` can print: epoch ms, 0..{@link MAX_TIMESTAMP}. */
export function isTimestamp(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_TIMESTAMP;
}

/** The days of a month (1-12) of a year of the Gregorian calendar. */
function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate();
}

/**
 * `2026-11-24T00:00:00Z`, `2026-11-24T09:00:00+09:00`, `2026-11-24` (midnight UTC) or epoch milliseconds: a time
 * with no zone (`2026-11-24T00:00`) is refused, since the shell's zone would silently pick the range.
 */
export function parseTimestamp(text: string): number {
  const trimmed = text.trim();
  const epoch = /^\d{1,16}$/.test(trimmed);
  const dateOnly = /^\d{4}-\d{2}-\d{2}$/.test(trimmed);
  const zoned = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/i.test(trimmed);
  // Date.parse rolls a day past the month's end into the next month (2026-02-30 is 2 March): refused instead.
  const [year, month, day] = trimmed.slice(0, 10).split('-').map(Number) as [number, number, number];
  const realDay =
    (!dateOnly && !zoned) || (month >= 1 && month <= 12 && day >= 1 && day <= daysIn(year, month));
  const ms = epoch
    ? Number(trimmed)
    : dateOnly || zoned
      ? Date.parse(dateOnly ? `${trimmed}T00:00:00Z` : trimmed)
      : Number.NaN;
  if (!realDay || !isTimestamp(ms)) {
    throw new OffsetsByTimeError(
      `${JSON.stringify(text)} is not a time: give ISO 8601 with a zone (2026-11-24T00:00:00Z, …+09:00), a date (UTC midnight) or epoch milliseconds (at most ${MAX_TIMESTAMP})`,
    );
  }
  return ms;
}
