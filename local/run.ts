/**
 * One local run in progress: the log, the emulated mappings' pollers, the processor containers under the fault
 * schedule, and the checkpointer. Each poller plays the mapping's poller for its partitions: one batch in flight
 * per partition, a failed batch retried whole, the consumer offset committed only after success. Concurrent
 * attempts never share a processor instance (as Lambda never runs two invocations in one container); a crashed
 * attempt's instance is discarded.
 */
import type { AwsClients } from '../shared/aws/clients.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import type { CoordinatorStep } from '../shared/coordinator/definition.ts';
import { InjectedCrashError, OffsetsWentBackwardsError } from '../shared/errors.ts';
import { decodeRecord } from '../shared/kafka/event.ts';
import { EpochLedger } from '../shared/ledger/epoch-switch.ts';
import { laneOf, topicOfLane } from '../shared/ledger/epochs.ts';
import {
  type BatchReport,
  createProcessor,
  type Processor,
  type ProcessorStep,
} from '../shared/processor/processor.ts';
import type { Transform } from '../shared/transforms/types.ts';
import { Checkpointer } from './checkpoints.ts';
import { BatchRetriesExhaustedError } from './errors.ts';
import { AttemptSlot, attemptContext, FaultLog, FaultPlanner, type InvocationPlan } from './faults.ts';
import type { InputRecord } from './input.ts';
import { PartitionedLog } from './kafka-log.ts';
import { type Delivery, MskEmulator } from './msk-emulator.ts';
import { seededRandom } from './prng.ts';
import { RunClock } from './run-clock.ts';
import type { ClientRole, RunOptions } from './run-options.ts';
import { runTableRoot } from './table-check.ts';

/** A processor instance with its own clients and fault slot: one attempt at a time, as a Lambda container. */
interface Container {
  readonly processor: Processor;
  readonly slot: AttemptSlot;
}

/** Containers, one per concurrent attempt; created on demand, reused while warm. */
class Containers {
  private readonly free: Container[] = [];
  constructor(private readonly create: () => Container) {}
  acquire(): Container {
    return this.free.pop() ?? this.create();
  }
  release(container: Container): void {
    this.free.push(container);
  }
}

type AttemptResult =
  | { readonly ok: true; readonly report: BatchReport }
  | { readonly ok: false; readonly error: unknown };

interface Totals {
  duplicatesByOffset: number;
  duplicatesByKey: number;
  invocations: number;
  failed: number;
  lostCommits: number;
}

/** How often paced input appends what is due (and pollers re-check their batching windows). */
const PACE_TICK_MS = 10;

export class Run {
  readonly clock: RunClock;
  readonly faultLog = new FaultLog();
  private readonly planner: FaultPlanner;
  private log: PartitionedLog;
  emulator: MskEmulator;
  /** The first generation's log, once the topic was recreated (`recreateTopicWith`). */
  private previous: PartitionedLog | undefined;
  epochsOpened = 0;
  readonly checkpointer: Checkpointer;
  readonly clients: AwsClients;
  private readonly containers: Containers;
  readonly totals: Totals = {
    duplicatesByOffset: 0,
    duplicatesByKey: 0,
    invocations: 0,
    failed: 0,
    lostCommits: 0,
  };
  private checkpointing: Promise<void> | undefined;
  private nextCheckpointAt: number;
  private failure: unknown;
  private changed!: () => void;
  private change: Promise<void> = this.newChange();
  private readonly lastErrors = new Map<number, unknown>();
  /** Every client set this run made: destroyed at the end, so that no keep-alive socket outlives the run. */
  private readonly allClients: AwsClients[] = [];

  constructor(
    private readonly options: RunOptions,
    readonly transform: Transform,
  ) {
    this.clock = new RunClock(options.clock ?? 'real');
    const random = seededRandom(options.seed);
    this.planner = new FaultPlanner(options.faults, random.fork('faults'));
    // Clients take endpoints and credentials from the environment (AWS_ENDPOINT_URL_*), as everywhere.
    this.clients = this.newClients('runner');
    this.log = new PartitionedLog(options.topic ?? 'orders', options.partitions, this.clock);
    this.emulator = this.newEmulator();
    if (options.recreateTopicWith && options.paceRecordsPerSecond !== undefined) {
      throw new RangeError('a recreated topic runs from a backlog: no paceRecordsPerSecond');
    }
    if (options.paceRecordsPerSecond === undefined) {
      for (const record of options.input) this.append(record);
      this.log.close();
    } else if (this.clock.mode !== 'real' || !(options.paceRecordsPerSecond > 0)) {
      throw new RangeError('paceRecordsPerSecond needs the real clock and a positive rate');
    }
    const committed = options.observer?.committed;
    const step = options.observer?.step;
    this.checkpointer = new Checkpointer({
      settings: options.settings,
      clients: this.newClients('coordinator'),
      ...(committed ? { onCommitted: (id: number) => committed(id, this.clock.now()) } : {}),
      ...(step
        ? {
            onStep: (name: CoordinatorStep, phase: 'before' | 'after') => step(name, phase, this.clock.now()),
          }
        : {}),
      clock: this.clock,
      planner: this.planner,
      random: random.fork('coordinator'),
      faults: this.faultLog,
      ...(options.partitionsPerShard ? { partitionsPerShard: options.partitionsPerShard } : {}),
      ...(options.iceberg ? { iceberg: { root: runTableRoot(options.settings.pipelineId) } } : {}),
    });
    this.containers = new Containers(() => {
      const slot = new AttemptSlot(this.faultLog);
      const processor = createProcessor({
        settings: options.settings,
        clients: slot.instrument(this.newClients('processor')),
        transform,
        clock: this.clock,
        hooks: slot.hooks,
      });
      return { processor, slot };
    });
    this.nextCheckpointAt = this.clock.now() + options.checkpointIntervalMs;
  }

  private newEmulator(): MskEmulator {
    const { batchSize, batchingWindowMs, maxPartitionsPerEvent } = this.options;
    return new MskEmulator({
      log: this.log,
      clock: this.clock,
      ...(batchSize ? { batchSize } : {}),
      ...(batchingWindowMs === undefined ? {} : { maxBatchingWindowMs: batchingWindowMs }),
      ...(maxPartitionsPerEvent ? { maxPartitionsPerEvent } : {}),
    });
  }

  /** A second event source mapping over the log (the replay's, `replay-scenario.ts`), from its start. */
  replayEmulator(): MskEmulator {
    return this.newEmulator();
  }

  /** Per partition, how many records the log holds. */
  logLengths(): number[] {
    return Array.from({ length: this.log.partitions }, (_, p) => this.log.endOffset(p));
  }

  /** The topic is deleted and created again: a new log from offset 0, a mapping that starts at its beginning. */
  private recreateTopic(input: readonly InputRecord[]): void {
    this.previous = this.log;
    this.log = new PartitionedLog(this.log.topic, this.options.partitions, this.clock);
    this.emulator = this.newEmulator();
    for (const record of input) this.append(record);
    this.log.close();
  }

  /**
   * What an operator does about a partition stopped by a recreated topic (`eos epoch --start-new`): opens a new
   * epoch. Run again for every retry of the stopped batch, as an operator may: a second run finds the new epoch
   * fresh and changes nothing; a stop not yet recorded (a fault hit its write) is switched on a later retry.
   */
  private async openEpoch(stopped: OffsetsWentBackwardsError): Promise<void> {
    const { settings } = this.options;
    const epochs = new EpochLedger(
      this.clients.dynamodb,
      settings.ledgerTable,
      settings.pipelineId,
      this.clock,
    );
    const outcome = await epochs.startNew(topicOfLane(stopped.topic), stopped.partition);
    if (outcome.kind === 'opened') this.epochsOpened++;
  }

  private newClients(role: ClientRole): AwsClients {
    const clients = createAwsClients();
    this.allClients.push(clients);
    this.options.observer?.clients?.(clients, role);
    return clients;
  }

  private append(record: InputRecord): void {
    const offset = this.emulator.produce(record.partition, record);
    this.options.observer?.appended?.(record.partition, offset, this.clock.now());
  }

  /**
   * Paced input: appends what is due every few milliseconds (waking the pollers, whose batching windows are
   * checked on each wake-up), then closes the log.
   */
  private async produce(recordsPerSecond: number): Promise<void> {
    const input = this.options.input;
    const start = Date.now();
    let next = 0;
    while (next < input.length && this.failure === undefined) {
      const due = Math.min(input.length, Math.floor(((Date.now() - start) * recordsPerSecond) / 1000) + 1);
      for (; next < due; next++) this.append(input[next]!);
      this.notify();
      if (next < input.length) await new Promise((resolve) => setTimeout(resolve, PACE_TICK_MS));
    }
    this.log.close();
    this.notify();
  }

  dispose(): void {
    for (const { dynamodb, s3 } of this.allClients) {
      dynamodb.destroy();
      s3.destroy();
    }
  }

  /**
   * Every record of the log, decoded as the processor sees it. After a recreated topic: the first generation's,
   * then the second's, filed under the lane of epoch 1 where the first generation left a fence (there the
   * processor stops and the run opens epoch 1; a partition the first generation never used stays in epoch 0).
   */
  *records() {
    const previous = this.previous;
    if (previous) {
      for (let p = 0; p < previous.partitions; p++)
        for (const entry of previous.entries(p)) yield decodeRecord(entry.record);
    }
    for (let p = 0; p < this.log.partitions; p++) {
      const epoch = previous !== undefined && previous.entries(p).length > 0 ? 1 : 0;
      for (const entry of this.log.entries(p)) {
        const record = decodeRecord(entry.record);
        yield epoch === 0 ? record : { ...record, topic: laneOf(record.topic, epoch) };
      }
    }
  }

  /** Polls, invokes and acknowledges until every record is acknowledged. */
  async drain(): Promise<void> {
    this.options.observer?.started?.(this.clock.now());
    const pace = this.options.paceRecordsPerSecond;
    await Promise.all([
      ...Array.from({ length: this.options.partitions }, () => this.poller()),
      ...(pace === undefined ? [] : [this.produce(pace)]),
    ]);
    if (this.options.recreateTopicWith && this.failure === undefined) {
      this.recreateTopic(this.options.recreateTopicWith);
      await Promise.all(Array.from({ length: this.options.partitions }, () => this.poller()));
    }
    this.options.observer?.drained?.(this.clock.now());
    await this.checkpointing;
    if (this.failure) throw this.failure;
  }

  private newChange(): Promise<void> {
    return new Promise((resolve) => {
      this.changed = resolve;
    });
  }

  private notify(): void {
    const changed = this.changed;
    this.change = this.newChange();
    changed();
  }

  private async poller(): Promise<void> {
    while (this.failure === undefined) {
      const delivery = this.emulator.poll();
      if (delivery) {
        try {
          await this.deliver(delivery);
        } catch (error) {
          this.failure ??= error;
        }
        this.notify();
        continue;
      }
      if (this.emulator.isDrained() && this.log.isClosed) return;
      // Paced input wakes the pollers every few ms: the schedule then starts checkpoints on time, as the deployed
      // schedule does, not only after a delivery (a backlog or the virtual clock wake them only on deliveries).
      this.maybeCheckpoint();
      await this.change; // every pending partition is in flight elsewhere: wait for an acknowledgement
    }
  }

  private async deliver(delivery: Delivery): Promise<void> {
    const attempt = Math.max(...delivery.slices.map((slice) => slice.attempt));
    const max = this.options.maxAttemptsPerBatch ?? 25;
    if (attempt > max) {
      const partitions = delivery.slices.map((slice) => slice.partition);
      throw new BatchRetriesExhaustedError(partitions, attempt - 1, {
        cause: this.lastErrors.get(partitions[0]!),
      });
    }
    const batch = delivery.slices.map((s) => `${s.partition}:${s.firstOffset}-${s.lastOffset}`).join(',');
    const plan = this.planner.planInvocation(batch, attempt);
    const { result, plan: decisive } = plan.zombie
      ? await this.zombie(delivery, plan, batch, attempt)
      : { result: await this.attempt(delivery, plan), plan };
    this.clock.tick(this.options.invocationMs ?? 100);
    this.totals.invocations++;
    if (!result.ok) {
      this.totals.failed++;
      for (const slice of delivery.slices) this.lastErrors.set(slice.partition, result.error);
      if (this.previous !== undefined && result.error instanceof OffsetsWentBackwardsError) {
        await this.openEpoch(result.error);
      }
      this.emulator.release(delivery);
    } else if (decisive.loseCommit) {
      this.faultLog.record('redeliver');
      this.totals.lostCommits++;
      this.emulator.release(delivery);
    } else {
      this.count(result.report);
      this.emulator.commit(delivery);
      this.options.observer?.acknowledged?.(
        delivery.slices.reduce((sum, slice) => sum + slice.lastOffset - slice.firstOffset + 1, 0),
        this.clock.now(),
      );
    }
    this.maybeCheckpoint();
    // After a recreated topic, the first generation (all acknowledged) counts too.
    const before = this.previous?.size ?? 0;
    this.options.onProgress?.({
      acknowledged: before + this.log.size - this.emulator.lag(),
      total: before + this.log.size,
      checkpointsCommitted: this.checkpointer.counts.committed,
    });
  }

  private count(report: BatchReport): void {
    for (const partition of report.partitions) {
      this.totals.duplicatesByOffset += partition.duplicatesByOffset;
      this.totals.duplicatesByKey += partition.duplicatesByKey;
    }
  }

  /** One processor attempt in its own container under `plan`. */
  private async attempt(
    delivery: Delivery,
    plan: InvocationPlan,
    extras: Parameters<typeof attemptContext>[1] = {},
  ): Promise<AttemptResult> {
    const container = this.containers.acquire();
    let crashed = false;
    try {
      const context = attemptContext(plan, extras);
      const report = await container.slot.run(context, () =>
        container.processor.processEvent(delivery.event),
      );
      return { ok: true, report };
    } catch (error) {
      crashed = error instanceof InjectedCrashError;
      return { ok: false, error };
    } finally {
      // A crashed container is gone (its warm state with it); a failed one stays warm, as in Lambda.
      if (!crashed) this.containers.release(container);
    }
  }

  /**
   * A zombie: the first attempt stalls at a step until the mapping gives up on it (a timeout) and retries the same
   * batch; the stalled attempt resumes when the retry reaches its planned step, and both then run concurrently.
   * The retry's outcome is the delivery's; the zombie's result is discarded, its effects are not.
   */
  private async zombie(delivery: Delivery, plan: InvocationPlan, batch: string, attempt: number) {
    let resume!: () => void;
    const gate = new Promise<void>((resolve) => {
      resume = resolve;
    });
    let stalled!: () => void;
    const isStalled = new Promise<'stalled'>((resolve) => {
      stalled = () => resolve('stalled');
    });
    const first = this.attempt(delivery, plan, {
      stall: () => {
        stalled();
        return gate;
      },
    });
    if ((await Promise.race([first.then(() => 'done' as const), isStalled])) === 'done') {
      return { result: await first, plan };
    }
    const retryPlan = this.planner.planInvocation(batch, attempt + 1, false);
    const resumeAt = plan.zombie!.resumeAt;
    const retry = this.attempt(delivery, retryPlan, {
      onStep: (step: ProcessorStep) => {
        if (step === resumeAt) resume();
      },
    });
    const result = await retry;
    resume();
    await first;
    return { result, plan: retryPlan };
  }

  /** As deployed: the weaker guarantees write final objects directly, and no schedule starts a checkpoint. */
  get checkpoints(): boolean {
    return this.options.settings.deliveryGuarantee === 'exactly-once';
  }

  private maybeCheckpoint(): void {
    if (!this.checkpoints || this.checkpointing || this.clock.now() < this.nextCheckpointAt) return;
    this.nextCheckpointAt = this.clock.now() + this.options.checkpointIntervalMs;
    this.checkpointing = this.checkpointer
      .run()
      .then(() => undefined)
      .catch((error: unknown) => {
        this.failure ??= error;
      })
      .finally(() => {
        this.checkpointing = undefined;
      });
  }
}
