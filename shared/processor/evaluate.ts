/**
 * Evaluation of a partition's pending records: transform once, find each record's business idempotency key,
 * and build its rows. Pure: no I/O, so a retried batch evaluates to the same rows (P5).
 */
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
  /** The business idempotency key, or undefined when the record has none (or keys are off). */
  readonly idempotencyKey: string | undefined;
  readonly output: readonly OutputRow[];
  readonly deadLetter: DeadLetterRow | undefined;
  readonly state: readonly StateDelta[];
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
  const candidateKey = idempotencyKeyOf(keySource, record, transformed);
  const tooLong = oversizedKey(candidateKey, transformed);
  const result: TransformResult = tooLong ? { kind: 'poison', error: tooLong } : transformed;
  // An oversized key can be stored nowhere: the record is dead-lettered without a claim.
  const idempotencyKey = tooLong ? undefined : candidateKey;
  if (result.kind === 'poison') {
    return {
      offset: record.offset,
      idempotencyKey,
      output: [],
      deadLetter: {
        source,
        error: result.error,
        raw: { key: record.rawKey, value: record.rawValue, headers: record.headers },
      },
      state: [],
    };
  }
  return {
    offset: record.offset,
    idempotencyKey,
    output: result.rows.map((row) => ({ ...row, source })),
    deadLetter: undefined,
    state: result.state,
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
