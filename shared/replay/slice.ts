/**
 * What the replay mapping's processor stages of a delivered batch (`plan.ts`): the records of its plan's range
 * for that partition, into the generation lane, plus — once the batch reaches past the range — the first record
 * after it, staged without any effect (`inertRecord`): that moves the lane's fence past `to`, which is how the
 * coordinator knows every record of the range is staged even when offset `to` itself no longer exists (compacted,
 * or a transaction marker). Records before `from`, a partition the plan does not name, and everything after that
 * first record stage nothing.
 *
 * Pure: the processor (`replayBatch`) and the tests use it.
 */

import type { PartitionBatch } from '../kafka/record.ts';
import { generationLaneOf, topicOfLane } from '../ledger/epochs.ts';
import type { ReplayRange } from '../sink/generation-switch.ts';
import type { ReplayPlan } from './plan.ts';

export interface ReplaySlice {
  /** The batch to stage: `topic` names the generation lane, records keep their own topic and offsets. */
  readonly batch: PartitionBatch;
  readonly range: ReplayRange;
  /** Records above this offset are staged without effect (at most one: the first after the range). */
  readonly to: number;
}

/** The plan's range for a delivered partition, if it names one. */
export function rangeFor(plan: ReplayPlan, topic: string, partition: number): ReplayRange | undefined {
  return plan.ranges.find((range) => range.partition === partition && topicOfLane(range.lane) === topic);
}

/** The part of `batch` the replay stages; undefined when nothing (see the module comment). */
export function replaySlice(plan: ReplayPlan, batch: PartitionBatch): ReplaySlice | undefined {
  const range = rangeFor(plan, batch.topic, batch.partition);
  if (range === undefined) return undefined;
  const records = [];
  for (const record of batch.records) {
    if (record.offset < range.from) continue;
    records.push(record);
    if (record.offset > range.to) break;
  }
  if (records.length === 0) return undefined;
  return {
    batch: { topic: generationLaneOf(range.lane, plan.generation), partition: batch.partition, records },
    range,
    to: range.to,
  };
}
