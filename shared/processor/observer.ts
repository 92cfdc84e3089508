/**
 * What the processor tells its host: the steps a fault schedule can crash at, and the facts the Lambda handler
 * turns into metrics and logs (`observability/processor-metrics.ts`).
 */
import type { EventSourceRejectedError, MalformedEventError, UnprovenRedeliveryError } from '../errors.ts';

/** The points of a batch where a fault schedule can crash the processor. */
export const PROCESSOR_STEPS = [
  'after-claims',
  'before-stage-write',
  'after-stage-write',
  'after-transaction',
  'before-return',
] as const;
export type ProcessorStep = (typeof PROCESSOR_STEPS)[number];

export interface StepContext {
  readonly topic: string;
  readonly partition: number;
  /** The chunk's index within this partition's batch (0 for before-return). */
  readonly chunk: number;
}

export interface ProcessorHooks {
  /** Awaited at each step; throwing here crashes the invocation at that step (tests, fault injection). */
  onStep?(step: ProcessorStep, context: StepContext): void | Promise<void>;
}

/** A fence move larger than `settings.maxFenceJump`, after the transaction that made it committed. */
export interface FenceJump {
  readonly topic: string;
  readonly partition: number;
  /** The fence before the transaction. */
  readonly fence: number;
  /** The first offset the transaction staged. */
  readonly firstOffset: number;
}

/** A record dead-lettered because its idempotency key is held by a record with another payload. */
export interface KeyConflict {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly idempotencyKey: string;
  /** `<topic>#<partition>#<offset>` of the holder. */
  readonly claimant: string;
}

/**
 * The errors that stop a partition (L2): the named structural ones (the same on every retry:
 * `OffsetsWentBackwardsError`, `ItemLimitExceededError`, `MalformedLedgerItemError`, a `StateTypeConflictError`
 * naming no record) and any other error a batch fails with that is neither transient nor an injected crash: the
 * mapping retries the batch and nothing moves until it passes, so it is reported (metric `PartitionsStopped`)
 * rather than left to the retry alone.
 */
export type PartitionStoppedError = Error;

/**
 * Called when the fact is final: a jump or conflict once its transaction has committed (so a crash and retry never
 * count it twice), a stop or a rejection before the error is thrown.
 */
export interface ProcessorObserver {
  eventRejected?(error: MalformedEventError | EventSourceRejectedError): void;
  partitionStopped?(error: PartitionStoppedError): void;
  fenceJumped?(jump: FenceJump): void;
  keyConflicts?(conflicts: readonly KeyConflict[]): void;
  /** A batch failed retryably: below the fence, nothing proves it a redelivery (`batch-judge.ts`). */
  redeliveryUnproven?(error: UnprovenRedeliveryError): void;
}
