/**
 * A generation switch as a manifest records it: a replay generation and the offset ranges it serves from that
 * manifest on (`generations.ts` turns the switches into what readers show; `replay/plan.ts` is the operator's plan a
 * switch comes from). Checked whenever read, since a manifest is input like any other.
 *
 * Free of SDK imports.
 */
import { PipelineError } from '../errors.ts';
import { LANE_PATTERN, MAX_EPOCH, parseLane } from '../ledger/epochs.ts';

/** One source partition's range of a replay: offsets `from`..`to` (inclusive) of epoch lane `lane`. */
export interface ReplayRange {
  /** The epoch lane (`<topic>` or `<topic>~<epoch>`) whose offsets are replayed. */
  readonly lane: string;
  readonly partition: number;
  readonly from: number;
  readonly to: number;
}

/** What a manifest records of a switch: the generation and the ranges it now serves. */
export interface GenerationSwitch {
  readonly generation: number;
  readonly ranges: readonly ReplayRange[];
}

/**
 * At most this many ranges in one plan: the plan is one ledger item (400 KB) and is copied into the manifest
 * that switches to it, so it stays small (and {@link MAX_REPLAY_PLAN_BYTES} bounds its bytes).
 */
export const MAX_REPLAY_RANGES = 4096;

/**
 * At most this many bytes of ranges (their JSON): the plan's item must stay under DynamoDB's 400 KB whatever the
 * topic names' lengths, and the manifest that switches carries them too.
 */
export const MAX_REPLAY_PLAN_BYTES = 200 * 1024;

/** A plan or range that cannot be replayed as written. */
export class ReplayPlanError extends PipelineError {}

const EPOCH_LANE = new RegExp(`^${LANE_PATTERN}$`);

/** The problem with a range, or undefined. */
function rangeProblem(range: ReplayRange): string | undefined {
  const lane =
    typeof range.lane === 'string' && EPOCH_LANE.test(range.lane) ? parseLane(range.lane) : undefined;
  if (lane === undefined || lane.generation !== undefined || lane.round !== undefined) {
    return `lane ${String(range.lane)} is not an epoch lane (<topic> or <topic>~<epoch>)`;
  }
  if (!Number.isSafeInteger(range.partition) || range.partition < 0) {
    return `partition ${String(range.partition)} is not a partition number`;
  }
  if (!Number.isSafeInteger(range.from) || range.from < 0)
    return `from ${String(range.from)} is not an offset`;
  if (!Number.isSafeInteger(range.to) || range.to < range.from) {
    return `to ${String(range.to)} is not an offset at or after from ${range.from}`;
  }
  return undefined;
}

/** The ranges sorted by lane and partition, checked: well-formed, at most one per partition, not too many. */
export function checkRanges(ranges: readonly ReplayRange[]): ReplayRange[] {
  if (ranges.length === 0) throw new ReplayPlanError('a replay names no partition');
  if (ranges.length > MAX_REPLAY_RANGES) {
    throw new ReplayPlanError(`a replay names ${ranges.length} partitions, at most ${MAX_REPLAY_RANGES}`);
  }
  const bytes = Buffer.byteLength(JSON.stringify(ranges));
  if (bytes > MAX_REPLAY_PLAN_BYTES) {
    throw new ReplayPlanError(
      `a replay's ranges take ${bytes} bytes, at most ${MAX_REPLAY_PLAN_BYTES}: replay fewer partitions at a time`,
    );
  }
  const seen = new Set<string>();
  for (const range of ranges) {
    const problem = rangeProblem(range);
    if (problem) throw new ReplayPlanError(`replay range: ${problem}`);
    const id = `${range.lane}#${range.partition}`;
    if (seen.has(id))
      throw new ReplayPlanError(`replay names ${range.lane} partition ${range.partition} twice`);
    seen.add(id);
  }
  return [...ranges]
    .map((r) => ({ lane: r.lane, partition: r.partition, from: r.from, to: r.to }))
    .sort((a, b) => (a.lane < b.lane ? -1 : a.lane > b.lane ? 1 : a.partition - b.partition));
}

export function checkGeneration(generation: number): void {
  if (!Number.isSafeInteger(generation) || generation < 1 || generation > MAX_EPOCH) {
    throw new ReplayPlanError(`generation ${String(generation)} is not an integer in 1..${MAX_EPOCH}`);
  }
}

/** A switch as a manifest may hold it, or a {@link ReplayPlanError}. */
export function parseGenerationSwitch(value: unknown): GenerationSwitch {
  const v = value as Partial<GenerationSwitch> | undefined;
  if (typeof v !== 'object' || v === null || !Array.isArray(v.ranges)) {
    throw new ReplayPlanError('a generation switch is not {generation, ranges}');
  }
  checkGeneration(v.generation as number);
  return { generation: v.generation as number, ranges: checkRanges(v.ranges as ReplayRange[]) };
}

/** Whether a lane is a topic's epoch-0 lane or an epoch lane (what a range may name). */
export function isEpochLane(lane: string): boolean {
  const parsed = parseLane(lane);
  return parsed !== undefined && parsed.generation === undefined && parsed.round === undefined;
}
