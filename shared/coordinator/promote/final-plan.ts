/**
 * The promotion plan's objects (C5), planned in prepare before the decision: per partition and stream, the covered
 * staged files are taken in offset order and packed greedily into groups of at most {@link PromotionLimits}; each
 * group becomes ONE final object whose key is `finalObjectKey(pipeline, {stream, topic, partition, first offset of
 * the group, last offset of the group})`. A group whose files hold no records yields no final object. A stream
 * that is re-encoded (Parquet, time folders) is planned per folder by `folder-pack.ts` instead.
 *
 * The plan is persisted (`plan-store.ts`), so a retried or recovering promotion (`promoter.ts`) works from the same
 * groups and writes the same bytes under the same keys.
 */
import { STREAMS } from '../../ledger/layout.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { finalObjectKey, type ObjectRange } from '../../sink/layout.ts';
import type { PARQUET_ROW_GROUP_ROWS } from '../../sink/parquet.ts';
import type { FolderBounds } from '../../sink/record-time.ts';
import type { ColumnDefinition } from '../../transforms/api.ts';
import {
  type FolderPart,
  misfitPartsOf,
  partsOf,
  planFolders,
  type StagedFileMember,
  stagedFileMember,
} from './folder-pack.ts';
import { type FolderCensus, NO_FOLDER, type OutputShape, reencodes } from './folder-plan.ts';

export interface StagedMember extends StagedFileMember {
  /** Re-encoded objects only (`folder-plan.ts`): rows of this member the object holds. */
  readonly rows?: number;
  /** Re-encoded objects only: the entry's `stagedAt` (record time of a row staged without a timestamp). */
  readonly stagedAt?: number;
  /** Re-encoded objects only, a slice of a member over the row cap: its rows with offsets in [from, to]. */
  readonly fromOffset?: number;
  readonly toOffset?: number;
  /** An output member of a dead-letter object: its rows that do not fit the plan's columns (`folder-plan.ts`). */
  readonly misfit?: true;
}

/**
 * The object prepare wrote with a final object's bytes (`candidateKey` in `work-objects.ts`), verified and
 * write-once, which promote copies to the final key pinned to `etag`. The plan's digest, and so the vote, covers it.
 */
export interface FinalCandidate {
  readonly key: string;
  readonly sha256: string;
  /** As S3 answered prepare's write (quotes included): promote's copy is conditioned on it. */
  readonly etag: string;
  readonly bytes: number;
}

/**
 * Where a planned object's bytes lie in a merged final object (`merged-plan.ts`): one NDJSON object holding several
 * partitions' objects of a shard, concatenated. Each is listed by the manifest as a slice of it.
 */
export interface ObjectSlice {
  /** Where its bytes start in the merged object (the candidate's bytes). */
  readonly start: number;
  readonly bytes: number;
  /** Hex SHA-256 of its bytes alone. */
  readonly sha256: string;
}

export interface PlannedObject extends ObjectRange {
  readonly finalKey: string;
  /** Gzip NDJSON (false for Parquet). */
  readonly gzip: boolean;
  /** Present for Parquet objects only (so that plans of NDJSON objects keep their bytes). */
  readonly format?: 'parquet';
  readonly recordCount: number;
  /** In offset order; only members with records. */
  readonly members: readonly StagedMember[];
  /**
   * The final object's bytes as prepare merged and verified them. Absent in a plan of the release before
   * candidates: promote then merges the members' verified copies itself, as that release did.
   */
  readonly candidate?: FinalCandidate;
  /**
   * Present when the object's bytes are a slice of a merged final object: `finalKey` is then the merged object's
   * key (`mergedObjectKey`) and `candidate` its candidate, the same for every slice of it.
   */
  readonly slice?: ObjectSlice;
}

/** How promote encodes re-encoded objects: recorded in the plan, so promote depends on no setting. */
export interface PlanEncoding {
  readonly timeField?: string;
  /** The Parquet columns (the `outputColumns` setting at prepare). */
  readonly columns?: readonly ColumnDefinition[];
  /**
   * The bound of time folders around a staged file's `stagedAt` the census filed rows by (`record-time.ts`).
   * Absent in a plan of a release before the bound: promote then files rows unbounded, as that release did, so
   * a checkpoint decided before an upgrade rolls forward after it.
   */
  readonly folderBounds?: FolderBounds;
}

export interface PromotionLimits {
  /** Largest final object (the promoter holds one in memory: give it twice this much memory). */
  readonly maxObjectBytes: number;
  /** Most staged files merged into one final object. */
  readonly maxMembers: number;
  /**
   * Most rows in one re-encoded (Parquet or time-partitioned) object: promote holds them decoded, and a Parquet
   * file's row groups are cut at {@link PARQUET_ROW_GROUP_ROWS}.
   */
  readonly maxObjectRows?: number;
}

export const DEFAULT_PROMOTION_LIMITS: PromotionLimits = {
  maxObjectBytes: 32 * 1024 * 1024,
  maxMembers: 2000,
  maxObjectRows: 250_000,
};

/**
 * Whether promote re-encodes the object (rows decoded and encoded again) rather than concatenating its members'
 * bytes: Parquet, a time folder, or members that name their rows (rows staged with a timestamp, see
 * `folder-plan.ts`).
 */
export function isReencoded(object: PlannedObject): boolean {
  return (
    object.folder !== undefined ||
    object.format !== undefined ||
    object.members.some((m) => m.rows !== undefined)
  );
}

/**
 * Groups one partition's covered entries (any streams) into final objects. Pure and deterministic. With a `shape`
 * that re-encodes a stream (Parquet, time folders), that stream is planned by `folder-pack.ts` from the census of
 * its verified objects; every other stream is packed from whole staged files, whose bytes are concatenated.
 */
export function planFinalObjects(
  pipeline: string,
  entries: readonly StagedFileEntry[],
  limits: PromotionLimits = DEFAULT_PROMOTION_LIMITS,
  shape?: OutputShape,
  census?: FolderCensus,
): PlannedObject[] {
  const planned: PlannedObject[] = [];
  for (const stream of STREAMS) {
    const ofStream = entries.filter((e) => e.stream === stream).sort((a, b) => a.lastOffset - b.lastOffset);
    // Output rows that do not fit the Parquet columns (a schema change) are this partition's dead letters.
    const misfits: FolderPart[] =
      shape && stream === 'deadletter'
        ? misfitPartsOf(
            entries.filter((e) => e.stream === 'output' && e.recordCount > 0),
            census,
          )
        : [];
    if (
      shape &&
      (reencodes(shape, stream) || ofStream.some((e) => census?.has(e.key)) || misfits.length > 0)
    ) {
      const withRows = ofStream.filter((e) => e.recordCount > 0);
      // Re-encoded only for stamped rows (time folders switched off) or misfits: the other members' rows all count.
      const counts: FolderCensus = reencodes(shape, stream)
        ? (census ?? new Map())
        : new Map(withRows.map((e) => [e.key, census?.get(e.key) ?? new Map([[NO_FOLDER, e.recordCount]])]));
      planned.push(
        ...planFolders(pipeline, [...partsOf(withRows, counts), ...misfits], shape, {
          maxObjectBytes: limits.maxObjectBytes,
          maxMembers: limits.maxMembers,
          maxObjectRows: limits.maxObjectRows ?? DEFAULT_PROMOTION_LIMITS.maxObjectRows!,
        }),
      );
      continue;
    }
    let group: StagedFileEntry[] = [];
    let groupBytes = 0;
    const flush = (): void => {
      if (group.length > 0) planned.push(toPlanned(pipeline, group));
      group = [];
      groupBytes = 0;
    };
    for (const entry of ofStream) {
      const full = group.length >= limits.maxMembers || groupBytes + entry.bytes > limits.maxObjectBytes;
      if (group.length > 0 && (full || entry.gzip !== group[0]!.gzip)) flush();
      group.push(entry);
      groupBytes += entry.bytes;
    }
    flush();
  }
  return planned.filter((object) => object.recordCount > 0);
}

function toPlanned(pipeline: string, group: readonly StagedFileEntry[]): PlannedObject {
  const first = group[0]!;
  const range: ObjectRange = {
    stream: first.stream,
    topic: first.topic,
    partition: first.partition,
    firstOffset: first.firstOffset,
    lastOffset: group[group.length - 1]!.lastOffset,
  };
  const members = group.filter((e) => e.recordCount > 0).map(stagedFileMember);
  return {
    ...range,
    finalKey: finalObjectKey(pipeline, range, first.gzip),
    gzip: first.gzip,
    recordCount: members.reduce((sum, m) => sum + m.recordCount, 0),
    members,
  };
}
