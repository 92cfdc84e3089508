/**
 * Epochs: a Kafka partition's offsets belong to an epoch. Epoch 0 is the partition as first met; an
 * operator opens epoch N+1 (`eos epoch --start-new`) after the processor stopped the partition because its offsets
 * went backwards (a recreated topic, a migrated cluster): the new records, under offsets the old epoch already
 * used, then get a fence, staged entries, key window and final keys of their own, and nothing of the old epoch is
 * lost or rewritten.
 *
 * How an epoch is named. Wherever the pipeline names a source partition for its own bookkeeping (ledger keys,
 * fences, staged and final S3 keys, cuts, manifests, `eos verify`), epoch N ≥ 1 of topic T is the *lane* `T~N`;
 * epoch 0 is `T` itself, so nothing written before epochs changes. `~` is not in Kafka's topic alphabet
 * (`[a-zA-Z0-9._-]`), so a lane never collides with a real topic, and it is none of the separators the layouts use
 * (`#` in ledger keys, `+` in time-folder file names, `/`). Rows keep their record's real topic in their lineage
 * (`source.topic`); the object and manifest entry they sit in name the lane. The coordinator needs no epoch logic:
 * a lane is one more partition of the cut, and a closed lane's fence stays where its last staging left it, so the
 * next checkpoint commits what the old epoch staged and later ones carry it unchanged.
 *
 * Where the current epoch is kept: on the epoch-0 fence item (the root, `fenceKeys.fence(T, P)`, or the legacy key
 * for a partition staged only before the shards), attribute `epoch` (absent: 0). The switch to N+1 is one
 * DynamoDB transaction per partition: it closes the current lane's fence (`closedAt`, on condition its staged
 * offset is still the one read and it is not closed) and sets the root's `epoch` to N+1 (on condition it is still
 * N). Every staging transaction is conditioned on its fence not being closed, so a processor (or a zombie) still
 * holding the old epoch fails its condition, reads again and finds the new lane. The new lane's fence does not
 * exist until its first staging transaction creates it (condition: absent), like a partition's first fence.
 *
 * Free of SDK imports (the layouts and the CLI's help load it).
 */

/** Separates a topic from its epoch in a lane name. Not in Kafka's topic alphabet. */
export const EPOCH_SEPARATOR = '~';

/** The largest epoch a lane can name (nine digits: a safe integer with room, and short keys). */
export const MAX_EPOCH = 999_999_999;

/**
 * The regular-expression source of a lane: a topic, then `~N` for epoch N >= 1 (no leading zero), then `~rR` for
 * the output generation G >= 1 a replay writes (`shared/replay/`: a range of the epoch reprocessed into output
 * that replaces the old one's only when an operator switches to it), then `~rR` for the dead-letter redrive round
 * R >= 1 (`shared/redrive/`): the records a redrive sends back through the pipeline are staged in a lane of their
 * own, keyed by their original offsets.
 */
export const LANE_PATTERN = '[a-zA-Z0-9._-]+(?:~[1-9]\\d{0,8})?(?:~g[1-9]\\d{0,8})?(?:~r[1-9]\\d{0,8})?';

const LANE = /^([a-zA-Z0-9._-]+)(?:~([1-9]\d{0,8}))?(?:~g([1-9]\d{0,8}))?(?:~r([1-9]\d{0,8}))?$/;

function checkNumber(what: string, value: number, min: number): void {
  if (!Number.isSafeInteger(value) || value < min || value > MAX_EPOCH) {
    throw new RangeError(`${what} ${value} is not an integer in ${min}..${MAX_EPOCH}`);
  }
}

/** The lane of `topic`'s epoch `epoch`: the topic itself for epoch 0. */
export function laneOf(topic: string, epoch: number): string {
  checkNumber('epoch', epoch, 0);
  return epoch === 0 ? topic : `${topic}${EPOCH_SEPARATOR}${epoch}`;
}

/** The lane of output generation `generation` (>= 1) of an epoch lane: where a replay of that epoch stages. */
export function generationLaneOf(epochLane: string, generation: number): string {
  checkNumber('generation', generation, 1);
  const parsed = parseLane(epochLane);
  if (parsed === undefined || parsed.generation !== undefined || parsed.round !== undefined) {
    throw new RangeError(`${epochLane} is not an epoch lane (<topic>[~<epoch>])`);
  }
  return `${epochLane}${EPOCH_SEPARATOR}g${generation}`;
}

/** The lane of redrive round `round` (>= 1) of a source lane (a topic's epoch lane, or a generation lane). */
export function redriveLaneOf(sourceLane: string, round: number): string {
  checkNumber('redrive round', round, 1);
  return `${sourceLane}${EPOCH_SEPARATOR}r${round}`;
}

export interface Lane {
  /** The Kafka topic. */
  readonly topic: string;
  readonly epoch: number;
  /** The output generation, for a lane a replay writes (absent: generation 0, the live output). */
  readonly generation?: number;
  /** The redrive round, for a lane of redriven dead letters. */
  readonly round?: number;
}

/** The topic, epoch and redrive round a lane names; undefined for a string that is no lane. */
export function parseLane(lane: string): Lane | undefined {
  const match = LANE.exec(lane);
  if (!match) return undefined;
  return {
    topic: match[1]!,
    epoch: match[2] === undefined ? 0 : Number(match[2]),
    ...(match[3] === undefined ? {} : { generation: Number(match[3]) }),
    ...(match[4] === undefined ? {} : { round: Number(match[4]) }),
  };
}

/**
 * The lane a redrive lane redrives: the epoch lane, or the generation lane, it took its dead letters from (the
 * lane itself when it is no redrive lane).
 */
export function sourceLaneOf(lane: string): string {
  const parsed = parseLane(lane);
  if (parsed === undefined) return lane;
  const epochLane = laneOf(parsed.topic, parsed.epoch);
  return parsed.generation === undefined ? epochLane : generationLaneOf(epochLane, parsed.generation);
}

/** The epoch lane of any lane: its generation and redrive round dropped (the offsets it keys records by). */
export function epochLaneOf(lane: string): string {
  const parsed = parseLane(lane);
  return parsed === undefined ? lane : laneOf(parsed.topic, parsed.epoch);
}

/** The output generation of a lane: 0 for the live output (an epoch lane and its redrive rounds). */
export function generationOfLane(lane: string): number {
  return parseLane(lane)?.generation ?? 0;
}

/** Whether a lane is a topic's epoch 0 itself (the root: only it may have a legacy fence or name an epoch). */
export function isRootLane(lane: string): boolean {
  const parsed = parseLane(lane);
  return (
    parsed !== undefined &&
    parsed.epoch === 0 &&
    parsed.round === undefined &&
    parsed.generation === undefined
  );
}

/** The Kafka topic of a lane (the string itself when it names no epoch). */
export function topicOfLane(lane: string): string {
  return parseLane(lane)?.topic ?? lane;
}

/**
 * Why the processor stopped a partition (L2), written on the stopped lane's fence so that `eos epoch` can show it:
 * the batch it refused, the fence it judged against and the rule's reason, and the invocations that saw it.
 */
export interface StopRecord {
  readonly reason: string;
  readonly fence: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  /** Epoch ms of the first sighting. */
  readonly at: number;
  /** The invocations (attempts) that judged this batch start backwards against this fence; absent before them. */
  readonly seenBy?: StopSightings;
}

/** Which attempts saw a stop: the first, the last and how many (a fixed size, however often it is retried). */
export interface StopSightings {
  readonly first: string;
  readonly last: string;
  readonly count: number;
}

function isSightings(value: unknown): value is StopSightings {
  const v = value as Partial<StopSightings> | undefined;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.first === 'string' &&
    typeof v.last === 'string' &&
    Number.isSafeInteger(v.count) &&
    v.count! >= 1
  );
}

export function isStopRecord(value: unknown): value is StopRecord {
  const v = value as Partial<StopRecord> | undefined;
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.reason === 'string' &&
    Number.isSafeInteger(v.fence) &&
    Number.isSafeInteger(v.firstOffset) &&
    Number.isSafeInteger(v.lastOffset) &&
    typeof v.at === 'number' &&
    (v.seenBy === undefined || isSightings(v.seenBy))
  );
}

/**
 * How many invocations saw a stop. One written before sightings were counted counts as seen once (by an attempt
 * whose id it did not keep): the mapping's next retry of the batch confirms it, and until then `eos epoch
 * --start-new` refuses it as any stop seen once — a zombie's false stop of an earlier release is never taken.
 */
export function stopSightings(stop: StopRecord): number {
  return stop.seenBy?.count ?? 1;
}

/**
 * A stop is confirmed once two invocations judged the same batch start backwards against the same fence, the later
 * one begun after the first sighting. The mapping retries a batch whose offsets truly went backwards until it
 * passes, and a retry begins after the refusal, so a real stop is confirmed by its first retry; a zombie (a stale
 * invocation whose batch was already retried and acknowledged) is never retried, and a second zombie of the same
 * batch (its own timed-out retry) began before the first one's sighting, so a stop zombies wrote falsely — on
 * clocks ahead of the stagers', say — stays seen once.
 */
export function isConfirmedStop(stop: StopRecord): boolean {
  return stopSightings(stop) >= 2;
}

/**
 * The stop record to write when attempt `attemptId` (begun at `startedAt`) judges a batch backwards, given the one
 * stored (`previous`): the same fence and batch start adds a sighting (its first `at` kept), anything else starts
 * anew; undefined when this attempt is already counted or began before the first sighting (nothing to write).
 */
export function sightedStop(
  previous: StopRecord | undefined,
  stop: Omit<StopRecord, 'seenBy'>,
  attemptId: string,
  startedAt: number,
): StopRecord | undefined {
  if (previous === undefined || previous.fence !== stop.fence || previous.firstOffset !== stop.firstOffset) {
    return { ...stop, seenBy: { first: attemptId, last: attemptId, count: 1 } };
  }
  const seen = previous.seenBy;
  if (seen?.first === attemptId || seen?.last === attemptId) return undefined;
  // An attempt begun before the stop was first seen is no retry of the refused batch: a stale twin of it.
  if (startedAt < previous.at) return undefined;
  return {
    ...stop,
    at: previous.at,
    seenBy: {
      first: seen?.first ?? '(an earlier release)',
      last: attemptId,
      count: stopSightings(previous) + 1,
    },
  };
}

/** A fence attribute: the current epoch, on the root (epoch-0) fence item only. */
export const EPOCH_ATTRIBUTE = 'epoch';
/** A fence attribute: when the lane was closed by the switch to the next epoch (epoch ms). */
export const CLOSED_ATTRIBUTE = 'closedAt';
/** A fence attribute: the {@link StopRecord} of the batch that stopped the lane, cleared by its next staging. */
export const STOP_ATTRIBUTE = 'stoppedBy';
