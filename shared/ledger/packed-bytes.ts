/**
 * The byte-level pieces of the ledger's packed attributes (`packed-entry.ts`, `fence-identity.ts`): LEB128 varints
 * of safe integers, their zigzag form for signed ones, and a reader that answers undefined rather than throw on
 * bytes that do not hold what it is asked for. DynamoDB bills a write by the item's bytes, so the fence's values
 * are packed; nothing read is trusted, a value that does not unpack exactly is no value.
 */

/** Unsigned LEB128 of a safe non-negative integer (arithmetic, not bit operations: those stop at 32 bits). */
export function varint(value: number): number[] {
  const bytes: number[] = [];
  let rest = value;
  while (rest >= 0x80) {
    bytes.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  bytes.push(rest);
  return bytes;
}

/** Whether {@link zigzag} takes `value`: a safe integer whose zigzag form is safe too. */
export const zigzagFits = (value: number): boolean =>
  Number.isSafeInteger(value) && Math.abs(value) <= Number.MAX_SAFE_INTEGER / 2;

/** A signed safe integer as an unsigned one (0, -1, 1, -2 … as 0, 1, 2, 3 …), for {@link varint}. */
export const zigzag = (value: number): number => (value >= 0 ? value * 2 : -value * 2 - 1);

const unzigzag = (value: number): number => (value % 2 === 0 ? value / 2 : -(value + 1) / 2);

/** The varint of a text's UTF-8 length, then the text. */
export function withLength(text: string): Buffer {
  const bytes = Buffer.from(text, 'utf8');
  return Buffer.concat([Buffer.from(varint(bytes.byteLength)), bytes]);
}

/** A cursor over packed bytes; every read returns undefined past the end or on a value out of range. */
export class PackedReader {
  private at = 0;
  private readonly bytes: Buffer;

  constructor(value: Uint8Array) {
    this.bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  }

  get done(): boolean {
    return this.at === this.bytes.byteLength;
  }

  byte(): number | undefined {
    return this.at < this.bytes.byteLength ? this.bytes[this.at++] : undefined;
  }

  varint(): number | undefined {
    let value = 0;
    for (let scale = 1, i = 0; i < 8; i++, scale *= 0x80) {
      const byte = this.byte();
      if (byte === undefined) return undefined;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return Number.isSafeInteger(value) ? value : undefined;
    }
    return undefined;
  }

  signed(): number | undefined {
    const value = this.varint();
    return value === undefined ? undefined : unzigzag(value);
  }

  take(length: number): Buffer | undefined {
    if (this.at + length > this.bytes.byteLength) return undefined;
    const slice = this.bytes.subarray(this.at, this.at + length);
    this.at += length;
    return slice;
  }

  text(): string | undefined {
    const length = this.varint();
    const bytes = length === undefined ? undefined : this.take(length);
    const text = bytes?.toString('utf8');
    return text !== undefined && Buffer.byteLength(text) === length ? text : undefined;
  }
}
