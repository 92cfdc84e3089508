/**
 * What the processor needs from the ledger: the port its use cases are written against. `StagingLedger` (the
 * DynamoDB adapter, `shared/ledger/staging-ledger.ts`) satisfies it structurally; the processor never reaches past
 * these methods, so what it does to the ledger is read here in one place.
 */
import type { StopRecord } from '../ledger/epochs.ts';
import type { KeyWindowBucket } from '../ledger/key-window.ts';
import type { ClaimItem } from '../ledger/records.ts';
import type {
  ClaimHolder,
  ClaimsAhead,
  DirectStateTransaction,
  FenceState,
  LaneFence,
  StagedFence,
  StagingTransaction,
} from '../ledger/staging-ledger.ts';

export interface ProcessorLedger {
  /** A lane's fence as stored (strongly consistent). */
  readFence(pipeline: string, topic: string, partition: number): Promise<FenceState>;
  /** The partition's current lane (its epoch) and that lane's fence. */
  readCurrentFence(pipeline: string, topic: string, partition: number): Promise<LaneFence>;
  /** Writes or confirms a stop on the lane's fence; false when the fence changed meanwhile. */
  recordStop(
    pipeline: string,
    lane: string,
    partition: number,
    fence: FenceState,
    stop: StopRecord,
  ): Promise<boolean>;
  /** A keyed-state item as stored, or undefined. */
  readState(pipeline: string, stateKey: string): Promise<Record<string, unknown> | undefined>;
  /** One chunk's effects in one transaction, conditioned on the fence (P1, P2). */
  stage(txn: StagingTransaction): Promise<StagedFence>;
  /** When this release's coordinator took over the pipeline (epoch ms), if it did (`inline-gate.ts`). */
  readCompactFenceSince(pipeline: string): Promise<number | undefined>;
  /** The live output's claims of these keys (a replay generation judges against them). */
  readLiveClaims(pipeline: string, idempotencyKeys: readonly string[]): Promise<ClaimHolder[]>;
  /** Releases a claim of a closed lane's record, on condition it still names that record. */
  releaseOrphanClaim(
    pipeline: string,
    idempotencyKey: string,
    claimant: string,
    digest: string,
  ): Promise<boolean>;
  /** This attempt leaves the claims' holders; a claim left with none is released. */
  releaseClaims(pipeline: string, attemptId: string, claims: readonly ClaimItem[]): Promise<number>;
  /** Conditional puts of claims ahead of the staging transaction. */
  claimAhead(
    pipeline: string,
    claims: readonly ClaimItem[],
    now: number,
    attemptId: string,
    /** Told of each claim as it is created or confirmed (a failure later in the call still held it). */
    onHeld: (claim: ClaimItem) => void,
  ): Promise<ClaimsAhead>;
  /** Keyed state without fence (at-least-once and none). */
  applyState(txn: DirectStateTransaction): Promise<void>;
  /** The partition's key-window buckets (partition-scoped idempotency). */
  readKeyWindow(
    pipeline: string,
    topic: string,
    partition: number,
    buckets: number,
  ): Promise<KeyWindowBucket[]>;
}
