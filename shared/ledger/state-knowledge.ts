/**
 * What this container believes the stored min, max and latest fields to be, per table, pipeline and state key:
 * a hint that lets the update of such a field be sent right the first time, never a fact the result relies on.
 *
 * DynamoDB has no update that keeps the smaller of two numbers, so the ledger guesses, for each min, max or latest
 * field of an update, whether the new value moves the stored one: if so it writes the value on condition that it
 * does (`apply`), if not it writes nothing for the field, on condition that it does not (`skip`). Either way the
 * condition states the guess, so a wrong guess (another container moved the field, an item deleted behind the
 * pipeline, a belief from another table of the same name) cancels the transaction, which returns the stored item;
 * the ledger learns it here and the update is sent again (`state-items.ts`). The belief only decides how often
 * that happens: the stored value is the join of every value applied, whatever the belief was.
 *
 * Beliefs come from stored items (a read, a cancelled condition: the truth at that moment, which replaces what
 * was believed) and from updates once their transaction committed (`believeCommitted` in `state-update.ts`),
 * never from updates in flight, whose transaction may yet fail. At most {@link MAX_KEYS} keys are remembered,
 * the least recently used forgotten.
 */
import { compareUtf8, latestOrderKey } from '../transforms/state-order.ts';
import type { LatestValue } from '../transforms/types.ts';
import { storedField } from './state-fields.ts';

/** What a field is believed to hold: at most `value` (min), at least `value` (max), at least `order` (latest). */
export type Belief =
  | { readonly operation: 'min' | 'max'; readonly value: number }
  | { readonly operation: 'latest'; readonly order: string };

/** Keys remembered per container: beliefs of 50 fields at most each, a few MB at most. */
const MAX_KEYS = 10_000;

const beliefs = new Map<string, Map<string, Belief>>();

const slot = (table: string, pipeline: string, stateKey: string) =>
  `${table}\u0000${pipeline}\u0000${stateKey}`;

function remember(id: string, fields: Map<string, Belief>): void {
  beliefs.delete(id);
  beliefs.set(id, fields);
  if (beliefs.size > MAX_KEYS) beliefs.delete(beliefs.keys().next().value as string);
}

/** The beliefs about one state item (empty when none). */
export function beliefsOf(table: string, pipeline: string, stateKey: string): ReadonlyMap<string, Belief> {
  const id = slot(table, pipeline, stateKey);
  const found = beliefs.get(id);
  if (found === undefined) return new Map();
  remember(id, found);
  return found;
}

/** Believes a committed update moved these fields to these values. */
export function assume(
  table: string,
  pipeline: string,
  stateKey: string,
  moved: ReadonlyMap<string, Belief>,
): void {
  if (moved.size === 0) return;
  const id = slot(table, pipeline, stateKey);
  const fields = new Map(beliefs.get(id) ?? []);
  for (const [field, belief] of moved) fields.set(field, furthest(fields.get(field), belief));
  remember(id, fields);
}

/**
 * The further along of two beliefs about one field: another partition's commit believed late (its transaction
 * answered after a later one) must not set a belief back, which would make the next guess a refused `apply`.
 */
function furthest(known: Belief | undefined, committed: Belief): Belief {
  if (committed.operation === 'latest') {
    return known?.operation === 'latest' && compareUtf8(known.order, committed.order) >= 0
      ? known
      : committed;
  }
  return numberStays(committed.operation, committed.value, known) ? known! : committed;
}

/** Believes what a stored item (read now, or returned by a cancelled condition) holds; `undefined`: no item. */
export function learn(
  table: string,
  pipeline: string,
  stateKey: string,
  item: Readonly<Record<string, unknown>> | undefined,
): void {
  const fields = new Map<string, Belief>();
  for (const name of Object.keys(item ?? {})) {
    const stored = storedField(item!, name);
    if (stored?.operation === 'latest' && stored.order !== undefined) {
      fields.set(name, { operation: 'latest', order: stored.order });
    } else if (
      (stored?.operation === 'min' || stored?.operation === 'max') &&
      typeof stored.value === 'number'
    ) {
      fields.set(name, { operation: stored.operation, value: stored.value });
    }
  }
  remember(slot(table, pipeline, stateKey), fields);
}

/** Forgets every belief (a new container's memory). */
export function forgetStateKnowledge(): void {
  beliefs.clear();
}

/** Whether, by `belief`, a min or max of `value` leaves the field as it is. */
export function numberStays(operation: 'min' | 'max', value: number, belief: Belief | undefined): boolean {
  if (belief?.operation !== operation) return false;
  return operation === 'min' ? belief.value <= value : belief.value >= value;
}

/** Whether, by `belief`, a latest of `value` leaves the field as it is. */
export function latestStays(value: LatestValue, belief: Belief | undefined): boolean {
  return belief?.operation === 'latest' && compareUtf8(belief.order, latestOrderKey(value)) >= 0;
}
