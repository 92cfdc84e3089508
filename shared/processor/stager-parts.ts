/** What a `PartitionStager` is given: the container's parts, and what one attempt knows of its batch. */
import type { ClaimItem } from '../ledger/records.ts';
import type { FenceState } from '../ledger/staging-ledger.ts';
import type { Fingerprints } from './batch-judge.ts';
import type { Claims } from './claims.ts';
import type { ProcessorContext } from './context.ts';
import type { FenceJudge } from './fence-judge.ts';
import type { InlineEntriesGate } from './inline-gate.ts';
import type { KeyWindows } from './key-windows.ts';
import type { LaneFences } from './lane-fences.ts';
import type { ReplayMode } from './replay-mode.ts';

/** The container-wide parts a stager works with (built once by `Processor`). */
export interface StagerParts {
  readonly ctx: ProcessorContext;
  readonly fences: LaneFences;
  readonly judge: FenceJudge;
  readonly windows: KeyWindows;
  readonly claims: Claims;
  readonly replay: ReplayMode;
  readonly inlineGate: InlineEntriesGate;
}

/** What an attempt knows of the batch it stages. */
export interface StagerAttempt {
  /** The batch, filed under its lane. */
  readonly prints: Fingerprints;
  /** The fence the batch was judged against at its start. */
  readonly start: FenceState;
  /** Claims this attempt holds: filled by the stager, read by the caller to release them if the batch fails. */
  readonly held: Map<number, ClaimItem>;
  readonly attemptId: string;
  readonly startedAt: number;
}
