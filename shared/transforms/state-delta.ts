/**
 * What one keyed-state delta may hold, checked when its record is evaluated, so that no delta can fail a staging
 * transaction on every retry and stall its partition (L1): such a record is dead-lettered with a one-line reason.
 *
 * A delta names one state item (`key`) and the operations on its fields: `fields` set text, `add` adds integers,
 * `min` and `max` keep the smallest and largest number given, `latest` the value with the greatest time
 * (`state-order.ts`). A field takes one operation. The bounds keep every item and every update far within
 * DynamoDB's limits: item size, expression length (each min, max and latest field is a condition of the update,
 * `shared/ledger/state-update.ts`), and the numbers it stores exactly.
 */
import type { LatestValue, StateDelta } from './types.ts';

/** Most fields (every operation together) of one state item, folded over a chunk too (`state-fold.ts`). */
export const MAX_STATE_FIELDS = 100;
/**
 * Most `min`, `max` and `latest` fields of one state key in one update. Every field is a condition of the update
 * (`shared/ledger/state-update.ts`): about 70 bytes for one of these, 32 for a set or added field, and DynamoDB
 * takes at most 4 KB of condition expression: 20 of them and 80 others fit.
 */
export const MAX_ORDERED_FIELDS = 20;
/** Longest state field name (UTF-8 bytes). */
export const MAX_FIELD_NAME_BYTES = 255;
/** Longest text value (`fields`, a `latest` string; UTF-8 bytes). With the bounds above an item stays < 400 KB. */
export const MAX_FIELD_VALUE_BYTES = 1024;
/**
 * Most bytes of state items in one staging transaction (DynamoDB caps a transaction at 4 MB; the rest is left
 * for the fence, entries and claims). One record's state must fit alone; the chunk planner ends a chunk before it.
 */
export const TRANSACTION_STATE_BUDGET_BYTES = 3 * 1024 * 1024;
/**
 * The smallest magnitude DynamoDB stores (1e-130); a number closer to 0 is refused by DynamoDB on every retry.
 * Numbers are also within ±(2^53 - 1): the document client refuses to write a larger one as a number.
 */
export const MIN_NUMBER_MAGNITUDE = 1e-130;
/** The largest `latest` time: times are compared as integers, exactly. */
export const MAX_LATEST_TIME = Number.MAX_SAFE_INTEGER;
/**
 * Field names start with it only where the ledger keeps a min, max or latest field's operation (and a latest's
 * time): `@<field>` beside `<field>` (`shared/ledger/state-update.ts`).
 */
export const COMPANION_PREFIX = '@';

/**
 * State field names the ledger's state item uses itself (`pk`, `sk`, `stateKey`; `expiresAt` is the table's TTL
 * attribute, so a state field of that name would let TTL delete the aggregate), and names that break folding in
 * plain objects. Names starting with {@link COMPANION_PREFIX} are reserved too.
 */
export const RESERVED_STATE_FIELDS: ReadonlySet<string> = new Set([
  'pk',
  'sk',
  'stateKey',
  'expiresAt',
  '__proto__',
  'constructor',
  'prototype',
]);

/** The operations a state field takes, in the order reasons name them. */
export const STATE_OPERATIONS = ['set', 'add', 'min', 'max', 'latest'] as const;
export type StateOperation = (typeof STATE_OPERATIONS)[number];
/** The operations the ledger applies on a condition (DynamoDB has no update that keeps the smaller number). */
export type OrderedOperation = Extract<StateOperation, 'min' | 'max' | 'latest'>;

const LONE_SURROGATE = /\p{Cs}/u;

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Whether `name` is reserved for the ledger. */
export function isReservedStateField(name: string): boolean {
  return RESERVED_STATE_FIELDS.has(name) || name.startsWith(COMPANION_PREFIX);
}

/** Every field a delta touches with its operation, in the order of {@link STATE_OPERATIONS}. */
export function operationsOf(delta: StateDelta): Array<[string, StateOperation]> {
  return namesByOperation(delta).flatMap(([operation, names]) =>
    names.map((name): [string, StateOperation] => [name, operation]),
  );
}

export function isOrdered(operation: StateOperation): operation is OrderedOperation {
  return operation === 'min' || operation === 'max' || operation === 'latest';
}

/**
 * Why a transform's state delta is not one (a plain object with a string key and each operation a map of the
 * right values), or undefined. Bounds come after: {@link stateDeltaProblem}.
 */
export function stateShapeProblem(delta: unknown): string | undefined {
  if (!isPlainObject(delta) || typeof delta.key !== 'string')
    return 'transform returned a state delta without a key';
  const at = `state delta "${delta.key}"`;
  const maps = (value: unknown, accepts: (v: unknown) => boolean) =>
    isPlainObject(value) && Object.values(value).every(accepts);
  if (!maps(delta.fields, (v) => typeof v === 'string')) return `${at}: fields must map names to strings`;
  if (!maps(delta.add, (v) => typeof v === 'number')) return `${at}: add must map names to numbers`;
  for (const operation of ['min', 'max'] as const) {
    if (delta[operation] !== undefined && !maps(delta[operation], (v) => typeof v === 'number'))
      return `${at}: ${operation} must map names to numbers`;
  }
  if (delta.latest !== undefined && !maps(delta.latest, isPlainObject))
    return `${at}: latest must map names to { value, at }`;
  return undefined;
}

function shown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'object' && value !== null) return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}

/** Whether DynamoDB and the document client store `value` as the number it is. */
export function isStorableNumber(value: unknown): value is number {
  if (typeof value !== 'number' || !Number.isFinite(value)) return false;
  const size = Math.abs(value);
  return size === 0 || (size >= MIN_NUMBER_MAGNITUDE && size <= Number.MAX_SAFE_INTEGER);
}

const NUMBER_RULE = `0 or a number from ${MIN_NUMBER_MAGNITUDE} to 2^53 - 1 in size`;

function isWellFormedText(value: string): boolean {
  return !LONE_SURROGATE.test(value) && Buffer.byteLength(value) <= MAX_FIELD_VALUE_BYTES;
}

function latestProblem(name: string, latest: LatestValue): string | undefined {
  const extra = Object.keys(latest).find((field) => field !== 'value' && field !== 'at');
  if (extra !== undefined) return `latest "${name}" must be { value, at }, got the field "${extra}"`;
  const { value, at } = latest as { value: unknown; at: unknown };
  if (!Number.isSafeInteger(at) || (at as number) < 0)
    return `latest "${name}": at must be an integer from 0 to 2^53 - 1, got ${shown(at)}`;
  if (typeof value === 'number') {
    return isStorableNumber(value)
      ? undefined
      : `latest "${name}": value must be ${NUMBER_RULE}, got ${value}`;
  }
  if (typeof value !== 'string') {
    return `latest "${name}": value must be a string or a number, got ${shown(value)}`;
  }
  return isWellFormedText(value)
    ? undefined
    : `latest "${name}": value must be at most ${MAX_FIELD_VALUE_BYTES} bytes of well-formed text`;
}

/** Why a field name cannot be one, or undefined. */
function nameProblem(name: string): string | undefined {
  if (isReservedStateField(name)) return `field name "${name}" is reserved`;
  if (name === '' || LONE_SURROGATE.test(name) || Buffer.byteLength(name) > MAX_FIELD_NAME_BYTES) {
    return `field name must be 1-${MAX_FIELD_NAME_BYTES} bytes of well-formed text`;
  }
  return undefined;
}

/** Why a field's two operations cannot both be, worded as the reasons have always been for set and add. */
export function twoOperations(name: string, a: StateOperation, b: StateOperation): string {
  const [first, then] = [a, b].sort((x, y) => STATE_OPERATIONS.indexOf(x) - STATE_OPERATIONS.indexOf(y));
  if (first === 'set' && then === 'add') return `field "${name}" is both set and added`;
  return `field "${name}" takes two operations (${first} and ${then})`;
}

/** Why the values of one delta's operations cannot be stored exactly, or undefined. */
function valuesProblem(delta: StateDelta): string | undefined {
  for (const [name, value] of Object.entries(delta.fields)) {
    if (!isWellFormedText(value)) {
      return `field "${name}" must be at most ${MAX_FIELD_VALUE_BYTES} bytes of well-formed text`;
    }
  }
  for (const [name, value] of Object.entries(delta.add)) {
    // Integers only, and safe ones: the document client refuses to marshal an unsafe number (a stall), and
    // floats would make state depend on chunking (folded here in binary doubles, summed by DynamoDB in decimal).
    // The chunk planner keeps every folded sum safe too.
    if (!Number.isSafeInteger(value))
      return `add "${name}" must be an integer within ±(2^53 - 1), got ${value}`;
  }
  for (const operation of ['min', 'max'] as const) {
    for (const [name, value] of Object.entries(delta[operation] ?? {})) {
      // Any storable number: the smaller of two numbers is one of them, so nothing depends on how they fold.
      if (!isStorableNumber(value)) return `${operation} "${name}" must be ${NUMBER_RULE}, got ${value}`;
    }
  }
  for (const [name, latest] of Object.entries(delta.latest ?? {})) {
    const problem = latestProblem(name, latest);
    if (problem) return problem;
  }
  return undefined;
}

/** The names each operation of a delta takes, in the order of {@link STATE_OPERATIONS}. */
function namesByOperation(delta: StateDelta): Array<[StateOperation, string[]]> {
  const values = { set: delta.fields, add: delta.add, min: delta.min, max: delta.max, latest: delta.latest };
  return STATE_OPERATIONS.map((operation) => [operation, Object.keys(values[operation] ?? {})]);
}

/** The first field (by operation, then name) that a later operation takes too, as a reason; or undefined. */
function sharedField(delta: StateDelta): string | undefined {
  const byOperation = namesByOperation(delta);
  for (const [i, [operation, names]] of byOperation.entries()) {
    for (const name of names) {
      const later = byOperation.slice(i + 1).find(([, others]) => others.includes(name));
      if (later !== undefined) return twoOperations(name, operation, later[0]);
    }
  }
  return undefined;
}

/**
 * Why one state delta (its key checked already) cannot be one update of one ledger item, or undefined: too many
 * fields, a reserved or malformed name, a field taking two operations, a value the ledger cannot store exactly.
 */
export function stateDeltaProblem(delta: StateDelta): string | undefined {
  const at = `state delta "${delta.key.slice(0, 100)}"`;
  const operations = operationsOf(delta);
  if (operations.length > MAX_STATE_FIELDS) return `${at} has more than ${MAX_STATE_FIELDS} fields`;
  if (operations.filter(([, operation]) => isOrdered(operation)).length > MAX_ORDERED_FIELDS) {
    return `${at} has more than ${MAX_ORDERED_FIELDS} min, max and latest fields`;
  }
  for (const [name] of operations) {
    const problem = nameProblem(name);
    if (problem) return `${at}: ${problem}`;
  }
  const shared = sharedField(delta);
  if (shared) return `${at}: ${shared}`;
  const problem = valuesProblem(delta);
  return problem === undefined ? undefined : `${at}: ${problem}`;
}

/**
 * An upper bound of the bytes a state delta's item adds to a transaction, sized as DynamoDB sizes items (UTF-8
 * bytes of names and strings, at most 21 bytes per number), with room for the pipeline prefix and `sk`. A min,
 * max or latest field counts its `@` companion too (its operation; a latest's time and order key).
 */
export function stateItemBytes(delta: StateDelta): number {
  const text = (value: string | number) => (typeof value === 'string' ? Buffer.byteLength(value) : 21);
  let bytes = 2 * Buffer.byteLength(delta.key) + 200;
  for (const [name, value] of Object.entries(delta.fields))
    bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
  for (const name of Object.keys(delta.add)) bytes += Buffer.byteLength(name) + 21;
  for (const name of [...Object.keys(delta.min ?? {}), ...Object.keys(delta.max ?? {})])
    bytes += 2 * Buffer.byteLength(name) + 1 + 21 + 24;
  for (const [name, { value }] of Object.entries(delta.latest ?? {}))
    bytes +=
      2 * Buffer.byteLength(name) + 1 + text(value) + 56 + (typeof value === 'string' ? text(value) : 16);
  return bytes;
}

/** Copies a delta into null-prototype objects, so folding and key lookups never reach Object.prototype. */
export function ownStateDelta(delta: StateDelta): StateDelta {
  const own = <T>(values: Record<string, T>) =>
    Object.assign(Object.create(null) as Record<string, T>, values);
  return {
    key: delta.key,
    fields: own(delta.fields),
    add: own(delta.add),
    ...(delta.min === undefined ? {} : { min: own(delta.min) }),
    ...(delta.max === undefined ? {} : { max: own(delta.max) }),
    ...(delta.latest === undefined
      ? {}
      : {
          latest: own(
            Object.fromEntries(
              Object.entries(delta.latest).map(([name, { value, at }]) => [name, { value, at }]),
            ),
          ),
        }),
  };
}
