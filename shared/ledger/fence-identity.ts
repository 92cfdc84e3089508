/**
 * The fence's identity ({@link FenceIdentity}: the fence record, the batch start and the ring of recent batch
 * starts) as one binary attribute, `identity`, about 190 bytes where the two maps and the packed ring of the release
 * before (`recent-starts.ts`) take 570. DynamoDB bills every staging write by the whole fence item, per started
 * kilobyte, and the fence also holds a checkpoint interval's inline entries (`inline-entries.ts`): every byte the
 * identity gives up is room for an entry before the write costs a second unit.
 *
 *   byte 0    format (1)
 *   the fence record     offset (varint), timestamp (zigzag varint), the first 16 bytes of its digest
 *   varint n  ring starts, oldest first; the last is the batch start
 *   n starts  the fence offset minus the start's (varint), its timestamp minus the fence record's (zigzag
 *             varint), the first 16 bytes of its digest
 *
 * 16 bytes of a SHA-256 tell a redelivered record from another (`processor/batch-judge.ts`, {@link sameDigest}):
 * no producer finds a second record with the same 128 bits. An identity that does not pack (an offset or timestamp
 * out of range, a digest that is not a SHA-256, a batch start that is not the ring's last) is written in the form
 * of the release before; readers take whichever form names the fence's staged offset (`fence-reads.ts`).
 */
import { PackedReader, varint, zigzag, zigzagFits } from './packed-bytes.ts';
import { LEGACY_RING_ATTRIBUTE, RING_ATTRIBUTE, ringUpdate } from './recent-starts.ts';
import { type FenceIdentity, RECENT_STARTS, type RecordFingerprint } from './records.ts';

/** The fence attribute holding the packed identity. */
export const IDENTITY_ATTRIBUTE = 'identity';

const FORMAT = 1;
/** The digest bytes an identity keeps. */
export const KEPT_DIGEST_BYTES = 16;
const FULL_DIGEST_BYTES = 32;

/** The digest's bytes, when it is the base64url of a SHA-256 or of the part of one an identity keeps. */
function digestBytes(digest: string): Buffer | undefined {
  const bytes = Buffer.from(digest, 'base64url');
  const whole = bytes.toString('base64url') === digest;
  return whole && (bytes.byteLength === FULL_DIGEST_BYTES || bytes.byteLength === KEPT_DIGEST_BYTES)
    ? bytes
    : undefined;
}

/**
 * Whether two digests name the same record: equal, or one is the part of the other an identity keeps (the
 * record's own digest is whole, the fence's may be cut to {@link KEPT_DIGEST_BYTES}).
 */
export function sameDigest(a: string, b: string): boolean {
  if (a === b) return true;
  const x = digestBytes(a);
  const y = digestBytes(b);
  if (x === undefined || y === undefined || x.byteLength === y.byteLength) return false;
  return x.subarray(0, KEPT_DIGEST_BYTES).equals(y.subarray(0, KEPT_DIGEST_BYTES));
}

const isOffset = (offset: number) => Number.isSafeInteger(offset) && offset >= 0;

/** One start's bytes relative to the fence record; undefined when it does not pack. */
function packStart(start: RecordFingerprint, fence: RecordFingerprint): number[] | undefined {
  const digest = digestBytes(start.digest);
  const below = fence.offset - start.offset;
  const later = start.timestamp - fence.timestamp;
  if (!digest || !isOffset(start.offset) || below < 0 || !zigzagFits(later)) return undefined;
  return [...varint(below), ...varint(zigzag(later)), ...digest.subarray(0, KEPT_DIGEST_BYTES)];
}

/** The identity packed, or undefined when it does not pack (see the module doc). */
export function packIdentity(identity: FenceIdentity): Uint8Array | undefined {
  const { fenceRecord, batchStart, recentStarts } = identity;
  const last = recentStarts.at(-1);
  const digest = digestBytes(fenceRecord.digest);
  if (!digest || !isOffset(fenceRecord.offset) || !zigzagFits(fenceRecord.timestamp)) return undefined;
  if (recentStarts.length > RECENT_STARTS || last === undefined) return undefined;
  if (last.offset !== batchStart.offset || last.timestamp !== batchStart.timestamp) return undefined;
  if (!sameDigest(last.digest, batchStart.digest)) return undefined;
  const bytes = [
    FORMAT,
    ...varint(fenceRecord.offset),
    ...varint(zigzag(fenceRecord.timestamp)),
    ...digest.subarray(0, KEPT_DIGEST_BYTES),
    ...varint(recentStarts.length),
  ];
  for (const start of recentStarts) {
    const packed = packStart(start, fenceRecord);
    if (packed === undefined) return undefined;
    bytes.push(...packed);
  }
  return Uint8Array.from(bytes);
}

function readStart(read: PackedReader, fence: RecordFingerprint): RecordFingerprint | undefined {
  const below = read.varint();
  const later = read.signed();
  const digest = read.take(KEPT_DIGEST_BYTES);
  if (below === undefined || later === undefined || digest === undefined || below > fence.offset) return;
  const timestamp = fence.timestamp + later;
  if (!Number.isSafeInteger(timestamp)) return undefined;
  return { offset: fence.offset - below, timestamp, digest: digest.toString('base64url') };
}

/**
 * The identity a packed value holds, its digests cut to {@link KEPT_DIGEST_BYTES}; undefined when the value is
 * not one, exactly (an empty ring, more starts than a fence keeps, bytes left over).
 */
export function unpackIdentity(value: unknown): FenceIdentity | undefined {
  if (!(value instanceof Uint8Array)) return undefined;
  const read = new PackedReader(value);
  if (read.byte() !== FORMAT) return undefined;
  const offset = read.varint();
  const timestamp = read.signed();
  const digest = read.take(KEPT_DIGEST_BYTES);
  const count = read.varint();
  if (offset === undefined || timestamp === undefined || digest === undefined || count === undefined) return;
  if (count < 1 || count > RECENT_STARTS) return undefined;
  const fenceRecord = { offset, timestamp, digest: digest.toString('base64url') };
  const recentStarts: RecordFingerprint[] = [];
  for (let i = 0; i < count; i++) {
    const start = readStart(read, fenceRecord);
    if (start === undefined) return undefined;
    recentStarts.push(start);
  }
  const batchStart = recentStarts.at(-1);
  if (!read.done || batchStart === undefined) return undefined;
  return { fenceRecord, batchStart, recentStarts };
}

/** Every identity attribute either form sets or removes, by placeholder: the update names them all. */
const IDENTITY_NAMES = {
  '#identity': IDENTITY_ATTRIBUTE,
  '#fenceRecord': 'fenceRecord',
  '#batchStart': 'batchStart',
  '#ring': RING_ATTRIBUTE,
  '#legacyRing': LEGACY_RING_ATTRIBUTE,
};

/**
 * The fence update's part for the identity: packed when `compact` (this release's readers alone run, the
 * processor's gate: `processor/inline-gate.ts`) and it packs, the other form removed; else the form of the release
 * before, the packed one removed. One form at a time: a reader never weighs an old one against a new.
 */
export function identityUpdate(
  identity: FenceIdentity,
  compact: boolean,
): {
  readonly set: string;
  readonly remove: string;
  readonly names: Record<string, string>;
  readonly values: Record<string, unknown>;
} {
  const packed = compact ? packIdentity(identity) : undefined;
  if (packed !== undefined) {
    return {
      set: '#identity = :identity',
      remove: '#fenceRecord, #batchStart, #ring, #legacyRing',
      names: IDENTITY_NAMES,
      values: { ':identity': packed },
    };
  }
  const ring = ringUpdate(identity.recentStarts);
  return {
    set: `#fenceRecord = :fenceRecord, #batchStart = :batchStart, ${ring.set}`,
    remove: `#identity, ${ring.remove}`,
    names: { ...IDENTITY_NAMES, ...ring.names },
    values: { ':fenceRecord': identity.fenceRecord, ':batchStart': identity.batchStart, ...ring.values },
  };
}
