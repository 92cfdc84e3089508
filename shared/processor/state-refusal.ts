/**
 * Which records of a chunk DynamoDB refused for their keyed state, the same on every retry (L1, L3, P6): an ADD to a
 * field stored as text, an operation on a field another operation holds (a max on a sum, an add to a min…), or
 * growth of an item past its 400 KB limit. The ledger names the refused items (`StateTypeConflictError`,
 * `StateConditionError`, `StateItemTooLargeError`); this module reads them as stored now and finds exactly the
 * records to dead-letter, so the rest of the chunk is applied. Shared by the exactly-once staging path and the
 * direct path of the weaker guarantees: every guarantee dead-letters the same records.
 *
 * A `StateConditionError` may name no such record: a min, max or latest field was not as this container believed
 * (another writer moved it). The ledger has learnt the item, so the chunk is staged again as it is, and the update
 * goes out with the right guesses (`shared/ledger/state-update.ts`).
 */
import { StateItemTooLargeError, StateTypeConflictError } from '../ledger/staging-ledger.ts';
import { storedField } from '../ledger/state-fields.ts';
import { StateConditionError } from '../ledger/state-items.ts';
import { isOrdered, operationsOf, type StateOperation } from '../transforms/state-delta.ts';
import type { EvaluatedRecord } from './evaluate.ts';
import { oversizedStateRecords } from './state-size.ts';

/**
 * Condition refusals of one chunk that made no progress before the batch fails. A refusal makes progress when it
 * turns a field's guess from `apply` to `skip` (the stored field was ahead of the value): within the protocol a
 * field turns at most once per chunk, since beliefs rest only on committed updates and stored items and a stored
 * field only moves on. So a chunk meets at most as many progressing refusals as it has min, max and latest fields,
 * however cold the container or hot the key; only a writer outside the protocol (an item deleted and rewritten
 * behind the pipeline) refuses without progress, and the bound keeps it from holding the invocation in the loop
 * until it times out. The batch's retry starts afresh.
 */
export const MAX_CONDITION_RELEARNING = 25;

/** Counts a partition's condition refusals that only taught the ledger, per chunk (see `MAX_CONDITION_RELEARNING`). */
export class RelearningBound {
  private readonly turned = new Set<string>();
  private idle = 0;

  /** A chunk committed: the next one starts its count afresh. */
  committed(): void {
    this.turned.clear();
    this.idle = 0;
  }

  /**
   * Judges a refusal that dead-letters `found` (with `refused` the records dead-lettered before it): throws `error`
   * when it is one refusal too many that dead-letters nothing new and turns no new guess.
   */
  judge(error: StateRefusal, found: ReadonlyMap<number, string>, refused: ReadonlyMap<number, string>): void {
    if (!(error instanceof StateConditionError)) return;
    if ([...found.keys()].some((offset) => !refused.has(offset))) return;
    const fresh = error.turned.filter((field) => !this.turned.has(field));
    for (const field of fresh) this.turned.add(field);
    if (fresh.length === 0 && ++this.idle > MAX_CONDITION_RELEARNING) throw error;
  }
}

/** Reads a keyed-state item as stored (strongly consistent), or undefined. */
export type StateReader = (stateKey: string) => Promise<Record<string, unknown> | undefined>;

export type StateRefusal = StateTypeConflictError | StateItemTooLargeError | StateConditionError;

/** Whether an error is a refusal of keyed state this module resolves record by record. */
export function isStateRefusal(error: unknown): error is StateRefusal {
  return (
    error instanceof StateTypeConflictError ||
    error instanceof StateItemTooLargeError ||
    error instanceof StateConditionError
  );
}

/**
 * The records of `records` (a refused chunk's kept records, offset order) to dead-letter for `error`, with their
 * reasons. Throws `error` when it finds nothing beyond `refused` (the records already dead-lettered for their
 * state): the stored items changed since (another partition set them), or what DynamoDB refused is not what a record
 * of the chunk does; nothing to dead-letter with certainty, so the batch fails (a state item over its limit stops
 * the partition) and its retry judges again.
 */
export async function refusedStateRecords(
  error: StateRefusal,
  records: readonly EvaluatedRecord[],
  read: StateReader,
  refused: ReadonlyMap<number, string>,
): Promise<Map<number, string>> {
  if (error instanceof StateConditionError) return conditionRefusals(error, records, read, refused);
  const found =
    error instanceof StateTypeConflictError
      ? await wrongTypeAdds(records, error.stateKeys, read)
      : await oversizedState(records, error.stateKeys, read);
  if (found.size === 0 || [...found.keys()].every((offset) => refused.has(offset))) throw error;
  return found;
}

/**
 * The records to dead-letter for refused conditions (none when only a belief was wrong), or the error again when
 * the refusal teaches nothing: no such record, and the update would be sent with the same guesses. An item the
 * refusal did not return is read (learnt by the ledger as it is read).
 */
async function conditionRefusals(
  error: StateConditionError,
  records: readonly EvaluatedRecord[],
  read: StateReader,
  refused: ReadonlyMap<number, string>,
): Promise<Map<number, string>> {
  const stored = new Map(error.stored);
  let learnt = error.learnt;
  for (const [key, item] of error.stored) {
    if (item !== undefined) continue;
    const now = await read(key);
    stored.set(key, now);
    if (now !== undefined) learnt = true;
  }
  const found = otherOperations(records, stored);
  const fresh = [...found.keys()].some((offset) => !refused.has(offset));
  if (!fresh && !learnt) throw error;
  return found;
}

/** How a reason names the operation a field holds, and what a record does to it. */
const HELD: Readonly<Record<StateOperation, string>> = {
  set: 'text',
  add: 'a sum',
  min: 'a min',
  max: 'a max',
  latest: 'a latest value',
};
const DOES: Readonly<Record<StateOperation, string>> = {
  set: 'sets it',
  add: 'adds to it',
  min: 'takes its min',
  max: 'takes its max',
  latest: 'takes its latest value',
};

/** Whether an update of `operation` is refused on a field holding `held` (an add to text: `wrongTypeAdds`). */
function refusedOn(held: StateOperation, operation: StateOperation): boolean {
  return held !== operation && (isOrdered(held) || isOrdered(operation));
}

/**
 * The records (offset order) whose operation meets a field of a refused item that another operation holds, as
 * stored or as an earlier record of the chunk leaves it, with a reason naming key, field and both operations.
 */
export function otherOperations(
  records: readonly EvaluatedRecord[],
  stored: ReadonlyMap<string, Record<string, unknown> | undefined>,
): Map<number, string> {
  const fields = new Map<string, Map<string, StateOperation>>();
  for (const [key, item] of stored) {
    const held = new Map<string, StateOperation>();
    for (const name of Object.keys(item ?? {})) {
      const field = storedField(item!, name);
      if (field !== undefined) held.set(name, field.operation);
    }
    fields.set(key, held);
  }
  const found = new Map<number, string>();
  for (const record of records) {
    const reason = otherOperation(record, fields);
    if (reason !== undefined) {
      found.set(record.offset, reason);
      continue;
    }
    for (const delta of record.state) {
      const held = fields.get(delta.key);
      for (const [field, operation] of operationsOf(delta))
        if (!held?.has(field)) held?.set(field, operation);
    }
  }
  return found;
}

function otherOperation(
  record: EvaluatedRecord,
  fields: ReadonlyMap<string, ReadonlyMap<string, StateOperation>>,
): string | undefined {
  for (const delta of record.state) {
    for (const [field, operation] of operationsOf(delta)) {
      const held = fields.get(delta.key)?.get(field);
      if (held === undefined || !refusedOn(held, operation)) continue;
      return (
        `state key ${JSON.stringify(delta.key.slice(0, 100))}: field ${JSON.stringify(field)} holds ` +
        `${HELD[held]}, and this record ${DOES[operation]}: a state field keeps one operation`
      );
    }
  }
  return undefined;
}

/** The first field `add` adds to that the stored state item holds as something other than a number. */
export function nonNumberAddedTo(
  item: Record<string, unknown>,
  add: Readonly<Record<string, unknown>>,
): string | undefined {
  return Object.keys(add).find((name) => item[name] !== undefined && typeof item[name] !== 'number');
}

/**
 * The records whose adds meet a stored field that is not a number, with a reason naming key and field. The planner
 * keeps a field set and added within one chunk apart, so the stored items (read after the refusal) are what such an
 * add meets. Dead-lettering the record, rather than keeping `fields` and `add` in disjoint attribute namespaces,
 * keeps the state item's shape (one attribute per field) that the readers of state (status, local results,
 * expectations) rely on.
 */
async function wrongTypeAdds(
  records: readonly EvaluatedRecord[],
  stateKeys: readonly string[],
  read: StateReader,
): Promise<Map<number, string>> {
  const stored = new Map<string, Record<string, unknown>>();
  for (const key of new Set(stateKeys)) {
    const item = await read(key);
    if (item !== undefined) stored.set(key, item);
  }
  const found = new Map<number, string>();
  for (const record of records) {
    for (const delta of record.state) {
      const item = stored.get(delta.key);
      if (item === undefined) continue;
      const field = nonNumberAddedTo(item, delta.add);
      if (field === undefined || found.has(record.offset)) continue;
      found.set(
        record.offset,
        `state field ${JSON.stringify(field)} of ${JSON.stringify(delta.key)} is not a number (it was set), and ` +
          'this record adds to it: a state field is either set or added to, never both',
      );
    }
  }
  return found;
}

/**
 * The records that would grow a state item past DynamoDB's item limit, with a reason naming the key
 * (`state-size.ts`), judged against the refused items as stored now (read after the refusal).
 */
async function oversizedState(
  records: readonly EvaluatedRecord[],
  stateKeys: readonly string[],
  read: StateReader,
): Promise<Map<number, string>> {
  const stored = new Map<string, Record<string, unknown> | undefined>();
  for (const key of new Set(stateKeys)) stored.set(key, await read(key));
  return oversizedStateRecords(records, stored);
}
