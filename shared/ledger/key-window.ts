/**
 * Partition-scoped idempotency (setting `idempotencyScope: partition`, issue 16): the idempotency keys a partition
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
 * and not full; it counts until `createdAt + TTL × 9/8`, so a key blocks its duplicates for at least the TTL and at
 * most an eighth longer. Only the newest `windowKeys / BUCKET_ENTRIES + 1` buckets count: under heavy traffic the
 * window is the last `windowKeys` keys of the partition (up to 1,000 more), shorter than the TTL (see the docs). Every write is
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
const RECENT_HASHES = new Map<string, string>();
const RECENT_HASHES_MAX = 4096;

function keyHashHex(key: string): string {
  let hash = RECENT_HASHES.get(key);
  if (hash === undefined) {
    hash = createHash('sha256').update(key, 'utf8').digest().subarray(0, KEY_HASH_BYTES).toString('hex');
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
 * Buckets that count: at most this many of the newest, one more than `windowKeys` fills, so that the window holds
 * at least the last `windowKeys` keys (and at most {@link BUCKET_ENTRIES} more) while they are within the TTL.
 */
export function maxBuckets(limits: KeyWindowLimits): number {
  return Math.ceil(limits.windowKeys / BUCKET_ENTRIES) + 1;
}

function entryCount(bucket: KeyWindowBucket): number {
  return bucket.entries.length / ENTRY_BYTES;
}

/**
 * Each bucket's look-up map (key hash → digest prefix), built once per bucket object: a window after a transaction
 * shares every bucket but the one it added to, whose map is the old one plus the new keys.
 */
const INDEXES = new WeakMap<KeyWindowBucket, ReadonlyMap<string, string>>();

function indexOf(bucket: KeyWindowBucket): ReadonlyMap<string, string> {
  let map = INDEXES.get(bucket);
  if (!map) {
    map = withEntries(new Map(), bucket.entries);
    INDEXES.set(bucket, map);
  }
  return map;
}

/** `map` plus the entries in `bytes` (the first entry of a key wins: a held key is never added again anyway). */
function withEntries(map: Map<string, string>, bytes: Uint8Array): Map<string, string> {
  const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let at = 0; at < buffer.length; at += ENTRY_BYTES) {
    const hash = buffer.toString('hex', at, at + KEY_HASH_BYTES);
    if (!map.has(hash)) map.set(hash, buffer.toString('hex', at + KEY_HASH_BYTES, at + ENTRY_BYTES));
  }
  return map;
}

/**
 * One partition's window as of one fence value: look-ups, and the bucket writes that add a chunk's keys. Pure:
 * `now` is passed in, and {@link withWrites} returns the window after a committed transaction.
 */
export class KeyWindow {
  /** Newest first. */
  private readonly buckets: readonly KeyWindowBucket[];

  constructor(
    buckets: readonly KeyWindowBucket[],
    private readonly limits: KeyWindowLimits,
  ) {
    this.buckets = [...buckets].sort((a, b) => b.seq - a.seq).slice(0, maxBuckets(limits));
  }

  static empty(limits: KeyWindowLimits): KeyWindow {
    return new KeyWindow([], limits);
  }

  /** The holder of `key` among the buckets that count at `now`, if any. */
  lookup(key: string, now: number): WindowHolder | undefined {
    const hash = keyHashHex(key);
    for (const bucket of this.buckets) {
      if (bucket.expiresAt * 1000 <= now) continue;
      const found = indexOf(bucket).get(hash);
      if (found !== undefined) return { digestPrefix: found };
    }
    return undefined;
  }

  /**
   * The bucket Puts that add `keys` (in staging order) at `now`: the newest bucket while it is young and not full,
   * then new buckets. At most `ceil(keys / BUCKET_ENTRIES) + 1` writes.
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
      const added = Buffer.concat(open.added);
      const bucket = { ...open.bucket, entries: Buffer.concat([open.bucket.entries, added]) };
      INDEXES.set(bucket, withEntries(new Map(indexOf(open.bucket)), added));
      writes.push({ bucket, previousEntries: open.previous });
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
      open.added.push(
        Buffer.concat([Buffer.from(keyHashHex(key), 'hex'), Buffer.from(digestPrefix(digest), 'hex')]),
      );
    }
    close();
    return writes;
  }

  /** The window after a transaction that made `writes` committed. */
  withWrites(writes: readonly BucketWrite[]): KeyWindow {
    const bySeq = new Map(this.buckets.map((bucket) => [bucket.seq, bucket]));
    for (const { bucket } of writes) bySeq.set(bucket.seq, bucket);
    return new KeyWindow([...bySeq.values()], this.limits);
  }

  /** A bucket takes keys while younger than an eighth of the TTL (so it never counts past TTL × 9/8). */
  private accepts(bucket: KeyWindowBucket, now: number): boolean {
    return (
      now >= bucket.createdAt &&
      now - bucket.createdAt < (this.limits.ttlSeconds * 1000) / 8 &&
      entryCount(bucket) < BUCKET_ENTRIES
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
