/** What the processor reports for a batch: per partition, what was received, dropped, staged and committed. */
import type { PartitionBatch } from '../kafka/record.ts';

export interface PartitionReport {
  readonly topic: string;
  readonly partition: number;
  readonly received: number;
  /** Records at or below the fence: acknowledged without effects (redelivery). */
  readonly duplicatesByOffset: number;
  /** Records whose idempotency key was already claimed by the same payload: acknowledged without effects. */
  readonly duplicatesByKey: number;
  /** Output rows written. */
  readonly stagedRows: number;
  /** Dead-letter rows written (key conflicts included). */
  readonly deadLettered: number;
  /** Records dead-lettered because another payload holds their idempotency key. */
  readonly keyConflicts: number;
  /**
   * Records in which the idempotency key source found nothing (`missingIdempotencyKey`): dead-lettered (counted in
   * `deadLettered` too) or processed by offset only.
   */
  readonly missingKeys: number;
  /** Transactions that moved the fence by more than `maxFenceJump`. */
  readonly fenceJumps: number;
  /** Transactions committed. */
  readonly chunks: number;
  /** The partition's fence after this batch (-1 under at-least-once and none). */
  readonly stagedOffset: number;
}

export interface BatchReport {
  readonly partitions: readonly PartitionReport[];
}

/** The counters of a partition report, as the batch goes. */
export type Counts = {
  -readonly [K in Exclude<
    keyof PartitionReport,
    'topic' | 'partition' | 'received' | 'stagedOffset'
  >]: number;
};

/** Counts before anything happened: the start of every partition report. */
export const NO_COUNTS: Readonly<Counts> = {
  duplicatesByOffset: 0,
  duplicatesByKey: 0,
  stagedRows: 0,
  deadLettered: 0,
  keyConflicts: 0,
  missingKeys: 0,
  fenceJumps: 0,
  chunks: 0,
};

/** A delivered partition batch acknowledged with nothing staged (a replay outside its plan). */
export function unstagedReport(batch: PartitionBatch): PartitionReport {
  return {
    topic: batch.topic,
    partition: batch.partition,
    received: batch.records.length,
    ...NO_COUNTS,
    stagedOffset: -1,
  };
}
