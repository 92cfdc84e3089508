/**
 * Idempotency claims (P4), written ahead of the staging transaction (`claimWrite: ahead`, the default) or inside it
 * (`in-transaction`, and every takeover of an expired claim). A claim records its record's digest, so a record
 * whose key is held with the same digest is a duplicate and with another a conflict (`key-decision.ts`); a claim
 * is a record's own when claimant and digest both match, so a retry recognises its own claim in both modes.
 *
 * A claim written ahead lists the attempts that created or confirmed it (`holders`). An attempt whose batch then
 * fails deterministically (not transient, not a crash) leaves the holders of its records still above the fence,
 * read again consistently; a claim left with no holder is marked released and taken over by the next record with
 * its key inside its fenced transaction (UpdateItem only: the processor role needs no DeleteItem). A claim the
 * mapping's concurrent retry confirmed keeps that attempt as holder; a claim put by a staging transaction lists the
 * committing attempt for good. Transient errors keep the claims for the retry. A crash after the claims leaves the
 * crashed attempt a holder: the retry reuses the claim, or, if it fails deterministically first, the claim lasts
 * to its TTL. A record dead-lettered for its state never holds its key: its claim ahead is released, or handed to
 * the batch's next record with that key, inside the staging transaction that dead-letters it, whichever attempts
 * (a crashed one included) still list themselves as its holders. docs/architecture.md, "Record-level and
 * structural problems".
 */
import { isTransient } from '../aws/classify.ts';
import { InjectedCrashError } from '../errors.ts';
import { parseLane } from '../ledger/epochs.ts';
import { type ClaimItem, claimantOf, parseClaimant } from '../ledger/records.ts';
import type { ClaimHolder, ClaimOwner } from '../ledger/staging-ledger.ts';
import type { ProcessorContext } from './context.ts';
import type { EvaluatedRecord } from './evaluate.ts';

/** What an attempt holds of a batch's keys, and which records take an expired claim over in their transaction. */
export interface HeldClaims {
  /** Claims this attempt wrote ahead (or confirmed as its records' own), by record offset. */
  readonly held: Map<number, ClaimItem>;
  /** Records whose claim goes into the transaction in `ahead` mode: expired claims taken over. */
  readonly takeovers: Set<number>;
}

export class Claims {
  constructor(private readonly ctx: ProcessorContext) {}

  /** The claims of `records` (those with a key), expiring after the idempotency TTL. */
  claimsFor(records: readonly EvaluatedRecord[], topic: string, partition: number): ClaimItem[] {
    const expiresAt = Math.floor(this.ctx.clock.now() / 1000) + this.ctx.settings.idempotencyTtlSeconds;
    return records.flatMap((record) =>
      record.idempotencyKey === undefined
        ? []
        : [
            {
              idempotencyKey: record.idempotencyKey,
              claimant: claimantOf(topic, partition, record.offset),
              digest: record.digest,
              expiresAt,
            },
          ],
    );
  }

  /**
   * Claims the keys of the records still pending, before any staging transaction. Returns the holders of keys
   * another record holds (the caller tells duplicates from conflicts); expired ones join `takeovers` (taken over
   * inside the fenced transaction); claims created or confirmed join `held` as each is written. Safe to repeat: a
   * retry finds its own.
   */
  async claimAhead(
    pending: readonly EvaluatedRecord[],
    dropped: ReadonlySet<number>,
    { held, takeovers }: HeldClaims,
    topic: string,
    partition: number,
    attemptId: string,
  ): Promise<ClaimHolder[]> {
    const keyed = pending.filter(
      (record) => record.idempotencyKey !== undefined && !dropped.has(record.offset),
    );
    const claims = this.claimsFor(keyed, topic, partition);
    if (claims.length === 0) return [];
    const { ledger, settings, clock } = this.ctx;
    // Held from the moment each is written: a call that then fails for good still releases every claim it wrote.
    const offsets = new Map(claims.map((claim, i) => [claim, keyed[i]!.offset]));
    const found = await ledger.claimAhead(settings.pipelineId, claims, clock.now(), attemptId, (claim) => {
      const offset = offsets.get(claim);
      if (offset !== undefined) held.set(offset, claim);
    });
    const orphaned = await this.releaseOrphans(found.taken, topic, partition);
    const expired = new Set([...found.expired, ...orphaned]);
    for (const record of keyed) if (expired.has(record.idempotencyKey!)) takeovers.add(record.offset);
    await this.ctx.step('after-claims', { topic, partition, chunk: 0 });
    return found.taken.filter((holder) => !orphaned.has(holder.idempotencyKey));
  }

  /**
   * Claims written ahead by an attempt whose lane was then closed by a new epoch (`epochs.ts`), for a record above
   * that lane's final fence: the record can never be staged there, so the claim holds its key for nothing (a crash
   * after the claims, then the switch). Such a claim is released (on condition it still names that record), so
   * that the key is taken over inside this batch's fenced transaction instead of its records being dropped as
   * duplicates of a record that never became durable. Only claims of an earlier epoch of this batch's own
   * partition are looked at (a claim of another partition's closed epoch keeps blocking its key until its own
   * retry takes it over, or its TTL), so a duplicate of an open lane costs no read: the fences of those lanes are
   * read in parallel, only when such claims are found taken. Returns the keys released.
   */
  async releaseOrphans(taken: readonly ClaimHolder[], lane: string, partition: number): Promise<Set<string>> {
    const { ledger, settings } = this.ctx;
    const own = parseLane(lane);
    const candidates = taken.flatMap((holder) => {
      const claimant = parseClaimant(holder.claimant);
      const of = claimant === undefined ? undefined : parseLane(claimant.lane);
      const earlierEpoch =
        of !== undefined &&
        own !== undefined &&
        claimant!.partition === partition &&
        claimant!.lane !== lane &&
        of.topic === own.topic &&
        of.round === own.round &&
        of.generation === own.generation &&
        of.epoch < own.epoch;
      return earlierEpoch && holder.digest !== undefined
        ? [{ holder, claimant: claimant!, digest: holder.digest }]
        : [];
    });
    if (candidates.length === 0) return new Set();
    const lanes = [...new Set(candidates.map((c) => c.claimant.lane))];
    const fences = new Map(
      await Promise.all(
        lanes.map(
          async (name) =>
            [
              name,
              await ledger.readFence(settings.pipelineId, name, partition).catch(() => undefined),
            ] as const,
        ),
      ),
    );
    const released = new Set<string>();
    for (const { holder, claimant, digest } of candidates) {
      const fence = fences.get(claimant.lane);
      if (!fence?.closed || claimant.offset <= fence.stagedOffset) continue;
      if (
        await ledger.releaseOrphanClaim(settings.pipelineId, holder.idempotencyKey, holder.claimant, digest)
      ) {
        released.add(holder.idempotencyKey);
      }
    }
    return released;
  }

  /**
   * Claims ahead x a state refusal in the same batch: a refused record's key passes to the batch's next record with
   * that key (`key-decision.ts`), which wrote no claim ahead. The heir takes the key over inside its fenced
   * transaction: the refused record's claim is released by the transaction that dead-letters it, or taken over by
   * the heir's put when both are in one transaction (`StagingTransaction.handovers`), so the key passes whichever
   * other attempts (a crashed one) still list themselves as the claim's holders. If another record holds the key
   * meanwhile, the takeover meets it and the heir is judged against it, never output with its key unclaimed. A
   * refused record that was itself a takeover (the key's claim had expired, so none was held ahead) passes the
   * takeover on. `refused` are the refused records as they were before being dead-lettered (a dead letter carries
   * no key).
   */
  handOverRefusedClaims(
    pending: readonly EvaluatedRecord[],
    refused: readonly EvaluatedRecord[],
    { held, takeovers }: HeldClaims,
  ): void {
    const holders = new Map<string, number>();
    for (const record of pending) {
      const key = record.idempotencyKey;
      if (key !== undefined && !holders.has(key)) holders.set(key, record.offset);
    }
    for (const record of refused) {
      const key = record.idempotencyKey;
      if (key === undefined) continue;
      const wasTakeover = takeovers.delete(record.offset);
      if (!wasTakeover && !held.has(record.offset)) continue;
      const heir = holders.get(key);
      if (heir !== undefined && heir !== record.offset && !held.has(heir)) takeovers.add(heir);
    }
  }

  /**
   * The claims written ahead for `records` that DynamoDB refused for their state: released (or handed over) by the
   * transaction that dead-letters them.
   */
  handoversOf(
    records: readonly EvaluatedRecord[],
    stateRefused: ReadonlyMap<number, string>,
    held: ReadonlyMap<number, ClaimItem>,
  ): ClaimOwner[] {
    return records.flatMap((record) => {
      const claim = held.get(record.offset);
      return claim === undefined || !stateRefused.has(record.offset) ? [] : [claim];
    });
  }

  /**
   * After a batch failed: deterministically, its claims of records still above the fence are released (see the
   * module doc). A crash runs no code (an injected crash stands for one); transient errors keep the claims for the
   * retry. A release that fails itself leaves them to the retry or their TTL.
   */
  async releaseAfter(
    error: unknown,
    lane: string,
    partition: number,
    held: ReadonlyMap<number, ClaimItem>,
    attemptId: string,
  ): Promise<void> {
    if (held.size === 0 || isTransient(error) || error instanceof InjectedCrashError) return;
    const { ledger, settings } = this.ctx;
    try {
      // Records at or below the fence as stored now (a consistent read, not this container's cache: another
      // invocation may have staged them meanwhile) are staged: their claims are theirs. Above it, the release is
      // attempt-scoped (see StagingLedger.releaseClaims): a claim another attempt of the same batch confirmed —
      // or committed, which lists that attempt as holder for good — is left alone.
      const { stagedOffset } = await ledger.readFence(settings.pipelineId, lane, partition);
      const unstaged = [...held].filter(([offset]) => offset > stagedOffset).map(([, claim]) => claim);
      if (unstaged.length === 0) return;
      await ledger.releaseClaims(settings.pipelineId, attemptId, unstaged);
    } catch {
      // The original error is what the invocation reports; the claims stay for the retry (or their TTL).
    }
  }
}
