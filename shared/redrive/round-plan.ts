/**
 * Which round a (lane, partition) runs and the dead letters it may send, decided from its state and the last
 * committed cut alone: a new round only once the previous round's fence is committed, an interrupted one resumed
 * above its fence.
 */
import type { DecodedRecord } from '../kafka/record.ts';
import { redriveLaneOf } from '../ledger/epochs.ts';
import { partitionId } from '../ledger/layout.ts';
import { type DeadLetter, recordOf } from './dead-letter.ts';
import type { PartitionState } from './partition-state.ts';
import type { PartitionRedrive } from './redrive-result.ts';

/** A dead letter to judge, with the record it was made from. */
export interface Candidate {
  readonly letter: DeadLetter;
  readonly record: DecodedRecord;
}

/** A (lane, partition) whose round runs: the round, where it resumes (-1: from the start), what it may send. */
export interface RoundPlan {
  readonly state: PartitionState;
  readonly base: Omit<PartitionRedrive, 'outcome'>;
  readonly round: number;
  readonly resumedAt: number;
  readonly candidates: readonly Candidate[];
}

export type PartitionPlan = RoundPlan | { readonly done: PartitionRedrive };

/**
 * Which round a (lane, partition) runs and the dead letters it may send; or its outcome, when it runs none.
 * With `checkpoint`, only the dead letters that checkpoint committed.
 */
export function planRound(
  state: PartitionState,
  lastCut: Readonly<Record<string, number>>,
  checkpoint: number | undefined,
): PartitionPlan {
  const { lane, partition } = state;
  const base = {
    lane,
    partition,
    sent: 0,
    staged: { output: 0, deadLettered: 0 },
    unchanged: 0,
    unreadable: state.unreadable,
  };
  const letters = [...state.latest.values()]
    .filter((letter) => !state.redriven.has(letter.offset))
    .filter((letter) => checkpoint === undefined || letter.checkpointId === checkpoint)
    .sort((a, b) => a.offset - b.offset);
  const last = state.rounds[state.rounds.length - 1];
  let round: number;
  if (last !== undefined && !last.closed) {
    round = last.round; // an interrupted run: go on with its round
  } else {
    if (letters.length === 0) return { done: { ...base, outcome: 'nothing' } };
    if (
      last !== undefined &&
      (lastCut[partitionId(redriveLaneOf(lane, last.round), partition)] ?? -1) < last.stagedOffset
    ) {
      return { done: { ...base, round: last.round, outcome: 'waiting' } };
    }
    round = (last?.round ?? 0) + 1;
  }
  // An interrupted round goes on above its fence: what lies at or below it, this round has handled already (a
  // batch re-sent from below would be judged against fingerprints of its last batches only). A record below it
  // that this round did not take is a candidate of the next round.
  const resumedAt = last?.round === round ? last.stagedOffset : -1;
  const candidates = letters
    .filter((letter) => letter.offset > resumedAt)
    .map((letter) => ({ letter, record: recordOf(letter, partition) }));
  return { state, base, round, resumedAt, candidates };
}
