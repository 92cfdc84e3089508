/**
 * A planned final object's bytes from its members' bytes (C5): concatenated in offset order (concatenated gzip
 * members are one valid gzip stream; NDJSON concatenates) or, for a re-encoded object (Parquet, time folders),
 * decoded, filed and encoded again (`folder-plan.ts`). Prepare builds each candidate with it from the staged bytes
 * it verified; promote builds with it only for a plan of the release before candidates, from the verified copies.
 * A pure function of the plan and the members' bytes, so every build of one plan gives the same bytes.
 */
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { Stream } from '../../ledger/layout.ts';
import { parseStagedObjectKey } from '../../sink/layout.ts';
import { encodeNdjson } from '../../sink/ndjson.ts';
import { encodeParquet } from '../../sink/parquet.ts';
import { asOutputRow } from '../../sink/record-time.ts';
import { isReencoded, type PlanEncoding, type PlannedObject, type StagedMember } from './final-plan.ts';
import {
  type ClassifiedRow,
  type ClassifyParams,
  classifyStaged,
  granularityOf,
  memberRows,
  streamMemberRows,
} from './folder-plan.ts';

/** A planned object is not what the layout allows promote to write: nothing is written. */
export class PlanRejectedError extends PipelineError {
  constructor(
    readonly finalKey: string,
    detail: string,
  ) {
    super(`promotion of ${finalKey} refused: ${detail}`);
  }
}

/** A member's bytes, checked by the caller's own rule (verified staged bytes at prepare, a copy at promote). */
export type ReadMember = (member: StagedMember) => Promise<Buffer>;

export interface BuildOptions {
  /** Objects built at once. */
  readonly objects: number;
  /** Members read at once per object. */
  readonly members: number;
  /**
   * A re-encoded member of at most this many rows is decoded once for all the objects given and kept until its
   * last object is built; a larger one is streamed once per object that takes rows from it, holding only those.
   */
  readonly maxCachedRows: number;
}

/**
 * Builds each of `objects` (a plan's, checked by the caller) and hands its bytes to `take`, in plan order; returns
 * what `take` returned. A re-encoded member is read and decoded ONCE for all the objects given however many
 * (folders, slices, misfits) take rows from it, and released after the last of them.
 */
export async function buildObjects<T>(
  pipeline: string,
  objects: readonly PlannedObject[],
  encoding: PlanEncoding,
  read: ReadMember,
  options: BuildOptions,
  take: (object: PlannedObject, body: Buffer) => Promise<T>,
): Promise<T[]> {
  const users = new Map<string, number>();
  for (const object of objects.filter(isReencoded))
    for (const m of new Set(object.members.map((member) => member.key)))
      users.set(m, (users.get(m) ?? 0) + 1);
  const decoded = new Map<string, Promise<ClassifiedRow[]>>();
  const rowsOf = async (object: PlannedObject, m: StagedMember): Promise<Record<string, unknown>[]> => {
    const parts = parseStagedObjectKey(pipeline, m.key);
    if (!parts) throw new PlanRejectedError(object.finalKey, `member ${m.key} is not a staged key`);
    const params = classifyParamsOf(object, m, parts.stream, encoding);
    if (m.recordCount > options.maxCachedRows)
      return streamMemberRows(await read(m), parts.gzip, params, m, object.folder);
    let rows = decoded.get(m.key);
    if (!rows) {
      rows = read(m).then((bytes) => classifyStaged(bytes, parts.gzip, params));
      decoded.set(m.key, rows);
    }
    return memberRows(await rows, m, object.folder);
  };
  return mapLimit(objects, options.objects, async (object) => {
    if (!isReencoded(object)) {
      const parts = await mapLimit(object.members, options.members, read);
      return take(object, Buffer.concat(parts));
    }
    const rows = await mapLimit(object.members, options.members, (m) => rowsOf(object, m));
    const body = reencode(object, rows, encoding);
    for (const key of new Set(object.members.map((m) => m.key))) {
      const left = (users.get(key) ?? 1) - 1;
      users.set(key, left);
      if (left === 0) decoded.delete(key);
    }
    return take(object, body);
  });
}

/** How a member's rows are classified: the staged file's stream, and the plan's rule (never the settings). */
function classifyParamsOf(
  object: PlannedObject,
  m: StagedMember,
  stream: Stream,
  encoding: PlanEncoding,
): ClassifyParams {
  return {
    stream,
    stagedAt: m.stagedAt ?? 0,
    ...(object.folder === undefined
      ? {}
      : {
          granularity: granularityOf(object.folder),
          ...(encoding.folderBounds === undefined ? {} : { bounds: encoding.folderBounds }),
        }),
    ...(encoding.timeField === undefined ? {} : { timeField: encoding.timeField }),
    ...(encoding.columns === undefined ? {} : { columns: encoding.columns }),
  };
}

/**
 * A re-encoded object's bytes from each member's rows of the object's folder and slice (`rows[i]` for member i,
 * which must be the count the plan voted for, else {@link PlanRejectedError}: the plan and the verified bytes
 * disagree), staged timestamp removed, encoded as Parquet with the plan's columns or as NDJSON. A dead-letter
 * object holding schema misfits is ordered by offset (its members may share a chunk's range).
 */
function reencode(
  object: PlannedObject,
  memberRowLists: readonly (readonly Record<string, unknown>[])[],
  encoding: PlanEncoding,
): Buffer {
  let rows = object.members.flatMap((m, index) => {
    const found = memberRowLists[index]!;
    if (found.length !== m.rows) {
      throw new PlanRejectedError(
        object.finalKey,
        `member ${m.key} holds ${found.length} rows for it, the plan says ${m.rows}`,
      );
    }
    return found;
  });
  if (object.members.some((m) => m.misfit)) {
    const offsetOf = (row: Record<string, unknown>) => (row.source as { offset: number }).offset;
    rows = rows
      .map((row, index) => ({ row, index }))
      .sort((a, b) => offsetOf(a.row) - offsetOf(b.row) || a.index - b.index)
      .map(({ row }) => row);
  }
  if (object.format === 'parquet') {
    if (!encoding.columns)
      throw new PlanRejectedError(object.finalKey, 'a Parquet object in a plan without columns');
    return Buffer.from(encodeParquet(encoding.columns, rows.map(asOutputRow)));
  }
  return encodeNdjson(rows, object.gzip).body;
}
