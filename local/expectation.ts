/**
 * The oracle of the end-to-end property (DESIGN.md): what the committed output and the keyed aggregates must be,
 * computed directly from the input, and the comparison of a run's actual result with it.
 *
 * Each input record belongs to an identity: its business idempotency key when it has one, else its own lineage.
 * Exactly-once means every identity appears exactly once in the committed output (as an output row, or as a
 * dead-letter row for poison), nothing else appears, and the aggregates equal the sum over one record per identity.
 *
 * Each record's fate (output or dead letter, its key, its state) is the processor's pure evaluation
 * (`evaluateRecord`: the record-level rules, tested on their own); what this oracle judges is the protocol around
 * it: staging, dedupe, checkpoints, commit. A dead letter never claims its key (issue 17), so it is always an
 * identity of its own (its lineage), whatever key its header names.
 */
import type { IdempotencyKeySource } from '../shared/config/settings.ts';
import type { DecodedRecord, Lineage } from '../shared/kafka/record.ts';
import type { Stream } from '../shared/ledger/layout.ts';
import { type EffectLimits, evaluateRecord } from '../shared/processor/evaluate.ts';
import type { Transform } from '../shared/transforms/types.ts';

/** A keyed aggregate as exported: the state entry's descriptive fields and its totals. */
export type Aggregate = Record<string, string | number>;

export interface Expectation {
  /** Identity → the stream its single row must land in. */
  readonly identities: ReadonlyMap<string, Stream>;
  /** `<topic>#<partition>#<offset>` → identity. */
  readonly identityOf: ReadonlyMap<string, string>;
  /** State key → aggregate. */
  readonly aggregates: ReadonlyMap<string, Aggregate>;
  readonly records: number;
  /** Input records the transform rejects. */
  readonly poison: number;
}

export interface CommittedRow {
  readonly stream: Stream;
  readonly source: Lineage;
}

export interface Outcome {
  /** Identities with no committed row. */
  readonly lost: number;
  /** Committed rows beyond the first of their identity. */
  readonly duplicated: number;
  /** Rows whose lineage is not an input record, or that landed in the wrong stream. */
  readonly unexpected: number;
  readonly aggregatesMatch: boolean;
  /** Readable, capped list of what differs. */
  readonly differences: readonly string[];
}

export const lineageId = (l: Lineage): string => `${l.topic}#${l.partition}#${l.offset}`;

/**
 * The expectation for `records`. A transform with a `prepare` step (registry schemas) must have been prepared with
 * these records first, as the processor prepares each batch.
 */
export function expectOutcome(
  records: Iterable<DecodedRecord>,
  transform: Transform,
  keySource: IdempotencyKeySource,
  limits?: EffectLimits,
  /**
   * The pipeline's `idempotencyScope`: with `partition` a key is deduplicated within its partition (its lane) only,
   * as the processor does, so the same key on two partitions is two identities.
   */
  scope: 'global' | 'partition' = 'global',
): Expectation {
  const identities = new Map<string, Stream>();
  const identityOf = new Map<string, string>();
  const aggregates = new Map<string, Aggregate>();
  let count = 0;
  let poison = 0;
  for (const record of records) {
    count++;
    const evaluated = evaluateRecord(transform, keySource, record, limits);
    const key = evaluated.idempotencyKey;
    const identity =
      key === undefined
        ? `lineage:${lineageId(record)}`
        : scope === 'partition'
          ? `key:${record.topic}#${record.partition}:${key}`
          : `key:${key}`;
    identityOf.set(lineageId(record), identity);
    if (evaluated.deadLetter) {
      poison++;
      identities.set(identity, 'deadletter');
      continue;
    }
    if (identities.has(identity)) continue;
    identities.set(identity, 'output');
    for (const delta of evaluated.state) {
      const aggregate = aggregates.get(delta.key) ?? { ...delta.fields };
      for (const [name, add] of Object.entries(delta.add))
        aggregate[name] = Number(aggregate[name] ?? 0) + add;
      aggregates.set(delta.key, aggregate);
    }
  }
  return { identities, identityOf, aggregates, records: count, poison };
}

function sameAggregate(a: Aggregate | undefined, b: Aggregate | undefined): boolean {
  if (!a || !b) return a === b;
  const names = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...names].every((name) => String(a[name]) === String(b[name]));
}

const MAX_DIFFERENCES = 20;

export function compareOutcome(
  expectation: Expectation,
  rows: Iterable<CommittedRow>,
  actualAggregates: ReadonlyMap<string, Aggregate>,
): Outcome {
  const differences: string[] = [];
  const note = (text: string) => differences.length < MAX_DIFFERENCES && differences.push(text);
  const seen = new Map<string, number>();
  let unexpected = 0;
  let duplicated = 0;
  for (const row of rows) {
    const identity = expectation.identityOf.get(lineageId(row.source));
    const stream = identity === undefined ? undefined : expectation.identities.get(identity);
    if (!identity || stream !== row.stream) {
      unexpected++;
      note(`unexpected ${row.stream} row for ${lineageId(row.source)}`);
      continue;
    }
    const times = (seen.get(identity) ?? 0) + 1;
    seen.set(identity, times);
    if (times > 1) {
      duplicated++;
      note(`duplicate ${row.stream} row for ${identity} (at ${lineageId(row.source)})`);
    }
  }
  let lost = 0;
  for (const [identity, stream] of expectation.identities) {
    if (seen.has(identity)) continue;
    lost++;
    note(`lost: no ${stream} row for ${identity}`);
  }
  let aggregatesMatch = true;
  const stateKeys = new Set([...expectation.aggregates.keys(), ...actualAggregates.keys()]);
  for (const key of [...stateKeys].sort()) {
    const want = expectation.aggregates.get(key);
    const got = actualAggregates.get(key);
    if (sameAggregate(want, got)) continue;
    aggregatesMatch = false;
    note(`aggregate ${key}: expected ${JSON.stringify(want ?? null)}, got ${JSON.stringify(got ?? null)}`);
  }
  return { lost, duplicated, unexpected, aggregatesMatch, differences };
}
