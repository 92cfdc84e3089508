/**
 * The local runner behind `eos local` and the chaos tests: the MSK event-source emulator, the processor and the
 * checkpoint coordinator, run together on the local parts under a seeded fault schedule.
 *
 * ```
 *  input ─▶ log (P partitions) ─▶ pollers (one per partition) ─▶ processor attempts ─▶ commit / release offsets
 *                                        │ faults: crash, zombie, transient SDK errors, lost commit
 *                                        └─ every checkpoint interval ─▶ coordinator (state machine) ─▶ S3 final/
 *  drained ─▶ final checkpoint(s) ─▶ read back (final objects, aggregates) ─▶ compare with the input ─▶ verify
 * ```
 * Each poller plays the mapping's poller for its partitions: one batch in flight per partition, a failed batch
 * retried whole, the consumer offset committed only after success. Concurrent attempts never share a processor
 * instance (as Lambda never runs two invocations in one container); a crashed attempt's instance is discarded.
 */
import type { AwsClients } from '../shared/aws/clients.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import {
  formatIdempotencyKeySource,
  type MissingIdempotencyKey,
  type Settings,
} from '../shared/config/settings.ts';
import type { CoordinatorStep } from '../shared/coordinator/definition.ts';
import { InjectedCrashError, OffsetsWentBackwardsError } from '../shared/errors.ts';
import { decodeRecord } from '../shared/kafka/event.ts';
import type { Lineage } from '../shared/kafka/record.ts';
import { EpochLedger } from '../shared/ledger/epoch-switch.ts';
import { epochLaneOf, laneOf, parseLane, topicOfLane } from '../shared/ledger/epochs.ts';
import { checkKeySource } from '../shared/processor/evaluate.ts';
import {
  type BatchReport,
  createProcessor,
  effectLimits,
  type Processor,
  type ProcessorStep,
} from '../shared/processor/processor.ts';
import { type PartitionRedrive, type RedriveResult, redrive } from '../shared/redrive/redrive.ts';
import { parseFinalKey } from '../shared/sink/layout.ts';
import { readCommitted } from '../shared/sink/reader.ts';
import { type FinalRow, readFinalRows, type VerifyResult, verifySink } from '../shared/sink/verify.ts';
import { loadTransform } from '../shared/transforms/load.ts';
import type { Transform } from '../shared/transforms/types.ts';
import { type CheckpointCounts, Checkpointer } from './checkpoints.ts';
import { BatchRetriesExhaustedError } from './errors.ts';
import {
  type Aggregate,
  compareOutcome,
  type Expectation,
  expectOutcome,
  lineageId,
  type Outcome,
  type ResolvedExpectation,
  resolveExpectation,
} from './expectation.ts';
import {
  AttemptSlot,
  attemptContext,
  type FaultKind,
  FaultLog,
  FaultPlanner,
  type FaultRates,
  formatFaultRates,
  type InvocationPlan,
} from './faults.ts';
import type { InputRecord } from './input.ts';
import { PartitionedLog } from './kafka-log.ts';
import { type Delivery, MskEmulator } from './msk-emulator.ts';
import { seededRandom } from './prng.ts';
import { type ReplayReport, replayAfter, replayedTransform } from './replay-scenario.ts';
import { readAggregates } from './results.ts';
import { type ClockMode, RunClock } from './run-clock.ts';

export interface RunOptions {
  readonly settings: Settings;
  /**
   * The transform every processor attempt and the oracle use; default: `loadTransform(settings.transform)` (a
   * built-in's name or a module path, relative to the working directory).
   */
  readonly transform?: Transform;
  readonly input: readonly InputRecord[];
  readonly partitions: number;
  readonly faults: FaultRates;
  readonly seed: number;
  /** Time between checkpoints (ms of the run's clock). */
  readonly checkpointIntervalMs: number;
  /** `real` for `eos local`, `virtual` for tests (no wall-clock dependence); default `real`. */
  readonly clock?: ClockMode;
  /** Virtual mode: how much time one processor attempt takes; default 100 ms. */
  readonly invocationMs?: number;
  readonly topic?: string;
  readonly batchSize?: number;
  readonly maxPartitionsPerEvent?: number;
  /** Attempts of one batch before the run gives up on an error that was not injected; default 25. */
  readonly maxAttemptsPerBatch?: number;
  readonly onProgress?: (progress: Progress) => void;
  /**
   * Appends the input over time, this many records per second in input order (real clock only), instead of all
   * of it before the first poll; the log closes after the last record. Default: all at once (a backlog).
   */
  readonly paceRecordsPerSecond?: number;
  /** Optional probes for measurements (the benchmark): none is called, and nothing is recorded, when absent. */
  readonly observer?: RunObserver;
  /**
   * Recreates the topic once every record of `input` is acknowledged: the log starts again at offset 0
   * with these records, a new generation. The processor stops each partition whose offsets went backwards; the
   * run opens a new epoch for it, as an operator does with `eos epoch --start-new`, and goes on. The verdict is
   * per epoch: each generation's records exactly once in their own lane (`shared/ledger/epochs.ts`).
   */
  readonly recreateTopicWith?: readonly InputRecord[];
  /**
   * Redrives the dead letters after the run: `transform` is then the one with a bug, this the fixed one.
   * Once the input is committed, `eos redrive` runs with the fixed transform (crashing once at a seeded step when
   * crashes are injected, then run again), a checkpoint commits the round, and a second redrive must change
   * nothing. The verdict is judged against the fixed transform, each record by its latest outcome.
   */
  readonly redriveWith?: Transform;
  /**
   * Replays a range after the run (`replay-scenario.ts`): `transform` is then the one with a bug, this the
   * changed one. Once the input is committed, the middle half of every partition is replayed with this transform
   * into generation 1 through a second mapping, and the switch is requested at once; readers are checked after
   * every checkpoint. The verdict is judged on what readers show: this transform's outcome in the range, the
   * run's outside it; keyed state stays the run's (a replay does not touch it).
   */
  readonly replayWith?: Transform;
}

/** What the redrive scenario did. */
export interface RedriveReport {
  /** Records the redrive sent back through the pipeline. */
  readonly sent: number;
  /** Of those, staged as output rows and as dead letters again. */
  readonly output: number;
  readonly deadLettered: number;
  /** Dead letters left as they are: the fixed transform rejects them for the same reason. */
  readonly unchanged: number;
  /** Whether the first redrive crashed (and was run again). */
  readonly crashed: boolean;
  /**
   * Rows the second redrive staged (0: it changed nothing). It may send records again that the first dropped as
   * duplicates by key (their key is held by the same payload): they are dropped again, and nothing is written.
   */
  readonly secondRunStaged: number;
}

/** Where a run's client set works: a processor container, the coordinator, or the runner's own read-back. */
export type ClientRole = 'processor' | 'coordinator' | 'runner';

/** Probes into a run; every time is the run's clock (epoch ms; wall time in `real` mode without faults). */
export interface RunObserver {
  /** Every client set the run makes, before any call (e.g. to attach a call or byte counter). */
  clients?(clients: AwsClients, role: ClientRole): void;
  /** A record was appended to the log. */
  appended?(partition: number, offset: number, at: number): void;
  /** The pollers start: the first delivery follows. */
  started?(at: number): void;
  /** Every record acknowledged, nothing in flight (before the final checkpoints). */
  drained?(at: number): void;
  /** A delivery was acknowledged (its offsets committed): this many records, at this time. */
  acknowledged?(records: number, at: number): void;
  /** A coordinator step (a state machine Task: one Lambda invocation) starts or returns. */
  step?(step: CoordinatorStep, phase: 'before' | 'after', at: number): void;
  /** A checkpoint's commit step returned: its manifest is written and it is COMMITTED. */
  committed?(checkpointId: number, at: number): void;
}

export interface Progress {
  readonly acknowledged: number;
  readonly total: number;
  readonly checkpointsCommitted: number;
}

export interface RunReport {
  readonly pipeline: string;
  readonly guarantee: Settings['deliveryGuarantee'];
  readonly seed: number;
  readonly partitions: number;
  readonly faultSpec: string;
  readonly records: {
    readonly in: number;
    /** Output rows under the final prefix (for exactly-once: the committed output). */
    readonly committed: number;
    readonly deadLettered: number;
    /** Distinct identities the input holds (what exactly-once must commit). */
    readonly expected: number;
    readonly duplicatesDroppedByOffset: number;
    readonly duplicatesDroppedByKey: number;
    /** Records expected as key-conflict dead letters: their key was held by a record with other contents. */
    readonly keyConflicts: number;
    /**
     * Records for which the configured idempotency-key source found no key, and what the processor does with
     * them (`missingIdempotencyKey`): dead-letter them, or dedupe them by offset only.
     */
    readonly missingKeys: {
      readonly count: number;
      readonly source: string;
      readonly handling: MissingIdempotencyKey;
    };
  };
  readonly faults: Record<FaultKind, number>;
  readonly invocations: { readonly total: number; readonly failed: number; readonly lostCommits: number };
  readonly checkpoints: CheckpointCounts;
  /** Wall time from the first delivery to the final checkpoint's end. */
  readonly durationMs: number;
  /** Where the wall time went: draining the log, the final checkpoint(s), reading back and verifying. */
  readonly phasesMs: { readonly drain: number; readonly finalCheckpoint: number; readonly judge: number };
  readonly recordsPerSecond: number;
  readonly outcome: Outcome;
  readonly verify: VerifyResult;
  readonly verdict: 'exactly-once' | 'not exactly-once';
  /** Why the verdict is not exactly-once (empty when it is). */
  readonly violations: readonly string[];
  /** With a recreated topic: the epochs the run opened (one per partition the new generation stopped). */
  readonly epochsOpened?: number;
  /** With a redrive (`redriveWith`). */
  readonly redrive?: RedriveReport;
  /** With a replay (`replayWith`). */
  readonly replay?: ReplayReport;
}

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

class Run {
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
    const { batchSize, maxPartitionsPerEvent } = this.options;
    return new MskEmulator({
      log: this.log,
      clock: this.clock,
      ...(batchSize ? { batchSize } : {}),
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

  private maybeCheckpoint(): void {
    if (this.checkpointing || this.clock.now() < this.nextCheckpointAt) return;
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

function violationsOf(outcome: Outcome, verify: VerifyResult): string[] {
  const violations: string[] = [];
  if (outcome.lost > 0) violations.push(`${outcome.lost} lost`);
  if (outcome.duplicated > 0) violations.push(`${outcome.duplicated} duplicated`);
  if (outcome.unexpected > 0) violations.push(`${outcome.unexpected} unexpected rows`);
  if (!outcome.aggregatesMatch) violations.push('aggregates differ from the deduplicated input');
  if (!verify.ok) violations.push(`eos verify failed (${verify.problems.length} problems)`);
  return violations;
}

/** Both streams as the committed reader shows them (`shared/sink/generations.ts`), as final rows. */
async function readerRows(s3: AwsClients['s3'], settings: Settings): Promise<FinalRow[]> {
  const rows: FinalRow[] = [];
  for (const stream of ['output', 'deadletter'] as const) {
    for await (const { file, row } of readCommitted({
      s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream,
    })) {
      rows.push({ key: file.key, stream, row });
    }
  }
  return rows;
}

function redriveViolations(report: RedriveReport | undefined): string[] {
  if (report === undefined || report.secondRunStaged === 0) return [];
  return [`a second redrive staged ${report.secondRunStaged} rows again`];
}

/**
 * Reads what the run left behind and judges it against the input. `stateOf`, when given, is the expectation whose
 * keyed state the ledger must hold (a replay's: the run's, not the view's).
 */
async function judge(run: Run, options: RunOptions, expectation: Expectation, stateOf = expectation) {
  const { settings } = options;
  const pipeline = settings.pipelineId;
  const s3 = run.clients.s3;
  // A replay scenario is judged on what readers show (one generation per record); others on every final object.
  const rows: FinalRow[] = options.replayWith
    ? await readerRows(s3, settings)
    : await readFinalRows({ s3, bucket: settings.bucket, pipeline });
  const laned = rows.flatMap(({ key, stream, row }) => {
    const source = row.source as { topic: string; partition: number; offset: number } | undefined;
    // Judged per epoch: a row counts under the lane its object names (its own topic in epoch 0); a redriven row
    // under the lane of the dead letter it redrove, ranked by its round.
    const name = parseFinalKey(pipeline, key)?.topic ?? source?.topic ?? '';
    const lane = parseLane(name);
    if (!source || !lane) return [];
    return [{ stream, source: { ...source, topic: epochLaneOf(name) }, round: lane.round ?? 0 }];
  });
  // Which record of a key group won is the rows' to say (within what the rules allow): resolved from them.
  const shown = resolveExpectation(expectation, laned);
  const resolved: ResolvedExpectation =
    stateOf === expectation ? shown : { ...shown, aggregates: resolveExpectation(stateOf, laned).aggregates };
  const committedRows = options.redriveWith ? latestOutcomes(laned, resolved) : laned;
  const aggregates: Map<string, Aggregate> = await readAggregates(
    run.clients,
    settings.ledgerTable,
    settings.pipelineId,
    new Set([...stateOf.stateKeys, ...resolved.aggregates.keys()]),
  );
  const outcome = compareOutcome(resolved, committedRows, aggregates);
  const verify = await verifySink({ s3, bucket: settings.bucket, pipeline });
  return { rows, aggregates, outcome, verify, resolved };
}

/**
 * The redrive scenario judges each record by its latest outcome (the dead letters themselves are never rewritten:
 * the committed log keeps them). A dead letter is superseded by a dead letter of a later redrive round, and by an
 * output row of the same identity: the record itself redriven, or the record whose key it duplicates (a redriven
 * duplicate is dropped by its key, as the fixed transform would have dropped it from the start).
 */
function latestOutcomes<T extends { stream: string; source: Lineage; round: number }>(
  rows: readonly T[],
  expectation: ResolvedExpectation,
): T[] {
  const lineage = (row: T) => lineageId(row.source);
  const identity = (row: T) => expectation.identityOf.get(lineage(row)) ?? `lineage:${lineage(row)}`;
  const output = new Set(rows.filter((row) => row.stream === 'output').map(identity));
  const lastRound = new Map<string, number>();
  for (const row of rows) {
    if (row.stream === 'deadletter')
      lastRound.set(lineage(row), Math.max(lastRound.get(lineage(row)) ?? -1, row.round));
  }
  return rows.filter(
    (row) =>
      row.stream === 'output' || (!output.has(identity(row)) && row.round === lastRound.get(lineage(row))),
  );
}

export interface RunResult {
  readonly report: RunReport;
  readonly aggregates: ReadonlyMap<string, Aggregate>;
}

export async function runLocal(options: RunOptions): Promise<RunResult> {
  const transform = options.transform ?? (await loadTransform(options.settings.transform)).transform;
  // Before any part starts: a key source the transform cannot feed is a bad setting, not a batch failure.
  checkKeySource(transform, options.settings.idempotencyKey);
  const started = Date.now();
  const run = new Run(options, transform);
  try {
    return await runAndJudge(run, options, started);
  } finally {
    run.dispose();
  }
}

/**
 * The redrive scenario's operator: `eos redrive` with the fixed transform (crashed once at a seeded step when the
 * schedule injects crashes, then run again), a checkpoint, then a second redrive that must send nothing.
 */
async function redriveAfter(run: Run, options: RunOptions, fixed: Transform): Promise<RedriveReport> {
  const base = { settings: options.settings, clients: run.clients, transform: fixed, clock: run.clock };
  const crashAt =
    options.faults.crash > 0
      ? (['after-read', 'after-batch', 'before-close'] as const)[options.seed % 3]
      : undefined;
  let crashed = false;
  let first: RedriveResult | undefined;
  if (crashAt !== undefined) {
    try {
      first = await redrive({
        ...base,
        batchSize: 5,
        hooks: {
          onStep: (step) => {
            if (step === crashAt) throw new InjectedCrashError(`redrive ${step}`);
          },
        },
      });
    } catch (error) {
      if (!(error instanceof InjectedCrashError)) throw error;
      crashed = true;
    }
  }
  // After a crash the operator runs it again: the round goes on where the crash left it.
  const done = first ?? (await redrive(base));
  await run.checkpointer.final();
  const second = await redrive(base);
  await run.checkpointer.final();
  const sum = (result: RedriveResult, pick: (p: PartitionRedrive) => number) =>
    result.partitions.reduce((total, p) => total + pick(p), 0);
  return {
    sent: sum(done, (p) => p.sent),
    output: sum(done, (p) => p.staged.output),
    deadLettered: sum(done, (p) => p.staged.deadLettered),
    unchanged: sum(done, (p) => p.unchanged),
    crashed,
    secondRunStaged: sum(second, (p) => p.staged.output + p.staged.deadLettered),
  };
}

/** The expectation for every record of the run's log under `oracle`, prepared as the processor prepares a batch. */
async function expectationUnder(run: Run, options: RunOptions, oracle: Transform): Promise<Expectation> {
  const records = [...run.records()];
  await oracle.prepare?.(records);
  const { settings } = options;
  // The processor's own bounds and rules (missingIdempotencyKey among them), as it evaluates each record.
  return expectOutcome(records, oracle, {
    keySource: settings.idempotencyKey,
    limits: effectLimits(settings),
    scope: settings.idempotencyScope,
  });
}

async function runAndJudge(run: Run, options: RunOptions, started: number): Promise<RunResult> {
  // The oracle evaluates with the processor's own transform. Paced input is in the log only once it has drained.
  const expect = async (): Promise<Expectation> => {
    // With a redrive the verdict is the fixed transform's: every record by its latest outcome.
    const expectation = await expectationUnder(run, options, options.redriveWith ?? run.transform);
    if (options.faults.poison > 0) run.faultLog.record('poison', expectation.poison);
    return expectation;
  };
  // Paced input, and a recreated topic's second generation, are in the log only once it has drained.
  const late = options.paceRecordsPerSecond !== undefined || options.recreateTopicWith !== undefined;
  let expectation = late ? undefined : await expect();
  let stateOf: Expectation | undefined;
  await run.drain();
  const drained = Date.now();
  await run.checkpointer.final();
  const redriven = options.redriveWith ? await redriveAfter(run, options, options.redriveWith) : undefined;
  const replayed = options.replayWith
    ? await replayAfter({
        settings: options.settings,
        clients: run.clients,
        clock: run.clock,
        checkpointer: run.checkpointer,
        emulator: run.replayEmulator(),
        topic: options.topic ?? 'orders',
        lengths: run.logLengths(),
        transform: options.replayWith,
        seed: options.seed,
        faults: options.faults.crash > 0,
      })
    : undefined;
  const durationMs = Date.now() - started;
  expectation ??= await expect();
  if (replayed && options.replayWith) {
    // Readers show the changed transform's outcome in the range and the run's elsewhere; keyed state is the run's.
    const view = replayedTransform(run.transform, options.replayWith, replayed.from, replayed.to);
    stateOf = expectation;
    expectation = await expectationUnder(run, options, view);
  }
  const { rows, aggregates, outcome, verify, resolved } = await judge(run, options, expectation, stateOf);
  const phasesMs = {
    drain: drained - started,
    finalCheckpoint: started + durationMs - drained,
    judge: Date.now() - started - durationMs,
  };
  const violations = [
    ...violationsOf(outcome, verify),
    ...redriveViolations(redriven),
    ...(replayed?.violations ?? []),
  ];
  const report: RunReport = {
    pipeline: options.settings.pipelineId,
    guarantee: options.settings.deliveryGuarantee,
    seed: options.seed,
    partitions: options.partitions,
    faultSpec: formatFaultRates(options.faults),
    records: {
      in: options.input.length + (options.recreateTopicWith?.length ?? 0),
      committed: rows.filter((row) => row.stream === 'output').length,
      deadLettered: rows.filter((row) => row.stream === 'deadletter').length,
      expected: resolved.identities.size,
      duplicatesDroppedByOffset: run.totals.duplicatesByOffset,
      duplicatesDroppedByKey: run.totals.duplicatesByKey,
      keyConflicts: resolved.conflicts,
      missingKeys: {
        count: expectation.missingKeys,
        source: formatIdempotencyKeySource(options.settings.idempotencyKey),
        handling: expectation.missingKeyChoice,
      },
    },
    faults: run.faultLog.snapshot(),
    invocations: {
      total: run.totals.invocations,
      failed: run.totals.failed,
      lostCommits: run.totals.lostCommits,
    },
    checkpoints: { ...run.checkpointer.counts },
    durationMs,
    phasesMs,
    recordsPerSecond: Math.round((options.input.length * 1000) / Math.max(1, durationMs)),
    outcome,
    verify,
    verdict: violations.length === 0 ? 'exactly-once' : 'not exactly-once',
    violations,
    ...(options.recreateTopicWith ? { epochsOpened: run.epochsOpened } : {}),
    ...(redriven ? { redrive: redriven } : {}),
    ...(replayed ? { replay: replayed } : {}),
  };
  return { report, aggregates };
}
