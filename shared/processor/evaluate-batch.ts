/**
 * A partition batch's records evaluated within the bounds of one transaction (L1): what `evaluate.ts` does to one
 * record, applied to a batch with the lane's rules (a replay's range end, a generation's state).
 */
import type { Settings } from '../config/settings.ts';
import type { PartitionBatch } from '../kafka/record.ts';
import { generationOfLane } from '../ledger/epochs.ts';
import type { Transform } from '../transforms/types.ts';
import { type EffectLimits, type EvaluatedRecord, evaluateRecord, inertRecord } from './evaluate.ts';

/** Items the legacy fence key takes in a transaction that creates a partition's sharded fence (fences.ts). */
export const LEGACY_FENCE_ITEMS = 1;

/**
 * The bounds a record's effects are evaluated against (anything over them is dead-lettered, L1): one transaction
 * item less than the setting, since the first staging of a partition also settles its legacy fence key (fences.ts)
 * and a redrive lane's chunk keeps an item for its dead-letter entry, and a record must fit a chunk of its own then
 * too; two items per key in partition scope (the window's bucket). The redrive judges with the same bounds.
 */
export function effectLimits(
  settings: Pick<Settings, 'maxTransactionItems' | 'idempotencyScope' | 'missingIdempotencyKey'>,
): EffectLimits {
  return {
    maxTransactionItems: settings.maxTransactionItems - LEGACY_FENCE_ITEMS,
    keyItems: settings.idempotencyScope === 'partition' ? 2 : 1,
    missingIdempotencyKey: settings.missingIdempotencyKey,
  };
}

/**
 * Every record of the batch evaluated once. `replayEnd` is a replay's range end in this lane (its first record
 * after the range only moves the fence: `shared/replay/slice.ts`).
 */
export function evaluateBatch(
  transform: Transform,
  settings: Settings,
  batch: PartitionBatch,
  replayEnd: number | undefined,
): EvaluatedRecord[] {
  const limits = effectLimits(settings);
  const replayed = generationOfLane(batch.topic) !== 0;
  return batch.records.map((record) => {
    if (replayEnd !== undefined && record.offset > replayEnd) return inertRecord(record);
    const evaluated = evaluateRecord(transform, settings.idempotencyKey, record, limits);
    // Keyed state is the live output's (generation 0): a replay generation, and a redrive of its dead letters,
    // rewrite output only. Applying their deltas would count records the live pipeline counted already
    // (docs/operations.md, "Replay into a new generation").
    return replayed && evaluated.state.length > 0 ? { ...evaluated, state: [] } : evaluated;
  });
}
