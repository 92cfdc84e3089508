/** What one end-to-end run is given: the input, the pipeline's shape and how many rounds to measure. */
import { LOCAL_DEFAULTS } from '../cli/local.ts';

export interface E2eConfig {
  /** Input records per run (generated orders, the same seed every run). */
  readonly records: number;
  readonly partitions: number;
  /** Records per partition per invocation (the event source mapping's batch size). */
  readonly batchSize: number;
  /** The event source mapping's batching window, ms (default the emulator's, as MSK's own default). */
  readonly batchingWindowMs?: number;
  readonly checkpointIntervalMs: number;
  /** The exactly-once runs' idempotency key source (`none`: offset dedupe only, as the processor benchmark). */
  readonly idempotencyKey: string;
  /** Interleaved exactly-once / at-least-once pairs, after one unmeasured warm-up pair. */
  readonly pairs: number;
  readonly warmUpRecords: number;
  readonly seed: number;
}

export const E2E_DEFAULTS: E2eConfig = {
  records: Number(process.env.BENCH_E2E_RECORDS ?? 16_000),
  partitions: LOCAL_DEFAULTS.partitions,
  // The event source mapping's default batch size (eos local's 20 is for many invocations under faults).
  batchSize: 100,
  checkpointIntervalMs: LOCAL_DEFAULTS.checkpointIntervalMs,
  idempotencyKey: 'none',
  pairs: Number(process.env.BENCH_E2E_PAIRS ?? 5),
  warmUpRecords: 1_000,
  seed: 1,
};
