/** What the processor's batch report means in metrics (the processor handler records it after each batch). */
import type { BatchReport } from '../processor/processor.ts';
import type { BatchCounts } from './telemetry.ts';

/**
 * Sums a batch report over its partitions. "Staged" counts every record whose effects a staging transaction made
 * durable (P1), dead-lettered ones included — they are staged too, into the dead-letter stream (P6).
 */
export function batchCounts(report: BatchReport): BatchCounts {
  let staged = 0;
  let duplicatesByOffset = 0;
  let duplicatesByKey = 0;
  let deadLettered = 0;
  for (const partition of report.partitions) {
    staged += partition.received - partition.duplicatesByOffset - partition.duplicatesByKey;
    duplicatesByOffset += partition.duplicatesByOffset;
    duplicatesByKey += partition.duplicatesByKey;
    deadLettered += partition.deadLettered;
  }
  return { staged, duplicatesByOffset, duplicatesByKey, deadLettered };
}
