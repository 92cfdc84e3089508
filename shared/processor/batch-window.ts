/**
 * Partition-scoped idempotency for one batch: its partition's key window (`key-window.ts`) as of the fence the
 * stager knows, the window's holders of the batch's keys, and the window each committed chunk leaves
 * (`key-windows.ts` keeps it for the container).
 */
import type { Clock } from '../clock.ts';
import type { BucketWrite, KeyWindow } from '../ledger/key-window.ts';
import type { ClaimHolder, FenceState } from '../ledger/staging-ledger.ts';
import type { Chunk } from './chunks.ts';
import type { KeyWindows } from './key-windows.ts';

export class BatchWindow {
  /** The key window as of the fence known (see `key-window.ts`). */
  private window: KeyWindow | undefined;

  constructor(
    private readonly windows: KeyWindows,
    private readonly clock: Clock,
    private readonly topic: string,
    private readonly partition: number,
  ) {}

  /** The window's holders of `keys` become `external`, as claims found taken do in global scope. */
  async loadHolders(
    known: FenceState,
    keys: Iterable<string>,
    external: Map<string, ClaimHolder>,
  ): Promise<void> {
    const { topic, partition } = this;
    this.window = await this.windows.of(topic, partition, known);
    external.clear();
    for (const [key, holder] of this.window.holders(keys, this.clock.now())) {
      external.set(key, {
        idempotencyKey: key,
        claimant: `an earlier record of ${topic}-${partition} (key window)`,
        digest: holder.digestPrefix,
        prefixOnly: true,
      });
    }
  }

  /** The window's writes for a chunk's keys; none before a window was read. */
  writesFor(keys: readonly { readonly key: string; readonly digest: string }[]): BucketWrite[] {
    return this.window?.writesFor(keys, this.clock.now()) ?? [];
  }

  /**
   * The window as stored after a commit: the one this transaction's fence condition proved, plus its writes (a
   * chunk without keys leaves a copy of the window it started from as it was, now under the new fence).
   */
  committed(chunk: Chunk, from: number, keyWindow: readonly BucketWrite[]): void {
    const { topic, partition } = this;
    if (this.window) {
      this.window = this.window.withWrites(keyWindow, this.clock.now());
      this.windows.remember(topic, partition, chunk.lastOffset, this.window);
    } else {
      this.windows.carry(topic, partition, from, chunk.lastOffset);
    }
  }
}
