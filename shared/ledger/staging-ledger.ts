/**
 * The processor's side of the ledger: read a partition's fence, write claims ahead, and apply one chunk's effects
 * in ONE DynamoDB transaction (P1, P2). This adapter only translates; the protocol lives in `shared/processor`.
 * Each part lives in its own module, and this class gives the processor one object over a table:
 *   fence-reads.ts          the fence of a lane, the partition's current lane, the stop record
 *   staging-transaction.ts  the staging write; its items and their order (staging-items.ts), what a chunk's
 *                           write implies (staging-effects.ts), its refusals (staging-refusals.ts)
 *   key-window-reads.ts     the key-window read
 *   claim-items.ts          idempotency claims: written ahead, released, read for a replay's judgement
 *   state-items.ts          keyed-state items: in the transaction, or applied on their own
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ledgerDocumentClient } from '../aws/clients.ts';
import type { TableRef } from '../aws/dynamo.ts';
import {
  type ClaimHolder,
  type ClaimsAhead,
  claimAhead,
  readLiveClaims,
  releaseClaims,
  releaseOrphanClaim,
} from './claim-items.ts';
import type { StopRecord } from './epochs.ts';
import {
  type FenceState,
  type LaneFence,
  readCompactFenceSince,
  readCurrentFence,
  readFence,
  recordStop,
} from './fence-reads.ts';
import type { KeyWindowBucket } from './key-window.ts';
import type { ClaimItem } from './records.ts';
import { readKeyWindow, type StagedFence, type StagingTransaction, stage } from './staging-transaction.ts';
import { applyState, type DirectStateTransaction, readState } from './state-items.ts';

export {
  type ClaimHolder,
  type ClaimOwner,
  type ClaimsAhead,
  ClaimsTakenError,
  RELEASED,
} from './claim-items.ts';
export {
  EpochChangedError,
  type FenceState,
  type LaneFence,
  NO_FENCE,
} from './fence-reads.ts';
export {
  ClaimHandoverLostError,
  FenceMovedError,
  KeyWindowChangedError,
  type StagedFence,
  type StagingTransaction,
} from './staging-transaction.ts';
export {
  type DirectStateTransaction,
  StateItemTooLargeError,
  StateTypeConflictError,
} from './state-items.ts';

export class StagingLedger {
  private readonly at: TableRef;

  constructor(dynamodb: DynamoDBClient, table: string) {
    this.at = { doc: ledgerDocumentClient(dynamodb), table };
  }

  /** The partition's fence, strongly consistent: `NO_FENCE` when nothing was staged yet (`fence-reads.ts`). */
  readFence(pipeline: string, topic: string, partition: number): Promise<FenceState> {
    return readFence(this.at, pipeline, topic, partition);
  }

  /** The partition's current lane (`epochs.ts`) and that lane's fence. */
  readCurrentFence(pipeline: string, topic: string, partition: number): Promise<LaneFence> {
    return readCurrentFence(this.at, pipeline, topic, partition);
  }

  /** Writes why the processor stopped a lane onto its fence; best effort (false when it did not). */
  recordStop(
    pipeline: string,
    lane: string,
    partition: number,
    fence: FenceState,
    stop: StopRecord,
  ): Promise<boolean> {
    return recordStop(this.at, pipeline, lane, partition, fence, stop);
  }

  /** A keyed-state item as stored, read after a `StateTypeConflictError` (`state-items.ts`). */
  readState(pipeline: string, stateKey: string): Promise<Record<string, unknown> | undefined> {
    return readState(this.at, pipeline, stateKey);
  }

  /** Applies a chunk's effects atomically (P1, P2), or throws what names the refusal (`staging-refusals.ts`). */
  stage(txn: StagingTransaction): Promise<StagedFence> {
    return stage(this.at, txn);
  }

  /**
   * When this release's coordinator took over the pipeline (the head's `compactFenceSince`, epoch ms,
   * `processor/inline-gate.ts`); undefined before.
   */
  readCompactFenceSince(pipeline: string): Promise<number | undefined> {
    return readCompactFenceSince(this.at, pipeline);
  }

  /** The live output's claims of these keys that are not released (`claim-items.ts`). */
  readLiveClaims(pipeline: string, idempotencyKeys: readonly string[]): Promise<ClaimHolder[]> {
    return readLiveClaims(this.at, pipeline, idempotencyKeys);
  }

  /** Marks a claim whose record can never be staged released, if it still names that record. */
  releaseOrphanClaim(
    pipeline: string,
    idempotencyKey: string,
    claimant: string,
    digest: string,
  ): Promise<boolean> {
    return releaseOrphanClaim(this.at, pipeline, idempotencyKey, claimant, digest);
  }

  /** Releases the claims an attempt wrote ahead for a batch that failed for good; how many were released. */
  releaseClaims(pipeline: string, attemptId: string, claims: readonly ClaimItem[]): Promise<number> {
    return releaseClaims(this.at, pipeline, attemptId, claims);
  }

  /** Writes claims ahead of the staging transaction (P4): created or confirmed, never taken over (`claim-items.ts`). */
  claimAhead(
    pipeline: string,
    claims: readonly ClaimItem[],
    now: number,
    attemptId: string,
    onHeld: (claim: ClaimItem) => void,
  ): Promise<ClaimsAhead> {
    return claimAhead(this.at, pipeline, claims, now, attemptId, onHeld);
  }

  /** AT_LEAST_ONCE / NONE: one chunk's keyed-state deltas, without fence (`state-items.ts`). */
  applyState(txn: DirectStateTransaction): Promise<void> {
    return applyState(this.at, txn);
  }

  /** The newest `buckets` key-window buckets of a partition (`key-window-reads.ts`). */
  readKeyWindow(
    pipeline: string,
    topic: string,
    partition: number,
    buckets: number,
  ): Promise<KeyWindowBucket[]> {
    return readKeyWindow(this.at, pipeline, topic, partition, buckets);
  }
}
