/**
 * The fences this container knows, by lane, and each partition's current lane (`epochs.ts`): the steady state
 * reads nothing (a batch above a cached fence is staged on the cache's word), and a fence is read anew only when a
 * condition fails or a batch lies at or below it.
 */
import { partitionId } from '../ledger/layout.ts';
import { EpochChangedError, type FenceState, type LaneFence } from '../ledger/staging-ledger.ts';
import type { ProcessorLedger } from './ledger-port.ts';

/** A lane's fence, and whether it came from this container's copy (no read). */
export type KnownLaneFence = LaneFence & { readonly cached: boolean };

export class LaneFences {
  /** Fences as last read or written by this container, by lane: re-read only when a condition fails. */
  private readonly fences = new Map<string, FenceState>();
  /** Each partition's current lane as last read: `<topic>` until an operator opens epoch 1. */
  private readonly lanes = new Map<string, string>();

  constructor(
    private readonly ledger: ProcessorLedger,
    private readonly pipelineId: string,
  ) {}

  /** Remembers a lane's fence as this container wrote or confirmed it. */
  remember(lane: string, partition: number, fence: FenceState): void {
    this.fences.set(partitionId(lane, partition), fence);
  }

  /** The partition's current lane and its fence: this container's copy, else read (root, then lane). */
  async current(topic: string, partition: number): Promise<KnownLaneFence> {
    const lane = this.lanes.get(partitionId(topic, partition));
    const cached = lane === undefined ? undefined : this.fences.get(partitionId(lane, partition));
    if (lane !== undefined && cached !== undefined) return { lane, fence: cached, cached: true };
    return { ...(await this.refreshLane(topic, partition)), cached: false };
  }

  /** An explicit lane's fence (a redrive lane, a replay generation's): this container's copy, else read. */
  async explicit(lane: string, partition: number): Promise<KnownLaneFence> {
    const cached = this.fences.get(partitionId(lane, partition));
    if (cached !== undefined) return { lane, fence: cached, cached: true };
    return { lane, fence: await this.refresh(lane, partition), cached: false };
  }

  /** A cached lane's fence read anew, or, when an epoch closed it meanwhile, the partition's current lane. */
  async freshLane(topic: string, partition: number, lane: string): Promise<LaneFence> {
    try {
      return { lane, fence: await this.refresh(lane, partition) };
    } catch (error) {
      if (!(error instanceof EpochChangedError)) throw error;
      return this.refreshLane(topic, partition);
    }
  }

  /** Reads the partition's current lane and fence anew (`epochs.ts`). */
  async refreshLane(topic: string, partition: number): Promise<LaneFence> {
    const current = await this.ledger.readCurrentFence(this.pipelineId, topic, partition);
    this.lanes.set(partitionId(topic, partition), current.lane);
    this.fences.set(partitionId(current.lane, partition), current.fence);
    return current;
  }

  /**
   * Reads a lane's fence anew. A closed lane means an operator opened a newer epoch while this batch held the old
   * one: {@link EpochChangedError} (the mapping's retry reads the new lane).
   */
  async refresh(lane: string, partition: number): Promise<FenceState> {
    const fence = await this.ledger.readFence(this.pipelineId, lane, partition);
    if (fence.closed) {
      this.fences.delete(partitionId(lane, partition));
      for (const [root, cachedLane] of this.lanes) if (cachedLane === lane) this.lanes.delete(root);
      throw new EpochChangedError(lane, partition);
    }
    this.fences.set(partitionId(lane, partition), fence);
    return fence;
  }
}
