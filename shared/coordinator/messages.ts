/**
 * The payloads the state machine passes between steps: references only (checkpoint id, attempt, shard), never
 * file lists, so they stay a few hundred bytes whatever a checkpoint covers. Validated at the handler boundary.
 */
import { z } from 'zod';

export const BEGIN_ACTIONS = ['checkpoint', 'commit', 'busy', 'empty', 'publish', 'handoff'] as const;
/**
 * - `checkpoint`: a new checkpoint (or attempt) was allocated: prepare it.
 * - `commit`: an expired checkpoint past its decision was taken over: roll it forward (promote, commit).
 * - `busy`: another execution's checkpoint is live (C1): exit cleanly.
 * - `empty`: nothing staged since the last commit: no checkpoint, no manifest, no gap.
 * - `publish`: as `empty`, but the Iceberg table's published mark is behind the last committed checkpoint (its
 *   publish failed and no later checkpoint came to catch it up): publish that checkpoint, then end. Only when the
 *   begin input says the state machine publishes.
 * - `handoff`: this is an Express workflow (the begin input says it hands off) and the work may take longer than
 *   its five minutes: an expired checkpoint to recover, the attempt after an abort, or the checkpoint after a long
 *   one. Nothing was changed; the Standard workflow begins afresh.
 */
export type BeginAction = (typeof BEGIN_ACTIONS)[number];

export const ABORT_OUTCOMES = ['aborted', 'decided', 'nothing'] as const;
/**
 * - `aborted`: the checkpoint is ABORTED; its covered data waits for the next one (C6).
 * - `decided`: it was already COMMITTING: abort refused (C4); the state machine rolls it forward instead.
 * - `nothing`: no checkpoint of this execution to abort (begin failed before allocating one).
 */
export type AbortOutcome = (typeof ABORT_OUTCOMES)[number];

export const beginInputSchema = z.object({
  execution: z.string().min(1),
  /** The state machine has a publish step (an Iceberg table is configured): report a lagging published mark. */
  publish: z.boolean().optional(),
  /** The state machine is an Express workflow that hands recoveries and retries to the Standard one. */
  handOff: z.boolean().optional(),
});
export type BeginInput = z.infer<typeof beginInputSchema>;

export interface BeginOutput {
  readonly action: BeginAction;
  /** 0 for `busy` and `empty`; for `publish`, the last committed checkpoint and its attempt. */
  readonly checkpointId: number;
  readonly attempt: number;
  /** Shard numbers 0..n-1 for the Map states (n ≤ MAX_SHARDS); empty for `busy` and `empty`. */
  readonly shards: readonly number[];
}

export const checkpointRefSchema = z.object({
  execution: z.string().min(1),
  checkpointId: z.number().int().positive(),
  attempt: z.number().int().positive(),
});
export type CheckpointRef = z.infer<typeof checkpointRefSchema>;

export const shardInputSchema = checkpointRefSchema.extend({ shard: z.number().int().nonnegative() });
export type ShardInput = z.infer<typeof shardInputSchema>;

export interface ShardOutput {
  readonly shard: number;
  /** Staged files verified (prepare), final objects written (promote), staged files removed (cleanup). */
  readonly count: number;
}

export const abortInputSchema = z.object({
  execution: z.string().min(1),
  checkpointId: z.number().int().nonnegative(),
  attempt: z.number().int().nonnegative(),
  /** The caught error as Step Functions hands it over. */
  error: z.object({ Error: z.string().optional(), Cause: z.unknown().optional() }).partial().default({}),
});
export type AbortInput = z.input<typeof abortInputSchema>;

export interface AbortOutput {
  readonly outcome: AbortOutcome;
  readonly reason: string;
  readonly orphansDeleted: number;
}

export interface DecideOutput {
  readonly checkpointId: number;
  readonly decidedAt: number;
}

export interface CommitOutput {
  readonly checkpointId: number;
  /** When the checkpoint began (epoch ms): its duration is measured from here. */
  readonly begunAt: number;
  /** Final objects the manifest lists (a merged object once, however many slices). */
  readonly files: number;
  readonly records: number;
  /**
   * The oldest `stagedAt` (epoch ms) of the staged entries the checkpoint covered, and the commit's latency: its
   * COMMITTED write minus that time (the worst record's wait from staging to visibility). Absent when the covered
   * entries are gone (a commit retried after cleanup) or could not be read.
   */
  readonly oldestStagedAt?: number;
  readonly commitLatencyMs?: number;
}

/** A readable reason from Step Functions' `{Error, Cause}` (Lambda's Cause is a JSON `{errorMessage, …}`). */
export function describeCaughtError(error: { Error?: string; Cause?: unknown } | undefined): string {
  if (!error) return 'unknown error';
  let cause = error.Cause;
  if (typeof cause === 'string') {
    try {
      const parsed = JSON.parse(cause) as { errorMessage?: unknown };
      if (typeof parsed.errorMessage === 'string') cause = parsed.errorMessage;
    } catch {
      // not JSON: the interpreter hands over the message itself
    }
  }
  const text = typeof cause === 'string' ? cause : cause === undefined ? '' : JSON.stringify(cause);
  return `${error.Error ?? 'Error'}: ${text}`.slice(0, 2000);
}
