/**
 * How a checkpoint's work is split for the Map states: the partitions whose cut moved are sorted and dealt
 * round-robin to at most MAX_SHARDS shards. The assignment is a pure function of the checkpoint record, so every
 * step (and every retry) of every shard sees the same partitions without passing them through Step Functions.
 */
import type { CheckpointRecord } from '../ledger/checkpoints.ts';
import { MAX_SHARDS } from './definition.ts';

/** The partitions with something new: cut above the previous cut (absent = -1). Sorted. */
export function changedPartitions(
  cut: Record<string, number>,
  previousCut: Record<string, number>,
): string[] {
  return Object.keys(cut)
    .filter((partition) => (cut[partition] ?? -1) > (previousCut[partition] ?? -1))
    .sort();
}

export function shardCountFor(changed: number): number {
  return Math.max(1, Math.min(MAX_SHARDS, changed));
}

export function shardList(count: number): number[] {
  return Array.from({ length: count }, (_, shard) => shard);
}

export function partitionsOfShard(
  record: Pick<CheckpointRecord, 'cut' | 'previousCut' | 'shardCount'>,
  shard: number,
): string[] {
  return changedPartitions(record.cut, record.previousCut).filter(
    (_, index) => index % record.shardCount === shard,
  );
}
