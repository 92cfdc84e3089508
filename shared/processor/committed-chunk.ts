/** A committed chunk in the partition's report: its counts, its fence jump and its key conflicts. */
import { NO_FENCE } from '../ledger/staging-ledger.ts';
import type { Chunk } from './chunks.ts';
import type { ProcessorContext } from './context.ts';
import type { KeyConflict } from './observer.ts';
import type { Counts } from './report.ts';

/** A chunk whose staging transaction committed, and what the stager decided of its records. */
export interface CommittedChunk {
  readonly chunk: Chunk;
  /** The staged offset the transaction moved the fence from. */
  readonly from: number;
  readonly topic: string;
  readonly partition: number;
  /** Offsets dead-lettered as key conflicts. */
  readonly conflicts: ReadonlyMap<number, KeyConflict>;
}

/** Counts a committed chunk and reports its fence jump and key conflicts (final now: see the observer). */
export function reportCommitted(
  ctx: ProcessorContext,
  report: Counts,
  { chunk, from, topic, partition, conflicts }: CommittedChunk,
): void {
  const { observer, settings } = ctx;
  report.chunks += 1;
  report.duplicatesByKey += chunk.records.length - chunk.kept.length;
  report.stagedRows += chunk.kept.reduce((n, record) => n + record.output.length, 0);
  report.deadLettered += chunk.kept.filter((record) => record.deadLetter).length;
  report.missingKeys += chunk.kept.filter((record) => record.missingKey).length;
  const committed = chunk.kept.flatMap((record) => {
    const found = conflicts.get(record.offset);
    return found ? [found] : [];
  });
  if (committed.length > 0) {
    report.keyConflicts += committed.length;
    observer?.keyConflicts?.(committed);
  }
  if (from !== NO_FENCE && chunk.firstOffset - from > settings.maxFenceJump) {
    report.fenceJumps += 1;
    observer?.fenceJumped?.({ topic, partition, fence: from, firstOffset: chunk.firstOffset });
  }
}
