/**
 * Re-encoded final objects: Parquet output, and time-partitioned output of either format. Such an object is not a
 * concatenation of staged bytes: its members are decoded (the staged bytes prepare verified, when prepare merges
 * the object's candidate), the rows of the object's folder kept, the staged-only timestamp removed and the rows
 * encoded again (`object-bytes.ts`). Prepare, which reads every covered object anyway (C3), takes a census of each
 * one: its rows per time folder ({@link censusOf}); `folder-pack.ts` packs the members into objects from it. Each
 * member records how many of its rows go to the object, and an object whose members do not give exactly that is
 * refused.
 *
 * Bounds keep the work of merging a function of the staged input, never of record content:
 * - the folders of one staged file are bounded around its `stagedAt` (`record-time.ts` assignFolders);
 * - a member whose rows of one folder exceed the row cap is sliced by offset ranges (`folder-pack.ts`);
 * - each member is decoded once per partition (prepare) or shard (promote of a plan without candidates), not once
 *   per object (`object-bytes.ts` buildObjects), and a member over the row cap is streamed once per object
 *   instead, holding only that object's rows ({@link streamMemberRows});
 * - every staged row's lineage offset lies within its entry's range, else prepare refuses the entry
 *   ({@link StagedRowLineageError}): slices and misfit order go by offset, and a row outside would vanish.
 *
 * A schema change (outputColumns redeployed while rows of the previous transform are staged) never stalls: a
 * staged output row is projected onto the current columns (undeclared fields dropped; an added nullable column is
 * null; a value of the new type's range is kept, e.g. int → long). A row that still does not fit is committed
 * exactly once as a dead letter `{source, error: "schema-mismatch: <problem>", raw: {key: null, value: null,
 * headers: []}, row}`: the table's schema stays the declared one, and the outcome is a pure function of the
 * verified bytes and the plan's columns. Such rows join their partition's dead-letter stream (their member is the
 * output staged file, marked `misfit`), in the dead-letter folder of their Kafka timestamp, ordered by offset.
 *
 * Everything here is a pure function of the entries, the verified bytes and the settings recorded in the plan, so
 * a retried or recovering promote writes the same bytes under the same keys (C5).
 */
import type { Settings } from '../../config/settings.ts';
import { PipelineError } from '../../errors.ts';
import type { Stream } from '../../ledger/layout.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import type { FinalEncoding } from '../../sink/layout.ts';
import { decodeNdjson, ndjsonLines } from '../../sink/ndjson.ts';
import {
  FOLDER_BOUNDS,
  FolderAssigner,
  type FolderBounds,
  type FolderRule,
  withoutStagedTime,
} from '../../sink/record-time.ts';
import type { TimeGranularity } from '../../sink/time-partitions.ts';
import type { ColumnDefinition } from '../../transforms/api.ts';
import { compileRowCheck } from '../../transforms/rows.ts';

/** What the settings say about final objects, as the plan records it. */
export interface OutputShape {
  readonly format: Settings['outputFormat'];
  /** Gzip re-encoded NDJSON objects. */
  readonly gzip: boolean;
  readonly granularity?: TimeGranularity;
  readonly timeField?: string;
  readonly columns?: readonly ColumnDefinition[];
}

export function outputShapeOf(settings: Settings): OutputShape {
  return {
    format: settings.outputFormat,
    gzip: settings.gzip,
    ...(settings.timePartitioning === 'none' ? {} : { granularity: settings.timePartitioning }),
    ...(settings.timeField === undefined ? {} : { timeField: settings.timeField }),
    ...(settings.outputColumns === undefined ? {} : { columns: settings.outputColumns }),
  };
}

/** Whether a stream's final objects are re-encoded (else staged bytes are concatenated). */
export function reencodes(shape: OutputShape | undefined, stream: Stream): boolean {
  if (!shape) return false;
  return shape.granularity !== undefined || (stream === 'output' && shape.format === 'parquet');
}

/** What a plan records for promote (`promoter.ts` PlanEncoding); undefined when nothing is re-encoded. */
export function planEncoding(
  shape: OutputShape,
): { timeField?: string; columns?: readonly ColumnDefinition[]; folderBounds?: FolderBounds } | undefined {
  if (!reencodes(shape, 'output') && !reencodes(shape, 'deadletter')) return undefined;
  return {
    ...(shape.timeField === undefined ? {} : { timeField: shape.timeField }),
    ...(shape.format === 'parquet' && shape.columns ? { columns: shape.columns } : {}),
    // The bound the census filed rows by: promote files them by the same one, whatever release runs it.
    ...(shape.granularity === undefined ? {} : { folderBounds: FOLDER_BOUNDS }),
  };
}

/** The final encoding of a re-encoded object of `stream`: dead letters stay NDJSON. */
export function reencodedEncoding(shape: OutputShape, stream: Stream): FinalEncoding {
  if (stream === 'output' && shape.format === 'parquet') return 'parquet';
  return shape.gzip ? 'ndjson.gz' : 'ndjson';
}

/** The folder rule of a stream: the time field applies to output rows only. */
export function folderRule(granularity: TimeGranularity, stream: Stream, timeField?: string): FolderRule {
  return stream === 'output' && timeField !== undefined ? { granularity, timeField } : { granularity };
}

/** The key of rows that go to no folder (unpartitioned Parquet). */
export const NO_FOLDER = '';

/** Rows per folder of one staged object; {@link NO_FOLDER} when unpartitioned. Sorted by folder. */
export type FolderCounts = ReadonlyMap<string, number>;
/** Per staged key. */
export type FolderCensus = ReadonlyMap<string, FolderCounts>;

/** Rows per lineage offset, in offset order: `[offset, rows]`. */
export type OffsetRuns = readonly (readonly [number, number])[];

/**
 * Offset runs are kept for a folder of more rows than this (only then can it exceed the row cap and need slicing),
 * and always for dead letters and schema misfits (rare, and they may share an object with each other).
 */
export const CENSUS_RUNS_MIN_ROWS = 10_000;

/**
 * {@link censusOf}'s result: the output (or dead-letter) rows per folder as a {@link FolderCounts}, plus the rows
 * that do not fit the Parquet columns (per dead-letter folder) and the offset runs of large folders.
 */
export class StagedCensus extends Map<string, number> {
  /** Rows that do not fit the columns, per dead-letter folder (output entries of a Parquet plan only). */
  readonly misfits = new Map<string, number>();
  /** Offset runs per folder (see {@link CENSUS_RUNS_MIN_ROWS}). */
  readonly runs = new Map<string, OffsetRuns>();
  /** Offset runs of the misfits per dead-letter folder. */
  readonly misfitRuns = new Map<string, OffsetRuns>();
}

/** What the classification of a staged object's rows depends on (all recorded in the plan or the entry). */
export interface ClassifyParams {
  /** The staged object's own stream. */
  readonly stream: Stream;
  readonly stagedAt: number;
  readonly granularity?: TimeGranularity;
  readonly timeField?: string;
  /** Parquet columns: output rows are projected onto them, and a row that still does not fit is a misfit. */
  readonly columns?: readonly ColumnDefinition[];
  /** The bound of the folders around `stagedAt`; absent: none (a plan made before the bound existed). */
  readonly bounds?: FolderBounds;
}

/** One staged row as promote writes it. */
export interface ClassifiedRow {
  /** The final row (staged time removed, projected) or, for a misfit, its dead-letter row. */
  readonly row: Record<string, unknown>;
  /** Its folder ({@link NO_FOLDER} when unpartitioned); a misfit's is its dead-letter folder. */
  readonly folder: string;
  readonly misfit: boolean;
  readonly offset: number;
}

/** The reason a schema misfit's dead-letter row carries. */
export const SCHEMA_MISMATCH = 'schema-mismatch';

/**
 * Classifies and files a staged object's rows one at a time, in staged order (see the module comment): the
 * classifier keeps the folder state of the rows before (fitting rows by the output rule, the time field; misfits
 * by the dead-letter rule, the Kafka timestamp; each bounded around stagedAt on its own), so a staged object can
 * be read as a stream. Prepare's census and promote both derive from this one function, so they cannot disagree.
 */
export function rowClassifier(params: ClassifyParams): (staged: Record<string, unknown>) => ClassifiedRow {
  const columns = params.stream === 'output' ? params.columns : undefined;
  const check = columns ? compileRowCheck(columns) : undefined;
  const declared = new Set(columns?.map((column) => column.name));
  const assigner = (misfit: boolean) =>
    params.granularity === undefined
      ? undefined
      : new FolderAssigner(
          folderRule(params.granularity, misfit ? 'deadletter' : params.stream, params.timeField),
          params.stagedAt,
          params.bounds,
        );
  const fitting = assigner(false);
  const misfits = assigner(true);
  const filed = (staged: Record<string, unknown>, misfit: boolean): string =>
    (misfit ? misfits : fitting)?.next(staged) ?? NO_FOLDER;
  return (staged) => {
    const plain = withoutStagedTime(staged);
    const source = plain.source as Record<string, unknown> | undefined;
    const offset = typeof source?.offset === 'number' ? source.offset : Number.NaN;
    if (!check) return { row: plain, misfit: false, offset, folder: filed(staged, false) };
    const { source: _source, ...fields } = plain;
    const projected = Object.keys(fields).every((name) => declared.has(name))
      ? fields
      : Object.fromEntries(Object.entries(fields).filter(([name]) => declared.has(name)));
    const problem = check(projected);
    if (problem === undefined)
      return { row: { ...projected, source }, misfit: false, offset, folder: filed(staged, false) };
    const deadLetter = {
      source,
      error: `${SCHEMA_MISMATCH}: ${problem}`,
      raw: { key: null, value: null, headers: [] },
      row: fields,
    };
    return { row: deadLetter, misfit: true, offset, folder: filed(staged, true) };
  };
}

/** A staged object's rows, classified and filed ({@link rowClassifier}). */
export function classifyRows(
  staged: readonly Record<string, unknown>[],
  params: ClassifyParams,
): ClassifiedRow[] {
  return staged.map(rowClassifier(params));
}

/** {@link classifyRows} of a staged object's bytes. */
export function classifyStaged(body: Uint8Array, gzip: boolean, params: ClassifyParams): ClassifiedRow[] {
  return classifyRows(decodeNdjson(body, gzip) as Record<string, unknown>[], params);
}

/** The classification parameters of a staged entry under `shape` (prepare's view). */
export function classifyParamsOf(entry: StagedFileEntry, shape: OutputShape): ClassifyParams {
  return {
    stream: entry.stream,
    stagedAt: entry.stagedAt,
    ...(shape.granularity === undefined ? {} : { granularity: shape.granularity, bounds: FOLDER_BOUNDS }),
    ...(shape.timeField === undefined ? {} : { timeField: shape.timeField }),
    ...(entry.stream === 'output' && shape.format === 'parquet' && shape.columns
      ? { columns: shape.columns }
      : {}),
  };
}

function sortedByKey<V>(map: Map<string, V>): [string, V][] {
  return [...map].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}

function runsOf(offsets: readonly number[]): OffsetRuns {
  const runs = new Map<number, number>();
  for (const offset of offsets) runs.set(offset, (runs.get(offset) ?? 0) + 1);
  return [...runs].sort(([a], [b]) => a - b);
}

/**
 * One verified staged object's rows per folder, with its schema misfits and offset runs (a {@link StagedCensus}).
 * Never throws for a row that does not fit the Parquet columns: that row is a misfit, planned as a dead letter.
 */
export function censusOf(entry: StagedFileEntry, body: Uint8Array, shape: OutputShape): StagedCensus {
  const classified = classifyStaged(body, entry.gzip, classifyParamsOf(entry, shape));
  const census = new StagedCensus();
  const offsets = new Map<string, number[]>();
  const misfitOffsets = new Map<string, number[]>();
  for (const [index, { folder, misfit, offset }] of classified.entries()) {
    // Planning and promote file rows by their lineage offset (slices, misfit order): a row outside its entry's
    // range would belong to no slice and vanish without a word, so it is refused here,
    // before the vote, as a bad key is.
    if (!Number.isSafeInteger(offset) || offset < entry.firstOffset || offset > entry.lastOffset)
      throw new StagedRowLineageError(entry, index, offset);
    const list = (misfit ? misfitOffsets : offsets).get(folder) ?? [];
    list.push(offset);
    (misfit ? misfitOffsets : offsets).set(folder, list);
  }
  for (const [folder, list] of sortedByKey(offsets)) {
    census.set(folder, list.length);
    if (list.length > CENSUS_RUNS_MIN_ROWS || entry.stream === 'deadletter')
      census.runs.set(folder, runsOf(list));
  }
  for (const [folder, list] of sortedByKey(misfitOffsets)) {
    census.misfits.set(folder, list.length);
    census.misfitRuns.set(folder, runsOf(list));
  }
  return census;
}

/**
 * A staged row's lineage offset is not an offset of its entry's range: the processor that staged it is faulty (or
 * forged it). Prepare throws it, so the attempt aborts naming the object, and every next attempt does too until
 * the entry is repaired (docs/operations.md): nothing is committed past it.
 */
export class StagedRowLineageError extends PipelineError {
  constructor(
    entry: Pick<StagedFileEntry, 'key' | 'firstOffset' | 'lastOffset'>,
    readonly rowIndex: number,
    offset: number,
  ) {
    super(
      `staged object ${entry.key}: row ${rowIndex + 1}'s lineage offset ${Number.isNaN(offset) ? '(not a number)' : offset} lies outside its entry's offsets ${entry.firstOffset}-${entry.lastOffset}`,
    );
  }
}

/** A staged row that does not fit the Parquet columns, as an error (the census makes such a row a misfit instead). */
export class RowMisfitError extends PipelineError {
  constructor(
    readonly rowIndex: number,
    readonly problem: string,
  ) {
    super(`row ${rowIndex + 1} does not fit outputColumns: ${problem}`);
  }
}

/**
 * The rows a member gives an object of `folder` (undefined: unpartitioned), from its classified rows: its
 * fitting rows (or, for a `misfit` member, its dead letters) of that folder, within its slice, in staged order.
 * The count is checked by the caller against the plan.
 */
export function memberRows(
  classified: readonly ClassifiedRow[],
  member: MemberSelector,
  folder: string | undefined,
): Record<string, unknown>[] {
  return classified.filter((c) => belongs(c, member, folder)).map((c) => c.row);
}

/** Which of a staged object's rows a member of an object takes (a slice, misfits): `folder-pack.ts` FolderMember. */
type MemberSelector = {
  readonly fromOffset?: number;
  readonly toOffset?: number;
  readonly misfit?: true;
};

function belongs(c: ClassifiedRow, member: MemberSelector, folder: string | undefined): boolean {
  const { fromOffset, toOffset } = member;
  return (
    c.misfit === (member.misfit === true) &&
    (folder === undefined || c.folder === folder) &&
    (fromOffset === undefined || (c.offset >= fromOffset && c.offset <= (toOffset ?? fromOffset)))
  );
}

/**
 * {@link memberRows} of a staged object's bytes read as a stream: only the member's rows for the object are held,
 * never the whole staged object decoded (promote's memory stays a function of the row cap for a staged file of
 * any size).
 */
export async function streamMemberRows(
  body: Uint8Array,
  gzip: boolean,
  params: ClassifyParams,
  member: MemberSelector,
  folder: string | undefined,
): Promise<Record<string, unknown>[]> {
  const classify = rowClassifier(params);
  const rows: Record<string, unknown>[] = [];
  for await (const line of ndjsonLines(body, gzip)) {
    const c = classify(JSON.parse(line) as Record<string, unknown>);
    if (belongs(c, member, folder)) rows.push(c.row);
  }
  return rows;
}

/** The granularity a folder is spelled in. */
export function granularityOf(folder: string): TimeGranularity {
  return folder.includes('/hour=') ? 'hour' : 'day';
}
