/**
 * Evaluation of a partition's pending records: transform once, find each record's business idempotency key,
 * and build its rows. Pure: no I/O, so a retried batch evaluates to the same rows (P5).
 */
import { createHash } from 'node:crypto';
import type { IdempotencyKeySource } from '../config/settings.ts';
import type { DecodedRecord, Lineage } from '../kafka/record.ts';
import type {
  DeadLetterRow,
  OutputRow,
  StateDelta,
  Transform,
  TransformResult,
} from '../transforms/types.ts';

export interface EvaluatedRecord {
  readonly offset: number;
  /** Where the record came from; every row it makes carries it. */
  readonly source: Lineage;
  /** The record as received, kept so that any evaluated record can still become a dead-letter row. */
  readonly raw: DeadLetterRow['raw'];
  /** {@link recordDigest} of the record: tells a same-key record with another payload from a redelivery. */
  readonly digest: string;
  /**
   * The business idempotency key, or undefined when the record has none, keys are off, or the record is a
   * dead letter (a poison record never claims its key: it must not suppress the real record with that key).
   */
  readonly idempotencyKey: string | undefined;
  readonly output: readonly OutputRow[];
  readonly deadLetter: DeadLetterRow | undefined;
  readonly state: readonly StateDelta[];
}

function framed(hash: ReturnType<typeof createHash>, base64: string | null): void {
  if (base64 === null) {
    hash.update(Uint8Array.of(0));
    return;
  }
  const bytes = Buffer.from(base64, 'base64');
  const length = Buffer.alloc(9);
  length.writeUInt8(1, 0);
  length.writeBigUInt64BE(BigInt(bytes.length), 1);
  hash.update(length).update(bytes);
}

/**
 * SHA-256 (base64url) of the record's exact key and value bytes. Each part is framed (a presence byte, then an
 * 8-byte length), so a null key differs from an empty one and no (key, value) split collides with another.
 * Headers and timestamp are left out: they are delivery metadata, not the record's content.
 */
export function recordDigest(record: Pick<DecodedRecord, 'rawKey' | 'rawValue'>): string {
  const hash = createHash('sha256');
  framed(hash, record.rawKey);
  framed(hash, record.rawValue);
  return hash.digest('base64url');
}

/**
 * The record as a dead letter with `reason`: no output rows, no state, no idempotency key (so it claims
 * nothing), the raw record kept. Used for every per-record problem found after the transform (L1).
 */
export function deadLetterOf(record: EvaluatedRecord, reason: string): EvaluatedRecord {
  return {
    offset: record.offset,
    source: record.source,
    raw: record.raw,
    digest: record.digest,
    idempotencyKey: undefined,
    output: [],
    deadLetter: { source: record.source, error: reason, raw: record.raw },
    state: [],
  };
}

function lineageOf(record: DecodedRecord): Lineage {
  return { topic: record.topic, partition: record.partition, offset: record.offset };
}

function idempotencyKeyOf(
  source: IdempotencyKeySource,
  record: DecodedRecord,
  result: TransformResult,
): string | undefined {
  switch (source.kind) {
    case 'none':
      return undefined;
    case 'header':
      return record.headers[source.name] || undefined;
    case 'json': {
      const value = result.kind === 'ok' ? result.body?.[source.field] : undefined;
      return typeof value === 'string' || typeof value === 'number' ? String(value) : undefined;
    }
  }
}

export function evaluateRecord(
  transform: Transform,
  keySource: IdempotencyKeySource,
  record: DecodedRecord,
): EvaluatedRecord {
  const transformed = transform.apply(record);
  const source = lineageOf(record);
  const raw: DeadLetterRow['raw'] = { key: record.rawKey, value: record.rawValue, headers: record.headers };
  const candidateKey = idempotencyKeyOf(keySource, record, transformed);
  const base: EvaluatedRecord = {
    offset: record.offset,
    source,
    raw,
    digest: recordDigest(record),
    idempotencyKey: candidateKey,
    output: [],
    deadLetter: undefined,
    state: [],
  };
  if (transformed.kind === 'poison') return deadLetterOf(base, transformed.error);
  // An oversized key can be stored nowhere: the record is dead-lettered without a claim.
  const tooLong = oversizedKey(candidateKey, transformed);
  if (tooLong) return deadLetterOf(base, tooLong);
  return {
    ...base,
    output: transformed.rows.map((row) => ({ ...row, source })),
    state: transformed.state,
  };
}

/**
 * Ledger keys embed idempotency keys and state keys; DynamoDB rejects a partition key over 2,048 bytes, which
 * would fail the batch on every retry and stall the partition. Such a record is poison instead (P6).
 */
export const MAX_KEY_BYTES = 1024;

function oversizedKey(idempotencyKey: string | undefined, result: TransformResult): string | undefined {
  if (idempotencyKey !== undefined && Buffer.byteLength(idempotencyKey) > MAX_KEY_BYTES) {
    return `idempotency key longer than ${MAX_KEY_BYTES} bytes`;
  }
  const state = result.kind === 'ok' ? result.state : [];
  if (state.some((delta) => Buffer.byteLength(delta.key) > MAX_KEY_BYTES)) {
    return `state key longer than ${MAX_KEY_BYTES} bytes`;
  }
  return undefined;
}

/** Sums deltas per state key: a transaction may touch each item once. */
export function foldState(deltas: Iterable<StateDelta>): StateDelta[] {
  const folded = new Map<
    string,
    { key: string; fields: Record<string, string>; add: Record<string, number> }
  >();
  for (const delta of deltas) {
    const current = folded.get(delta.key) ?? { key: delta.key, fields: {}, add: {} };
    Object.assign(current.fields, delta.fields);
    for (const [field, value] of Object.entries(delta.add))
      current.add[field] = (current.add[field] ?? 0) + value;
    folded.set(delta.key, current);
  }
  return [...folded.values()];
}
