/**
 * The processor: stages an MSK batch exactly once (invariants P1–P6, L1, L2 of docs/architecture.md). This module
 * is the facade its hosts call (the Lambda handler, the local runner, the redrive, the benchmark); the work lives
 * beside it, one concept per file:
 *
 * - `event-source.ts`: the event parsed and its source checked, before any effect.
 * - `lane-fences.ts`, `fence-judge.ts`, `batch-judge.ts`: the fence a batch starts from, and whether the batch is
 *   new, a redelivery, or offsets that went backwards (a loud stop, L2).
 * - `partition-stager.ts`: a partition batch staged chunk by chunk (objects, claims, the staging transaction), with
 *   what it is given (`stager-parts.ts`), where a chunk's entries go (`entry-placement.ts`), the fence a chunk leaves
 *   (`chunk-fence.ts`), one batch's copy of the key window (`batch-window.ts`) and what a committed chunk reports
 *   (`committed-chunk.ts`).
 * - `claims.ts`, `key-decision.ts`, `key-windows.ts`: idempotency keys (P4), claimed ahead or in the transaction,
 *   or kept in a partition's key window.
 * - `replay-mode.ts`: a replay generation's slice of a batch; `direct-write.ts`: at-least-once and none.
 *
 * Partitions run concurrently, each in offset order. Before any partition's work, the transform's `prepare` runs
 * once with the event's records. Poison records become dead-letter rows staged through the same path (P6).
 * Transient AWS errors escape, so the event source mapping retries the whole batch; the fence makes the retry
 * harmless (P5). In steady state with offset-only dedupe a batch costs two AWS calls: the PutObject and one
 * transaction (the fence is read once per warm container).
 *
 * Delivery guarantees (as Flink's DeliveryGuarantee): `exactly-once` as above; `at-least-once` applies keyed state
 * without fence or dedupe, then writes rows straight to final objects; `none` does the same and swallows every
 * error so the batch is acknowledged anyway. A record DynamoDB refuses for its state is dead-lettered under every
 * guarantee (`state-refusal.ts`).
 *
 * The ledger is reached through its port (`ledger-port.ts`): `StagingLedger` by default.
 */
import { randomUUID } from 'node:crypto';
import { isTransient } from '../aws/classify.ts';
import type { AwsClients } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import { InjectedCrashError, PipelineError } from '../errors.ts';
import { partitionBatches } from '../kafka/event.ts';
import type { PartitionBatch } from '../kafka/record.ts';
import { parseLane } from '../ledger/epochs.ts';
import type { ClaimItem } from '../ledger/records.ts';
import { EpochChangedError, type FenceState, NO_FENCE, StagingLedger } from '../ledger/staging-ledger.ts';
import { ReplayStore } from '../replay/store.ts';
import { StagedWriter } from '../sink/staged-writer.ts';
import { builtinTransform } from '../transforms/registry.ts';
import type { Transform } from '../transforms/types.ts';
import { Fingerprints } from './batch-judge.ts';
import { Claims } from './claims.ts';
import type { ProcessorContext } from './context.ts';
import { writeDirect } from './direct-write.ts';
import { checkKeySource } from './evaluate.ts';
import { evaluateBatch } from './evaluate-batch.ts';
import { acceptEvent } from './event-source.ts';
import { FenceJudge, type Laning } from './fence-judge.ts';
import { ALWAYS_INLINE, CoordinatorReadersGate } from './inline-gate.ts';
import { KeyWindows } from './key-windows.ts';
import { LaneFences } from './lane-fences.ts';
import type { ProcessorLedger } from './ledger-port.ts';
import type { ProcessorHooks, ProcessorObserver } from './observer.ts';
import { PartitionStager, type StagerParts } from './partition-stager.ts';
import { ReplayMode } from './replay-mode.ts';
import { type BatchReport, type PartitionReport, unstagedReport } from './report.ts';

export { type JudgingMode, judgeBatch, type Verdict } from './batch-judge.ts';
export { effectLimits } from './evaluate-batch.ts';
export type { ProcessorLedger } from './ledger-port.ts';
export {
  type FenceJump,
  type KeyConflict,
  type PartitionStoppedError,
  PROCESSOR_STEPS,
  type ProcessorHooks,
  type ProcessorObserver,
  type ProcessorStep,
  type StepContext,
} from './observer.ts';
export type { BatchReport, PartitionReport } from './report.ts';
export { NO_FENCE };

export interface ProcessorDeps {
  readonly settings: Settings;
  readonly clients: AwsClients;
  /**
   * Defaults to the built-in transform named by `settings.transform`; a user's module is loaded by its host and
   * passed here (`loadTransform` locally, the bundle's static import in Lambda).
   */
  readonly transform?: Transform;
  readonly clock?: Clock;
  /** Unique per invocation; defaults to a random UUID. */
  readonly newAttemptId?: () => string;
  readonly hooks?: ProcessorHooks;
  readonly observer?: ProcessorObserver;
  /**
   * When chunks may keep their staged entries inline in the fence item (`inline-gate.ts`): `always` where no
   * coordinator of an earlier release runs (the default: `eos local`, tests), `after-coordinator-upgrade` in the
   * deployed processor.
   */
  readonly inlineEntries?: 'always' | 'after-coordinator-upgrade';
}

export class Processor {
  private readonly ctx: ProcessorContext;
  private readonly parts: StagerParts;
  private readonly newAttemptId: () => string;

  constructor(deps: ProcessorDeps, ledger?: ProcessorLedger) {
    const { settings, clients } = deps;
    const port = ledger ?? new StagingLedger(clients.dynamodb, settings.ledgerTable);
    const transform = deps.transform ?? builtinTransform(settings.transform);
    checkKeySource(transform, settings.idempotencyKey);
    this.ctx = {
      settings,
      ledger: port,
      writer: new StagedWriter(clients.s3, settings.bucket),
      transform,
      clock: deps.clock ?? systemClock,
      observer: deps.observer,
      step: async (step, context) => {
        await deps.hooks?.onStep?.(step, context);
      },
    };
    this.newAttemptId = deps.newAttemptId ?? (() => randomUUID());
    const fences = new LaneFences(port, settings.pipelineId);
    const readPlan = (generation: number) =>
      new ReplayStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId).read(generation);
    this.parts = {
      ctx: this.ctx,
      fences,
      judge: new FenceJudge(this.ctx, fences, (lane, partition) => this.refreshFence(lane, partition)),
      windows: new KeyWindows(port, settings),
      claims: new Claims(this.ctx),
      replay: new ReplayMode(this.ctx, fences, readPlan),
      inlineGate:
        deps.inlineEntries === 'after-coordinator-upgrade'
          ? new CoordinatorReadersGate(port, settings.pipelineId)
          : ALWAYS_INLINE,
    };
  }

  /** Validates the event, then stages every partition; throws to make the mapping retry the batch. */
  async processEvent(input: unknown): Promise<BatchReport> {
    const { settings, transform, observer } = this.ctx;
    const batches = partitionBatches(acceptEvent(input, settings, observer));
    const attemptId = this.newAttemptId();
    const startedAt = this.ctx.clock.now();
    const { deliveryGuarantee, replayGeneration } = settings;
    const work =
      replayGeneration !== undefined
        ? (batch: PartitionBatch) => this.replayPartition(batch, replayGeneration, attemptId, startedAt)
        : deliveryGuarantee === 'exactly-once'
          ? (batch: PartitionBatch) => this.stagePartition(batch, attemptId, startedAt)
          : (batch: PartitionBatch) => this.writeDirect(batch, attemptId);
    try {
      // Once per batch, before any evaluation: registry schemas the records name. Only a transient failure throws
      // here (the batch is retried); a schema the registry lacks dead-letters the records that need it.
      await transform.prepare?.(batches.flatMap((batch) => batch.records));
      // allSettled, not all: no partition's work is left running when the invocation fails.
      const settled = await Promise.allSettled(batches.map(work));
      const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failure) throw failure.reason;
      await this.ctx.step('before-return', { topic: '', partition: -1, chunk: 0 });
      return { partitions: settled.map((s) => (s as PromiseFulfilledResult<PartitionReport>).value) };
    } catch (error) {
      if (deliveryGuarantee !== 'none') throw error;
      // NONE: acknowledge whatever happened; the batch's unwritten effects are lost.
      return { partitions: [] };
    }
  }

  /**
   * Stages records under an explicit redrive lane (`shared/redrive/`: dead letters sent back through the pipeline
   * with the current transform, keyed by their original offsets), by the same protocol as a delivered batch: the
   * lane's fence drops what an earlier (crashed) run of the same round staged, and a retry is harmless.
   * `batch.topic` names the lane; each record keeps its own topic, partition and offset. Exactly-once only.
   */
  async stageInLane(batch: PartitionBatch): Promise<PartitionReport> {
    const lane = parseLane(batch.topic);
    if (lane?.round === undefined) {
      throw new PipelineError(`${batch.topic} is not a redrive lane (<topic>[~<epoch>]~r<round>)`);
    }
    if (this.ctx.settings.deliveryGuarantee !== 'exactly-once') {
      throw new PipelineError('a redrive needs the exactly-once guarantee');
    }
    for (const record of batch.records) {
      if (record.topic !== lane.topic || record.partition !== batch.partition) {
        throw new PipelineError(
          `record ${record.topic}-${record.partition}@${record.offset} is not of ${batch.topic}`,
        );
      }
    }
    if (batch.records.length === 0) throw new PipelineError('a redrive batch holds no record');
    const attemptId = this.newAttemptId();
    const startedAt = this.ctx.clock.now();
    await this.ctx.transform.prepare?.(batch.records);
    const report = await this.stagePartition(batch, attemptId, startedAt, 'explicit');
    await this.ctx.step('before-return', { topic: batch.topic, partition: batch.partition, chunk: 0 });
    return report;
  }

  /**
   * EXACTLY_ONCE: the batch judged against its lane's fence (`fence-judge.ts`), then staged from it
   * (`partition-stager.ts`). A batch that fails releases the claims it wrote ahead when the failure is for good
   * (`claims.ts`), and reports a stop unless it was transient, a crash, or a new epoch (an operator's act: the
   * retry stages the batch there).
   */
  private async stagePartition(
    batch: PartitionBatch,
    attemptId: string,
    startedAt: number,
    laning: Laning = 'resolve',
  ): Promise<PartitionReport> {
    let prints = new Fingerprints(batch);
    /** Claims this attempt wrote ahead (or confirmed as its records' own), by record offset. */
    const held = new Map<number, ClaimItem>();
    try {
      const start = await this.parts.judge.starting(prints, laning, startedAt, attemptId);
      // From here on the batch is filed under its lane: every ledger item and staged key names it.
      prints = prints.inLane(start.lane);
      const attempt = { prints, start: start.fence, held, attemptId, startedAt };
      return await new PartitionStager(this.parts, attempt).run();
    } catch (error) {
      await this.parts.claims.releaseAfter(
        error,
        prints.batch.topic,
        prints.batch.partition,
        held,
        attemptId,
      );
      const stop = !(error instanceof EpochChangedError);
      if (stop && !isTransient(error) && !(error instanceof InjectedCrashError)) {
        this.ctx.observer?.partitionStopped?.(
          error instanceof Error ? error : new PipelineError(`batch failed with ${String(error)}`),
        );
      }
      throw error;
    }
  }

  /**
   * Reads a lane's fence anew, never from this container's copy: claims ahead and a failed fence condition are
   * judged against it. A closed lane means an operator opened a newer epoch while this batch held the old one:
   * `EpochChangedError` (the mapping's retry reads the new lane).
   */
  private refreshFence(lane: string, partition: number): Promise<FenceState> {
    return this.parts.fences.refresh(lane, partition);
  }

  /** Replay mode: the generation's slice of the batch staged in its lane, the rest acknowledged unstaged. */
  private async replayPartition(
    batch: PartitionBatch,
    generation: number,
    attemptId: string,
    startedAt: number,
  ): Promise<PartitionReport> {
    const slice = await this.parts.replay.slice(batch, generation);
    if (slice === undefined) return unstagedReport(batch);
    return this.stagePartition(slice, attemptId, startedAt, 'explicit');
  }

  /** AT_LEAST_ONCE and NONE (`direct-write.ts`). */
  private writeDirect(batch: PartitionBatch, attemptId: string): Promise<PartitionReport> {
    const replayEnd = this.parts.replay.endOf(batch.topic, batch.partition);
    const evaluated = evaluateBatch(this.ctx.transform, this.ctx.settings, batch, replayEnd);
    return writeDirect(this.ctx, batch, evaluated, attemptId);
  }
}

export function createProcessor(deps: ProcessorDeps): Processor {
  return new Processor(deps);
}
