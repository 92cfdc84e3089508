/**
 * A batch judged against its lane's fence (`batch-judge.ts` holds the rules): at the start of a batch, and each
 * time the fence is read again during it. Turns a verdict into what happens: a stop recorded on the fence and
 * thrown (`OffsetsWentBackwardsError`, L2), or a retryable `UnprovenRedeliveryError` (no stop record).
 */

import { MalformedLedgerItemError, OffsetsWentBackwardsError, UnprovenRedeliveryError } from '../errors.ts';
import { sightedStop } from '../ledger/epochs.ts';
import type { FenceState, LaneFence } from '../ledger/staging-ledger.ts';
import {
  type Fingerprints,
  type JudgingMode,
  judgeAgainst,
  judgingMode,
  type Verdict,
} from './batch-judge.ts';
import type { ProcessorContext } from './context.ts';
import type { LaneFences } from './lane-fences.ts';

/**
 * How a partition batch finds its lane: `resolve` reads the partition's current epoch (a delivered batch),
 * `explicit` is given one (`stageInLane`: a redrive lane; a replay generation's lane).
 */
export type Laning = 'resolve' | 'explicit';

export class FenceJudge {
  constructor(
    private readonly ctx: ProcessorContext,
    private readonly fences: LaneFences,
    /** Reads a lane's fence anew (`Processor.refreshFence`): a closed lane throws `EpochChangedError`. */
    private readonly refresh: (lane: string, partition: number) => Promise<FenceState>,
  ) {}

  /**
   * The lane and fence to start from, judged: a "backwards" against a cached fence is confirmed against a fresh
   * read of the partition's current lane (an operator may have opened a new epoch since), and a confirmed one is
   * recorded on the lane's fence (`eos epoch` shows it) before it is thrown. An `explicit` batch names its lane
   * itself: no epoch resolution, no stop record.
   */
  async starting(
    prints: Fingerprints,
    laning: Laning,
    startedAt: number,
    attemptId: string,
  ): Promise<LaneFence> {
    const { topic, partition } = prints.batch;
    const explicit = laning === 'explicit';
    const { lane, fence, cached } = explicit
      ? await this.fences.explicit(topic, partition)
      : await this.fences.current(topic, partition);
    const verdict = this.judge(prints, fence, judgingMode(fence, startedAt));
    // Only "new" is taken on the cache's word. A batch at or below a cached fence (redelivery or backwards) is
    // judged against a fresh read: the cached lane may have been closed by a new epoch (or a redrive round)
    // meanwhile, and its records must never be dropped as redeliveries of the old one. A read per redelivery
    // only: the steady state (batches above the fence) reads nothing.
    if (verdict.kind === 'new') return { lane, fence };
    if (!cached && verdict.kind === 'redelivery') return { lane, fence };
    // The cached lane's own fence first (one read); only a closed one sends an epoch lane to the root. A closed
    // explicit lane fails (EpochChangedError).
    const fresh = !cached
      ? { lane, fence }
      : explicit
        ? { lane, fence: await this.refresh(lane, partition) }
        : await this.fences.freshLane(topic, partition, lane);
    const again = cached ? this.judge(prints, fresh.fence, judgingMode(fresh.fence, startedAt)) : verdict;
    if (again.kind === 'unproven') throw this.unproven(prints.inLane(fresh.lane), fresh.fence);
    if (again.kind !== 'backwards') return fresh;
    const stopped = this.backwards(prints.inLane(fresh.lane), fresh.fence, again.reason);
    if (!explicit) await this.recordStop(fresh, stopped, attemptId, startedAt);
    throw stopped;
  }

  /**
   * Re-reads the fence during the batch and judges the batch against it if it moved: in full when it moved before
   * this invocation began (the cache was stale), by fingerprints only when it moved while this invocation ran.
   */
  async moved(prints: Fingerprints, known: FenceState, startedAt: number): Promise<FenceState> {
    const { topic, partition } = prints.batch;
    const fresh = await this.refresh(topic, partition);
    if (fresh.stagedOffset === known.stagedOffset) return fresh;
    if (fresh.stagedOffset < known.stagedOffset) {
      // Only a staging transaction moves a fence, and only up: a lower one was rewritten outside the protocol.
      throw new MalformedLedgerItemError(
        `fence ${topic}#${partition}`,
        `went down from ${known.stagedOffset} to ${fresh.stagedOffset}`,
      );
    }
    const verdict = this.judge(prints, fresh, judgingMode(fresh, startedAt));
    if (verdict.kind === 'backwards') throw this.backwards(prints, fresh, verdict.reason);
    if (verdict.kind === 'unproven') throw this.unproven(prints, fresh);
    return fresh;
  }

  private judge(prints: Fingerprints, fence: FenceState, mode: JudgingMode): Verdict {
    return judgeAgainst(prints, fence, this.ctx.settings.maxFenceJump, mode);
  }

  private backwards(prints: Fingerprints, fence: FenceState, reason: string): OffsetsWentBackwardsError {
    const { topic, partition } = prints.batch;
    return new OffsetsWentBackwardsError(
      topic,
      partition,
      fence.stagedOffset,
      prints.firstOffset,
      prints.lastOffset,
      reason,
    );
  }

  /** An unproven redelivery, reported (a warning and `UnprovenRedeliveries`) before it is thrown: no stop record. */
  private unproven(prints: Fingerprints, fence: FenceState): UnprovenRedeliveryError {
    const { topic, partition } = prints.batch;
    const error = new UnprovenRedeliveryError(
      topic,
      partition,
      fence.stagedOffset,
      prints.firstOffset,
      prints.lastOffset,
    );
    this.ctx.observer?.redeliveryUnproven?.(error);
    return error;
  }

  /**
   * Writes the stop onto the lane's fence, or adds this attempt's sighting to the stop already there for the same
   * fence and batch start (`sightedStop`): a stop two attempts saw is confirmed, and only a confirmed one lets `eos
   * epoch --start-new` open an epoch without `--force` (a zombie's false stop is never retried, so never confirmed).
   */
  private async recordStop(
    { lane, fence }: LaneFence,
    stopped: OffsetsWentBackwardsError,
    attemptId: string,
    startedAt: number,
  ): Promise<void> {
    const stop = sightedStop(
      fence.stop,
      {
        reason: stopped.reason,
        fence: stopped.fence,
        firstOffset: stopped.firstOffset,
        lastOffset: stopped.lastOffset,
        at: this.ctx.clock.now(),
      },
      attemptId,
      startedAt,
    );
    if (stop === undefined) return;
    if (
      await this.ctx.ledger.recordStop(this.ctx.settings.pipelineId, lane, stopped.partition, fence, stop)
    ) {
      this.fences.remember(lane, stopped.partition, { ...fence, stop });
    }
  }
}
