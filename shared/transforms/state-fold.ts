/**
 * Folding keyed-state deltas into one update per state key: a transaction may touch each item once, so a record's
 * deltas, and a chunk's, are folded before they are staged. Sets keep the last text, adds sum, `min` and `max`
 * keep the smallest and largest number, `latest` the greatest value in its order (`state-order.ts`). The three
 * are idempotent and commutative: whatever order, chunking or repetition the deltas come in, they fold to the same
 * values, which is what lets a retried or replayed batch leave them as they were.
 *
 * What cannot fold: a field taking two operations, a sum outside the safe integers, more fields than one item
 * update takes. A record whose own deltas cannot fold is dead-lettered ({@link stateFoldProblem}); the chunk
 * planner ends a chunk before a record whose deltas cannot join the chunk's ({@link StateFold}).
 */
import {
  isOrdered,
  MAX_ORDERED_FIELDS,
  MAX_STATE_FIELDS,
  operationsOf,
  type StateOperation,
  twoOperations,
} from './state-delta.ts';
import { latestWins } from './state-order.ts';
import type { LatestValue, StateDelta } from './types.ts';

/** Why a delta cannot join a key's fold. */
type FoldProblem =
  | {
      readonly kind: 'two';
      readonly field: string;
      readonly first: StateOperation;
      readonly second: StateOperation;
    }
  | { readonly kind: 'sum'; readonly field: string; readonly sum: number }
  | { readonly kind: 'fields' }
  | { readonly kind: 'ordered' };

/** The fields one state key's fold takes, by operation, and the sums of its adds. */
class KeyFold {
  private constructor(
    private readonly operations: Map<string, StateOperation>,
    private readonly sums: Map<string, number>,
    private ordered: number,
  ) {}

  static empty(): KeyFold {
    return new KeyFold(new Map(), new Map(), 0);
  }

  copy(): KeyFold {
    return new KeyFold(new Map(this.operations), new Map(this.sums), this.ordered);
  }

  /** Takes `delta` in, or says why it cannot join (leaving this fold partly changed: try it on a copy). */
  take(delta: StateDelta): FoldProblem | undefined {
    for (const [field, value] of Object.entries(delta.add)) {
      const sum = (this.sums.get(field) ?? 0) + value;
      // A folded sum the document client cannot marshal would fail the transaction on every retry.
      if (!Number.isSafeInteger(sum)) return { kind: 'sum', field, sum };
      this.sums.set(field, sum);
    }
    for (const [field, operation] of operationsOf(delta)) {
      const first = this.operations.get(field);
      if (first !== undefined && first !== operation) return { kind: 'two', field, first, second: operation };
      if (first === undefined) {
        this.operations.set(field, operation);
        if (isOrdered(operation)) this.ordered += 1;
      }
    }
    if (this.operations.size > MAX_STATE_FIELDS) return { kind: 'fields' };
    if (this.ordered > MAX_ORDERED_FIELDS) return { kind: 'ordered' };
    return undefined;
  }
}

function setAndAdd({ first, second }: { first: StateOperation; second: StateOperation }): boolean {
  return (first === 'set' && second === 'add') || (first === 'add' && second === 'set');
}

/**
 * Why a record's own deltas cannot be folded into one update per state key, or undefined. Each delta may be fine
 * alone while their fold is not; such a record would fit no chunk, even one of its own, and stall its partition.
 */
export function stateFoldProblem(deltas: readonly StateDelta[]): string | undefined {
  const folds = new Map<string, KeyFold>();
  for (const delta of deltas) {
    const fold = folds.get(delta.key) ?? KeyFold.empty();
    folds.set(delta.key, fold);
    const problem = fold.take(delta);
    if (problem === undefined) continue;
    const at = `state key "${delta.key.slice(0, 100)}"`;
    switch (problem.kind) {
      case 'sum':
        return `${at}: the adds to field "${problem.field}" sum to ${problem.sum}, outside ±(2^53 - 1)`;
      case 'two':
        return `${at}: ${twoOperations(problem.field, problem.first, problem.second)} ${setAndAdd(problem) ? 'by' : 'in'} this record`;
      case 'fields':
        return `${at}: this record's deltas touch more than ${MAX_STATE_FIELDS} fields`;
      case 'ordered':
        return `${at}: this record's deltas take more than ${MAX_ORDERED_FIELDS} min, max and latest fields`;
    }
  }
  return undefined;
}

/** The state keys a chunk's records touch so far, and what their fold takes (the chunk planner's tally). */
export class StateFold {
  private readonly keys = new Map<string, KeyFold>();

  /** Distinct state keys folded so far: one transaction item each. */
  get size(): number {
    return this.keys.size;
  }

  has(key: string): boolean {
    return this.keys.has(key);
  }

  /** Takes the record's deltas in if their fold with this one's can be one update per key; else changes nothing. */
  tryTake(deltas: readonly StateDelta[]): boolean {
    const trial = new Map<string, KeyFold>();
    for (const delta of deltas) {
      const fold = trial.get(delta.key) ?? this.keys.get(delta.key)?.copy() ?? KeyFold.empty();
      if (fold.take(delta) !== undefined) return false;
      trial.set(delta.key, fold);
    }
    for (const [key, fold] of trial) this.keys.set(key, fold);
    return true;
  }
}

type MutableDelta = {
  key: string;
  fields: Record<string, string>;
  add: Record<string, number>;
  min?: Record<string, number>;
  max?: Record<string, number>;
  latest?: Record<string, LatestValue>;
};

const record = <T>(): Record<string, T> => Object.create(null) as Record<string, T>;

function foldInto(current: MutableDelta, delta: StateDelta): void {
  for (const [field, value] of Object.entries(delta.fields)) current.fields[field] = value;
  for (const [field, value] of Object.entries(delta.add))
    current.add[field] = (current.add[field] ?? 0) + value;
  for (const [field, value] of Object.entries(delta.min ?? {})) {
    current.min ??= record();
    const held = current.min[field];
    current.min[field] = held === undefined ? value : Math.min(held, value);
  }
  for (const [field, value] of Object.entries(delta.max ?? {})) {
    current.max ??= record();
    const held = current.max[field];
    current.max[field] = held === undefined ? value : Math.max(held, value);
  }
  for (const [field, value] of Object.entries(delta.latest ?? {})) {
    current.latest ??= record();
    const held = current.latest[field];
    if (held === undefined || latestWins(value, held))
      current.latest[field] = { value: value.value, at: value.at };
  }
}

/** Folds deltas per state key: a transaction may touch each item once. Null-prototype objects throughout. */
export function foldState(deltas: Iterable<StateDelta>): StateDelta[] {
  const folded = new Map<string, MutableDelta>();
  for (const delta of deltas) {
    const current = folded.get(delta.key) ?? { key: delta.key, fields: record(), add: record() };
    foldInto(current, delta);
    folded.set(delta.key, current);
  }
  return [...folded.values()];
}
