/**
 * Replay plans: an operator's request to reprocess offset ranges of an epoch with the current transform
 * into a new output *generation*, and later to switch readers to it.
 *
 * The lifecycle, each step one conditional write to the plan's ledger item (`<pl>#REPLAY`, `G#<generation>`):
 * 1. planned — `eos replay --from-offset …` writes the plan: generation G and, per source partition, the epoch
 *    lane and the inclusive offset range [from, to]. The plan never changes after that.
 * 2. staging — the replay mapping (a second event source mapping of its own consumer group, read from the start)
 *    feeds a processor in replay mode (`shared/processor/`): it stages the range's records, and nothing else, into the
 *    generation lane `<epoch lane>~g<G>`, by the same protocol as live batches. The coordinator commits those lanes
 *    like any other; readers ignore every generation that no manifest switched to.
 * 3. switch requested — `eos replay --switch G` marks the plan (`switchRequestedAt`).
 * 4. switched — the next checkpoint whose cut covers every range (the generation lane's cut at or past `to`:
 *    every record of the range staged, so committed by that checkpoint or an earlier one) names the switch in its
 *    manifest (`generations`); the commit then notes the checkpoint on the plan (`switchedIn`) so later cuts leave
 *    it out. From that manifest on, readers show generation G's rows for those ranges instead of the earlier
 *    generation's: one atomic switch, since a manifest is.
 *
 * Only operators write plans and request switches, and only the coordinator notes `switchedIn`; the replay
 * processor reads its plan (the stack's IAM keeps processors off the item, so a compromised processor cannot
 * forge a switch).
 *
 * Free of SDK imports (the manifest types and readers use it).
 */
import { epochLaneOf } from '../ledger/epochs.ts';
import { parseClaimant } from '../ledger/records.ts';
import type { GenerationSwitch } from '../sink/generation-switch.ts';

/**
 * The times an operator planned a replay by (`eos replay --from-timestamp`), epoch ms: kept for the record only. The
 * plan's ranges hold the offsets the brokers gave for them, and nothing else reads the times.
 */
export interface ReplayTimes {
  readonly from: number;
  readonly to?: number;
}

export interface ReplayPlan extends GenerationSwitch {
  /** Epoch ms. */
  readonly createdAt: number;
  readonly times?: ReplayTimes;
  /** Epoch ms: when an operator asked for the switch. */
  readonly switchRequestedAt?: number;
  /** The checkpoint whose manifest switched to this generation. */
  readonly switchedIn?: number;
}

/** The phase a plan is in, from its item (see the module comment). */
export type ReplayPhase = 'staging' | 'switch-requested' | 'switched';

export function phaseOf(plan: ReplayPlan): ReplayPhase {
  if (plan.switchedIn !== undefined) return 'switched';
  return plan.switchRequestedAt === undefined ? 'staging' : 'switch-requested';
}

/**
 * Whether a claimant (`<lane>#<partition>#<offset>`) is a record one of the plan's ranges replays: the generation's
 * own claim of the key decides then, not the live one. The processor (a generation's live holders) and `eos
 * redrive` (a generation's key-conflict dead letters) judge by it alike.
 */
export function replaysClaimant(plan: ReplayPlan, claimant: string): boolean {
  const of = parseClaimant(claimant);
  if (of === undefined) return false;
  const lane = epochLaneOf(of.lane);
  return plan.ranges.some(
    (range) =>
      range.lane === lane &&
      range.partition === of.partition &&
      of.offset >= range.from &&
      of.offset <= range.to,
  );
}
