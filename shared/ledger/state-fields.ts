/**
 * How a keyed-state item holds its fields (item `<pl>#STATE#<stateKey>` / `STATE`, beside `stateKey`): each field
 * is one attribute of its own name, the value as readers want it — text for `fields`, a number for `add`, `min`
 * and `max`, the value (text or number) for `latest`. A min, max or latest field has a companion attribute,
 * `@<field>`, a map naming its operation (`{op: "min"}`, `{op: "max"}`) and, for latest, its time and order key
 * (`{op: "latest", at, order}`, `shared/transforms/state-order.ts`). The update's conditions read the companion,
 * so a field keeps the operation that first wrote it; readers that take only text and numbers (the local run's
 * aggregates) see the values alone. A field without a companion was set (text) or added to (a number).
 */
import { COMPANION_PREFIX, type StateOperation } from '../transforms/state-delta.ts';
import { timeOfOrderKey } from '../transforms/state-order.ts';

/** Attributes of a state item that are the ledger's, not fields. */
const BOOKKEEPING: ReadonlySet<string> = new Set(['pk', 'sk', 'stateKey']);

/** The companion attribute of a min, max or latest field. */
export function companionOf(field: string): string {
  return `${COMPANION_PREFIX}${field}`;
}

/** A field as stored: its operation and, for latest, its time and order key. */
export interface StoredField {
  readonly operation: StateOperation;
  readonly value: unknown;
  readonly at?: number;
  readonly order?: string;
}

/** The field as the item holds it, or undefined when the item has no such field. */
export function storedField(item: Readonly<Record<string, unknown>>, field: string): StoredField | undefined {
  const value = item[field];
  if (value === undefined) return undefined;
  const companion = item[companionOf(field)] as { op?: unknown; at?: unknown; order?: unknown } | undefined;
  const op = companion?.op;
  if (op === 'min' || op === 'max') return { operation: op, value };
  if (op === 'latest' && typeof companion?.order === 'string') {
    return { operation: 'latest', value, order: companion.order, at: timeOfOrderKey(companion.order) };
  }
  return { operation: typeof value === 'number' || typeof value === 'bigint' ? 'add' : 'set', value };
}

/** A state item as a reader shows it: its key, each field's value and operation, each latest's time. */
export interface StateView {
  readonly key: string;
  readonly values: Record<string, string | number>;
  readonly operations: Record<string, StateOperation>;
  readonly latestAt: Record<string, number>;
}

/** Reads a stored state item (plain values, as the document client returns them). */
export function viewOfState(item: Readonly<Record<string, unknown>>): StateView {
  const values: Record<string, string | number> = {};
  const operations: Record<string, StateOperation> = {};
  const latestAt: Record<string, number> = {};
  for (const name of Object.keys(item)) {
    if (BOOKKEEPING.has(name) || name.startsWith(COMPANION_PREFIX)) continue;
    const field = storedField(item, name);
    if (field === undefined) continue;
    values[name] = typeof field.value === 'bigint' ? Number(field.value) : (field.value as string | number);
    operations[name] = field.operation;
    if (field.at !== undefined) latestAt[name] = field.at;
  }
  return { key: String(item.stateKey), values, operations, latestAt };
}

type AttributeValue = Readonly<Record<string, unknown>>;

/** One attribute value in DynamoDB's wire form as a plain value. */
function plainValue(value: AttributeValue): unknown {
  if ('S' in value) return value.S;
  if ('N' in value) return Number(value.N);
  if ('BOOL' in value) return value.BOOL;
  if ('NULL' in value) return null;
  if ('M' in value) return plainMap(value.M as Record<string, AttributeValue>);
  if ('L' in value) return (value.L as AttributeValue[]).map(plainValue);
  if ('SS' in value) return new Set(value.SS as string[]);
  if ('NS' in value) return new Set((value.NS as string[]).map(Number));
  return value;
}

function plainMap(map: Readonly<Record<string, AttributeValue>>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(map).map(([name, value]) => [name, plainValue(value)]));
}

/**
 * An item as a cancelled transaction's reasons return it (DynamoDB's wire form, which the document client does
 * not translate there) in plain values; an item in plain values already is returned as it is.
 */
export function plainItem(item: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const wire = typeof item.pk === 'object' && item.pk !== null && 'S' in item.pk;
  return wire ? plainMap(item as Record<string, AttributeValue>) : { ...item };
}
