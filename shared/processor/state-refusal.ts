/**
 * Which records of a chunk DynamoDB refused for their keyed state, the same on every retry (L1, L3, P6): an ADD to a
 * field stored as text, or growth of an item past its 400 KB limit. The ledger names the refused items
 * (`StateTypeConflictError`, `StateItemTooLargeError`); this module reads them as stored now and finds exactly the
 * records to dead-letter, so the rest of the chunk is applied. Shared by the exactly-once staging path and the
 * direct path of the weaker guarantees: every guarantee dead-letters the same records.
 */
import { StateItemTooLargeError, StateTypeConflictError } from '../ledger/staging-ledger.ts';
import type { EvaluatedRecord } from './evaluate.ts';
import { oversizedStateRecords } from './state-size.ts';

/** Reads a keyed-state item as stored (strongly consistent), or undefined. */
export type StateReader = (stateKey: string) => Promise<Record<string, unknown> | undefined>;

/** Whether an error is a refusal of keyed state this module resolves record by record. */
export function isStateRefusal(error: unknown): error is StateTypeConflictError | StateItemTooLargeError {
  return error instanceof StateTypeConflictError || error instanceof StateItemTooLargeError;
}

/**
 * The records of `records` (a refused chunk's kept records, offset order) to dead-letter for `error`, with their
 * reasons. Throws `error` when it finds nothing beyond `refused` (the records already dead-lettered for their
 * state): the stored items changed since (another partition set them), or what DynamoDB refused is not what a record
 * of the chunk does; nothing to dead-letter with certainty, so the batch fails (a state item over its limit stops
 * the partition) and its retry judges again.
 */
export async function refusedStateRecords(
  error: StateTypeConflictError | StateItemTooLargeError,
  records: readonly EvaluatedRecord[],
  read: StateReader,
  refused: ReadonlyMap<number, string>,
): Promise<Map<number, string>> {
  const found =
    error instanceof StateTypeConflictError
      ? await wrongTypeAdds(records, error.stateKeys, read)
      : await oversizedState(records, error.stateKeys, read);
  if (found.size === 0 || [...found.keys()].every((offset) => refused.has(offset))) throw error;
  return found;
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
