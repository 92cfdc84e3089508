/**
 * Which records of a chunk would grow a keyed-state item past DynamoDB's item limit (L1, L3). A record's own
 * deltas are bounded at evaluation (`evaluate.ts`: at most 100 fields of at most 1 KB), but an item collects the
 * fields of every record that sets new names, so it can grow past 400 KB over many records; DynamoDB then refuses
 * the staging transaction, the same on every retry. Such a record is dead-lettered instead, as a state type
 * conflict is, and the rest of the chunk is staged.
 *
 * Sizes are upper bounds of DynamoDB's own count (UTF-8 bytes of each attribute name and string; a number takes
 * about one byte per two significant digits plus one), so a record judged to fit does fit: the re-planned chunk is
 * never refused again for the same item. A stored number is counted from its own digits and the result of an add
 * from its operands' (from one position above the larger one's highest digit, for a carry, down to the lower of
 * their lowest: 1e10 + 0.5 has 12 digits), not at the 21 bytes a number
 * can take at most: an item made mostly of small counters would otherwise count as over the limit by itself, and
 * an add that grows nothing would be dead-lettered next to a record that does grow the item.
 * The judgement runs only after DynamoDB refused a chunk, so the steady state pays nothing for it.
 */
import { companionOf } from '../ledger/state-fields.ts';
import { latestOrderKey } from '../transforms/state-order.ts';
import type { StateDelta } from '../transforms/types.ts';
import type { EvaluatedRecord } from './evaluate.ts';
import { stateItemBytes } from './evaluate.ts';

/** DynamoDB's largest item: 400 KB, names and values together. */
export const MAX_ITEM_BYTES = 400 * 1024;

/** DynamoDB keeps at most 38 significant digits of a number. */
const MAX_DIGITS = 38;

/**
 * The decimal positions of a number's highest and lowest significant digits (10^hi .. 10^lo; leading and trailing
 * zeroes are not stored). Zero counts as one digit at 10^0.
 */
interface Span {
  readonly hi: number;
  readonly lo: number;
}

function spanOf(value: number | bigint): Span {
  const text = (typeof value === 'bigint' ? value.toString() : String(value)).replace(/^-/, '');
  const [mantissa = '0', exponent = '0'] = text.toLowerCase().split('e');
  const [int = '', fraction = ''] = mantissa.split('.');
  const digits = int + fraction;
  const first = digits.search(/[1-9]/);
  if (first < 0) return { hi: 0, lo: 0 };
  let last = digits.length - 1;
  while (digits[last] === '0') last -= 1;
  const shift = int.length - 1 + Number(exponent);
  return { hi: shift - first, lo: shift - last };
}

/** The significant digits a span holds, at most DynamoDB's 38. */
function digitsOf({ hi, lo }: Span): number {
  return Math.min(hi - lo + 1, MAX_DIGITS);
}

/**
 * A span holding the sum of two numbers of spans `a` and `b`: one position above the larger operand's highest
 * digit (a carry), down to the lower of their lowest digits.
 */
function sumSpan(a: Span, b: Span): Span {
  return { hi: Math.max(a.hi, b.hi) + 1, lo: Math.min(a.lo, b.lo) };
}

/** The significant digits of a number, at least 1. */
export function significantDigits(value: number | bigint): number {
  return digitsOf(spanOf(value));
}

/**
 * An upper bound of a number's stored size with `digits` significant digits: DynamoDB stores two digits a byte
 * plus an exponent byte; one digit more covers digits that straddle a byte, and a negative number takes a byte
 * more for its terminator.
 */
export function numberBytes(digits: number, negative = true): number {
  return Math.ceil((Math.min(digits, MAX_DIGITS) + 1) / 2) + 1 + (negative ? 1 : 0);
}

function isNegative(value: number | bigint): boolean {
  return typeof value === 'bigint' ? value < 0n : value < 0;
}

/** An upper bound of what one attribute's value takes in an item. */
function valueBytes(value: unknown): number {
  if (typeof value === 'string') return Buffer.byteLength(value);
  if (typeof value === 'number' || typeof value === 'bigint')
    return numberBytes(significantDigits(value), isNegative(value));
  if (value instanceof Uint8Array) return value.byteLength;
  if (value instanceof Set) return [...value].reduce((sum: number, v) => sum + valueBytes(v) + 1, 3);
  // Maps, lists, booleans and nulls: their JSON text bounds them (a state item holds none of them itself).
  return Buffer.byteLength(JSON.stringify(value) ?? '') + 3;
}

/** A state item's attributes by name with their sizes (name and value), as stored or as it would become. */
class ItemSize {
  private constructor(
    private readonly attributes: Map<string, number>,
    /** Spans bounding the item's numbers, by name (stored, or after adds). */
    private readonly spans: Map<string, Span>,
    private total: number,
  ) {}

  /** A stored item; one not stored yet counts its key attributes (pk, sk, stateKey) as `base`. */
  static of(stored: Record<string, unknown> | undefined, base: number): ItemSize {
    const size = new ItemSize(new Map(), new Map(), stored === undefined ? base : 0);
    for (const [name, value] of Object.entries(stored ?? {})) {
      size.put(name, valueBytes(value));
      if (typeof value === 'number' || typeof value === 'bigint') size.spans.set(name, spanOf(value));
    }
    return size;
  }

  get bytes(): number {
    return this.total;
  }

  /**
   * The size after a delta (this one is left as it is). A min, max or latest field is counted as written, with
   * its companion: an upper bound, as the update may leave it as it is.
   */
  after(delta: StateDelta): ItemSize {
    const next = new ItemSize(new Map(this.attributes), new Map(this.spans), this.total);
    for (const [name, value] of Object.entries(delta.fields)) {
      next.put(name, Buffer.byteLength(value));
      next.spans.delete(name);
    }
    for (const [name, value] of [...Object.entries(delta.min ?? {}), ...Object.entries(delta.max ?? {})]) {
      next.putNumber(name, value);
      next.put(companionOf(name), valueBytes({ op: 'max' })); // a min's companion is as large
    }
    for (const [name, latest] of Object.entries(delta.latest ?? {})) {
      if (typeof latest.value === 'number') next.putNumber(name, latest.value);
      else {
        next.put(name, Buffer.byteLength(latest.value));
        next.spans.delete(name);
      }
      next.put(companionOf(name), valueBytes({ op: 'latest', at: latest.at, order: latestOrderKey(latest) }));
    }
    for (const [name, add] of Object.entries(delta.add)) {
      const before = next.spans.get(name);
      const span = before === undefined ? spanOf(add) : sumSpan(before, spanOf(add));
      next.spans.set(name, span);
      // The sum's sign is not known here: counted as negative (a byte more).
      next.put(name, numberBytes(digitsOf(span)));
    }
    return next;
  }

  /** A number written as it is (not added to). */
  private putNumber(name: string, value: number): void {
    this.spans.set(name, spanOf(value));
    this.put(name, valueBytes(value));
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
      const next = current.after(delta);
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
