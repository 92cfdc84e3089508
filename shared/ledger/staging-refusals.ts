/**
 * What a staging transaction DynamoDB cancelled refuses, told from its cancellation reasons (one per item, by index,
 * in the order of `staging-items.ts`): the fence moved, a claim is taken, a handover was lost, the key window
 * changed, or a keyed-state item refused (`state-items.ts`). Each is an error the processor acts on.
 */
import { MalformedLedgerItemError, PipelineError } from '../errors.ts';
import { type ClaimHolder, ClaimsTakenError, holderOf } from './claim-items.ts';
import { entriesInline, type StagingTransaction, touchesLegacy } from './staging-effects.ts';
import type { Planned } from './staging-items.ts';
import { explainStateCancellation } from './state-items.ts';

/** The fence is not at the value this invocation started from: someone else staged (P2). */
export class FenceMovedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly expected: number,
  ) {
    super(`fence of ${topic}-${partition} is no longer at ${expected}`);
  }
}

/**
 * A key-window bucket is not what the processor's window said although the fence was (only a writer outside the
 * protocol, or a defect, can do that): the processor reads the window again.
 */
export class KeyWindowChangedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
  ) {
    super(`key window of ${topic}-${partition} changed without its fence moving`);
  }
}

/**
 * A claim this transaction was to release (its record is dead-lettered for its state) no longer names that record:
 * the attempt no longer holds it, and plans the chunk again without the release. `holders` are the claims found
 * instead (none when the item is gone).
 */
export class ClaimHandoverLostError extends PipelineError {
  constructor(
    readonly idempotencyKeys: readonly string[],
    readonly holders: readonly ClaimHolder[],
  ) {
    super(`claims of dead-lettered records changed before their release: ${idempotencyKeys.join(', ')}`);
  }
}

export function explainCancellation(
  txn: StagingTransaction,
  reasons: ReadonlyArray<{ Code?: string; Message?: string; Item?: Record<string, unknown> }>,
  { claimsStart, releases, labels, entryItems }: Planned,
  error: unknown,
): void {
  const failed = (index: number) => reasons[index]?.Code === 'ConditionalCheckFailed';
  // A failed entry condition means another invocation staged the same range: the fence moved too. So does a
  // failed legacy move (another invocation moved or moved past it).
  const legacy = touchesLegacy(txn);
  const entriesStart = legacy ? 2 : 1;
  const own = entriesInline(txn) ? 0 : txn.entries.length;
  if (
    failed(0) ||
    (legacy && failed(1)) ||
    entryItems.slice(0, own).some((_, i) => failed(entriesStart + i))
  ) {
    throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
  }
  // The fence is as read, yet an entry it holds inline is an item too: a ledger this code did not write. Planning
  // the chunk again would meet it again; refused, loudly.
  const twice = entryItems.slice(own).find((_, i) => failed(entriesStart + own + i));
  if (twice !== undefined) {
    throw new MalformedLedgerItemError(
      `staged entry ${txn.topic}#${txn.partition} ${twice.stream} ${twice.firstOffset}..${twice.lastOffset}`,
      'it is both inline in the fence and an item of its own',
    );
  }
  const taken = txn.claims.flatMap((claim, i) =>
    failed(claimsStart + i) ? [holderOf(claim.idempotencyKey, reasons[claimsStart + i]?.Item)] : [],
  );
  if (taken.length > 0) throw new ClaimsTakenError(taken);
  const releasesStart = claimsStart + txn.claims.length;
  const lost = releases.filter((_, i) => failed(releasesStart + i));
  if (lost.length > 0) {
    throw new ClaimHandoverLostError(
      lost.map((owner) => owner.idempotencyKey),
      lost.flatMap((owner) => {
        const item = reasons[releasesStart + releases.indexOf(owner)]?.Item;
        return item === undefined ? [] : [holderOf(owner.idempotencyKey, item)];
      }),
    );
  }
  const windowStart = releasesStart + releases.length;
  if ((txn.keyWindow ?? []).some((_, i) => failed(windowStart + i))) {
    throw new KeyWindowChangedError(txn.topic, txn.partition);
  }
  explainStateCancellation(txn, reasons, labels, error);
}
