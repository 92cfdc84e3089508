/**
 * What one shard's prepare may hold at once, shared by its partitions, so that its memory is bounded per shard, not
 * per partition (`plan-partition.ts`): {@link Slots} for the staged objects being read and the final objects being
 * merged, and a {@link ByteBudget} for the staged bytes a re-encoded stream may keep from its census to its merge.
 */

/** At most `size` tasks hold a slot at once, the others wait in arrival order. */
export class Slots {
  private free: number;
  private readonly waiting: (() => void)[] = [];

  constructor(readonly size: number) {
    this.free = Math.max(1, size);
  }

  /** Runs `task` once a slot is free and frees it when `task` settles. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await task();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

/** Bytes a shard's prepare may keep beyond its slots: taken whole or not at all, never waited for. */
export class ByteBudget {
  private left: number;

  constructor(readonly size: number) {
    this.left = size;
  }

  /** Takes `bytes` if that many are left. */
  tryTake(bytes: number): boolean {
    if (bytes > this.left) return false;
    this.left -= bytes;
    return true;
  }

  give(bytes: number): void {
    this.left += bytes;
  }
}
