/**
 * The oracle of the end-to-end property (docs/architecture.md): what the committed output and the keyed aggregates
 * may be, computed from the input by the processor's documented rules, and the comparison of a run's actual result
 * with it.
 *
 * Each record's own fate (output rows or a dead letter, its key, its state) is the processor's pure evaluation
 * (`evaluateRecord`: the record-level rules, tested on their own). What this oracle adds are the rules between
 * records that share an idempotency key (P4 and the key conflicts of "Record-level and structural problems"):
 *
 * - a key's records form a group: per key in `global` scope, per key and partition (lane) in `partition` scope;
 * - one record of the group claims the key and is output: the first keyed record of its lane, since a lane is
 *   processed in offset order. In `partition` scope that is one record. In `global` scope the lanes race, so the
 *   first of any lane may win: the oracle takes the one the run output (exactly one must be);
 * - every other record of the group with the winner's exact key and value bytes is a duplicate: no row;
 * - every other record with other bytes is a conflict: one dead-letter row, its own.
 *
 * So the expectation is not one outcome but the few the rules allow: {@link resolveExpectation} picks the winner of
 * each group from the rows (the first candidate when none was output, which then counts as lost), and every other
 * row and aggregate is judged against that choice. A dead letter never claims its key, so it is always its own
 * identity, whatever key its header names. A record for which the key source finds no key is dead-lettered, or
 * output with offset dedupe only, as the `missingIdempotencyKey` setting says (the evaluation applies it).
 */
import type { IdempotencyKeySource, MissingIdempotencyKey } from '../shared/config/settings.ts';
import type { DecodedRecord, Lineage } from '../shared/kafka/record.ts';
import type { Stream } from '../shared/ledger/layout.ts';
import { type EffectLimits, evaluateRecord } from '../shared/processor/evaluate.ts';
import { foldState } from '../shared/transforms/state-fold.ts';
import type { StateDelta, Transform } from '../shared/transforms/types.ts';

/** A keyed aggregate as exported: the state entry's descriptive fields, its totals, its min, max and latest values. */
export type Aggregate = Record<string, string | number>;

export interface ExpectOptions {
  readonly keySource: IdempotencyKeySource;
  /**
   * The processor's evaluation bounds and rules (`effectLimits(settings)`), `missingIdempotencyKey` among them
   * (default `dead-letter`, the setting's default).
   */
  readonly limits?: EffectLimits;
  /** The pipeline's `idempotencyScope`; default `global`. */
  readonly scope?: 'global' | 'partition';
}

/** One input record as the oracle sees it. */
interface Fate {
  readonly lineage: string;
  /** Dead-lettered whatever happens (rejected, or without a key under `dead-letter`). */
  readonly deadLetter: boolean;
  /** The key group of a keyed record that is not a dead letter. */
  readonly group?: string;
  /** Its exact key and value bytes (duplicates share them, conflicts do not). */
  readonly digest: string;
  readonly state: readonly StateDelta[];
}

/** The records of one key group: its members, and the candidates to win it (the first of each lane). */
interface Group {
  readonly members: string[];
  readonly candidates: string[];
}

/** Every outcome the rules allow for an input, before the run's rows choose among them. */
export interface Expectation {
  readonly records: number;
  /** Input records the transform (or the record-level rules) rejects: dead-lettered whatever happens. */
  readonly poison: number;
  /** Records for which the configured key source found no key (counted under either choice). */
  readonly missingKeys: number;
  readonly missingKeyChoice: MissingIdempotencyKey;
  /** Every state key some allowed outcome touches (what to read back from the ledger). */
  readonly stateKeys: ReadonlySet<string>;
  /** Lineage (`<topic>#<partition>#<offset>`) → fate, in input order. */
  readonly fates: ReadonlyMap<string, Fate>;
  readonly groups: ReadonlyMap<string, Group>;
}

/** The one outcome the rules allow once each group's winner is chosen. */
export interface ResolvedExpectation {
  /** Identity → the stream its single row must land in. */
  readonly identities: ReadonlyMap<string, Stream>;
  /**
   * Lineage → identity: a record and the duplicates of its bytes in a key group share one; a conflict, a dead
   * letter or a record without a key is its own.
   */
  readonly identityOf: ReadonlyMap<string, string>;
  /** Lineage → the stream of the one row it must have; a record not listed must have none (a duplicate). */
  readonly rowOf: ReadonlyMap<string, Stream>;
  /** State key → aggregate. */
  readonly aggregates: ReadonlyMap<string, Aggregate>;
  /** Records expected as key-conflict dead letters. */
  readonly conflicts: number;
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
 * The outcomes allowed for `records`. A transform with a `prepare` step (registry schemas) must have been prepared
 * with these records first, as the processor prepares each batch.
 */
export function expectOutcome(
  records: Iterable<DecodedRecord>,
  transform: Transform,
  options: ExpectOptions,
): Expectation {
  const { keySource, scope = 'global', limits } = options;
  const choice = limits?.missingIdempotencyKey ?? 'dead-letter';
  const fates = new Map<string, Fate>();
  const groups = new Map<string, Group>();
  /** `<group>|<lane>` → the lowest offset of the group in that lane, and its lineage. */
  const firstInLane = new Map<string, { offset: number; lineage: string }>();
  const stateKeys = new Set<string>();
  let count = 0;
  let poison = 0;
  let missing = 0;
  for (const record of records) {
    count++;
    const lineage = lineageId(record);
    const evaluated = evaluateRecord(transform, keySource, record, limits);
    const key = evaluated.idempotencyKey;
    // Dead-lettered or not (by `missingIdempotencyKey`), a record without its key is counted: the user must see it.
    const noKey = evaluated.missingKey === true;
    if (noKey) missing++;
    const deadLetter = evaluated.deadLetter !== undefined;
    if (deadLetter) {
      if (!noKey) poison++;
      fates.set(lineage, { lineage, deadLetter, digest: evaluated.digest, state: [] });
      continue;
    }
    for (const delta of evaluated.state) stateKeys.add(delta.key);
    const lane = `${record.topic}#${record.partition}`;
    const group = key === undefined ? undefined : scope === 'partition' ? `${lane}:${key}` : key;
    fates.set(lineage, {
      lineage,
      deadLetter,
      digest: evaluated.digest,
      state: evaluated.state,
      ...(group === undefined ? {} : { group }),
    });
    if (group === undefined) continue;
    const members = groups.get(group)?.members ?? [];
    members.push(lineage);
    groups.set(group, { members, candidates: [] });
    const first = firstInLane.get(`${group}|${lane}`);
    if (first === undefined || record.offset < first.offset)
      firstInLane.set(`${group}|${lane}`, { offset: record.offset, lineage });
  }
  for (const [at, { lineage }] of firstInLane) {
    groups.get(at.slice(0, at.lastIndexOf('|')))!.candidates.push(lineage);
  }
  return {
    records: count,
    poison,
    missingKeys: missing,
    missingKeyChoice: choice,
    stateKeys,
    fates,
    groups,
  };
}

/** Each group's winner: the candidate the rows output (the first of them), else the first candidate. */
function winners(expectation: Expectation, rows: Iterable<CommittedRow>): Map<string, string> {
  const output = new Set<string>();
  for (const row of rows) if (row.stream === 'output') output.add(lineageId(row.source));
  const chosen = new Map<string, string>();
  for (const [group, { candidates }] of expectation.groups) {
    chosen.set(group, candidates.find((lineage) => output.has(lineage)) ?? candidates[0]!);
  }
  return chosen;
}

/**
 * The aggregates of the records applied: the first delta's fields, adds summed, and min, max and latest folded as
 * the ledger keeps them (whatever order the records are applied in, `shared/transforms/state-fold.ts`).
 */
class Aggregates {
  private readonly sums = new Map<string, Aggregate>();
  private readonly ordered = new Map<string, StateDelta>();

  apply(state: readonly StateDelta[]): void {
    for (const delta of state) {
      const aggregate = this.sums.get(delta.key) ?? { ...delta.fields };
      for (const [name, add] of Object.entries(delta.add))
        aggregate[name] = Number(aggregate[name] ?? 0) + add;
      this.sums.set(delta.key, aggregate);
      const before = this.ordered.get(delta.key);
      const [folded] = foldState([...(before ? [before] : []), { ...delta, fields: {}, add: {} }]);
      this.ordered.set(delta.key, folded!);
    }
  }

  get all(): Map<string, Aggregate> {
    const all = new Map<string, Aggregate>();
    for (const [key, sums] of this.sums) {
      const { min = {}, max = {}, latest = {} } = this.ordered.get(key) ?? { key };
      const values = Object.fromEntries(Object.entries(latest).map(([name, { value }]) => [name, value]));
      all.set(key, { ...sums, ...min, ...max, ...values });
    }
    return all;
  }
}

/**
 * The one outcome allowed once the rows have chosen each key group's winner (see the module comment): the winner
 * output, its byte-for-byte duplicates nothing, every other member of its group a conflict dead letter.
 */
export function resolveExpectation(
  expectation: Expectation,
  rows: Iterable<CommittedRow>,
): ResolvedExpectation {
  const chosen = winners(expectation, rows);
  const identities = new Map<string, Stream>();
  const identityOf = new Map<string, string>();
  const rowOf = new Map<string, Stream>();
  const aggregates = new Aggregates();
  let conflicts = 0;
  for (const fate of expectation.fates.values()) {
    const own = `lineage:${fate.lineage}`;
    if (fate.group === undefined) {
      const stream: Stream = fate.deadLetter ? 'deadletter' : 'output';
      identities.set(own, stream);
      identityOf.set(fate.lineage, own);
      rowOf.set(fate.lineage, stream);
      aggregates.apply(fate.state);
      continue;
    }
    const winner = expectation.fates.get(chosen.get(fate.group)!)!;
    if (fate.digest !== winner.digest) {
      conflicts++;
      identities.set(own, 'deadletter');
      identityOf.set(fate.lineage, own);
      rowOf.set(fate.lineage, 'deadletter');
      continue;
    }
    const identity = `key:${fate.group}`;
    identityOf.set(fate.lineage, identity);
    if (fate !== winner) continue;
    identities.set(identity, 'output');
    rowOf.set(fate.lineage, 'output');
    aggregates.apply(fate.state);
  }
  return { identities, identityOf, rowOf, aggregates: aggregates.all, conflicts };
}

function sameAggregate(a: Aggregate | undefined, b: Aggregate | undefined): boolean {
  if (!a || !b) return a === b;
  const names = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...names].every((name) => String(a[name]) === String(b[name]));
}

const MAX_DIFFERENCES = 20;

/**
 * Judges `rows` and the ledger's aggregates against what the rules allow. A row for a record the rules drop as a
 * duplicate counts as duplicated when it is an output row of a key that is output (at-least-once's producer
 * duplicates), else as unexpected; a second row of one record counts as duplicated.
 */
export function compareOutcome(
  resolved: ResolvedExpectation,
  rows: Iterable<CommittedRow>,
  actualAggregates: ReadonlyMap<string, Aggregate>,
): Outcome {
  const differences: string[] = [];
  const note = (text: string) => differences.length < MAX_DIFFERENCES && differences.push(text);
  const seenLineages = new Set<string>();
  const seenIdentities = new Set<string>();
  let unexpected = 0;
  let duplicated = 0;
  for (const row of rows) {
    const lineage = lineageId(row.source);
    const identity = resolved.identityOf.get(lineage);
    if (identity === undefined) {
      unexpected++;
      note(`unexpected ${row.stream} row for ${lineage}: not an input record`);
      continue;
    }
    const expected = resolved.rowOf.get(lineage);
    const again = seenLineages.has(lineage);
    seenLineages.add(lineage);
    if (expected === row.stream && !again) {
      seenIdentities.add(identity);
      continue;
    }
    if (again || (expected === undefined && row.stream === resolved.identities.get(identity))) {
      seenIdentities.add(identity);
      duplicated++;
      note(`duplicate ${row.stream} row for ${identity} (at ${lineage})`);
      continue;
    }
    // A record with a row in the wrong stream is not lost: the row is wrong instead.
    seenIdentities.add(identity);
    unexpected++;
    note(
      expected === undefined
        ? `unexpected ${row.stream} row for ${lineage}: a duplicate of another record's key, expected no row`
        : `unexpected ${row.stream} row for ${lineage}: expected a ${expected} row`,
    );
  }
  let lost = 0;
  for (const [identity, stream] of resolved.identities) {
    if (seenIdentities.has(identity)) continue;
    lost++;
    note(`lost: no ${stream} row for ${identity}`);
  }
  let aggregatesMatch = true;
  const stateKeys = new Set([...resolved.aggregates.keys(), ...actualAggregates.keys()]);
  for (const key of [...stateKeys].sort()) {
    const want = resolved.aggregates.get(key);
    const got = actualAggregates.get(key);
    if (sameAggregate(want, got)) continue;
    aggregatesMatch = false;
    note(`aggregate ${key}: expected ${JSON.stringify(want ?? null)}, got ${JSON.stringify(got ?? null)}`);
  }
  return { lost, duplicated, unexpected, aggregatesMatch, differences };
}
