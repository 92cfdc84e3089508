/**
 * Keeps an Avro decode's work proportional to the bytes decoded. The writer's schema is the producer's choice (by
 * the schema id it frames), and an array or map block starts with an item count: avro-js loops that many times
 * without looking at the buffer (reads past its end yield zeros), so a count of 5·10^8 in a 5-byte varint runs for
 * seconds and a 6-byte one past any timeout, and the batch is retried forever. Two rules close it:
 *
 * - every item of an array or entry of a map other than a zero-size one takes at least one byte, so a block whose
 *   count exceeds the bytes left is a truncated value: refused before its items are read;
 * - a zero-size type (null, a record of only zero-size fields; avro-js refuses fixed(0)) has exactly one value, so an array of
 *   them carries nothing but its count, and its count cannot be bounded by bytes: such a schema is refused when it
 *   is compiled. A map's entries always hold a key (a string, at least its length byte), so maps of nulls stay.
 *
 * A union is never zero-size (its branch index is written), so recursion through one always consumes bytes. The
 * bounded reads replace avro-js's `_read` on the compiled array and map types; avro-js's resolvers take the
 * reader type's `_read`, so a writer read into a reader schema is bounded too. avro-js is pinned (1.12.2), and
 * `test/decode/avro-bounds.test.ts` fails if its reading moves away from these members.
 */
import avro from 'avro-js/lib/schemas.js';

type AvroType = ReturnType<typeof avro.createType>;

const { ArrayType, MapType, NullType, RecordType, UnionType } = avro.types;

/** A schema whose values' decoding cannot be bounded by their bytes: refused when compiled. */
export class UnboundedAvroSchemaError extends Error {
  override name = 'UnboundedAvroSchemaError';
}

/** A block declared more items than bytes remain: the value is truncated (or lies about its size). */
export class AvroBlockTooLongError extends Error {
  override name = 'AvroBlockTooLongError';
  constructor(count: number, left: number) {
    super(`a block declares ${count} items with ${Math.max(left, 0)} bytes left`);
  }
}

/** avro-js's reading cursor (`utils.Tap`), as the bounded reads use it. */
interface Tap {
  readonly buf: Buffer;
  pos: number;
  readLong(): number;
  skipLong(): void;
  readString(): string;
}

/** What avro-js reads a value with: a type, or a resolver from a writer type. */
interface Reads {
  _read(tap: Tap): unknown;
}

/** Refuses `type` when it has an array of zero-size items; bounds the block counts of its arrays and maps. */
export function boundAvroType(type: AvroType): void {
  const zeroSize = new Map<AvroType, boolean>();
  const seen = new Set<AvroType>();
  const visit = (node: AvroType, path: string): void => {
    if (seen.has(node)) return;
    seen.add(node);
    if (node instanceof ArrayType) {
      const items = node.getItemsType();
      if (encodesToNothing(items, zeroSize)) {
        throw new UnboundedAvroSchemaError(
          `${path} is an array of items that encode to no bytes (${describe(items)}), ` +
            "so its item count is not bounded by the value's size",
        );
      }
      install(node, readArray);
      visit(items, `${path}[]`);
    } else if (node instanceof MapType) {
      install(node, readMap);
      visit(node.getValuesType(), `${path}{}`);
    } else if (node instanceof RecordType) {
      for (const field of node.getFields()) visit(field.getType(), `${path}.${field.getName()}`);
    } else if (node instanceof UnionType) {
      for (const branch of node.getTypes()) visit(branch, path);
    }
  };
  visit(type, 'the value');
}

/** True for a type whose every value encodes to zero bytes; memoized, as named records may be shared widely. */
function encodesToNothing(type: AvroType, memo: Map<AvroType, boolean>): boolean {
  const known = memo.get(type);
  if (known !== undefined) return known;
  // A record met again while deciding it contains itself with no union, array or map between: no finite value
  // exists (reading one overflows the stack, which decoding reports), and "not zero-size" ends the recursion.
  memo.set(type, false);
  let result = false;
  if (isNull(type)) result = true;
  else if (type instanceof RecordType) {
    result = type.getFields().every((field) => encodesToNothing(field.getType(), memo));
  }
  memo.set(type, result);
  return result;
}

/** Not an `instanceof` in place: a null type has no members of its own, so TypeScript would narrow the rest away. */
function isNull(type: AvroType): boolean {
  return type instanceof NullType;
}

function describe(type: AvroType): string {
  if (isNull(type)) return 'null';
  if (type instanceof RecordType) return `record ${type.getName()}`;
  return 'zero-size';
}

function install(type: AvroType, read: (this: never, tap: Tap) => unknown): void {
  (type as unknown as { _read: typeof read })._read = read;
}

/** A block's item count (a negative count is followed by the block's byte size, skipped), checked against the bytes left. */
function blockCount(tap: Tap): number {
  let count = tap.readLong();
  if (count < 0) {
    count = -count;
    tap.skipLong();
  }
  const left = tap.buf.length - tap.pos;
  if (count > left) throw new AvroBlockTooLongError(count, left);
  return count;
}

/** avro-js's `ArrayType.prototype._read` with the block count checked; `this` is the type or its resolver. */
function readArray(this: { readonly _items: Reads }, tap: Tap): unknown[] {
  const items = this._items;
  const value: unknown[] = [];
  for (let count = blockCount(tap); count > 0; count = blockCount(tap)) {
    for (let i = 0; i < count; i++) value.push(items._read(tap));
  }
  return value;
}

/** avro-js's `MapType.prototype._read` with the block count checked; `this` is the type or its resolver. */
function readMap(this: { readonly _values: Reads }, tap: Tap): Record<string, unknown> {
  const values = this._values;
  const value: Record<string, unknown> = {};
  for (let count = blockCount(tap); count > 0; count = blockCount(tap)) {
    for (let i = 0; i < count; i++) {
      const key = tap.readString();
      value[key] = values._read(tap);
    }
  }
  return value;
}
