/**
 * The `replay` prop (replay into a new generation): a second event source mapping on the same cluster and
 * topic, under a consumer group of its own that starts from the beginning of the topic (or a timestamp), feeding a
 * second processor built exactly like the live one plus `EOS_REPLAY_GENERATION`, so the processor stages the range
 * into output generation N (`shared/replay/`) next to the live output, until an operator switches to it.
 *
 * Free of CDK imports: `pipeline-props.ts` validates the prop with it before anything is built.
 */
import { InvalidSettingError } from '../shared/errors.ts';
import { keys } from '../shared/ledger/layout.ts';

/** The largest generation (nine digits, as epochs: `shared/ledger/epochs.ts`). */
export const MAX_REPLAY_GENERATION = 999_999_999;

/** The environment variable that turns the processor into the replay processor of generation N. */
export const REPLAY_GENERATION_ENV = 'EOS_REPLAY_GENERATION';

/** Where the replay's consumer group starts. */
export type ReplayStartingPosition = 'TRIM_HORIZON' | 'AT_TIMESTAMP';

export interface ReplayProps {
  /** The output generation the replay writes, 1–999,999,999 (the plan `eos replay` writes names the same one). */
  readonly generation: number;
  /** Where the replay's consumer group starts: `TRIM_HORIZON` (default) or `AT_TIMESTAMP`. */
  readonly startingPosition?: ReplayStartingPosition;
  /** For `AT_TIMESTAMP` only: whole Unix seconds. */
  readonly startingPositionTimestamp?: number;
}

/** A validated `replay` prop. */
export interface ReplayConfig {
  readonly generation: number;
  readonly startingPosition: ReplayStartingPosition;
  readonly startingPositionTimestamp?: number;
  /** `<consumerGroupId>-replay-g<generation>`. */
  readonly consumerGroupId: string;
}

/**
 * The partition key of the pipeline's replay plans (items `<pl>#REPLAY` / `G#<generation, 9 digits>`), from the
 * ledger layout `shared/replay/` reads and writes them with.
 */
export function replayLeadingKeys(pipeline: string): string[] {
  return [keys.replayPk(pipeline)];
}

/** The replay mapping's consumer group: a new group, so its starting position applies. */
export function replayConsumerGroupId(consumerGroupId: string, generation: number): string {
  return `${consumerGroupId}-replay-g${generation}`;
}

const REPLAY_KEYS = new Set(['generation', 'startingPosition', 'startingPositionTimestamp']);
/** Lambda's limit on a consumer group id. */
const MAX_CONSUMER_GROUP_LENGTH = 200;
/** Unix seconds above this are taken for milliseconds (the year 5138). */
const LARGEST_PLAUSIBLE_SECONDS = 1e11;

/**
 * Checks the `replay` prop against the pipeline's validated settings; each error names the field
 * (`replay.generation`, …). Undefined without the prop.
 */
export function replayConfigOf(
  replay: unknown,
  pipeline: { readonly deliveryGuarantee: string; readonly consumerGroupId: string },
): ReplayConfig | undefined {
  if (replay === undefined) return undefined;
  if (replay === null || typeof replay !== 'object' || Array.isArray(replay)) {
    throw new InvalidSettingError(
      'replay',
      `expected { generation, startingPosition?, startingPositionTimestamp? } (got ${JSON.stringify(replay)})`,
    );
  }
  const given = replay as Record<string, unknown>;
  const unknown = Object.keys(given).find((key) => !REPLAY_KEYS.has(key));
  if (unknown !== undefined) {
    throw new InvalidSettingError(
      `replay.${unknown}`,
      'unknown field (known: generation, startingPosition, startingPositionTimestamp)',
    );
  }
  const { generation, startingPosition = 'TRIM_HORIZON', startingPositionTimestamp } = given;
  if (
    typeof generation !== 'number' ||
    !Number.isInteger(generation) ||
    generation < 1 ||
    generation > MAX_REPLAY_GENERATION
  ) {
    throw new InvalidSettingError(
      'replay.generation',
      `an integer from 1 to ${MAX_REPLAY_GENERATION} (got ${JSON.stringify(generation)})`,
    );
  }
  if (startingPosition !== 'TRIM_HORIZON' && startingPosition !== 'AT_TIMESTAMP') {
    throw new InvalidSettingError(
      'replay.startingPosition',
      `TRIM_HORIZON or AT_TIMESTAMP (got ${JSON.stringify(startingPosition)}): a replay reads a range that is already in the topic`,
    );
  }
  if (startingPosition === 'AT_TIMESTAMP' && startingPositionTimestamp === undefined) {
    throw new InvalidSettingError(
      'replay.startingPositionTimestamp',
      'required with replay.startingPosition AT_TIMESTAMP',
    );
  }
  if (startingPosition !== 'AT_TIMESTAMP' && startingPositionTimestamp !== undefined) {
    throw new InvalidSettingError(
      'replay.startingPositionTimestamp',
      `only used with replay.startingPosition AT_TIMESTAMP (not ${startingPosition})`,
    );
  }
  if (
    startingPositionTimestamp !== undefined &&
    (typeof startingPositionTimestamp !== 'number' ||
      !Number.isInteger(startingPositionTimestamp) ||
      startingPositionTimestamp < 0 ||
      startingPositionTimestamp > LARGEST_PLAUSIBLE_SECONDS)
  ) {
    throw new InvalidSettingError(
      'replay.startingPositionTimestamp',
      `whole Unix seconds (got ${JSON.stringify(startingPositionTimestamp)}${
        typeof startingPositionTimestamp === 'number' && startingPositionTimestamp > LARGEST_PLAUSIBLE_SECONDS
          ? ': milliseconds?'
          : ''
      })`,
    );
  }
  // A replay stages into a generation the coordinator commits and an operator switches to: only the exactly-once
  // path has staging, a fence and checkpoints.
  if (pipeline.deliveryGuarantee !== 'exactly-once') {
    throw new InvalidSettingError(
      'replay',
      `needs deliveryGuarantee 'exactly-once' (got '${pipeline.deliveryGuarantee}'): a replay stages a new generation that a checkpoint commits`,
    );
  }
  const consumerGroupId = replayConsumerGroupId(pipeline.consumerGroupId, generation);
  if (consumerGroupId.length > MAX_CONSUMER_GROUP_LENGTH) {
    throw new InvalidSettingError(
      'replay',
      `its consumer group ${consumerGroupId} is longer than ${MAX_CONSUMER_GROUP_LENGTH} characters: shorten consumerGroupId`,
    );
  }
  return {
    generation,
    startingPosition,
    ...(startingPositionTimestamp === undefined ? {} : { startingPositionTimestamp }),
    consumerGroupId,
  };
}
