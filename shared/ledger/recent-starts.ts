/**
 * The fence's ring of recent batch starts ({@link FenceIdentity.recentStarts}) as one binary attribute, `ring`:
 * 48 bytes a start (offset, timestamp, the 32 bytes of its SHA-256 digest) instead of a list of maps that spell
 * each digest in base64 and each field by name, about 100 bytes a start. The ring is most of a fence item's own
 * bytes, and DynamoDB bills every staging write by the whole item, per started kilobyte.
 *
 * This is the form of the release before, still written while the processor's gate is shut
 * (`processor/inline-gate.ts`); once it opens, the ring is packed with the rest of the fence's identity, in
 * about 20 bytes a start (`fence-identity.ts`).
 *
 * The ring is advisory (it only turns a false stop into a proven redelivery, `processor/batch-judge.ts`): a
 * reader of the release before this attribute finds no list and judges without a ring, and this release reads
 * the list a fence of that release carries. A value that does not unpack counts as no ring.
 */
import type { RecordFingerprint } from './records.ts';

/** The fence attribute holding the packed ring. */
export const RING_ATTRIBUTE = 'ring';

/** The attribute the ring was a list of maps in, read when `ring` is absent and removed by every write. */
export const LEGACY_RING_ATTRIBUTE = 'recentStarts';

const DIGEST_BYTES = 32;
const START_BYTES = 8 + 8 + DIGEST_BYTES;

/** The digest's 32 bytes, when it is the base64url of exactly that many (what `recordDigest` makes). */
function digestBytes(digest: string): Buffer | undefined {
  const bytes = Buffer.from(digest, 'base64url');
  return bytes.byteLength === DIGEST_BYTES && bytes.toString('base64url') === digest ? bytes : undefined;
}

/**
 * The ring packed, or undefined when a start cannot be (an offset that is not a safe non-negative integer, a
 * digest that is not a SHA-256 in base64url): the writer then keeps the list form, which every reader reads.
 */
export function packRing(starts: readonly RecordFingerprint[]): Uint8Array | undefined {
  const packed = Buffer.alloc(starts.length * START_BYTES);
  for (const [i, start] of starts.entries()) {
    const digest = digestBytes(start.digest);
    if (!digest || !Number.isSafeInteger(start.offset) || start.offset < 0) return undefined;
    const at = i * START_BYTES;
    packed.writeBigUInt64BE(BigInt(start.offset), at);
    packed.writeDoubleBE(start.timestamp, at + 8);
    digest.copy(packed, at + 16);
  }
  return packed;
}

/** The starts of a packed ring, oldest first; undefined when the value is not one. */
export function unpackRing(value: unknown): RecordFingerprint[] | undefined {
  if (!(value instanceof Uint8Array) || value.byteLength % START_BYTES !== 0) return undefined;
  const bytes = Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  const starts: RecordFingerprint[] = [];
  for (let at = 0; at < bytes.byteLength; at += START_BYTES) {
    const offset = bytes.readBigUInt64BE(at);
    if (offset > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
    starts.push({
      offset: Number(offset),
      timestamp: bytes.readDoubleBE(at + 8),
      digest: bytes.subarray(at + 16, at + START_BYTES).toString('base64url'),
    });
  }
  return starts;
}

/**
 * The fence update's part for the ring: packed, the list form removed; or, when a start does not pack, the list,
 * the packed form removed (a reader takes both: `fence-reads.ts`).
 */
export function ringUpdate(starts: readonly RecordFingerprint[]): {
  readonly set: string;
  readonly remove: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, unknown>;
} {
  const names = { '#ring': RING_ATTRIBUTE, '#legacyRing': LEGACY_RING_ATTRIBUTE };
  const packed = packRing(starts);
  return packed
    ? { set: '#ring = :ring', remove: '#legacyRing', names, values: { ':ring': packed } }
    : { set: '#legacyRing = :legacyRing', remove: '#ring', names, values: { ':legacyRing': starts } };
}
