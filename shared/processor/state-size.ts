/**
 * Which records of a chunk would grow a keyed-state item past DynamoDB's item limit (L1, L3). A record's own
 * deltas are bounded at evaluation (`evaluate.ts`: at most 100 fields of at most 1 KB), but an item collects the
 * fields of every record that sets new names, so it can grow past 400 KB over many records; DynamoDB then refuses
 * the staging transaction, the same on every retry. Such a record is dead-lettered instead, as a state type
 * conflict is, and the rest of the chunk is staged.
 *
 * Sizes are upper bounds of DynamoDB's own count (UTF-8 bytes of each attribute name and string, at most 21 bytes
 * per number), so a record judged to fit does fit: the re-planned chunk is never refused again for the same item.
 * The judgement runs only after DynamoDB refused a chunk, so the steady state pays nothing for it.
 */
import type { EvaluatedRecord } from './evaluate.ts';
import { stateItemBytes } from './evaluate.ts';

/** DynamoDB's largest item: 400 KB, names and values together. */
export const MAX_ITEM_BYTES = 400 * 1024;

/** The most a number takes in an item (38 significant digits, plus sign and exponent). */
const NUMBER_BYTES = 21;

/** An upper bound of what one attribute's value takes in an item. */
function valueBytes(value: unknown): number {
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (typeof value === 'number' || typeof value === 'bigint') return NUMBER_BYTES;
  if (value instanceof Uint8Array) return value.byteLength;
  if (value instanceof Set) return [...value].reduce((sum: number, v) => sum + valueBytes(v) + 1, 3);
  // Maps, lists, booleans and nulls: their JSON text bounds them (a state item holds none of them itself).
  return Buffer.byteLength(JSON.stringify(value) ?? '') + 3;
}

/** A state item's attributes by name with their sizes (name and value), as stored or as it would become. */
class ItemSize {
  private constructor(
    private readonly attributes: Map<string, number>,
    private total: number,
  ) {}

  /** A stored item; one not stored yet counts its key attributes (pk, sk, stateKey) as `base`. */
  static of(stored: Record<string, unknown> | undefined, base: number): ItemSize {
    const size = new ItemSize(new Map(), stored === undefined ? base : 0);
    for (const [name, value] of Object.entries(stored ?? {})) size.put(name, valueBytes(value));
    return size;
  }

  get bytes(): number {
    return this.total;
  }

  /** The size after a delta (this one is left as it is). */
  after(fields: Readonly<Record<string, string>>, add: Readonly<Record<string, number>>): ItemSize {
    const next = new ItemSize(new Map(this.attributes), this.total);
    for (const [name, value] of Object.entries(fields)) next.put(name, Buffer.byteLength(value));
    for (const name of Object.keys(add)) if (!this.attributes.has(name)) next.put(name, NUMBER_BYTES);
    return next;
  }

  private put(name: string, value: number): void {
    const size = Buffer.byteLength(name) + value;
    this.total += size - (this.attributes.get(name) ?? 0);
    this.attributes.set(name, size);
  }
}

/**
 * The records of `records` (offset order) whose deltas would take one of the `stored` items (by state key; an
 * absent entry is an item not stored yet) past {@link MAX_ITEM_BYTES}, with the reason. The records before each one
 * that fit are counted in: they are staged with the same chunk. Only state keys in `stored` are judged.
 */
export function oversizedStateRecords(
  records: readonly EvaluatedRecord[],
  stored: ReadonlyMap<string, Record<string, unknown> | undefined>,
): Map<number, string> {
  const items = new Map<string, ItemSize>();
  const found = new Map<number, string>();
  for (const record of records) {
    const grown = new Map<string, ItemSize>();
    let over: { key: string; bytes: number } | undefined;
    for (const delta of record.state) {
      if (!stored.has(delta.key)) continue;
      const current =
        grown.get(delta.key) ??
        items.get(delta.key) ??
        ItemSize.of(stored.get(delta.key), stateItemBytes({ key: delta.key, fields: {}, add: {} }));
      const next = current.after(delta.fields, delta.add);
      if (next.bytes > MAX_ITEM_BYTES) {
        over = { key: delta.key, bytes: next.bytes };
        break;
      }
      grown.set(delta.key, next);
    }
    if (over === undefined) {
      for (const [key, size] of grown) items.set(key, size);
      continue;
    }
    found.set(
      record.offset,
      `state item ${JSON.stringify(over.key.slice(0, 100))} would grow past DynamoDB's 400 KB item limit with ` +
        `this record's fields (to about ${over.bytes} bytes): a state item collects every field name ever set ` +
        'on its key, so keep the names of a key few',
    );
  }
  return found;
}
