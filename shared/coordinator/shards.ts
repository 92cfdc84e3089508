/**
 * How a checkpoint's work is split for the Map states: begin sorts the partitions whose cut moved (code-unit
 * order) and deals them round-robin to one shard per {@link PARTITIONS_PER_SHARD} of them, at most MAX_SHARDS; each shard's partitions are stored as that
 * shard's cut pages (`ledger/checkpoints.ts`), so every step (and every retry) of a shard reads exactly its
 * partitions, page by page, without passing them through Step Functions and without reading the whole cut.
 */
import type { CutEntry } from '../ledger/checkpoints.ts';
import { MAX_SHARDS } from './definition.ts';

const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** Splits a cut into the entries that moved (cut above previous), sorted, and the rest, sorted. */
export function splitCut(entries: Iterable<CutEntry>): { changed: CutEntry[]; unchanged: CutEntry[] } {
  const changed: CutEntry[] = [];
  const unchanged: CutEntry[] = [];
  for (const entry of entries) (entry.cut > entry.previous ? changed : unchanged).push(entry);
  const order = (a: CutEntry, b: CutEntry) => byCodeUnits(a.partition, b.partition);
  return { changed: changed.sort(order), unchanged: unchanged.sort(order) };
}

/**
 * Partitions one shard takes before the checkpoint gets another. Each shard costs the same whatever it holds: three
 * Lambda invocations and three Step Functions transitions (prepare, promote, cleanup), a plan, a promotion record
 * and its reads and ledger writes. So shards are added for parallelism only where a checkpoint is large enough to
 * need it: 1,000 partitions still get all 16, 100 get 2 instead of 16 (a seventh of the transitions).
 */
export const PARTITIONS_PER_SHARD = 64;

export function shardCountFor(changed: number, partitionsPerShard = PARTITIONS_PER_SHARD): number {
  return Math.max(1, Math.min(MAX_SHARDS, Math.ceil(changed / partitionsPerShard)));
}

export function shardList(count: number): number[] {
  return Array.from({ length: count }, (_, shard) => shard);
}

/** Deals sorted entries round-robin to `shardCount` shards. Pure and deterministic. */
export function dealToShards<T>(sorted: readonly T[], shardCount: number): T[][] {
  const shards: T[][] = shardList(shardCount).map(() => []);
  sorted.forEach((entry, index) => {
    shards[index % shardCount]!.push(entry);
  });
  return shards;
}
