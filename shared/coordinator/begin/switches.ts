/**
 * Which requested replay generation switches a checkpoint makes: those whose every range its cut covers
 * (`shared/replay/plan.ts`). The manifest that commits the checkpoint names them (`commit/manifest.ts`).
 */
import type { CutEntry } from '../../ledger/checkpoints.ts';
import { generationLaneOf } from '../../ledger/epochs.ts';
import { partitionId } from '../../ledger/layout.ts';
import { phaseOf } from '../../replay/plan.ts';
import type { CoordinatorParts } from '../parts.ts';

/**
 * The replay generations whose switch an operator requested, not yet named by a committed manifest, and whose
 * every range this cut covers: the generation lane's cut at or past the range's `to`, so each record of the
 * range is committed by this checkpoint or an earlier one. One Query per begin.
 */
export async function coveredSwitches(
  parts: Pick<CoordinatorParts, 'replays' | 'log'>,
  cut: ReadonlyMap<string, CutEntry>,
): Promise<number[]> {
  const covered: number[] = [];
  const malformed = (error: Error) =>
    parts.log.error('a replay plan is malformed: left out of every switch', { error: error.message });
  for (const plan of await parts.replays.list(malformed)) {
    if (phaseOf(plan) !== 'switch-requested') continue;
    const waiting = plan.ranges.filter(
      (range) =>
        (cut.get(partitionId(generationLaneOf(range.lane, plan.generation), range.partition))?.cut ?? -1) <
        range.to,
    );
    if (waiting.length === 0) covered.push(plan.generation);
    else {
      parts.log.info('replay switch waits for its ranges to be staged', {
        generation: plan.generation,
        waitingPartitions: waiting.length,
      });
    }
  }
  return covered;
}
