/**
 * A row's record time, which decides its time folder, and how it travels from the processor to the
 * coordinator.
 *
 * The coordinator never sees Kafka records, only staged rows, so with time partitioning on the processor stages
 * each row with its record's Kafka timestamp inside the row's lineage (`source.timestamp`: `source` is reserved in
 * transform schemas, so the field can never clash with a column). The staged format is internal: promote removes
 * the field, and every final row's lineage is exactly `{topic, partition, offset}` in both formats.
 *
 * A row's record time is, in order: the value of the `timeField` column when it is an integer (milliseconds); the
 * staged Kafka timestamp; else the staged entry's `stagedAt` (a row staged before partitioning was switched on has
 * no timestamp). Each is a function of the staged bytes or the ledger entry, so planning again gives the same
 * folders (C5).
 *
 * The folder is then bounded around the staged file's `stagedAt` ({@link assignFolders}): Kafka's CreateTime is
 * whatever the producer says, and without a bound one staged file of N rows with N distinct hours would become N
 * final objects (promote work multiplied by record content). A row whose record time lies more
 * than {@link MAX_LATENESS_MS} before its file's `stagedAt` or more than {@link MAX_EARLINESS_MS} after it is filed
 * under the folder of `stagedAt` instead, and so are the rows of a file beyond its first
 * {@link MAX_FOLDERS_PER_STAGED_FILE} folders (in staged row order). Only the folder is clamped: the row keeps its
 * own time in its columns. `stagedAt` is recorded in the ledger entry and in the plan, never the promote's clock, so
 * the clamp is as deterministic as the rest.
 */
import type { OutputRow } from '../transforms/types.ts';
import { type TimeGranularity, timeFolder } from './time-partitions.ts';

/** The staged-only lineage field holding the Kafka timestamp. */
export const STAGED_TIME_FIELD = 'timestamp';

type Row = Record<string, unknown>;

const STAMPED = new RegExp(`"offset":\\d+,"${STAGED_TIME_FIELD}":`);

/** The row as the processor stages it for time partitioning: its lineage carries the Kafka timestamp. */
export function withStagedTime<R extends { readonly source: object }>(row: R, timestamp: number): R {
  return { ...row, source: { ...row.source, [STAGED_TIME_FIELD]: timestamp } };
}

/** The row without the staged-only timestamp; the same object when it has none (key order kept otherwise). */
export function withoutStagedTime(row: Row): Row {
  const source = row.source;
  if (typeof source !== 'object' || source === null || !(STAGED_TIME_FIELD in source)) return row;
  const { [STAGED_TIME_FIELD]: _time, ...lineage } = source as Row;
  return { ...row, source: lineage };
}

/**
 * Whether NDJSON text may hold rows staged with a timestamp: the stamped lineage's text (`"offset":<n>,"timestamp":`,
 * the order `withStagedTime` writes). A false positive (a json column holding that text) only costs a re-encode
 * that changes nothing; a stamped row is never missed.
 */
export function mayHoldStagedTime(text: string): boolean {
  return STAMPED.test(text);
}

/** How the coordinator files rows into folders. */
export interface FolderRule {
  readonly granularity: TimeGranularity;
  /** The output column holding the record time; dead-letter rows always use the Kafka timestamp. */
  readonly timeField?: string;
}

function integer(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isSafeInteger(value) ? value : undefined;
}

/** A staged row's record time (see the module comment). */
export function recordTimeOf(row: Row, timeField: string | undefined, stagedAt: number): number {
  const own = timeField === undefined ? undefined : integer(row[timeField]);
  if (own !== undefined) return own;
  const source = row.source as Row | undefined;
  return integer(source?.[STAGED_TIME_FIELD]) ?? stagedAt;
}

/** A staged row's folder, before the bound around `stagedAt` ({@link assignFolders} applies it). */
export function folderOfRow(row: Row, rule: FolderRule, stagedAt: number): string {
  return timeFolder(recordTimeOf(row, rule.timeField, stagedAt), rule.granularity);
}

/** How far before its file's `stagedAt` a record time may lie and still choose its folder: 7 days. */
export const MAX_LATENESS_MS = 7 * 24 * 3_600_000;
/** How far after its file's `stagedAt` a record time may lie and still choose its folder: 1 hour. */
export const MAX_EARLINESS_MS = 3_600_000;
/**
 * Most folders the rows of one staged file (of one stream) are filed in, the `stagedAt` folder included: 48 (two
 * days of hour folders). Rows of further folders go to the `stagedAt` folder.
 */
export const MAX_FOLDERS_PER_STAGED_FILE = 48;

/**
 * The bound of a staged file's folders around its `stagedAt`. A plan records the bound its census used
 * (`PlanEncoding.folderBounds`), and promote files rows by the plan's bound, never by this release's: a checkpoint
 * decided by a release with another bound (or with none recorded) still rolls forward (C4).
 */
export interface FolderBounds {
  readonly latenessMs: number;
  readonly earlinessMs: number;
  readonly maxFolders: number;
}

/** The bound this release plans with. */
export const FOLDER_BOUNDS: FolderBounds = {
  latenessMs: MAX_LATENESS_MS,
  earlinessMs: MAX_EARLINESS_MS,
  maxFolders: MAX_FOLDERS_PER_STAGED_FILE,
};

/**
 * Files one staged file's rows into folders, one row at a time in staged order (so a staged file can be read as a
 * stream): with `bounds`, a record time outside [stagedAt − latenessMs, stagedAt + earlinessMs] gives the
 * `stagedAt` folder, and once `maxFolders` folders are in use (the `stagedAt` folder counted), a row of any other
 * folder gets the `stagedAt` folder; without `bounds` (a plan made before them), every row its own record time's
 * folder. A pure function of the rows so far and `stagedAt`.
 */
export class FolderAssigner {
  private readonly home: string;
  private readonly used: Set<string>;

  constructor(
    private readonly rule: FolderRule,
    private readonly stagedAt: number,
    private readonly bounds: FolderBounds | undefined,
  ) {
    this.home = timeFolder(stagedAt, rule.granularity);
    this.used = new Set([this.home]);
  }

  next(row: Row): string {
    const time = recordTimeOf(row, this.rule.timeField, this.stagedAt);
    const bounds = this.bounds;
    if (!bounds) return timeFolder(time, this.rule.granularity);
    if (time < this.stagedAt - bounds.latenessMs || time > this.stagedAt + bounds.earlinessMs)
      return this.home;
    const folder = timeFolder(time, this.rule.granularity);
    if (this.used.has(folder)) return folder;
    if (this.used.size >= bounds.maxFolders) return this.home;
    this.used.add(folder);
    return folder;
  }
}

/** The folders of one staged file's rows, in order ({@link FolderAssigner}; this release's bound by default). */
export function assignFolders(
  rows: readonly Row[],
  rule: FolderRule,
  stagedAt: number,
  bounds: FolderBounds | undefined = FOLDER_BOUNDS,
): string[] {
  const assigner = new FolderAssigner(rule, stagedAt, bounds);
  return rows.map((row) => assigner.next(row));
}

/** Narrows a decoded staged row to an output row (the encoders' input); lineage checked by the encoder. */
export function asOutputRow(row: Row): OutputRow {
  return row as OutputRow;
}
