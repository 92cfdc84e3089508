/**
 * Replay mode (`replayGeneration` set: the replay mapping's processor, `shared/replay/`): a delivered batch's part
 * that its generation's plan asks for (`replaySlice`) is staged into the generation lane by the same protocol as a
 * live batch (the lane's fence drops a redelivery); the rest is acknowledged unstaged. Plans never change, so each
 * is read once per container. Also the live output's claims a replay generation's lanes judge keys against.
 */

import type { PartitionBatch } from '../kafka/record.ts';
import { generationOfLane } from '../ledger/epochs.ts';
import { partitionId } from '../ledger/layout.ts';
import type { ClaimHolder } from '../ledger/staging-ledger.ts';
import { NO_FENCE } from '../ledger/staging-ledger.ts';
import { type ReplayPlan, replaysClaimant } from '../replay/plan.ts';
import { replaySlice } from '../replay/slice.ts';
import { ReplayPlanError } from '../sink/generation-switch.ts';
import type { ProcessorContext } from './context.ts';
import type { LaneFences } from './lane-fences.ts';

export class ReplayMode {
  /** Replay plans by generation, read once each (the replay mapping's own; a redrive of a generation's). */
  private readonly plans = new Map<number, Promise<ReplayPlan>>();
  /** Per generation lane and partition, the range's last offset (`shared/replay/slice.ts`). */
  private readonly ends = new Map<string, number>();

  constructor(
    private readonly ctx: ProcessorContext,
    private readonly fences: LaneFences,
    /** Reads a generation's plan from the ledger table (`ReplayStore`). */
    private readonly readPlan: (generation: number) => Promise<ReplayPlan | undefined>,
  ) {}

  /** The range's last offset in a generation lane, once a batch of it was sliced here. */
  endOf(lane: string, partition: number): number | undefined {
    return this.ends.get(partitionId(lane, partition));
  }

  /**
   * The part of a delivered batch to stage in its generation lane (`explicit` laning), or undefined to acknowledge
   * it unstaged. Each batch also checks that the plan's epoch is still the partition's current one (one read):
   * offsets of a newer epoch must never be filed as the old epoch's; that fails the batch, and the mapping stops
   * there until the operator plans the replay anew.
   */
  async slice(batch: PartitionBatch, generation: number): Promise<PartitionBatch | undefined> {
    const { pipelineId, deliveryGuarantee } = this.ctx.settings;
    if (deliveryGuarantee !== 'exactly-once')
      throw new ReplayPlanError('a replay needs the exactly-once guarantee');
    const plan = await this.planOf(generation);
    const slice = replaySlice(plan, batch);
    if (slice === undefined) return undefined;
    const lane = slice.batch.topic;
    const { fence } = await this.fences.explicit(lane, batch.partition);
    // Only records after the range: the first one moves the fence past it once; later batches stage nothing (and
    // read nothing more: the mapping runs on until it is removed).
    if (slice.batch.records[0]!.offset > slice.to && fence.stagedOffset >= slice.to) return undefined;
    const current = await this.ctx.ledger.readCurrentFence(pipelineId, batch.topic, batch.partition);
    if (current.lane !== slice.range.lane) {
      throw new ReplayPlanError(
        `replay generation ${generation} names ${slice.range.lane} partition ${batch.partition}, but that partition is in ${current.lane} now (a new epoch opened): plan the replay again for the new epoch`,
      );
    }
    const first = batch.records[0]!.offset;
    const unstarted = async () =>
      // A cached "nothing staged" may be stale (another container started the lane): judged on a fresh read.
      fence.stagedOffset === NO_FENCE &&
      (await this.fences.refresh(lane, batch.partition)).stagedOffset === NO_FENCE;
    if (first > slice.range.from && (await unstarted())) {
      // The lane's first records must start the range: offsets from..first-1 never delivered (retention, an
      // AT_TIMESTAMP start) would be shown by no generation after the switch.
      throw new ReplayPlanError(
        `replay generation ${generation}: the first record delivered of ${batch.topic}-${batch.partition} is at offset ${first}, after the range's start ${slice.range.from}: offsets ${slice.range.from}..${first - 1} cannot be replayed (gone from the topic, or the replay mapping starts after them); plan the replay again from offset ${first}`,
      );
    }
    this.ends.set(partitionId(lane, batch.partition), slice.to);
    return slice.batch;
  }

  /**
   * A lane of a replay generation (the replay mapping's, or a redrive round of one), global scope: the live output's
   * claims of these keys whose claimant is a record outside the generation's ranges (one the readers keep showing
   * from the live generation after the switch). The generation judges its records against them as against its own
   * claims, so a key output before the range is not output again in it. A live claimant inside the ranges is
   * replayed itself: its own generation's claim decides. One GetItem per key of such a batch; the live path never
   * gets here.
   */
  async liveHolders(lane: string, keys: readonly string[]): Promise<ClaimHolder[]> {
    const generation = generationOfLane(lane);
    if (generation === 0) return [];
    const plan = await this.planOf(generation);
    const held = await this.ctx.ledger.readLiveClaims(this.ctx.settings.pipelineId, keys);
    return held.filter((holder) => !replaysClaimant(plan, holder.claimant));
  }

  /** A generation's plan, read once per container (plans never change). */
  private planOf(generation: number): Promise<ReplayPlan> {
    const cached = this.plans.get(generation);
    if (cached !== undefined) return cached;
    const reading = (async () => {
      const plan = await this.readPlan(generation);
      if (plan === undefined) {
        throw new ReplayPlanError(
          `replay generation ${generation} has no plan in ${this.ctx.settings.ledgerTable}: write it with eos replay first`,
        );
      }
      return plan;
    })().catch((error: unknown) => {
      this.plans.delete(generation); // read again on the next batch
      throw error;
    });
    this.plans.set(generation, reading);
    return reading;
  }
}
