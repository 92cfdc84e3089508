/**
 * The operator's side of a replay (`eos replay`, `plan.ts`): plan a range, watch it stage and commit, request
 * the switch. Everything here is a read or one conditional write; the replay itself is the replay mapping's
 * processor, the switch the coordinator's.
 */
import type { AwsClients } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import { isTimestamp, MAX_TIMESTAMP, type OffsetsByTime } from '../kafka/offsets-by-time.ts';
import { CheckpointStore } from '../ledger/checkpoints.ts';
import { EpochLedger } from '../ledger/epoch-switch.ts';
import { generationLaneOf, laneOf } from '../ledger/epochs.ts';
import { partitionId } from '../ledger/layout.ts';
import { StagedEntries } from '../ledger/staged-entries.ts';
import { checkRanges, ReplayPlanError, type ReplayRange } from '../sink/generation-switch.ts';
import { phaseOf, type ReplayPhase, type ReplayPlan, type ReplayTimes } from './plan.ts';
import { ReplayStore, type RequestSwitchOutcome } from './store.ts';

const iso = (ms: number): string => new Date(ms).toISOString();

export interface ReplayTarget {
  readonly clients: Pick<AwsClients, 'dynamodb'>;
  readonly table: string;
  readonly pipeline: string;
}

export interface PlanReplayOptions extends ReplayTarget {
  readonly topic: string;
  /**
   * The first offset replayed: one for every partition, or per partition (what `kafka-get-offsets --time T` prints
   * for a point in time; the partitions named are then the ones replayed).
   */
  readonly fromOffset: number | ReadonlyMap<number, number>;
  /**
   * The last offset replayed (inclusive), one for every partition or per partition; default, and at most, each
   * partition's last staged offset.
   */
  readonly toOffset?: number | ReadonlyMap<number, number>;
  /** The times the offsets were found for (`planReplayAtTimes`): kept on the plan for the operator. */
  readonly times?: ReplayTimes;
  /** A partition named that the pipeline never staged is skipped, not refused (the brokers named it). */
  readonly skipUnstaged?: boolean;
  /** Default: every partition of the topic the pipeline has staged. */
  readonly partitions?: readonly number[];
  readonly clock: Clock;
}

export interface PlannedReplay {
  readonly plan: ReplayPlan;
  /**
   * The newest plan already asked for exactly these ranges and is still staging (the command ran before, and maybe
   * crashed before it printed): it is returned as it is, not planned twice.
   */
  readonly existing: boolean;
  /** Partitions named (or found) that have nothing to replay from `fromOffset` on, and why. */
  readonly skipped: ReadonlyArray<{ readonly partition: number; readonly reason: string }>;
}

/**
 * Writes the next generation's plan: per partition, the current epoch's lane and [from, min(to, last staged)]
 * (records not yet staged by the live pipeline are not replayed: they will reach the output through it).
 */
export async function planReplay(options: PlanReplayOptions): Promise<PlannedReplay> {
  const { clients, table, pipeline, topic } = options;
  const perPartition = typeof options.fromOffset === 'number' ? undefined : options.fromOffset;
  const fromOf = (partition: number): number =>
    perPartition === undefined ? (options.fromOffset as number) : perPartition.get(partition)!;
  if (perPartition !== undefined && options.partitions !== undefined) {
    throw new ReplayPlanError(
      'per-partition start offsets name the partitions already: not with --partitions',
    );
  }
  const toOf = (partition: number): number | undefined =>
    typeof options.toOffset === 'number' ? options.toOffset : options.toOffset?.get(partition);
  const starts = perPartition === undefined ? [options.fromOffset as number] : [...perPartition.values()];
  for (const from of starts) {
    if (!Number.isSafeInteger(from) || from < 0)
      throw new ReplayPlanError(`start offset ${from} is not an offset`);
    if (typeof options.toOffset === 'number' && options.toOffset < from) {
      throw new ReplayPlanError(`--to-offset ${options.toOffset} is before the start offset ${from}`);
    }
  }
  const epochs = new EpochLedger(clients.dynamodb, table, pipeline, options.clock);
  const known = (await epochs.partitions()).filter((p) => p.topic === topic);
  if (known.length === 0) {
    throw new ReplayPlanError(`pipeline ${pipeline} has staged nothing of topic ${topic}: nothing to replay`);
  }
  const wanted =
    options.partitions ?? (perPartition ? [...perPartition.keys()] : known.map((p) => p.partition));
  const ranges: ReplayRange[] = [];
  const skipped: Array<{ partition: number; reason: string }> = [];
  for (const partition of [...new Set(wanted)].sort((a, b) => a - b)) {
    const found = known.find((p) => p.partition === partition);
    if (found === undefined && options.skipUnstaged === true) {
      skipped.push({ partition, reason: 'the pipeline has staged nothing of it' });
      continue;
    }
    if (found === undefined) {
      throw new ReplayPlanError(`pipeline ${pipeline} has staged nothing of ${topic} partition ${partition}`);
    }
    const lane = laneOf(topic, found.epoch);
    const staged = found.epochs.find((view) => view.epoch === found.epoch)?.stagedOffset ?? -1;
    const from = fromOf(partition);
    const to = Math.min(toOf(partition) ?? staged, staged);
    if (to < from) {
      skipped.push({
        partition,
        reason:
          to < staged
            ? `the range ends at offset ${to}, before its start ${from}`
            : `its epoch ${found.epoch} has staged up to offset ${staged}, before ${from}`,
      });
      continue;
    }
    ranges.push({ lane, partition, from, to });
  }
  if (ranges.length === 0) {
    const why = skipped.map((s) => `partition ${s.partition}: ${s.reason}`).join('; ');
    throw new ReplayPlanError(
      `nothing of ${topic} to replay from offset ${starts.join(', ')} on${why === '' ? '' : ` (${why})`}`,
    );
  }
  const store = new ReplayStore(clients.dynamodb, table, pipeline);
  const latest = (await store.list()).at(-1);
  if (
    latest !== undefined &&
    phaseOf(latest) === 'staging' &&
    JSON.stringify(latest.ranges) === JSON.stringify(checkRanges(ranges))
  ) {
    return { plan: latest, existing: true, skipped };
  }
  const generation = (latest?.generation ?? 0) + 1;
  if (!(await store.create(generation, ranges, options.clock.now(), options.times))) {
    throw new ReplayPlanError(
      `another replay took generation ${generation} meanwhile: run the command again`,
    );
  }
  const plan = await store.read(generation);
  if (plan === undefined)
    throw new ReplayPlanError(`generation ${generation}'s plan vanished after it was written`);
  return { plan, existing: false, skipped };
}

export interface PlanReplayAtTimesOptions
  extends Omit<PlanReplayOptions, 'fromOffset' | 'toOffset' | 'times' | 'skipUnstaged'> {
  readonly offsetsByTime: OffsetsByTime;
  /** From `times.from` (inclusive) to `times.to` (exclusive), epoch ms; no `to`: up to what is staged. */
  readonly times: ReplayTimes;
}

/**
 * Plans the replay of a time span: per partition, from the earliest offset at or after `times.from` to the last one
 * before the earliest at or after `times.to`, as the brokers give them (ListOffsets by time, the offsets an
 * `AT_TIMESTAMP` mapping starts at: record timestamps need not grow with offsets, so a range may hold a record
 * older than `from`, and miss one newer). The plan holds those offsets, and is then an offset plan like any other.
 */
export async function planReplayAtTimes(options: PlanReplayAtTimesOptions): Promise<PlannedReplay> {
  const { offsetsByTime, times, partitions, ...rest } = options;
  for (const time of [times.from, times.to]) {
    if (time !== undefined && !isTimestamp(time)) {
      throw new ReplayPlanError(`${time} is not a time: epoch ms from 0 to ${MAX_TIMESTAMP}`);
    }
  }
  if (times.to !== undefined && times.to <= times.from) {
    throw new ReplayPlanError(
      `--to-timestamp ${iso(times.to)} is not after --from-timestamp ${iso(times.from)}`,
    );
  }
  const [starts, ends] = await Promise.all([
    offsetsByTime.offsetsForTimes(options.topic, times.from),
    times.to === undefined ? undefined : offsetsByTime.offsetsForTimes(options.topic, times.to),
  ]);
  for (const partition of partitions ?? []) {
    if (!starts.has(partition)) {
      throw new ReplayPlanError(`topic ${options.topic} has no partition ${partition}`);
    }
  }
  const named = partitions === undefined ? undefined : new Set(partitions);
  const fromOffsets = new Map<number, number>();
  const toOffsets = new Map<number, number>();
  const skipped: Array<{ partition: number; reason: string }> = [];
  for (const [partition, start] of [...starts].sort(([a], [b]) => a - b)) {
    if (named !== undefined && !named.has(partition)) continue;
    if (!start.found) {
      skipped.push({ partition, reason: `it holds no record at or after ${iso(times.from)}` });
      continue;
    }
    fromOffsets.set(partition, start.offset);
    // Found or not, the answer for `to` bounds the range: every record before it is older than `to`. (Without a
    // record at or after `to`, it is the partition's end at the lookup, not the staged offset read later: records
    // produced meanwhile are not in the range.)
    if (ends === undefined) continue;
    const end = ends.get(partition);
    if (end === undefined) {
      throw new ReplayPlanError(
        `the brokers gave no offset of ${options.topic}-${partition} at ${iso(times.to!)}`,
      );
    }
    toOffsets.set(partition, end.offset - 1);
  }
  if (fromOffsets.size === 0) {
    throw new ReplayPlanError(
      `no partition of ${options.topic} holds a record at or after ${iso(times.from)}: nothing to replay`,
    );
  }
  const planned = await planReplay({
    ...rest,
    fromOffset: fromOffsets,
    ...(toOffsets.size === 0 ? {} : { toOffset: toOffsets }),
    times,
    skipUnstaged: named === undefined,
  });
  return {
    ...planned,
    skipped: [...skipped, ...planned.skipped].sort((a, b) => a.partition - b.partition),
  };
}

export interface RangeProgress extends ReplayRange {
  /** The generation lane's fence: the last offset the replay staged there (-1: nothing yet). */
  readonly stagedOffset: number;
  /** The generation lane's offset in the last committed checkpoint's cut (-1: none). */
  readonly committedOffset: number;
}

export interface ReplayStatus {
  readonly plan: ReplayPlan;
  readonly phase: ReplayPhase;
  readonly ranges: readonly RangeProgress[];
  /** Every range staged through `to` (the switch can happen at the next checkpoint). */
  readonly staged: boolean;
  /** Every range committed through `to`. */
  readonly committed: boolean;
}

/** Every plan with its progress: fences (one Query per fence shard) and the last committed cut. */
export async function replayStatus(target: ReplayTarget): Promise<ReplayStatus[]> {
  const { clients, table, pipeline } = target;
  const plans = await new ReplayStore(clients.dynamodb, table, pipeline).list();
  if (plans.length === 0) return [];
  const fences = await new StagedEntries(clients.dynamodb, table, pipeline).readFences();
  const checkpoints = new CheckpointStore(clients.dynamodb, table, pipeline);
  const head = await checkpoints.readHead();
  const { cut } = await checkpoints.committedCut(head?.committedId ?? 0);
  return plans.map((plan) => {
    const ranges = plan.ranges.map((range) => {
      const id = partitionId(generationLaneOf(range.lane, plan.generation), range.partition);
      return { ...range, stagedOffset: fences[id] ?? -1, committedOffset: cut.get(id) ?? -1 };
    });
    return {
      plan,
      phase: phaseOf(plan),
      ranges,
      staged: ranges.every((r) => r.stagedOffset >= r.to),
      committed: ranges.every((r) => r.committedOffset >= r.to),
    };
  });
}

/** Asks the coordinator to switch readers to `generation` as soon as a checkpoint covers all its ranges. */
export function requestSwitch(
  target: ReplayTarget,
  generation: number,
  clock: Clock,
): Promise<RequestSwitchOutcome> {
  return new ReplayStore(target.clients.dynamodb, target.table, target.pipeline).requestSwitch(
    generation,
    clock.now(),
  );
}
