/**
 * Which records of a batch are duplicates by key (P4) and which are conflicts, from what is known of the keys'
 * holders. Pure in what it is given, so a retry of the batch decides the same; the stager decides again whenever
 * something new is known (a fence re-read, claims found taken, a state refusal).
 */
import { digestPrefix } from '../ledger/key-window.ts';
import { claimantOf } from '../ledger/records.ts';
import type { ClaimHolder } from '../ledger/staging-ledger.ts';
import { deadLetterOf, type EvaluatedRecord } from './evaluate.ts';
import type { KeyConflict } from './observer.ts';

export interface KeyFacts {
  readonly topic: string;
  readonly partition: number;
  /** The batch's records above the fence it started from, as evaluated (before any key decision). */
  readonly originals: readonly EvaluatedRecord[];
  /** The fence's staged offset as known now: records at or below it were staged by another invocation. */
  readonly stagedOffset: number;
  /** Keys found held by records outside this batch (claims ahead, a cancelled transaction, a key window). */
  readonly external: ReadonlyMap<string, ClaimHolder>;
  /** Offsets dead-lettered because DynamoDB refused their state, with the reason. */
  readonly stateRefused: ReadonlyMap<number, string>;
  /**
   * Offsets at or below the fence that another invocation staged: whether each became output or a dead letter is
   * not known here, so none of them holds its key in this decision; the ledger (its claim, the key window) says who
   * does.
   */
  readonly unknownOutcome?: ReadonlySet<number>;
}

export interface KeyDecision {
  /** The records still to stage, conflicts and state refusals turned into dead letters. */
  readonly pending: EvaluatedRecord[];
  /** Offsets dropped as duplicates by key (P4). */
  readonly dropped: Set<number>;
  /** Offsets dead-lettered as key conflicts, reported once their transaction commits. */
  readonly conflicts: Map<number, KeyConflict>;
}

/**
 * Whether a held key's record is the same record (a duplicate) rather than a conflict. A key window keeps only a
 * digest prefix (`key-window.ts`); a claim written before digests has none, and counts as a duplicate.
 */
export function sameRecord(holder: ClaimHolder, digest: string): boolean {
  if (holder.digest === undefined) return true;
  return holder.prefixOnly ? holder.digest === digestPrefix(digest) : holder.digest === digest;
}

/**
 * A record whose key another record holds (outside the batch, or the batch's first record with that key) is a
 * duplicate when the digests are equal (or when the holder's claim predates digests) and a conflict
 * (dead-lettered, naming key and claimant) otherwise. A record dead-lettered for its state holds no key (a dead
 * letter never does), so the batch's holder of a key is its first record with the key that DynamoDB did not
 * refuse: the same outcome as when the refused record came in an earlier batch.
 */
export function decideKeys(facts: KeyFacts): KeyDecision {
  const { topic, partition, originals, stagedOffset, external, stateRefused } = facts;
  const unknown = facts.unknownOutcome ?? new Set<number>();
  const dropped = new Set<number>();
  const conflicts = new Map<number, KeyConflict>();
  const holders = new Map<string, EvaluatedRecord>();
  for (const record of originals) {
    const key = record.idempotencyKey;
    const mayHold = !stateRefused.has(record.offset) && !unknown.has(record.offset);
    if (key !== undefined && !holders.has(key) && mayHold) holders.set(key, record);
  }
  const pending = originals
    .filter((record) => record.offset > stagedOffset)
    .map((record) => {
      const key = record.idempotencyKey;
      const refused = stateRefused.get(record.offset);
      if (refused !== undefined) return deadLetterOf(record, refused);
      if (key === undefined) return record;
      const first = holders.get(key)!;
      const holder: ClaimHolder | undefined =
        external.get(key) ??
        (first === record
          ? undefined
          : {
              idempotencyKey: key,
              claimant: claimantOf(topic, partition, first.offset),
              digest: first.digest,
            });
      if (holder === undefined) return record;
      if (sameRecord(holder, record.digest)) {
        dropped.add(record.offset);
        return record;
      }
      conflicts.set(record.offset, {
        topic,
        partition,
        offset: record.offset,
        idempotencyKey: key,
        claimant: holder.claimant,
      });
      return deadLetterOf(
        record,
        `idempotency key ${JSON.stringify(key)} is already claimed by ${holder.claimant} with a different payload`,
      );
    });
  return { pending, dropped, conflicts };
}
