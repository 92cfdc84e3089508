/**
 * Chunk planning: split a partition's pending records into consecutive chunks whose transaction fits DynamoDB's
 * limits (P1). A chunk always ends on a record boundary, so each record's effects and the fence move past it
 * land in the same transaction.
 *
 * Items of a chunk: 1 fence + 1 staged entry per stream with rows + 1 claim per kept keyed record (unless the
 * claims were written ahead) + 1 per distinct state key. With partition-scoped idempotency, claims are replaced by
 * at most 2 key-window buckets, and a chunk holds at most {@link BUCKET_ENTRIES} kept keyed records (so its keys
 * fill the open bucket and at most one new one). A chunk also ends before its folded state would break one item's
 * update (`shared/transforms/state-fold.ts`: a field taking two operations, a folded sum outside the safe integers,
 * too many fields on one key) or state items past {@link TRANSACTION_STATE_BUDGET_BYTES}. Evaluation
 * dead-letters any record whose effects alone break these bounds, so every record fits a chunk of its own.
 */
import { PipelineError } from '../errors.ts';
import { BUCKET_ENTRIES } from '../ledger/key-window.ts';
import { StateFold } from '../transforms/state-fold.ts';
import { type EvaluatedRecord, stateItemBytes, TRANSACTION_STATE_BUDGET_BYTES } from './evaluate.ts';

export interface Chunk {
  /** Every record of the chunk, in offset order, including those dropped as duplicates by key. */
  readonly records: readonly EvaluatedRecord[];
  /** The records whose effects are applied (not dropped). */
  readonly kept: readonly EvaluatedRecord[];
  readonly firstOffset: number;
  readonly lastOffset: number;
}

class Tally {
  output = false;
  deadLetter = false;
  claims = 0;
  windowKeys = 0;
  stateBytes = 0;
  readonly stateKeys = new StateFold();

  /** Adds the record if the chunk still fits afterwards; leaves the tally unchanged and returns false if not. */
  tryAdd(record: EvaluatedRecord, countClaim: boolean, maxItems: number, keyWindow: boolean): boolean {
    const newKeys = new Set(record.state.map((delta) => delta.key).filter((key) => !this.stateKeys.has(key)));
    const windowKey = keyWindow && record.idempotencyKey !== undefined ? 1 : 0;
    if (this.windowKeys + windowKey > BUCKET_ENTRIES) return false;
    const items =
      (this.windowKeys + windowKey > 0 ? 2 : 0) +
      1 +
      Number(this.output || record.output.length > 0) +
      Number(this.deadLetter || record.deadLetter !== undefined) +
      this.claims +
      (countClaim ? 1 : 0) +
      this.stateKeys.size +
      newKeys.size;
    if (items > maxItems) return false;
    const bytes = record.state.reduce((sum, delta) => sum + stateItemBytes(delta), 0);
    if (this.stateBytes + bytes > TRANSACTION_STATE_BUDGET_BYTES) return false;
    if (!this.stateKeys.tryTake(record.state)) return false;
    this.output ||= record.output.length > 0;
    this.deadLetter ||= record.deadLetter !== undefined;
    this.claims += countClaim ? 1 : 0;
    this.windowKeys += windowKey;
    this.stateBytes += bytes;
    return true;
  }
}

/** The first chunk of `records` (non-empty) given the offsets dropped by key. */
export function planChunk(
  records: readonly EvaluatedRecord[],
  dropped: ReadonlySet<number>,
  maxItems: number,
  claimInTransaction: (record: EvaluatedRecord) => boolean = (record) => record.idempotencyKey !== undefined,
  /** Partition-scoped idempotency: kept keyed records go into key-window buckets (see the module comment). */
  keyWindow = false,
): Chunk {
  const tally = new Tally();
  let end = 0;
  for (const record of records) {
    if (
      !dropped.has(record.offset) &&
      !tally.tryAdd(record, !keyWindow && claimInTransaction(record), maxItems, keyWindow)
    )
      break;
    end += 1;
  }
  if (end === 0) {
    // Unreachable (an assertion): evaluation dead-letters a record whose effects alone exceed these bounds,
    // its own deltas folded by the same rules included (L1).
    throw new PipelineError(
      `record at offset ${records[0]!.offset} alone needs more than ${maxItems} transaction items`,
    );
  }
  const chunk = records.slice(0, end);
  return {
    records: chunk,
    kept: chunk.filter((record) => !dropped.has(record.offset)),
    firstOffset: chunk[0]!.offset,
    lastOffset: chunk[end - 1]!.offset,
  };
}
