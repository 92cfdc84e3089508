/**
 * A local Amazon MSK event-source mapping: reads a {@link PartitionedLog} and hands out invocation events in the
 * exact MSK format, with the mapping's documented semantics (see LOCAL-PARTS.md):
 *
 * - per partition, records in offset order, one batch in flight at a time (a partition's batches never overlap);
 * - a batch closes when it holds `batchSize` records, when the next record would push the invocation payload past
 *   the 6 MB synchronous limit, or when the batching window since its first record has passed (or the producers
 *   are done: the log is closed);
 * - optionally several partitions in one event (`maxPartitionsPerEvent`), each under `<topic>-<partition>`;
 * - the consumer offset is committed only after a successful invocation ({@link MskEmulator.commit}); after a
 *   failure ({@link MskEmulator.release}) the whole batch is delivered again, exactly as before.
 *
 * ```
 *  log p0: 0 1 2 3 4 5 6 7 ...        poll() ─▶ event{orders-0: [0..3]}  (p0 leased)
 *              ▲ committed             ├─ commit(d)  ─▶ committed = 4, p0 free
 *                                      └─ release(d) ─▶ committed = 0, next poll() gives [0..3] again
 * ```
 * The emulator drives nothing by itself: the runner polls, invokes, and commits or releases, which is where faults
 * (a lost commit, a zombie) are injected.
 */
import type { Clock } from '../shared/clock.ts';
import { RecordTooLargeError } from './errors.ts';
import type { MskEvent, MskEventRecord, PartitionedLog, ProducerRecord } from './kafka-log.ts';

/** Lambda's synchronous invocation payload limit. */
export const MAX_PAYLOAD_BYTES = 6 * 1024 * 1024;
export const DEFAULT_BATCH_SIZE = 100;
export const MAX_BATCH_SIZE = 10_000;
export const DEFAULT_BATCHING_WINDOW_MS = 500;

export interface MskEmulatorOptions {
  readonly log: PartitionedLog;
  readonly clock: Clock;
  /** Records per partition per event: default 100, at most 10,000. */
  readonly batchSize?: number;
  /** How long a partition's first pending record may wait for its batch to fill (ms); default 500. */
  readonly maxBatchingWindowMs?: number;
  /** The invocation payload limit (bytes of the event's JSON); default 6 MB. */
  readonly maxPayloadBytes?: number;
  /** How many partitions one event may carry; default 1. */
  readonly maxPartitionsPerEvent?: number;
  readonly eventSourceArn?: string;
  readonly bootstrapServers?: string;
}

/** One partition's part of a delivery: offsets firstOffset..lastOffset (inclusive). */
export interface PartitionSlice {
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  /** 1 for the first delivery of these records, 2 for the first retry, ... */
  readonly attempt: number;
}

export interface Delivery {
  readonly id: number;
  readonly event: MskEvent;
  readonly slices: readonly PartitionSlice[];
  readonly recordCount: number;
  /** UTF-8 bytes of `JSON.stringify(event)`. */
  readonly payloadBytes: number;
}

interface PartitionState {
  /** The next offset to deliver: everything below it was acknowledged. */
  committed: number;
  leased: boolean;
  /** After a failed delivery: the end (exclusive) of the batch that must come again, unchanged. */
  retryEnd: number | undefined;
  attempts: number;
}

const DEFAULT_ARN =
  'arn:aws:kafka:us-east-1:000000000000:cluster/local-emulator/00000000-0000-0000-0000-000000000000-1';

function positiveInt(name: string, value: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < 1 || value > max)
    throw new RangeError(`${name} must be an integer in 1..${max}`);
  return value;
}

export class MskEmulator {
  readonly batchSize: number;
  readonly maxBatchingWindowMs: number;
  readonly maxPayloadBytes: number;
  readonly maxPartitionsPerEvent: number;
  private readonly log: PartitionedLog;
  private readonly clock: Clock;
  private readonly envelope: Omit<MskEvent, 'records'>;
  private readonly envelopeBytes: number;
  private readonly states: PartitionState[];
  private cursor = 0;
  private nextId = 1;

  constructor(options: MskEmulatorOptions) {
    this.log = options.log;
    this.clock = options.clock;
    this.batchSize = positiveInt('batchSize', options.batchSize ?? DEFAULT_BATCH_SIZE, MAX_BATCH_SIZE);
    this.maxBatchingWindowMs = options.maxBatchingWindowMs ?? DEFAULT_BATCHING_WINDOW_MS;
    this.maxPayloadBytes = positiveInt('maxPayloadBytes', options.maxPayloadBytes ?? MAX_PAYLOAD_BYTES);
    this.maxPartitionsPerEvent = positiveInt('maxPartitionsPerEvent', options.maxPartitionsPerEvent ?? 1);
    this.envelope = {
      eventSource: 'aws:kafka',
      eventSourceArn: options.eventSourceArn ?? DEFAULT_ARN,
      bootstrapServers: options.bootstrapServers ?? 'b-1.local-emulator.kafka.localhost:9098',
    };
    this.envelopeBytes = Buffer.byteLength(JSON.stringify({ ...this.envelope, records: {} }));
    this.states = Array.from({ length: this.log.partitions }, () => ({
      committed: 0,
      leased: false,
      retryEnd: undefined,
      attempts: 0,
    }));
  }

  /** Appends to the log, refusing a record that no invocation could ever carry. */
  produce(partition: number, record: ProducerRecord): number {
    const bytes = this.log.measure(partition, record);
    if (this.envelopeBytes + this.partitionOverhead(partition, true) + bytes > this.maxPayloadBytes) {
      throw new RecordTooLargeError(partition, bytes, this.maxPayloadBytes);
    }
    return this.log.append(partition, record);
  }

  /** The next event, or undefined when no free partition has a batch ready. Leases the partitions it carries. */
  poll(): Delivery | undefined {
    const records: Record<string, MskEventRecord[]> = {};
    const slices: PartitionSlice[] = [];
    let bytes = this.envelopeBytes;
    const count = this.log.partitions;
    for (let step = 0; step < count && slices.length < this.maxPartitionsPerEvent; step++) {
      const partition = (this.cursor + step) % count;
      const slice = this.sliceFor(
        partition,
        this.maxPayloadBytes - bytes - this.partitionOverhead(partition, slices.length === 0),
      );
      if (!slice) continue;
      const batch = this.log.entries(partition).slice(slice.firstOffset, slice.lastOffset + 1);
      records[`${this.log.topic}-${partition}`] = batch.map((entry) => entry.record);
      bytes +=
        this.partitionOverhead(partition, slices.length === 0) +
        this.recordsBytes(batch.map((e) => e.eventBytes));
      slices.push(slice);
    }
    if (slices.length === 0) return undefined;
    this.cursor = (slices[slices.length - 1]!.partition + 1) % count;
    for (const slice of slices) this.states[slice.partition]!.leased = true;
    const recordCount = slices.reduce((sum, s) => sum + s.lastOffset - s.firstOffset + 1, 0);
    return {
      id: this.nextId++,
      event: { ...this.envelope, records },
      slices,
      recordCount,
      payloadBytes: bytes,
    };
  }

  /** The invocation succeeded: commit each partition's consumer offset past its slice. */
  commit(delivery: Delivery): void {
    for (const slice of delivery.slices) {
      const state = this.leasedState(slice, delivery);
      state.committed = slice.lastOffset + 1;
      state.retryEnd = undefined;
      state.attempts = 0;
      state.leased = false;
    }
  }

  /** The invocation failed (or its offset commit was lost): the same batch comes again. */
  release(delivery: Delivery): void {
    for (const slice of delivery.slices) {
      const state = this.leasedState(slice, delivery);
      state.retryEnd = slice.lastOffset + 1;
      state.leased = false;
    }
  }

  /** The consumer offset of a partition: the next offset to deliver. */
  committedOffset(partition: number): number {
    this.log.entries(partition);
    return this.states[partition]!.committed;
  }

  /** Records appended but not yet acknowledged. */
  lag(): number {
    return this.states.reduce((sum, state, p) => sum + this.log.endOffset(p) - state.committed, 0);
  }

  /** Every record acknowledged and nothing in flight. */
  isDrained(): boolean {
    return this.lag() === 0 && this.states.every((state) => !state.leased);
  }

  /**
   * When the next batch becomes ready if nobody appends: undefined when a batch is ready now, when nothing is
   * pending, or when every partition with pending records is in flight. Lets a runner on a virtual clock skip ahead
   * instead of sleeping.
   */
  nextReadyAt(): number | undefined {
    let earliest: number | undefined;
    for (let p = 0; p < this.log.partitions; p++) {
      const state = this.states[p]!;
      if (state.leased || state.committed >= this.log.endOffset(p)) continue;
      if (this.isReady(p)) return undefined;
      const at = this.readyAt(p);
      earliest = earliest === undefined ? at : Math.min(earliest, at);
    }
    return earliest;
  }

  private readyAt(partition: number): number {
    const state = this.states[partition]!;
    const pending = this.log.endOffset(partition) - state.committed;
    if (state.retryEnd !== undefined || this.log.isClosed || pending >= this.batchSize)
      return Number.NEGATIVE_INFINITY;
    return this.log.entry(partition, state.committed).appendedAt + this.maxBatchingWindowMs;
  }

  /** The batch a free partition would deliver now within `budget` bytes of records, or undefined. */
  private sliceFor(partition: number, budget: number): PartitionSlice | undefined {
    const state = this.states[partition]!;
    const end = this.log.endOffset(partition);
    if (state.leased || state.committed >= end) return undefined;
    const entries = this.log.entries(partition);
    if (state.retryEnd !== undefined) {
      // A retry carries exactly the failed batch; it waits for an event with room for all of it.
      const batch = entries.slice(state.committed, state.retryEnd).map((e) => e.eventBytes);
      if (this.recordsBytes(batch) > budget) return undefined;
      return this.slice(partition, state.committed, state.retryEnd - 1, state);
    }
    if (!this.isReady(partition)) return undefined;
    let last = state.committed - 1;
    let used = 0;
    const limit = Math.min(end, state.committed + this.batchSize);
    for (let offset = state.committed; offset < limit; offset++) {
      const add = entries[offset]!.eventBytes + (offset === state.committed ? 0 : 1);
      if (used + add > budget) break;
      used += add;
      last = offset;
    }
    if (last < state.committed) return undefined;
    return this.slice(partition, state.committed, last, state);
  }

  /** Full by count, full by payload, or its window has passed. */
  private isReady(partition: number): boolean {
    if (this.readyAt(partition) <= this.clock.now()) return true;
    const state = this.states[partition]!;
    const sizes = this.log
      .entries(partition)
      .slice(state.committed, state.committed + this.batchSize)
      .map((e) => e.eventBytes);
    return (
      this.envelopeBytes + this.partitionOverhead(partition, true) + this.recordsBytes(sizes) >
      this.maxPayloadBytes
    );
  }

  private slice(
    partition: number,
    firstOffset: number,
    lastOffset: number,
    state: PartitionState,
  ): PartitionSlice {
    state.attempts += 1;
    return { partition, firstOffset, lastOffset, attempt: state.attempts };
  }

  /** `"<topic>-<p>":[` + `]`, and the comma before it unless it is the event's first partition. */
  private partitionOverhead(partition: number, first: boolean): number {
    return Buffer.byteLength(JSON.stringify(`${this.log.topic}-${partition}`)) + 3 + (first ? 0 : 1);
  }

  private recordsBytes(sizes: readonly number[]): number {
    return sizes.reduce((sum, size) => sum + size, 0) + Math.max(0, sizes.length - 1);
  }

  private leasedState(slice: PartitionSlice, delivery: Delivery): PartitionState {
    const state = this.states[slice.partition]!;
    if (!state.leased || state.committed !== slice.firstOffset) {
      throw new RangeError(`delivery ${delivery.id} does not hold partition ${slice.partition}`);
    }
    return state;
  }
}
