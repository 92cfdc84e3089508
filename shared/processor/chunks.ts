/**
 * Chunk planning: split a partition's pending records into consecutive chunks whose transaction fits DynamoDB's
 * item limit (P1). A chunk always ends on a record boundary, so each record's effects and the fence move past it
 * land in the same transaction.
 *
 * Items of a chunk: 1 fence + 1 staged entry per stream with rows + 1 claim per kept keyed record (unless the
 * claims were written ahead) + 1 per distinct state key.
 */
import { PipelineError } from '../errors.ts';
import type { EvaluatedRecord } from './evaluate.ts';

export interface Chunk {
  /** Every record of the chunk, in offset order, including those dropped as duplicates by key. */
  readonly records: readonly EvaluatedRecord[];
  /** The records whose effects are applied (not dropped). */
  readonly kept: readonly EvaluatedRecord[];
  readonly firstOffset: number;
  readonly lastOffset: number;
}

interface Tally {
  output: boolean;
  deadLetter: boolean;
  claims: number;
  stateKeys: Set<string>;
}

function itemCount(tally: Tally): number {
  return 1 + Number(tally.output) + Number(tally.deadLetter) + tally.claims + tally.stateKeys.size;
}

function tallyWith(tally: Tally, record: EvaluatedRecord, countClaim: boolean): Tally {
  return {
    output: tally.output || record.output.length > 0,
    deadLetter: tally.deadLetter || record.deadLetter !== undefined,
    claims: tally.claims + (countClaim ? 1 : 0),
    stateKeys: new Set([...tally.stateKeys, ...record.state.map((delta) => delta.key)]),
  };
}

/** The first chunk of `records` (non-empty) given the offsets dropped by key. */
export function planChunk(
  records: readonly EvaluatedRecord[],
  dropped: ReadonlySet<number>,
  maxItems: number,
  claimInTransaction: (record: EvaluatedRecord) => boolean = (record) => record.idempotencyKey !== undefined,
): Chunk {
  let tally: Tally = { output: false, deadLetter: false, claims: 0, stateKeys: new Set() };
  let end = 0;
  for (const record of records) {
    const next = dropped.has(record.offset) ? tally : tallyWith(tally, record, claimInTransaction(record));
    if (itemCount(next) > maxItems) break;
    tally = next;
    end += 1;
  }
  if (end === 0) {
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
