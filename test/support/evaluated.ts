/**
 * An evaluated record (what the processor's staging and direct paths take) built by hand, for tests of those
 * paths that need no transform: a record of orders-0 at `offset` with one output row and these state deltas.
 */
import type { EvaluatedRecord } from '../../shared/processor/evaluate.ts';
import type { StateDelta } from '../../shared/transforms/types.ts';

export function evaluatedRecord(offset: number, state: StateDelta[]): EvaluatedRecord {
  return {
    offset,
    timestamp: 0,
    source: { topic: 'orders', partition: 0, offset },
    raw: { key: null, value: null, headers: {} },
    digest: `d${offset}`,
    idempotencyKey: undefined,
    output: [{ offset }],
    deadLetter: undefined,
    state,
  } as unknown as EvaluatedRecord;
}
