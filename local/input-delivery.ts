/**
 * Delivers an input file's records to a processor as an Amazon MSK event source mapping does, once, with no
 * checkpoint: `eos deliver` on a laptop, in place of the stack's live mapping, or of a generation's replay
 * mapping (the processor in replay mode). The file is the topic: each partition's records in file order, a
 * record's offset its position within its partition (as `eos local` lays them out), so the records of an
 * `eos local --input` run come again at the offsets they had.
 *
 * As the mapping: batches of one partition in offset order, one in flight at a time, from the partition's start
 * (a consumer group of its own that has committed nothing); a failed batch comes again unchanged, so a batch staged
 * already is a redelivery the processor drops by its fence. A batch refused because the partition's offsets went
 * backwards (a recreated topic) is delivered once more, as the mapping's retry, which confirms the stop
 * (`eos epoch`); the partition then waits for an operator and the others go on. A transient failure is retried a
 * few times, then thrown; any other failure is thrown at once: the mapping would retry them for ever, and a command
 * must end with the error that stopped it.
 *
 * Unlike the mapping: one batch at a time across partitions (no concurrency, no zombie), no batching window (the
 * file is all there), nothing after the file's end, no Lambda timeout or memory limit.
 */
import { isTransient } from '../shared/aws/classify.ts';
import { OffsetsWentBackwardsError } from '../shared/errors.ts';
import { EpochChangedError } from '../shared/ledger/fence-reads.ts';
import type { InputRecord } from './input.ts';
import type { ProducerRecord } from './kafka-log.ts';
import { PartitionedLog } from './kafka-log.ts';
import type { Delivery } from './msk-emulator.ts';
import { MskEmulator } from './msk-emulator.ts';

/** The processor as the mapping invokes it; what it reports per partition. */
export interface DeliveryTarget {
  processEvent(event: Delivery['event']): Promise<{
    readonly partitions: ReadonlyArray<{
      readonly topic: string;
      readonly partition: number;
      readonly stagedRows: number;
      readonly deadLettered: number;
      readonly duplicatesByOffset: number;
      readonly duplicatesByKey: number;
    }>;
  }>;
}

export interface InputDeliveryOptions {
  readonly processor: DeliveryTarget;
  readonly records: readonly InputRecord[];
  readonly topic: string;
  readonly partitions: number;
  /** Records per partition per invocation, as the mapping's batch size. */
  readonly batchSize: number;
  /** Epoch ms for the records without a timestamp of their own. */
  readonly timestamp: number;
  /** The event's source, as the processor's settings expect it (`eventSourceArn`, `bootstrapServers`). */
  readonly eventSourceArn?: string;
  readonly bootstrapServers?: string;
  /** Invocations of one batch before its failure is thrown; default 5. */
  readonly maxAttempts?: number;
  /** Waits between attempts of a failed batch (ms, times the attempt); default 200. */
  readonly retryDelayMs?: number;
  readonly onProgress?: (delivered: number, total: number) => void;
}

/** One partition's delivery. */
export interface PartitionDelivery {
  readonly partition: number;
  /** The partition's offsets in the file. */
  readonly firstOffset: number;
  readonly lastOffset: number;
  /** Records acknowledged, and the invocations that acknowledged them. */
  readonly records: number;
  readonly batches: number;
  /** The lanes the processor filed the partition's batches under (an epoch's, a replay generation's). */
  readonly lanes: readonly string[];
  readonly stagedRows: number;
  readonly deadLettered: number;
  readonly duplicatesByOffset: number;
  readonly duplicatesByKey: number;
  /** The batch the partition stopped at: its offsets went backwards (a recreated topic). */
  readonly stopped?: { readonly firstOffset: number; readonly lastOffset: number; readonly reason: string };
}

export interface InputDelivery {
  readonly topic: string;
  readonly partitions: readonly PartitionDelivery[];
}

type Tally = {
  -readonly [K in keyof Omit<PartitionDelivery, 'lanes' | 'stopped'>]: PartitionDelivery[K];
} & { lanes: Set<string>; stopped?: PartitionDelivery['stopped'] };

/** Two refusals of the same batch: the second, a later invocation, confirms the stop (`eos epoch`). */
const STOP_CONFIRMED_AFTER = 2;

function isWentBackwards(error: unknown): error is OffsetsWentBackwardsError {
  return error instanceof OffsetsWentBackwardsError;
}

/** What a retry can get past: throttling, 5xx, conflicts, an epoch an operator opened meanwhile. */
function isRetryable(error: unknown): boolean {
  return isTransient(error) || error instanceof EpochChangedError;
}

function logOf(options: InputDeliveryOptions): PartitionedLog {
  const log = new PartitionedLog(options.topic, options.partitions, { now: () => options.timestamp });
  for (const record of options.records) {
    const produced: ProducerRecord = {
      key: record.key,
      value: record.value,
      headers: record.headers,
      timestamp: record.timestamp ?? options.timestamp,
    };
    log.append(record.partition, produced);
  }
  log.close();
  return log;
}

function tallies(log: PartitionedLog): Map<number, Tally> {
  const byPartition = new Map<number, Tally>();
  for (let partition = 0; partition < log.partitions; partition++) {
    const end = log.endOffset(partition);
    if (end === 0) continue;
    byPartition.set(partition, {
      partition,
      firstOffset: 0,
      lastOffset: end - 1,
      records: 0,
      batches: 0,
      lanes: new Set(),
      stagedRows: 0,
      deadLettered: 0,
      duplicatesByOffset: 0,
      duplicatesByKey: 0,
    });
  }
  return byPartition;
}

export async function deliverInput(options: InputDeliveryOptions): Promise<InputDelivery> {
  const log = logOf(options);
  const emulator = new MskEmulator({
    log,
    clock: { now: () => options.timestamp },
    batchSize: options.batchSize,
    ...(options.eventSourceArn === undefined ? {} : { eventSourceArn: options.eventSourceArn }),
    ...(options.bootstrapServers === undefined ? {} : { bootstrapServers: options.bootstrapServers }),
  });
  const byPartition = tallies(log);
  const maxAttempts = options.maxAttempts ?? 5;
  const total = log.size;
  let delivered = 0;
  // A stopped partition keeps its lease: the emulator then never offers it again, and the others drain.
  for (let delivery = emulator.poll(); delivery !== undefined; delivery = emulator.poll()) {
    const slice = delivery.slices[0]!;
    const tally = byPartition.get(slice.partition)!;
    try {
      const report = await options.processor.processEvent(delivery.event);
      emulator.commit(delivery);
      tally.records += delivery.recordCount;
      tally.batches++;
      for (const p of report.partitions) {
        tally.lanes.add(p.topic);
        tally.stagedRows += p.stagedRows;
        tally.deadLettered += p.deadLettered;
        tally.duplicatesByOffset += p.duplicatesByOffset;
        tally.duplicatesByKey += p.duplicatesByKey;
      }
      delivered += delivery.recordCount;
      options.onProgress?.(delivered, total);
    } catch (error) {
      if (isWentBackwards(error) && slice.attempt >= STOP_CONFIRMED_AFTER) {
        tally.stopped = {
          firstOffset: slice.firstOffset,
          lastOffset: slice.lastOffset,
          reason: error.message,
        };
        continue;
      }
      if (!isWentBackwards(error) && (!isRetryable(error) || slice.attempt >= maxAttempts)) throw error;
      emulator.release(delivery);
      const wait = (options.retryDelayMs ?? 200) * slice.attempt;
      if (!isWentBackwards(error)) await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
  return {
    topic: options.topic,
    partitions: [...byPartition.values()].map(({ lanes, ...tally }) => ({ ...tally, lanes: [...lanes] })),
  };
}
