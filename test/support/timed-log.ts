/**
 * An emulated topic whose records carry chosen timestamps, for tests of `eos replay --from-timestamp`: the local
 * runner's `PartitionedLog` (it answers offsets at a time, as the brokers' ListOffsets does) filled with `orders`
 * records, and MSK events of its records.
 */
import { PartitionedLog } from '../../local/kafka-log.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { MskRecord } from '../../shared/kafka/event.ts';
import type { OffsetsAdmin } from '../../shared/kafka/kafkajs-offsets.ts';
import { mskEventOf, order } from './msk.ts';

export const TIME_BASE = Date.parse('2026-11-24T00:00:00Z');
/** Epoch ms `seconds` after {@link TIME_BASE}. */
export const secondsIn = (seconds: number) => TIME_BASE + seconds * 1000;
/** ISO 8601 of {@link secondsIn}. */
export const isoAt = (seconds: number) => new Date(secondsIn(seconds)).toISOString();

/** A topic whose partition p holds records at `times[p][i]` seconds (offset i); keys unique per topic incarnation. */
export function logOf(times: ReadonlyArray<readonly number[]>, tag = 'a'): PartitionedLog {
  const log = new PartitionedLog('orders', times.length, new ManualClock(TIME_BASE));
  times.forEach((partitionTimes, partition) => {
    for (const t of partitionTimes) append(log, partition, t, tag);
  });
  return log;
}

/** Appends an order at `seconds`; its offset. */
export function append(log: PartitionedLog, partition: number, seconds: number, tag = 'a'): number {
  const offset = log.endOffset(partition);
  const id = `${tag}-p${partition}-o${offset}`;
  return log.append(partition, {
    key: id,
    value: order(id, `cust-${offset % 3}`, `${offset}.25`),
    headers: { 'idempotency-key': id },
    timestamp: secondsIn(seconds),
  });
}

/** The records of the log (partitions and offsets chosen by `keep`) as one MSK event. */
export function eventOf(
  log: PartitionedLog,
  keep: (partition: number, offset: number) => boolean = () => true,
) {
  const records: Record<string, MskRecord[]> = {};
  for (let partition = 0; partition < log.partitions; partition++) {
    const chosen = log
      .entries(partition)
      .map((entry) => entry.record as MskRecord)
      .filter((r) => keep(partition, r.offset));
    if (chosen.length > 0) records[`${log.topic}-${partition}`] = chosen;
  }
  return mskEventOf(records);
}

/** Runs inside a lookup by time: `before` it reads anything, or `after` it made its answer (a producer appending). */
export interface LookupHooks {
  readonly beforeLookup?: (timestamp: number) => Promise<void>;
  readonly afterLookup?: (timestamp: number) => Promise<void>;
}

/**
 * kafkajs 2.2.4's admin over the log, as it answers (node_modules/kafkajs/src/admin/index.js), where no broker runs:
 * `fetchTopicOffsets` gives each partition's high watermark; `fetchTopicOffsetsByTimestamp` reads the high watermark,
 * then ListOffsets by time, and answers the high watermark where ListOffsets found no record.
 */
export function kafkajsAdminOver(log: PartitionedLog, hooks: LookupHooks = {}): OffsetsAdmin {
  return {
    fetchTopicOffsets: async () =>
      Array.from({ length: log.partitions }, (_, partition) => ({
        partition,
        offset: String(log.endOffset(partition)),
        high: String(log.endOffset(partition)),
        low: '0',
      })),
    fetchTopicOffsetsByTimestamp: async (topic, timestamp) => {
      await hooks.beforeLookup?.(timestamp!);
      const high = Array.from({ length: log.partitions }, (_, p) => log.endOffset(p));
      const found = await log.offsetsForTimes(topic, timestamp!);
      const answer = [...found].map(([partition, { offset, found: isRecord }]) => ({
        partition,
        offset: String(isRecord ? offset : high[partition]),
      }));
      await hooks.afterLookup?.(timestamp!);
      return answer;
    },
  };
}
