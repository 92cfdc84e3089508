/**
 * One keyed-state delta (folded per key) as the update of its item, in the staging transaction (EXACTLY_ONCE) or
 * on its own (the direct path): SET of `fields`, ADD of `add`, and each `min`, `max` and `latest` field written on
 * a condition (`state-fields.ts` for the layout).
 *
 * DynamoDB cannot keep the smaller of two numbers in an update, so each such field carries a guess
 * (`state-knowledge.ts`): `apply` writes the value and its companion on condition the stored field is absent or
 * the new value moves it (`>=` for min: writing an equal value again is harmless); `skip` writes nothing for it,
 * on condition the stored field is of the same operation and the value does not move it. Both conditions also
 * name the field's operation (its companion's `op`, or a latest's order key, which only latest companions have),
 * so a field another operation wrote fails either guess: a record mixing operations on a field is found, never
 * applied. The transaction commits only when every guess was right, which makes the stored field the join of
 * every value applied: the same after a retry, a replay or a zombie, in any order.
 *
 * A set or added field is written on condition it has no companion: a field a min, max or latest holds is
 * not overwritten or added to either (an add meeting text is refused by DynamoDB itself; a set replacing an added
 * number is allowed, as sets replace). So every operation of a record on a field of another is found and the
 * record dead-lettered (`processor/state-refusal.ts`). Every field is one condition: `MAX_ORDERED_FIELDS` keeps
 * the expression within DynamoDB's 4 KB.
 *
 * A cancelled condition returns the stored item (`ALL_OLD`); `state-items.ts` reads it against the plan kept here
 * for the delta ({@link planOf}) to say whether the next guesses differ.
 */
import type { TransactItem } from '../aws/dynamo.ts';
import type { OrderedOperation } from '../transforms/state-delta.ts';
import { latestOrderKey } from '../transforms/state-order.ts';
import type { LatestValue, StateDelta } from '../transforms/types.ts';
import { keys } from './layout.ts';
import { companionOf } from './state-fields.ts';
import { assume, type Belief, beliefsOf, latestStays, numberStays } from './state-knowledge.ts';

export type Guess = 'apply' | 'skip';

/** The guesses an update was sent with, per min, max or latest field, and where (to learn from its refusal). */
export interface StatePlan {
  readonly table: string;
  readonly pipeline: string;
  readonly guesses: ReadonlyMap<string, { readonly operation: OrderedOperation; readonly guess: Guess }>;
  /** What the fields hold once the update committed: believed only then ({@link believeCommitted}). */
  readonly moved: ReadonlyMap<string, Belief>;
}

const plans = new WeakMap<StateDelta, StatePlan>();

/** The plan `stateItem` sent `delta` with (the same object), if it sent one with min, max or latest fields. */
export function planOf(delta: StateDelta): StatePlan | undefined {
  return plans.get(delta);
}

/** The guess for each min, max and latest field of `delta`, by the beliefs given. */
export function guessesFor(
  delta: StateDelta,
  beliefs: ReadonlyMap<string, Belief>,
): Map<string, { operation: OrderedOperation; guess: Guess }> {
  const guesses = new Map<string, { operation: OrderedOperation; guess: Guess }>();
  for (const operation of ['min', 'max'] as const) {
    for (const [field, value] of Object.entries(delta[operation] ?? {})) {
      guesses.set(field, {
        operation,
        guess: numberStays(operation, value, beliefs.get(field)) ? 'skip' : 'apply',
      });
    }
  }
  for (const [field, value] of Object.entries(delta.latest ?? {})) {
    guesses.set(field, {
      operation: 'latest',
      guess: latestStays(value, beliefs.get(field)) ? 'skip' : 'apply',
    });
  }
  return guesses;
}

/** The update expression's parts, gathered field by field. */
class Expression {
  readonly names: Record<string, string> = {};
  readonly values: Record<string, unknown> = {};
  readonly sets: string[] = [];
  readonly adds: string[] = [];
  readonly conditions: string[] = [];

  constructor(stateKey: string) {
    this.values[':stateKey'] = stateKey;
    this.sets.push('stateKey = :stateKey');
  }

  /** A set or added field `#<p>`, on condition no min, max or latest holds it (it has no companion `#<p>c`). */
  unordered(p: string, field: string): void {
    this.names[`#${p}`] = field;
    this.names[`#${p}c`] = companionOf(field);
    this.conditions.push(`attribute_not_exists(#${p}c)`);
  }

  /** A min or max field `#<p>` (companion `#<p>c`) of value `:<p>`, as guessed. */
  number(p: string, field: string, operation: 'min' | 'max', value: number, guess: Guess): void {
    this.names[`#${p}`] = field;
    this.names[`#${p}c`] = companionOf(field);
    this.names['#op'] = 'op';
    this.values[`:${p}`] = value;
    this.values[`:${operation}`] = operation;
    const [moves, stays] = operation === 'min' ? ['>=', '<='] : ['<=', '>='];
    const same = `#${p}c.#op = :${operation}`;
    if (guess === 'skip') {
      this.conditions.push(`(${same} AND #${p} ${stays} :${p})`);
      return;
    }
    this.values[`:${operation}c`] = { op: operation };
    this.sets.push(`#${p} = :${p}`, `#${p}c = :${operation}c`);
    this.conditions.push(`(attribute_not_exists(#${p}) OR (${same} AND #${p} ${moves} :${p}))`);
  }

  /** A latest field `#<p>` (companion `#<p>c`), its order key `:<p>k`, as guessed. */
  latest(p: string, field: string, latest: LatestValue, guess: Guess): void {
    const order = latestOrderKey(latest);
    this.names[`#${p}c`] = companionOf(field);
    this.names['#order'] = 'order';
    this.values[`:${p}k`] = order;
    if (guess === 'skip') {
      this.conditions.push(`#${p}c.#order >= :${p}k`);
      return;
    }
    this.names[`#${p}`] = field;
    this.values[`:${p}`] = latest.value;
    this.values[`:${p}c`] = { op: 'latest', at: latest.at, order };
    this.sets.push(`#${p} = :${p}`, `#${p}c = :${p}c`);
    this.conditions.push(`(attribute_not_exists(#${p}) OR #${p}c.#order <= :${p}k)`);
  }
}

/** The beliefs an `apply` guess leaves: the field moved to the value sent. */
function movedBy(
  delta: StateDelta,
  guesses: ReadonlyMap<string, { operation: OrderedOperation; guess: Guess }>,
) {
  const moved = new Map<string, Belief>();
  for (const [field, { operation, guess }] of guesses) {
    if (guess === 'skip') continue;
    if (operation === 'latest') moved.set(field, { operation, order: latestOrderKey(delta.latest![field]!) });
    else moved.set(field, { operation, value: delta[operation]![field]! });
  }
  return moved;
}

/** One delta as a transaction item: SET of its fields, ADD of its numbers, min, max and latest on conditions. */
export function stateItem(table: string, pipeline: string, delta: StateDelta): TransactItem {
  const expression = new Expression(delta.key);
  Object.entries(delta.fields).forEach(([field, value], i) => {
    expression.unordered(`f${i}`, field);
    expression.values[`:f${i}`] = value;
    expression.sets.push(`#f${i} = :f${i}`);
  });
  Object.entries(delta.add).forEach(([field, value], i) => {
    expression.unordered(`a${i}`, field);
    expression.values[`:a${i}`] = value;
    expression.adds.push(`#a${i} :a${i}`);
  });
  const guesses = guessesFor(delta, beliefsOf(table, pipeline, delta.key));
  [...guesses].forEach(([field, { operation, guess }], i) => {
    if (operation === 'latest') expression.latest(`l${i}`, field, delta.latest![field]!, guess);
    else expression.number(`o${i}`, field, operation, delta[operation]![field]!, guess);
  });
  if (guesses.size > 0) plans.set(delta, { table, pipeline, guesses, moved: movedBy(delta, guesses) });
  const { names, values, sets, adds, conditions } = expression;
  return {
    Update: {
      TableName: table,
      Key: keys.state(pipeline, delta.key),
      UpdateExpression: `SET ${sets.join(', ')}${adds.length ? ` ADD ${adds.join(', ')}` : ''}`,
      ExpressionAttributeNames: Object.keys(names).length ? names : undefined,
      ExpressionAttributeValues: values,
      ...(conditions.length > 0
        ? {
            ConditionExpression: conditions.join(' AND '),
            ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
          }
        : {}),
    },
  };
}

/**
 * Believes what the updates of these deltas (sent by {@link stateItem} in a transaction that committed) left
 * their fields holding. Only a committed update is believed: a belief taken when an update is sent would be seen
 * by another writer of the same container before the update commits or fails, and two transactions that each
 * skip a field on the other's unfinished apply would refuse each other on every retry. A belief from a commit can
 * only be behind the stored field (it only moves by the join), so a `skip` it suggests is always right.
 */
export function believeCommitted(deltas: readonly StateDelta[]): void {
  for (const delta of deltas) {
    const plan = plans.get(delta);
    if (plan !== undefined) assume(plan.table, plan.pipeline, delta.key, plan.moved);
  }
}
