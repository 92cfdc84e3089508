/**
 * Packing of re-encoded final objects (`folder-plan.ts` has the census they are packed from): per stream and
 * folder, the members holding rows of that folder, in offset order, cut by the promotion limits (bytes estimated
 * as the member's share of its staged bytes, rows exact). Each group becomes one final object at
 * `finalObjectKey(stream, folder, topic, partition, first-last)`, first and last being the offsets of the group's
 * first and last member, so a file's range always covers its rows and the ranges of one folder never overlap.
 * A member whose rows of one folder exceed the row cap is split by offset ranges ({@link planFolders}): each slice
 * is an object of its own whose range is the slice's offsets, so keys stay distinct and ranges tile.
 *
 * Pure functions of the entries and their census, so a retried prepare plans the same objects under the same keys
 * (C5).
 */
import { PipelineError } from '../../errors.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { finalObjectKey, type ObjectRange } from '../../sink/layout.ts';
import {
  type FolderCensus,
  NO_FOLDER,
  type OffsetRuns,
  type OutputShape,
  reencodedEncoding,
  StagedCensus,
} from './folder-plan.ts';

/** Planning a re-encoded stream found a covered object prepare took no census of: a coordinator defect. */
export class CensusMissingError extends PipelineError {
  constructor(readonly key: string) {
    super(`no census of staged object ${key}: its rows per time folder are unknown, so it cannot be planned`);
  }
}

/** Limits of one re-encoded object. */
export interface ReencodeLimits {
  readonly maxObjectBytes: number;
  readonly maxMembers: number;
  readonly maxObjectRows: number;
}

/** A staged file as a member of a final object: what promote reads and checks it by. */
export interface StagedFileMember {
  readonly key: string;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly recordCount: number;
  readonly bytes: number;
  readonly sha256: string;
}

export function stagedFileMember(entry: StagedFileEntry): StagedFileMember {
  const { key, firstOffset, lastOffset, recordCount, bytes, sha256 } = entry;
  return { key, firstOffset, lastOffset, recordCount, bytes, sha256 };
}

/** A planned member of a re-encoded object. */
export interface FolderMember extends StagedFileMember {
  /** Rows of this member the object holds. */
  readonly rows: number;
  /** The entry's `stagedAt`: the record time of a row staged without a timestamp, and the folders' anchor. */
  readonly stagedAt: number;
  /** A slice of the member (its rows of the folder over the row cap): only rows with offsets in [from, to]. */
  readonly fromOffset?: number;
  readonly toOffset?: number;
  /** An output member of a dead-letter object: its rows that do not fit the plan's columns, as dead letters. */
  readonly misfit?: true;
}

export interface FolderObject extends ObjectRange {
  readonly finalKey: string;
  readonly gzip: boolean;
  readonly format?: 'parquet';
  readonly recordCount: number;
  readonly members: readonly FolderMember[];
}

/** A staged entry's rows of one folder, as planning sees them. */
export interface FolderPart {
  readonly entry: StagedFileEntry;
  readonly folder: string;
  readonly rows: number;
  readonly runs?: OffsetRuns;
  readonly misfit?: true;
}

/** The parts of entries of one stream, from their census (throws {@link CensusMissingError} without one). */
export function partsOf(entries: readonly StagedFileEntry[], census: FolderCensus): FolderPart[] {
  return entries.flatMap((entry) => {
    const counts = census.get(entry.key);
    if (!counts) throw new CensusMissingError(entry.key);
    const runs = counts instanceof StagedCensus ? counts.runs : undefined;
    return [...counts].map(([folder, rows]) => {
      const ofFolder = runs?.get(folder);
      return { entry, folder, rows, ...(ofFolder ? { runs: ofFolder } : {}) };
    });
  });
}

/** The schema misfits of output entries, as parts of their partition's dead-letter stream. */
export function misfitPartsOf(
  entries: readonly StagedFileEntry[],
  census: FolderCensus | undefined,
): FolderPart[] {
  return entries.flatMap((entry) => {
    const counts = census?.get(entry.key);
    if (!(counts instanceof StagedCensus)) return [];
    return [...counts.misfits].map(([folder, rows]) => {
      const runs = counts.misfitRuns.get(folder);
      return { entry, folder, rows, misfit: true as const, ...(runs ? { runs } : {}) };
    });
  });
}

/** Plans one stream's re-encoded objects of one partition from its parts (any order). */
export function planFolders(
  pipeline: string,
  parts: readonly FolderPart[],
  shape: OutputShape,
  limits: ReencodeLimits,
): FolderObject[] {
  const byFolder = new Map<string, FolderPart[]>();
  for (const part of parts) {
    if (part.rows <= 0) continue;
    const list = byFolder.get(part.folder) ?? [];
    list.push(part);
    byFolder.set(part.folder, list);
  }
  const folders = [...byFolder.keys()].sort();
  return folders.flatMap((folder) => {
    // Offset order; a dead-letter entry before the misfits of the output entry of the same chunk (same range).
    const sorted = byFolder
      .get(folder)!
      .sort(
        (a, b) =>
          a.entry.lastOffset - b.entry.lastOffset ||
          a.entry.firstOffset - b.entry.firstOffset ||
          Number(a.misfit ?? false) - Number(b.misfit ?? false),
      );
    return packFolder(pipeline, folder, sorted, shape, limits);
  });
}

function memberOf(part: FolderPart, rows: number, slice?: readonly [number, number]): FolderMember {
  const { entry } = part;
  return {
    ...stagedFileMember(entry),
    rows,
    stagedAt: entry.stagedAt,
    ...(slice ? { fromOffset: slice[0], toOffset: slice[1] } : {}),
    ...(part.misfit ? { misfit: true as const } : {}),
  };
}

/** Parts of one staged chunk (the same offset range): a dead-letter entry and its output entry's misfits. */
function unitsOf(parts: readonly FolderPart[]): FolderPart[][] {
  const units: FolderPart[][] = [];
  for (const part of parts) {
    const last = units[units.length - 1]?.[0];
    if (
      last &&
      last.entry.firstOffset === part.entry.firstOffset &&
      last.entry.lastOffset === part.entry.lastOffset
    )
      units[units.length - 1]!.push(part);
    else units.push([part]);
  }
  return units;
}

/**
 * A unit over the row cap cut into slices of whole offsets (a record's rows are never split), each at most the
 * cap unless one offset alone holds more. The slices tile the unit's range: the first starts at its first offset,
 * the last ends at its last, and each other starts at its first row's offset. Deterministic (offset runs only).
 */
function slicesOf(unit: readonly FolderPart[], cap: number): FolderMember[][] {
  const merged = new Map<number, number>();
  for (const part of unit)
    for (const [offset, rows] of part.runs!) merged.set(offset, (merged.get(offset) ?? 0) + rows);
  const offsets = [...merged.keys()].sort((a, b) => a - b);
  const starts: number[] = [];
  let rows = 0;
  for (const offset of offsets) {
    const count = merged.get(offset)!;
    if (starts.length === 0 || (rows > 0 && rows + count > cap)) {
      starts.push(offset);
      rows = 0;
    }
    rows += count;
  }
  const { firstOffset, lastOffset } = unit[0]!.entry;
  return starts.map((start, index) => {
    const from = index === 0 ? firstOffset : start;
    const to = index === starts.length - 1 ? lastOffset : starts[index + 1]! - 1;
    return unit.flatMap((part) => {
      const count = part.runs!.reduce(
        (sum, [offset, n]) => (offset >= from && offset <= to ? sum + n : sum),
        0,
      );
      return count > 0 ? [memberOf(part, count, [from, to])] : [];
    });
  });
}

function packFolder(
  pipeline: string,
  folder: string,
  parts: readonly FolderPart[],
  shape: OutputShape,
  limits: ReencodeLimits,
): FolderObject[] {
  const objects: FolderObject[] = [];
  const where = parts[0]!.misfit ? { ...parts[0]!.entry, stream: 'deadletter' as const } : parts[0]!.entry;
  let group: FolderMember[] = [];
  let bytes = 0;
  let rows = 0;
  const flush = (): void => {
    if (group.length > 0) objects.push(toObject(pipeline, folder, where, group, shape));
    group = [];
    bytes = 0;
    rows = 0;
  };
  for (const unit of unitsOf(parts)) {
    const count = unit.reduce((sum, part) => sum + part.rows, 0);
    // Above the cap on its own: sliced by offset ranges, each slice an object of its own. Without offset runs (a
    // census built by hand, or dead letters of an unpartitioned plan, which take no census) it stays whole.
    if (count > limits.maxObjectRows && unit.every((part) => part.runs !== undefined)) {
      flush();
      for (const slice of slicesOf(unit, limits.maxObjectRows)) {
        group = slice;
        flush();
      }
      continue;
    }
    // The member's share of its staged bytes: an estimate of what it adds (integers only: deterministic).
    const share = unit.reduce(
      (sum, { entry, rows: n }) => sum + Math.ceil((entry.bytes * n) / Math.max(entry.recordCount, 1)),
      0,
    );
    const full =
      group.length + unit.length > limits.maxMembers ||
      bytes + share > limits.maxObjectBytes ||
      rows + count > limits.maxObjectRows;
    if (group.length > 0 && full) flush();
    group.push(...unit.map((part) => memberOf(part, part.rows)));
    bytes += share;
    rows += count;
  }
  flush();
  return objects;
}

function toObject(
  pipeline: string,
  folder: string,
  where: Pick<StagedFileEntry, 'stream' | 'topic' | 'partition'>,
  members: readonly FolderMember[],
  shape: OutputShape,
): FolderObject {
  const encoding = reencodedEncoding(shape, where.stream);
  const range: ObjectRange = {
    stream: where.stream,
    topic: where.topic,
    partition: where.partition,
    firstOffset: Math.min(...members.map((m) => m.fromOffset ?? m.firstOffset)),
    lastOffset: Math.max(...members.map((m) => m.toOffset ?? m.lastOffset)),
    ...(folder === NO_FOLDER ? {} : { folder }),
  };
  return {
    ...range,
    finalKey: finalObjectKey(pipeline, range, encoding),
    gzip: encoding === 'ndjson.gz',
    ...(encoding === 'parquet' ? { format: 'parquet' as const } : {}),
    recordCount: members.reduce((sum, m) => sum + m.rows, 0),
    members,
  };
}
