/**
 * The keyed state of `at-least-once` and `none`: a partition batch's deltas applied without fence or dedupe, in
 * chunks the exactly-once planner bounds (`chunks.ts`: at most 100 fields per key, the transaction's items and
 * bytes), so no update is refused for its size. A record DynamoDB refuses for its state — one that would grow an
 * item past 400 KB, or add to a field set as text — is dead-lettered by the rules of the staging path
 * (`state-refusal.ts`) and the rest of its chunk applied (L1 holds for every guarantee): the partition never stalls
 * on a refusal that would repeat on every retry.
 */

import { planChunk } from './chunks.ts';
import { deadLetterOf, type EvaluatedRecord, foldState } from './evaluate.ts';
import type { ProcessorLedger } from './ledger-port.ts';
import { isStateRefusal, RelearningBound, refusedStateRecords } from './state-refusal.ts';

export interface DirectState {
  /** The batch's records, those refused for their state turned into dead letters. */
  readonly records: readonly EvaluatedRecord[];
  /** Transactions committed. */
  readonly transactions: number;
}

export interface DirectStateTarget {
  readonly ledger: Pick<ProcessorLedger, 'readState' | 'applyState'>;
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  /** `maxTransactionItems`: the planner counts a fence and the staged entries too, so the chunk fits with room. */
  readonly maxItems: number;
}

const NOTHING_DROPPED: ReadonlySet<number> = new Set();

/** Applies the records' keyed state chunk by chunk (offset order), dead-lettering what DynamoDB refuses. */
export async function applyDirectState(
  target: DirectStateTarget,
  evaluated: readonly EvaluatedRecord[],
): Promise<DirectState> {
  const { ledger, pipeline, topic, partition, maxItems } = target;
  const read = (stateKey: string) => ledger.readState(pipeline, stateKey);
  const refused = new Map<number, string>();
  let records = evaluated;
  let transactions = 0;
  let next = 0;
  const bound = new RelearningBound();
  while (next < records.length) {
    // No claims: this guarantee does not dedupe by key.
    const chunk = planChunk(records.slice(next), NOTHING_DROPPED, maxItems, () => false);
    const state = foldState(chunk.kept.flatMap((record) => record.state));
    try {
      if (state.length > 0) {
        await ledger.applyState({ pipeline, topic, partition, state });
        transactions += 1;
      }
    } catch (error) {
      if (!isStateRefusal(error)) throw error;
      // Nothing of the refused transaction was applied: the chunk is planned again without the refused state.
      const found = await refusedStateRecords(error, chunk.kept, read, refused);
      bound.judge(error, found, refused);
      for (const [offset, reason] of found) refused.set(offset, reason);
      records = records.map((record) => {
        const reason = found.get(record.offset);
        return reason === undefined ? record : deadLetterOf(record, reason);
      });
      continue;
    }
    bound.committed();
    next += chunk.records.length;
  }
  return { records, transactions };
}
