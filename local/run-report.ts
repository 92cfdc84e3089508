/** What a local run reports: its counts, faults, checkpoints, timings and verdict. */
import type { MissingIdempotencyKey, Settings } from '../shared/config/settings.ts';
import type { VerifyResult } from '../shared/sink/verify.ts';
import type { CheckpointCounts } from './checkpoints.ts';
import type { Outcome } from './expectation.ts';
import type { FaultKind } from './faults.ts';
import type { ReplayReport } from './replay-scenario.ts';
import type { TableReport } from './table-check.ts';

/** What the redrive scenario did. */
export interface RedriveReport {
  /** Records the redrive sent back through the pipeline. */
  readonly sent: number;
  /** Of those, staged as output rows and as dead letters again. */
  readonly output: number;
  readonly deadLettered: number;
  /** Dead letters left as they are: the fixed transform rejects them for the same reason. */
  readonly unchanged: number;
  /** Whether the first redrive crashed (and was run again). */
  readonly crashed: boolean;
  /**
   * Rows the second redrive staged (0: it changed nothing). It may send records again that the first dropped as
   * duplicates by key (their key is held by the same payload): they are dropped again, and nothing is written.
   */
  readonly secondRunStaged: number;
}

export interface RunReport {
  readonly pipeline: string;
  readonly guarantee: Settings['deliveryGuarantee'];
  readonly seed: number;
  readonly partitions: number;
  readonly faultSpec: string;
  readonly records: {
    readonly in: number;
    /** Output rows under the final prefix (for exactly-once: the committed output). */
    readonly committed: number;
    readonly deadLettered: number;
    /** Distinct identities the input holds (what exactly-once must commit). */
    readonly expected: number;
    readonly duplicatesDroppedByOffset: number;
    readonly duplicatesDroppedByKey: number;
    /** Records expected as key-conflict dead letters: their key was held by a record with other contents. */
    readonly keyConflicts: number;
    /**
     * Records for which the configured idempotency-key source found no key, and what the processor does with
     * them (`missingIdempotencyKey`): dead-letter them, or dedupe them by offset only.
     */
    readonly missingKeys: {
      readonly count: number;
      readonly source: string;
      readonly handling: MissingIdempotencyKey;
    };
  };
  readonly faults: Record<FaultKind, number>;
  readonly invocations: { readonly total: number; readonly failed: number; readonly lostCommits: number };
  readonly checkpoints: CheckpointCounts;
  /** Wall time from the first delivery to the final checkpoint's end. */
  readonly durationMs: number;
  /** Where the wall time went: draining the log, the final checkpoint(s), reading back and verifying. */
  readonly phasesMs: { readonly drain: number; readonly finalCheckpoint: number; readonly judge: number };
  readonly recordsPerSecond: number;
  readonly outcome: Outcome;
  readonly verify: VerifyResult;
  readonly verdict: 'exactly-once' | 'not exactly-once';
  /** Why the verdict is not exactly-once (empty when it is). */
  readonly violations: readonly string[];
  /** With a recreated topic: the epochs the run opened (one per partition the new generation stopped). */
  readonly epochsOpened?: number;
  /** With a redrive (`redriveWith`). */
  readonly redrive?: RedriveReport;
  /** With a replay (`replayWith`). */
  readonly replay?: ReplayReport;
  /** With an Iceberg table (`iceberg`): what it holds, read back by icebird. */
  readonly table?: TableReport;
}
