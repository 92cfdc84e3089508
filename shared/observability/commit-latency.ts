/**
 * Commit latency: how long the worst record of a checkpoint waited between being staged and becoming visible
 * (its manifest written, COMMITTED). The coordinator's commit step computes it from the voted plans, which name the
 * oldest `stagedAt` of the entries each shard covered (`coordinator/commit/latency.ts`), or, when a plan does not,
 * from the staged entries themselves (below); the handler emits it as `CommitLatency` (ms).
 *
 * Within a partition, chunks are staged in offset order (P2: each staging transaction moves the fence up from the
 * value it read), so the covered entry with the lowest offset is the partition's oldest, and one read of the first
 * covered entry per changed partition suffices (clock skew between processor instances aside: milliseconds). The
 * read happens after the COMMITTED write and before cleanup deletes the entries; a commit step retried after
 * cleanup finds none and reports no latency rather than a wrong one.
 */

import { mapLimit } from '../concurrency.ts';
import type { CutEntry } from '../ledger/checkpoints.ts';
import { parsePartitionId } from '../ledger/layout.ts';
import type { StagedEntries } from '../ledger/staged-entries.ts';

/** The oldest `stagedAt` (epoch ms) of the entries a cut covers (previous, cut]; undefined when it covers none. */
export async function oldestCoveredStagedAt(
  ledger: Pick<StagedEntries, 'items'>,
  cut: readonly CutEntry[],
  concurrency: number,
): Promise<number | undefined> {
  const changed = cut.filter((entry) => entry.cut > entry.previous);
  const oldest = await mapLimit(changed, concurrency, async (entry) => {
    const { topic, partition } = parsePartitionId(entry.partition);
    const range = { above: entry.previous, upTo: entry.cut };
    // Pages of 2 (a chunk's output and dead-letter entries): the first entry is all that is needed.
    for await (const item of ledger.items(topic, partition, range, { pageSize: 2 })) {
      // Rejected items (malformed, misplaced) carry no trustworthy time: the next entry is as old or older
      // than any entry after it, so go on to it.
      if (item.kind === 'entry' && Number.isFinite(item.entry.stagedAt)) return item.entry.stagedAt;
    }
    return undefined;
  });
  const times = oldest.filter((at): at is number => at !== undefined);
  return times.length === 0 ? undefined : Math.min(...times);
}

/** Commit time minus the oldest covered entry's staging time, never negative (clock skew). */
export function commitLatencyMs(committedAt: number, oldestStagedAt: number): number {
  return Math.max(0, committedAt - oldestStagedAt);
}
