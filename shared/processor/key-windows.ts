/**
 * Partition-scoped idempotency: each partition's key window (`key-window.ts`) as this container knows it, with the
 * fence value it belongs to, for at most {@link WINDOW_CACHE_PARTITIONS} partitions (oldest use evicted: read
 * again when needed).
 */
import type { Settings } from '../config/settings.ts';
import { KeyWindow, maxBuckets } from '../ledger/key-window.ts';
import { partitionId } from '../ledger/layout.ts';
import { type FenceState, NO_FENCE } from '../ledger/staging-ledger.ts';
import type { ProcessorLedger } from './ledger-port.ts';

/** Partitions whose key windows one container keeps (each up to `idempotencyWindowKeys` × 16 bytes). */
const WINDOW_CACHE_PARTITIONS = 16;

export class KeyWindows {
  private readonly windows = new Map<string, { readonly fenceOffset: number; readonly window: KeyWindow }>();

  constructor(
    private readonly ledger: ProcessorLedger,
    private readonly settings: Pick<
      Settings,
      'pipelineId' | 'idempotencyTtlSeconds' | 'idempotencyWindowKeys'
    >,
  ) {}

  /**
   * The partition's key window as of `fence`: this container's copy when it belongs to that fence value (written by
   * its own last transaction, or read after that fence), else read now. Read after the fence, so a window read here
   * is as new as the fence or newer; a newer one means the fence moved, and the staging condition then fails and
   * both are read again (`key-window.ts`).
   */
  async of(topic: string, partition: number, fence: FenceState): Promise<KeyWindow> {
    const id = partitionId(topic, partition);
    const cached = this.windows.get(id);
    this.windows.delete(id);
    if (cached !== undefined && cached.fenceOffset === fence.stagedOffset) {
      this.windows.set(id, cached);
      return cached.window;
    }
    const { pipelineId, idempotencyTtlSeconds, idempotencyWindowKeys } = this.settings;
    const limits = { ttlSeconds: idempotencyTtlSeconds, windowKeys: idempotencyWindowKeys };
    const buckets =
      fence.stagedOffset === NO_FENCE
        ? []
        : await this.ledger.readKeyWindow(pipelineId, topic, partition, maxBuckets(limits));
    const window = new KeyWindow(buckets, limits);
    this.remember(topic, partition, fence.stagedOffset, window);
    return window;
  }

  /** Files a window under the fence value it belongs to. */
  remember(topic: string, partition: number, fenceOffset: number, window: KeyWindow): void {
    const id = partitionId(topic, partition);
    this.windows.delete(id);
    this.windows.set(id, { fenceOffset, window });
    for (const oldest of this.windows.keys()) {
      if (this.windows.size <= WINDOW_CACHE_PARTITIONS) break;
      this.windows.delete(oldest);
    }
  }

  /**
   * A transaction without keys moved the fence from `from` to `to`: the copy of the window it started from is
   * still the window as stored, now under the new fence.
   */
  carry(topic: string, partition: number, from: number, to: number): void {
    const cached = this.windows.get(partitionId(topic, partition));
    if (cached?.fenceOffset === from) this.remember(topic, partition, to, cached.window);
  }

  /** Drops the partition's copy (it disagreed with the stored window). */
  forget(topic: string, partition: number): void {
    this.windows.delete(partitionId(topic, partition));
  }
}
