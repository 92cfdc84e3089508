/**
 * Evaluation of a partition's pending records: transform once, find each record's business idempotency key,
 * and build its rows. Pure: no I/O, so a retried batch evaluates to the same rows (P5).
 *
 * Every per-record problem ends here as a dead letter with its reason (L1, P6), never as an error that would
 * stall the partition: the transform's poison, a transform that throws or returns something malformed, a key the
 * ledger cannot store exactly (empty, oversized, not well-formed UTF-16, not derivable from the exact bytes),
 * effects that cannot fit one transaction or one item, and state field names the ledger item or plain-object
 * folding would misread. A dead letter never claims its idempotency key: a garbage record must not suppress the
 * real record with that key.
 *
 * The key comes from the `idempotencyKey` setting: a header's exact bytes (`header:<name>`), a field of the JSON
 * value (`json:<field>`, read from the transform's `body`), the key the transform returns (`transform`), or none.
 * Whatever its source, a key is checked by the same rules, and claims compare the record's digest (its exact key
 * and value bytes), so a same-key record with another payload is a conflict, never a silent duplicate. A record in
 * which the source finds nothing (no such header, an absent or null field, a transform that returns no key) never
 * passes silently: by the `missingIdempotencyKey` setting it is dead-lettered (`no idempotency key: <source> …`,
 * the default) or processed with offset dedupe only, and flagged `missingKey` either way so that it is counted.
 */
import { createHash } from 'node:crypto';
import {
  formatIdempotencyKeySource,
  type IdempotencyKeySource,
  type MissingIdempotencyKey,
} from '../config/settings.ts';
import { InvalidSettingError } from '../errors.ts';
import { strictUtf8 } from '../kafka/event.ts';
import type { DecodedRecord, Lineage } from '../kafka/record.ts';
import {
  ownStateDelta,
  stateDeltaProblem,
  stateItemBytes,
  stateShapeProblem,
  TRANSACTION_STATE_BUDGET_BYTES,
} from '../transforms/state-delta.ts';
import { stateFoldProblem } from '../transforms/state-fold.ts';
import type {
  DeadLetterRow,
  OutputRow,
  StateDelta,
  Transform,
  TransformResult,
} from '../transforms/types.ts';

// Keyed state's bounds and fold live with the transform result they bound; the evaluation's importers find them here.
export {
  MAX_FIELD_NAME_BYTES,
  MAX_FIELD_VALUE_BYTES,
  MAX_STATE_FIELDS,
  RESERVED_STATE_FIELDS,
  stateItemBytes,
  TRANSACTION_STATE_BUDGET_BYTES,
} from '../transforms/state-delta.ts';
export { foldState } from '../transforms/state-fold.ts';

export interface EvaluatedRecord {
  readonly offset: number;
  /** The record's Kafka timestamp (ms): staged with its rows when final objects are time-partitioned. */
  readonly timestamp: number;
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
  /**
   * The key source found nothing in the record: it is dead-lettered (`missingIdempotencyKey: dead-letter`) or
   * processed by offset only (`offset-only`), and counted either way (`missingKeys`).
   */
  readonly missingKey?: true;
}

/** Bounds a record's effects must respect; checked at evaluation so that no record can stall its partition. */
export interface EffectLimits {
  /** The `maxTransactionItems` setting: one record's effects alone must fit one staging transaction. */
  readonly maxTransactionItems: number;
  /** Items a keyed record's key takes in its chunk: 1 claim, or 2 key-window buckets (partition scope). */
  readonly keyItems?: number;
  /**
   * Not a bound but a rule of the same evaluation, so every evaluator (the processor, the redrive, the local
   * oracle) gets it from `effectLimits(settings)`: what a record whose key source finds nothing becomes. Default
   * `dead-letter`, the setting's default.
   */
  readonly missingIdempotencyKey?: MissingIdempotencyKey;
}

const DEFAULT_LIMITS: EffectLimits = { maxTransactionItems: 100 };

/**
 * Ledger keys embed idempotency keys and state keys; DynamoDB rejects a partition key over 2,048 bytes, which
 * would fail the batch on every retry and stall the partition. Such a record is poison instead (P6).
 */
export const MAX_KEY_BYTES = 1024;
/** Largest output row, as NDJSON with its lineage: a sane bound on what one record may write. */
export const MAX_ROW_BYTES = 1024 * 1024;
/** Longest error text kept in a dead-letter row (a transform's exception message may be anything). */
export const MAX_ERROR_CHARS = 1000;

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
  const error = reason.length > MAX_ERROR_CHARS ? `${reason.slice(0, MAX_ERROR_CHARS)}…` : reason;
  return {
    offset: record.offset,
    timestamp: record.timestamp,
    source: record.source,
    raw: record.raw,
    digest: record.digest,
    idempotencyKey: undefined,
    output: [],
    deadLetter: { source: record.source, error, raw: record.raw },
    state: [],
    // Still counted as missing its key when it becomes a dead letter for another reason later (offset-only).
    ...(record.missingKey ? { missingKey: true as const } : {}),
  };
}

const LONE_SURROGATE = /\p{Cs}/u;

/** Why `key` cannot be a ledger key, or undefined when it can. */
export function keyProblem(what: string, key: string): string | undefined {
  if (key === '') return `${what} is empty`;
  // DynamoDB stores UTF-8: two strings with different lone surrogates would become one item.
  if (LONE_SURROGATE.test(key)) return `${what} is not well-formed UTF-16 (a lone surrogate)`;
  if (Buffer.byteLength(key) > MAX_KEY_BYTES) return `${what} longer than ${MAX_KEY_BYTES} bytes`;
  return undefined;
}

/**
 * An idempotency key from a header's exact bytes. Well-formed UTF-8 gives its text, so ordinary keys read as
 * sent; any other bytes give `~` + base64url of the bytes, and a text that itself starts with `~` gets a second
 * `~`. The map is one-to-one: `6b ff` and `6b fe` are two keys, and no binary key equals a text key.
 */
export function keyFromBytes(bytes: Uint8Array): string {
  const text = strictUtf8(bytes);
  if (text === undefined) return `~${Buffer.from(bytes).toString('base64url')}`;
  return text.startsWith('~') ? `~${text}` : text;
}

/** A key, a key that cannot be read exactly (`problem`), or nothing found where the source looks (`missing`). */
type KeyOutcome =
  | { readonly key: string | undefined }
  | { readonly problem: string }
  | { readonly missing: string };

function idempotencyKeyOf(
  source: IdempotencyKeySource,
  record: DecodedRecord,
  result: TransformResult & { kind: 'ok' },
  transformName: string,
): KeyOutcome {
  const nothing = `${formatIdempotencyKeySource(source)} found nothing`;
  switch (source.kind) {
    case 'none':
      return { key: undefined };
    case 'header': {
      // The last header of that name wins, as in `headers`; its exact bytes make the key. An empty value is none.
      const header = record.rawHeaders.findLast((h) => h.name === source.name);
      if (header === undefined) return { missing: nothing };
      const key = keyFromBytes(Buffer.from(header.value, 'base64'));
      return key === '' ? { missing: nothing } : { key };
    }
    case 'json': {
      const value =
        result.body === undefined
          ? undefined
          : Object.hasOwn(result.body, source.field)
            ? result.body[source.field]
            : undefined;
      if (value === undefined || value === null) return { missing: nothing };
      if (typeof value !== 'string' && typeof value !== 'number') {
        const kind = Array.isArray(value) ? 'an array' : `a ${typeof value}`;
        return { missing: `${formatIdempotencyKeySource(source)} holds ${kind}, not a string or number` };
      }
      if (typeof value === 'number' && !Number.isSafeInteger(value)) {
        // JSON.parse rounded it (beyond 2^53) or it is a fraction: two distinct ids could read as one key.
        return {
          problem: `json:${source.field} is a number that cannot be read exactly (${value}); send it as a string`,
        };
      }
      if (!record.valueIsUtf8) {
        return { problem: `value is not well-formed UTF-8, so json:${source.field} cannot be read exactly` };
      }
      return { key: String(value) };
    }
    case 'transform': {
      // Checked like every key below (empty, oversized, lone surrogates are dead letters). Absent is the configured
      // source finding nothing, as a missing header or field is: the same rule applies.
      if (result.idempotencyKey === undefined) {
        return { missing: `${nothing} (${transformName} returned no idempotencyKey)` };
      }
      return { key: result.idempotencyKey };
    }
  }
}

/**
 * Throws {@link InvalidSettingError} when `keySource` cannot work with `transform`: `json:<field>` reads a field
 * of the JSON value, so a transform that decodes values in another format (Avro, Protobuf, bytes) would find no
 * key in any record and silently dedupe nothing; it should return `idempotencyKey` under the `transform` source.
 */
export function checkKeySource(transform: Transform, keySource: IdempotencyKeySource): void {
  if (keySource.kind !== 'json' || transform.valueFormat === undefined || transform.valueFormat === 'json')
    return;
  throw new InvalidSettingError(
    'idempotencyKey',
    `json:${keySource.field} reads the JSON value, but transform ${transform.name} decodes values as ` +
      `${transform.valueFormat}: use "transform" and return idempotencyKey from the transform`,
  );
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Why `result` is not a {@link TransformResult}, or undefined. Transforms are code we did not write. */
function shapeProblem(result: unknown): string | undefined {
  if (!isPlainObject(result)) return 'transform returned no result object';
  if (result.kind === 'poison') {
    return typeof result.error === 'string' ? undefined : 'transform returned poison without an error string';
  }
  if (result.kind !== 'ok') return 'transform returned a result whose kind is neither "ok" nor "poison"';
  if (!Array.isArray(result.rows) || !result.rows.every(isPlainObject)) {
    return 'transform returned rows that are not an array of objects';
  }
  if (!Array.isArray(result.state)) return 'transform returned state that is not an array';
  for (const delta of result.state as unknown[]) {
    const problem = stateShapeProblem(delta);
    if (problem) return problem;
  }
  if (result.body !== undefined && !isPlainObject(result.body))
    return 'transform returned a body that is not an object';
  if (result.idempotencyKey !== undefined && typeof result.idempotencyKey !== 'string')
    return 'transform returned an idempotencyKey that is not a string';
  return undefined;
}

/** Why one state delta cannot be one ledger item, or undefined. */
function deltaProblem(delta: StateDelta): string | undefined {
  return keyProblem('state key', delta.key) ?? stateDeltaProblem(delta);
}

/** Why the effects of an ok result cannot be applied in one transaction, or undefined. */
function effectsProblem(
  result: TransformResult & { kind: 'ok' },
  rows: readonly OutputRow[],
  hasKey: boolean,
  limits: EffectLimits,
): string | undefined {
  for (const delta of result.state) {
    const problem = deltaProblem(delta);
    if (problem) return problem;
  }
  const folding = stateFoldProblem(result.state);
  if (folding) return folding;
  const stateKeys = new Set(result.state.map((delta) => delta.key)).size;
  // A chunk holding only this record: the fence, its output entry, its claim (or key-window buckets), one item per
  // state key.
  const items = 1 + (rows.length > 0 ? 1 : 0) + (hasKey ? (limits.keyItems ?? 1) : 0) + stateKeys;
  if (items > limits.maxTransactionItems) {
    return `effects need ${items} transaction items, more than maxTransactionItems (${limits.maxTransactionItems})`;
  }
  const stateBytes = result.state.reduce((sum, delta) => sum + stateItemBytes(delta), 0);
  if (stateBytes > TRANSACTION_STATE_BUDGET_BYTES) {
    return `state items need about ${stateBytes} bytes, more than one transaction holds (${TRANSACTION_STATE_BUDGET_BYTES})`;
  }
  for (const [index, row] of rows.entries()) {
    let text: string | undefined;
    try {
      text = JSON.stringify(row);
    } catch (error) {
      return `output row ${index} cannot be serialized as JSON: ${messageOf(error)}`;
    }
    if (Buffer.byteLength(text) > MAX_ROW_BYTES)
      return `output row ${index} is larger than ${MAX_ROW_BYTES} bytes`;
  }
  return undefined;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/**
 * The record with no effect at all (no rows, no dead letter, no key, no state), the transform not run: staging it
 * only moves the fence past it. A replay stages the first record after its range so (`shared/replay/`).
 */
export function inertRecord(record: DecodedRecord): EvaluatedRecord {
  const source: Lineage = { topic: record.topic, partition: record.partition, offset: record.offset };
  const raw: DeadLetterRow['raw'] = {
    key: record.rawKey,
    value: record.rawValue,
    headers: record.rawHeaders,
    // The Kafka timestamp: with key, value and headers, all a redrive needs to give the transform the record again.
    timestamp: record.timestamp,
  };
  return {
    offset: record.offset,
    timestamp: record.timestamp,
    source,
    raw,
    digest: recordDigest(record),
    idempotencyKey: undefined,
    output: [],
    deadLetter: undefined,
    state: [],
  };
}

export function evaluateRecord(
  transform: Transform,
  keySource: IdempotencyKeySource,
  record: DecodedRecord,
  limits: EffectLimits = DEFAULT_LIMITS,
): EvaluatedRecord {
  const base = inertRecord(record);
  const { source } = base;
  let result: unknown;
  try {
    result = transform.apply(record);
  } catch (error) {
    return deadLetterOf(base, `transform ${transform.name} threw ${messageOf(error)}`);
  }
  const shape = shapeProblem(result);
  if (shape) return deadLetterOf(base, shape);
  const transformed = result as TransformResult;
  if (transformed.kind === 'poison') return deadLetterOf(base, transformed.error);
  const keyed = idempotencyKeyOf(keySource, record, transformed, transform.name);
  if ('problem' in keyed) return deadLetterOf(base, keyed.problem);
  // A record without its key is counted whatever becomes of it; a problem of its own is its reason first.
  const counted: EvaluatedRecord = 'missing' in keyed ? { ...base, missingKey: true } : base;
  const key = 'key' in keyed ? keyed.key : undefined;
  const keyIssue = key === undefined ? undefined : keyProblem('idempotency key', key);
  if (keyIssue) return deadLetterOf(base, keyIssue);
  let output: OutputRow[];
  try {
    output = transformed.rows.map((row) => ({ ...row, source }));
  } catch (error) {
    return deadLetterOf(counted, `output rows cannot be copied: ${messageOf(error)}`);
  }
  const effects = effectsProblem(transformed, output, key !== undefined, limits);
  if (effects) return deadLetterOf(counted, effects);
  if ('missing' in keyed && (limits.missingIdempotencyKey ?? 'dead-letter') === 'dead-letter') {
    return deadLetterOf(counted, `no idempotency key: ${keyed.missing}`);
  }
  return { ...counted, idempotencyKey: key, output, state: transformed.state.map(ownStateDelta) };
}
