/**
 * Time folders of final objects: Hive-style partitioning by record time, in UTC, the one definition of
 * how a folder is spelled, parsed back, and described to AWS Glue / Athena as partition projection.
 *
 * ```
 * <pl>/final/<stream>/dt=YYYY-MM-DD/<topic>+<partition>+<first>-<last>.<ext>            timePartitioning: day
 * <pl>/final/<stream>/dt=YYYY-MM-DD/hour=HH/<topic>+<partition>+<first>-<last>.<ext>    timePartitioning: hour
 * ```
 *
 * The record time is the Kafka timestamp by default, or the value of the transform's `timeField` column
 * (milliseconds since the epoch). A time before 1970-01-01T00:00Z (Kafka's "no timestamp" is -1) is filed under
 * 1970-01-01 hour 00, a time after 9999-12-31T23:59:59.999Z under 9999-12-31 hour 23: a folder must have a
 * four-digit year, and clamping keeps such a record in a deterministic folder instead of stalling its partition
 * (L1). The file names under a folder are defined in `layout.ts` (`finalObjectKey`).
 *
 * Glue: both partition keys are `string` columns (`dt` = `2026-12-01`, `hour` = `07`), projected by Athena:
 * `dt` as a `date` projection with format `yyyy-MM-dd`, `hour` as an `integer` projection 0-23 with two digits.
 * See {@link partitionProjection}.
 */
import type { TimePartitioning } from '../config/settings.ts';
import { PipelineError } from '../errors.ts';

/** A partitioning that makes folders. */
export type TimeGranularity = Exclude<TimePartitioning, 'none'>;

/** The first and last instants a folder can name (four-digit years); times outside are clamped to them. */
export const EARLIEST_FOLDER_MS = 0;
export const LATEST_FOLDER_MS = Date.UTC(9999, 11, 31, 23, 59, 59, 999);

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/** A record time that is not an integer number of milliseconds: the caller decides (the sink falls back). */
export class InvalidRecordTimeError extends PipelineError {
  constructor(readonly value: unknown) {
    super(`record time ${String(value)} is not an integer number of milliseconds since the epoch`);
  }
}

function pad(value: number, digits: number): string {
  return String(value).padStart(digits, '0');
}

/** Clamps `ms` into the range a folder can name (see the module comment). */
export function clampRecordTime(ms: number): number {
  if (!Number.isSafeInteger(ms)) throw new InvalidRecordTimeError(ms);
  return Math.min(Math.max(ms, EARLIEST_FOLDER_MS), LATEST_FOLDER_MS);
}

/** The folder (no leading or trailing slash) of a record at `ms`: `dt=YYYY-MM-DD` or `dt=YYYY-MM-DD/hour=HH`, UTC. */
export function timeFolder(ms: number, granularity: TimeGranularity): string {
  const date = new Date(clampRecordTime(ms));
  const dt = `dt=${pad(date.getUTCFullYear(), 4)}-${pad(date.getUTCMonth() + 1, 2)}-${pad(date.getUTCDate(), 2)}`;
  return granularity === 'day' ? dt : `${dt}/hour=${pad(date.getUTCHours(), 2)}`;
}

/** A parsed folder: its granularity and the first and last millisecond it holds. */
export interface ParsedTimeFolder {
  readonly granularity: TimeGranularity;
  readonly startMs: number;
  readonly endMs: number;
}

const FOLDER = /^dt=(\d{4})-(\d{2})-(\d{2})(?:\/hour=(\d{2}))?$/;

/**
 * The parts of a folder exactly as {@link timeFolder} spells it, else undefined: round-trips, so no second
 * spelling is accepted (`hour=7`, `dt=2026-02-30`, `hour=24`, a trailing slash, anything else).
 */
export function parseTimeFolder(folder: string): ParsedTimeFolder | undefined {
  const match = FOLDER.exec(folder);
  if (!match) return undefined;
  const granularity: TimeGranularity = match[4] === undefined ? 'day' : 'hour';
  const startMs = Date.UTC(
    Number(match[1]),
    Number(match[2]) - 1,
    Number(match[3]),
    granularity === 'hour' ? Number(match[4]) : 0,
  );
  // Date.UTC treats years 0-99 as 1900-1999 and rolls over days and hours: the round trip refuses all of that.
  if (!Number.isFinite(startMs) || startMs < EARLIEST_FOLDER_MS || startMs > LATEST_FOLDER_MS)
    return undefined;
  if (timeFolder(startMs, granularity) !== folder) return undefined;
  return { granularity, startMs, endMs: startMs + (granularity === 'day' ? DAY_MS : HOUR_MS) - 1 };
}

/** The depth (path segments) of a folder of `granularity`: 1 for `dt=…`, 2 for `dt=…/hour=…`. */
export function folderDepth(granularity: TimeGranularity): number {
  return granularity === 'day' ? 1 : 2;
}

/** A Glue partition key (column) of a time-partitioned table. */
export interface TimePartitionKey {
  readonly name: 'dt' | 'hour';
  readonly type: 'string';
  readonly comment: string;
}

/** The table's partition keys, in folder order. */
export function timePartitionKeys(granularity: TimeGranularity): TimePartitionKey[] {
  const dt: TimePartitionKey = { name: 'dt', type: 'string', comment: 'record date, UTC (yyyy-MM-dd)' };
  if (granularity === 'day') return [dt];
  return [dt, { name: 'hour', type: 'string', comment: 'record hour, UTC (00-23)' }];
}

export interface ProjectionOptions {
  /**
   * `s3://<bucket>/<pipeline>/final/<stream>/`: the table's location; the folders are appended to it.
   * Must end with a slash.
   */
  readonly location: string;
  /**
   * The first day the projection enumerates (`yyyy-MM-dd`, e.g. the pipeline's first deploy, or earlier if late
   * records older than that are expected). Records in folders before it are in S3 but invisible to projected
   * queries. The last day is `NOW+1DAYS`: a producer clock a little ahead still shows.
   */
  readonly firstDay: string;
}

/** The placeholders Athena fills in `storage.location.template` (the literal text `${dt}`, `${hour}`). */
export const PROJECTION_PLACEHOLDERS = { dt: `\${dt}`, hour: `\${hour}` } as const;

/** Thrown for a projection asked with a location or first day that would describe folders that never exist. */
export class InvalidProjectionError extends PipelineError {}

/**
 * The table parameters that make Athena project the time folders (partition projection: no crawler, no
 * `MSCK REPAIR`, no partition API calls when a checkpoint writes a new folder). Keys and values as Glue stores
 * them; `storage.location.template` holds `${dt}` and `${hour}` literally.
 */
export function partitionProjection(
  granularity: TimeGranularity,
  options: ProjectionOptions,
): Record<string, string> {
  if (!/^s3:\/\/[^/]+\/.+\/$/.test(options.location)) {
    throw new InvalidProjectionError(`location ${options.location} is not s3://<bucket>/<prefix>/`);
  }
  if (parseTimeFolder(`dt=${options.firstDay}`) === undefined) {
    throw new InvalidProjectionError(`first day ${options.firstDay} is not a yyyy-MM-dd date from 1970 on`);
  }
  const parameters: Record<string, string> = {
    'projection.enabled': 'true',
    'projection.dt.type': 'date',
    'projection.dt.format': 'yyyy-MM-dd',
    'projection.dt.range': `${options.firstDay},NOW+1DAYS`,
    'projection.dt.interval': '1',
    'projection.dt.interval.unit': 'DAYS',
  };
  if (granularity === 'hour') {
    parameters['projection.hour.type'] = 'integer';
    parameters['projection.hour.range'] = '0,23';
    parameters['projection.hour.digits'] = '2';
  }
  parameters['storage.location.template'] =
    granularity === 'day' ? `${options.location}dt=\${dt}/` : `${options.location}dt=\${dt}/hour=\${hour}/`;
  return parameters;
}
