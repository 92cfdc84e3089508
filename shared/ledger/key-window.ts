/**
 * Partition-scoped idempotency (setting `idempotencyScope: partition`): the idempotency keys a partition
 * staged recently, kept in items the partition's staging transactions own, so that keyed dedupe costs what
 * offset-only dedupe costs — the PutObject and one transaction per batch — instead of one conditional write per
 * record.
 *
 * Why it is sound. When the idempotency key is the Kafka message key (the common case), every duplicate of a
 * record lands in the same partition, and that partition's records are staged by one fenced writer at a time (P2).
 * The window items are written only inside the partition's staging transactions, which are conditioned on the
 * fence: if a transaction commits with `stagedOffset = F`, no other transaction of the partition committed since
 * the fence reached F, so the window as it stood then (read after the fence, or written by this container's own
 * transaction that moved the fence to F) is exactly the window as stored. The processor caches the window with the
 * fence it belongs to and re-reads both whenever the fence condition fails: no extra read in the steady state.
 *
 * Layout: pk `<pl>#KEYS#<topic>#<partition>`, sk `W#<seq, 12 digits>`, one item per bucket of at most
 * {@link BUCKET_ENTRIES} keys: `entries` is a binary attribute of 16-byte entries (8 bytes of SHA-256 of the key,
 * 8 bytes of the record's digest, which tells a duplicate from a conflict as claims do), `createdAt` (ms),
 * `expiresAt` (epoch s, the table's TTL attribute). A bucket takes keys while it is younger than 1/8 of the TTL
 * and not full, and only while it still counts for a whole TTL; it counts until `createdAt + TTL × 9/8`, so a key
 * blocks its duplicates for at least the TTL and at most an eighth longer. Newest first, buckets count while the
 * newer ones hold fewer than `windowKeys` keys: under heavy traffic the window is the last `windowKeys` keys of the
 * partition (up to 1,000 more), shorter than the TTL (see the docs). A window's look-up index costs 10 bytes per
 * key besides the 16 of the entry. Every write is
 * a whole-item Put (its size is what DynamoDB bills anyway), conditioned on the bucket being what the cache says
 * (absent, or holding exactly the entries counted), so a defect that desynchronised the cache fails loudly rather
 * than dropping keys.
 *
 * Collisions: two different keys with the same 64-bit hash, both in one partition's window, make the later one a
 * duplicate (same 64-bit digest prefix: probability 2^-64 again) or a conflict (dead-lettered, nothing lost). The
 * chance that a new key meets a colliding one is at most W / 2^64 per record for a window of W keys: with the
 * default 100,000 keys about 5.4 × 10^-15 per record, so about 5 × 10^-6 over a billion records.
 */
import { createHash } from 'node:crypto';
import { MalformedLedgerItemError } from '../errors.ts';

/** Keys per bucket item: 16 KB of entries, so a bucket Put stays a small write. */
export const BUCKET_ENTRIES = 1000;
const KEY_HASH_BYTES = 8;
const DIGEST_BYTES = 8;
export const ENTRY_BYTES = KEY_HASH_BYTES + DIGEST_BYTES;

/** One bucket as stored. */
export interface KeyWindowBucket {
  readonly seq: number;
  /** Epoch ms of its first key. */
  readonly createdAt: number;
  /** Epoch seconds after which it no longer counts (and DynamoDB's TTL may delete it). */
  readonly expiresAt: number;
  /** `n × ENTRY_BYTES` bytes: key hash then digest prefix, per key, in staging order. */
  readonly entries: Uint8Array;
}

/** A key the window holds: the first 8 bytes of its record's digest, hex (see {@link digestPrefix}). */
export interface WindowHolder {
  readonly digestPrefix: string;
}

/** What a bucket write must find: absent (a new bucket) or holding exactly this many entries. */
export interface BucketWrite {
  readonly bucket: KeyWindowBucket;
  readonly previousEntries: number | undefined;
}

export interface KeyWindowLimits {
  /** The `idempotencyTtlSeconds` setting. */
  readonly ttlSeconds: number;
  /** The `idempotencyWindowKeys` setting: most keys that count. */
  readonly windowKeys: number;
}

/** Hashes of the keys seen last: a batch looks each key up, then writes it (one SHA-256 per key, not two). */
const RECENT_HASHES = new Map<string, Buffer>();
const RECENT_HASHES_MAX = 4096;

/** The first 8 bytes of the key's SHA-256 (UTF-8). */
function keyHash(key: string): Buffer {
  let hash = RECENT_HASHES.get(key);
  if (hash === undefined) {
    hash = createHash('sha256').update(key, 'utf8').digest().subarray(0, KEY_HASH_BYTES);
    if (RECENT_HASHES.size >= RECENT_HASHES_MAX) RECENT_HASHES.clear();
    RECENT_HASHES.set(key, hash);
  }
  return hash;
}

/** The digest prefix a window keeps of a record digest (base64url SHA-256, `recordDigest`), hex. */
export function digestPrefix(digest: string): string {
  return Buffer.from(digest, 'base64url').subarray(0, DIGEST_BYTES).toString('hex');
}

/**
 * How many bucket items one read of a window takes at most: enough full buckets for `windowKeys`, one partial
 * newest bucket, and the buckets closed early by age while they still count (a bucket closes after TTL/8 and
 * counts until TTL × 9/8: at most 9 more). Older ones hold keys the window may forget.
 */
export function maxBuckets(limits: KeyWindowLimits): number {
  return Math.ceil(limits.windowKeys / BUCKET_ENTRIES) + 1 + 9;
}

function entryCount(bucket: KeyWindowBucket): number {
  return bucket.entries.length / ENTRY_BYTES;
}

/**
 * A bucket's look-up index: its key hashes as (high, low) 32-bit words sorted, with each one's entry position.
 * 10 bytes per key besides the 16 of the entry (a map of strings costs ~100), built once per
 * bucket object: a window after a transaction shares every bucket but the ones it wrote.
 */
interface BucketIndex {
  readonly high: Uint32Array;
  readonly low: Uint32Array;
  readonly position: Uint16Array;
}

const INDEXES = new WeakMap<KeyWindowBucket, BucketIndex>();

function indexOf(bucket: KeyWindowBucket): BucketIndex {
  let index = INDEXES.get(bucket);
  if (!index) {
    const bytes = Buffer.from(bucket.entries.buffer, bucket.entries.byteOffset, bucket.entries.byteLength);
    const n = entryCount(bucket);
    const highOf = (i: number) => bytes.readUInt32BE(i * ENTRY_BYTES);
    const lowOf = (i: number) => bytes.readUInt32BE(i * ENTRY_BYTES + 4);
    const order = Array.from({ length: n }, (_, i) => i).sort(
      (a, b) => highOf(a) - highOf(b) || lowOf(a) - lowOf(b) || a - b,
    );
    index = {
      high: Uint32Array.from(order, highOf),
      low: Uint32Array.from(order, lowOf),
      position: Uint16Array.from(order),
    };
    INDEXES.set(bucket, index);
  }
  return index;
}

/** The digest prefix of the first entry of `hash` in the bucket, if it holds the key. */
function find(bucket: KeyWindowBucket, hash: Buffer): string | undefined {
  const { high, low, position } = indexOf(bucket);
  const h = hash.readUInt32BE(0);
  const l = hash.readUInt32BE(4);
  let from = 0;
  let to = high.length;
  while (from < to) {
    const mid = (from + to) >>> 1;
    if (high[mid]! < h || (high[mid] === h && low[mid]! < l)) from = mid + 1;
    else to = mid;
  }
  if (from === high.length || high[from] !== h || low[from] !== l) return undefined;
  const at = position[from]! * ENTRY_BYTES + KEY_HASH_BYTES;
  return Buffer.from(bucket.entries.buffer, bucket.entries.byteOffset + at, DIGEST_BYTES).toString('hex');
}

function counts(bucket: KeyWindowBucket, now: number): boolean {
  return bucket.expiresAt * 1000 > now;
}

/**
 * One partition's window as of one fence value: look-ups, and the bucket writes that add a chunk's keys. Pure:
 * `now` is passed in, and {@link withWrites} returns the window after a committed transaction.
 *
 * What counts at `now`: newest first, the unexpired buckets while the unexpired buckets newer than them hold fewer
 * than `windowKeys` keys — so at least the last `windowKeys` keys (by key count, not bucket count: buckets closed
 * early by age or by another container's clock are partial) within the TTL.
 */
export class KeyWindow {
  /** Newest first. */
  private readonly buckets: readonly KeyWindowBucket[];

  constructor(
    buckets: readonly KeyWindowBucket[],
    private readonly limits: KeyWindowLimits,
  ) {
    this.buckets = [...buckets].sort((a, b) => b.seq - a.seq);
  }

  static empty(limits: KeyWindowLimits): KeyWindow {
    return new KeyWindow([], limits);
  }

  /** The buckets that count at `now`, newest first (see the class comment). */
  private counting(now: number): KeyWindowBucket[] {
    const found: KeyWindowBucket[] = [];
    let newer = 0;
    for (const bucket of this.buckets) {
      if (newer >= this.limits.windowKeys) break;
      if (!counts(bucket, now)) continue;
      found.push(bucket);
      newer += entryCount(bucket);
    }
    return found;
  }

  /** The holder of `key` among the buckets that count at `now`, if any. */
  lookup(key: string, now: number): WindowHolder | undefined {
    return this.holders([key], now).get(key);
  }

  /** The holders of those of `keys` the window holds at `now` (which buckets count is worked out once). */
  holders(keys: Iterable<string>, now: number): Map<string, WindowHolder> {
    const buckets = this.counting(now);
    const found = new Map<string, WindowHolder>();
    for (const key of keys) {
      const hash = keyHash(key);
      for (const bucket of buckets) {
        const prefix = find(bucket, hash);
        if (prefix === undefined) continue;
        found.set(key, { digestPrefix: prefix });
        break;
      }
    }
    return found;
  }

  /**
   * The bucket Puts that add `keys` (in staging order) at `now`: the newest bucket while it may take keys, then
   * new buckets. At most `ceil(keys / BUCKET_ENTRIES) + 1` writes.
   */
  writesFor(keys: readonly { readonly key: string; readonly digest: string }[], now: number): BucketWrite[] {
    if (keys.length === 0) return [];
    const writes: BucketWrite[] = [];
    const newest = this.buckets[0];
    let open: { bucket: KeyWindowBucket; previous: number | undefined; added: Buffer[] } | undefined =
      newest && this.accepts(newest, now)
        ? { bucket: newest, previous: entryCount(newest), added: [] }
        : undefined;
    let seq = newest?.seq ?? 0;
    const close = () => {
      if (!open || open.added.length === 0) return;
      const entries = Buffer.concat([open.bucket.entries, ...open.added]);
      writes.push({ bucket: { ...open.bucket, entries }, previousEntries: open.previous });
    };
    for (const { key, digest } of keys) {
      if (!open || entryCount(open.bucket) + open.added.length >= BUCKET_ENTRIES) {
        close();
        seq += 1;
        open = {
          bucket: {
            seq,
            createdAt: now,
            expiresAt: Math.ceil((now + this.limits.ttlSeconds * 1125) / 1000),
            entries: new Uint8Array(0),
          },
          previous: undefined,
          added: [],
        };
      }
      open.added.push(Buffer.concat([keyHash(key), Buffer.from(digestPrefix(digest), 'hex')]));
    }
    close();
    return writes;
  }

  /**
   * The window after a transaction that made `writes` committed at `now`; buckets that no longer count are let
   * go, so a long-lived container holds at most `windowKeys` keys (plus partial buckets) per partition.
   */
  withWrites(writes: readonly BucketWrite[], now: number): KeyWindow {
    const bySeq = new Map(this.buckets.map((bucket) => [bucket.seq, bucket]));
    for (const { bucket } of writes) bySeq.set(bucket.seq, bucket);
    return new KeyWindow(new KeyWindow([...bySeq.values()], this.limits).counting(now), this.limits);
  }

  /**
   * Whether the newest bucket may take a key at `now`: not full, younger than an eighth of the TTL (so it never
   * counts much past the TTL), and counting for at least the TTL from now (a bucket opened under a shorter TTL,
   * before the setting was raised, would let the key go too early). A bucket another container opened a little
   * in this one's future is taken (a negative age): refusing it would leave a partial bucket per clock skew.
   */
  private accepts(bucket: KeyWindowBucket, now: number): boolean {
    const ttlMs = this.limits.ttlSeconds * 1000;
    return (
      entryCount(bucket) < BUCKET_ENTRIES &&
      now - bucket.createdAt < ttlMs / 8 &&
      bucket.expiresAt * 1000 >= now + ttlMs
    );
  }
}

/** A bucket item as read, validated (a malformed one is refused, never taken for an empty bucket). */
export function bucketOf(item: Record<string, unknown>, where: string): KeyWindowBucket {
  const { seq, createdAt, expiresAt, entries } = item;
  const bytes = entries instanceof Uint8Array ? entries : undefined;
  if (
    !Number.isSafeInteger(seq) ||
    (seq as number) < 1 ||
    !Number.isSafeInteger(createdAt) ||
    !Number.isSafeInteger(expiresAt) ||
    !bytes ||
    bytes.length % ENTRY_BYTES !== 0 ||
    bytes.length > BUCKET_ENTRIES * ENTRY_BYTES
  ) {
    throw new MalformedLedgerItemError(where, 'not a key-window bucket (seq, createdAt, expiresAt, entries)');
  }
  return {
    seq: seq as number,
    createdAt: createdAt as number,
    expiresAt: expiresAt as number,
    entries: bytes,
  };
}
