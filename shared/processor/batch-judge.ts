/**
 * Telling a redelivery from offsets that went backwards (L2): pure, no I/O. The mapping redelivers a batch only
 * from its first offset B (or, splitting on error, from inside [B, F]), and Kafka keeps a record's bytes, so every
 * staging transaction writes into the fence the fingerprints of the record at the staged offset F, of the batch's
 * first record at B, and of the first records of the last 8 distinct batches (`recentStarts`). A batch whose first
 * offset s is at or below F is judged:
 *
 * ```
 *   offsets:   ... S ... B ............ F | s > F: new records (above the fence), staged
 *                  ^ S: a remembered batch start (ring)   ^ B batchStart   ^ F fenceRecord
 *   1. the batch holds F, B or a remembered start and that record's fingerprint differs → backwards
 *   2. the batch holds one of them with the same fingerprint                      → redelivery (proven)
 *   3. the batch reaches past F without holding F                                  → backwards
 *   4. s < B (and none of them is in the batch): no redelivery starts there        → backwards
 *   5. otherwise (s inside (B, F], ends before F: a split retry)                   → redelivery
 * ```
 * A fence without identities (written before they existed) is judged by distance only: more than `maxFenceJump`
 * below it is backwards.
 *
 * Two modes: `start` judges a batch as delivered; `moved` judges it against a fence another invocation moved while
 * this one ran (a zombie may legitimately hold a batch wholly below the new B), where rule 4 gives `unproven`
 * instead: nothing tells a zombie's stale batch from a live batch of another generation, so the invocation fails
 * retryably rather than acknowledge or stop. What this cannot tell apart, and the clocks involved, are in
 * docs/architecture.md ("Record-level and structural problems").
 */
import type { DecodedRecord, PartitionBatch } from '../kafka/record.ts';
import { sameDigest } from '../ledger/fence-identity.ts';
import type { RecordFingerprint } from '../ledger/records.ts';
import { type FenceState, NO_FENCE } from '../ledger/staging-ledger.ts';
import { recordDigest } from './evaluate.ts';

/** What {@link judgeBatch} decided about a batch against a fence. */
export type Verdict =
  | { readonly kind: 'new' }
  | { readonly kind: 'redelivery' }
  | { readonly kind: 'backwards'; readonly reason: string }
  | { readonly kind: 'unproven' };

/** `start`: a batch as delivered; `moved`: a batch whose fence another invocation moved while it ran. */
export type JudgingMode = 'start' | 'moved';

/**
 * The rules of the module doc. `records` are the batch's fingerprints in offset order (non-empty). In `moved`,
 * where rule 4 would say "backwards" (the batch starts below B, holds no fingerprinted record) the verdict is
 * `unproven`.
 */
export function judgeBatch(
  records: readonly RecordFingerprint[],
  fence: Pick<FenceState, 'stagedOffset' | 'identity'>,
  maxDistance: number,
  mode: JudgingMode,
): Verdict {
  const F = fence.stagedOffset;
  const first = records[0]!.offset;
  const last = records[records.length - 1]!.offset;
  if (F === NO_FENCE || first > F) return { kind: 'new' };
  const identity = fence.identity;
  if (identity === undefined) {
    return F - first > maxDistance
      ? { kind: 'backwards', reason: `the batch starts more than ${maxDistance} offsets below the fence` }
      : { kind: 'redelivery' };
  }
  const at = new Map(records.map((record) => [record.offset, record]));
  let matched = false;
  const known: ReadonlyArray<readonly [string, RecordFingerprint]> = [
    ['fence', identity.fenceRecord],
    ['first record of the last staged batch', identity.batchStart],
    ...identity.recentStarts.map((print) => ['first record of a recently staged batch', print] as const),
  ];
  for (const [what, print] of known) {
    const held = at.get(print.offset);
    if (held === undefined) continue;
    if (!sameDigest(held.digest, print.digest) || held.timestamp !== print.timestamp) {
      return {
        kind: 'backwards',
        reason: `the record at offset ${print.offset} (the ${what}) is not the one staged there`,
      };
    }
    matched = true;
  }
  if (matched) return { kind: 'redelivery' };
  if (last > F) {
    return {
      kind: 'backwards',
      reason: `the batch reaches past the fence without the record staged at ${F}`,
    };
  }
  const B = identity.batchStart.offset;
  if (first < B) {
    if (mode === 'moved') return { kind: 'unproven' };
    return {
      kind: 'backwards',
      reason: `the batch starts below ${B}, where the last staged batch started (a redelivery starts there)`,
    };
  }
  return { kind: 'redelivery' };
}

/**
 * How a batch is judged against a fence: `moved` when the fence's last staging transaction committed while this
 * invocation ran (at or after `startedAt`), else `start`. It holds for the first read as for a re-read: an
 * invocation that stalled before reading anything (a cold container, a slow `prepare`) and finds a fence other
 * invocations moved meanwhile is a zombie whose batch was retried and acknowledged, and may lie wholly below the
 * new batch start; judging it as delivered would stop a healthy partition.
 */
export function judgingMode(fence: FenceState, startedAt: number): JudgingMode {
  return fence.updatedAt !== undefined && fence.updatedAt >= startedAt ? 'moved' : 'start';
}

/**
 * A batch judged against a fence, computing no digest in the steady state (a batch above the fence); every
 * record's fingerprint only when it starts at or below the fence.
 */
export function judgeAgainst(
  prints: Fingerprints,
  fence: FenceState,
  maxDistance: number,
  mode: JudgingMode,
): Verdict {
  if (fence.stagedOffset === NO_FENCE || prints.firstOffset > fence.stagedOffset) return { kind: 'new' };
  return judgeBatch(prints.all(), fence, maxDistance, mode);
}

/** A partition batch's records by offset, with their fingerprints computed on demand. */
export class Fingerprints {
  private readonly byOffset = new Map<number, DecodedRecord>();

  constructor(
    readonly batch: PartitionBatch,
    private readonly memo = new Map<number, RecordFingerprint>(),
  ) {
    for (const record of batch.records) this.byOffset.set(record.offset, record);
  }

  /**
   * The same records filed under the partition's current lane (`epochs.ts`): `batch.topic` names the lane the
   * ledger and the staged keys use; each record keeps its own topic for its lineage.
   */
  inLane(lane: string): Fingerprints {
    if (lane === this.batch.topic) return this;
    // The fingerprints already computed (judging the batch against its fence) are the same records': kept.
    return new Fingerprints({ ...this.batch, topic: lane }, this.memo);
  }

  of(offset: number): RecordFingerprint {
    const cached = this.memo.get(offset);
    if (cached) return cached;
    const record = this.byOffset.get(offset)!;
    const print = { offset, digest: recordDigest(record), timestamp: record.timestamp };
    this.memo.set(offset, print);
    return print;
  }

  /** Every record's fingerprint (only when a batch starts at or below the fence: not the steady state). */
  all(): RecordFingerprint[] {
    return this.batch.records.map((record) => this.of(record.offset));
  }

  get firstOffset(): number {
    return this.batch.records[0]!.offset;
  }

  get lastOffset(): number {
    return this.batch.records[this.batch.records.length - 1]!.offset;
  }
}
