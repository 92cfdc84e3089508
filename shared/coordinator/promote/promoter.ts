/**
 * The promoter: writes a voted plan's final objects (C5); the plan itself is made in prepare (`final-plan.ts`).
 *
 * The members' bytes are read from the copies prepare made and verified (`stagedCopyKey`, under the coordinator's
 * prefix, never from the staged keys, which the processor may still rewrite), checked against their recorded
 * SHA-256, and concatenated in offset order (concatenated gzip members are one valid gzip stream; NDJSON
 * concatenates) or, for a re-encoded object, decoded and encoded again (`folder-plan.ts`). The result is written
 * with `If-None-Match: *`; on a 412 the existing object's SHA-256 must equal ours, else
 * {@link FinalObjectConflictError}. A server that ignored the header would simply get the same bytes again.
 *
 * Trust: the promoter writes under `final/`, so it is the one place a forged plan could do harm. Before reading or
 * writing anything it checks the planned object in code ({@link assertPlannedObject}): the final key must be
 * exactly the layout's key for the object's (stream, topic, partition, offset range) — so never a manifest, never
 * another pipeline's key, never a second spelling of a range — and every member must be a staged key of this
 * pipeline for the same stream, topic and partition, inside the object's range, in offset order. Prepare applies
 * the same rule to staged entries before planning ({@link assertStagedEntry}).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { Stream } from '../../ledger/layout.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { finalObjectKey, type ObjectRange, parseStagedObjectKey } from '../../sink/layout.ts';
import type { ManifestFile } from '../../sink/manifest.ts';
import { encodeNdjson } from '../../sink/ndjson.ts';
import { getBytes, putIfAbsent } from '../../sink/objects.ts';
import { encodeParquet } from '../../sink/parquet.ts';
import { asOutputRow } from '../../sink/record-time.ts';
import { parseTimeFolder } from '../../sink/time-partitions.ts';
import { stagedCopyKey } from '../work-objects.ts';
import {
  DEFAULT_PROMOTION_LIMITS,
  isReencoded,
  type PlanEncoding,
  type PlannedObject,
  type StagedMember,
} from './final-plan.ts';
import {
  type ClassifiedRow,
  type ClassifyParams,
  classifyStaged,
  granularityOf,
  memberRows,
  streamMemberRows,
} from './folder-plan.ts';

/** The plan's objects and limits, planned in prepare (`final-plan.ts`). */
export {
  DEFAULT_PROMOTION_LIMITS,
  isReencoded,
  type PlanEncoding,
  type PlannedObject,
  type PromotionLimits,
  planFinalObjects,
  type StagedMember,
} from './final-plan.ts';

/** A final object already exists with other bytes: C7 forbids changing it, so promotion stops loudly. */
export class FinalObjectConflictError extends PipelineError {
  constructor(
    readonly key: string,
    expectedSha256: string,
    foundSha256: string,
  ) {
    super(`final object ${key} exists with SHA-256 ${foundSha256}, promotion would write ${expectedSha256}`);
  }
}

/**
 * The verified copy of a staged object vanished or changed after the decision: the checkpoint cannot roll forward
 * until it is back. Only coordinator roles can write or delete a copy, so this means a coordinator defect, an
 * operator, or a checkpoint decided by a release before the copies (see docs/operations.md).
 */
export class StagedObjectLostError extends PipelineError {
  constructor(
    readonly key: string,
    detail: string,
  ) {
    super(
      `staged object ${key} needed by a decided checkpoint is ${detail}; the checkpoint cannot roll forward`,
    );
  }
}

/** Which attempt's copies a promotion reads: the attempt that verified them and whose plan was voted. */
export interface PromotionSource {
  readonly checkpointId: number;
  readonly attempt: number;
}

/** A planned object is not what the layout allows promote to write: nothing is written. */
export class PlanRejectedError extends PipelineError {
  constructor(
    readonly finalKey: string,
    detail: string,
  ) {
    super(`promotion of ${finalKey} refused: ${detail}`);
  }
}

/** A staged entry names an object that is not a staged key of this pipeline for its own partition and range. */
export class StagedEntryRejectedError extends PipelineError {
  constructor(
    readonly key: string,
    detail: string,
  ) {
    super(`staged entry for ${key} refused: ${detail}`);
  }
}

/** Prepare's check: the entry's object key is the staged key of exactly this entry (pipeline, partition, range). */
export function assertStagedEntry(
  pipeline: string,
  entry: StagedFileEntry,
  expected: { readonly topic: string; readonly partition: number },
): void {
  const parts = parseStagedObjectKey(pipeline, entry.key);
  if (!parts)
    throw new StagedEntryRejectedError(String(entry.key), `not a staged key of pipeline ${pipeline}`);
  const same =
    entry.topic === expected.topic &&
    entry.partition === expected.partition &&
    parts.topic === entry.topic &&
    parts.partition === entry.partition &&
    parts.stream === entry.stream &&
    parts.firstOffset === entry.firstOffset &&
    parts.lastOffset === entry.lastOffset &&
    parts.gzip === entry.gzip &&
    entry.firstOffset <= entry.lastOffset;
  if (!same) {
    throw new StagedEntryRejectedError(
      String(entry.key),
      `the key does not name the entry's ${entry.stream} ${entry.topic}/${entry.partition} ${entry.firstOffset}-${entry.lastOffset} in ${expected.topic}/${expected.partition}`,
    );
  }
}

/** Promote's check of a planned object (see the module comment); throws {@link PlanRejectedError}. */
export function assertPlannedObject(pipeline: string, object: PlannedObject): void {
  const range: ObjectRange = {
    stream: object.stream,
    topic: object.topic,
    partition: object.partition,
    firstOffset: object.firstOffset,
    lastOffset: object.lastOffset,
    ...(object.folder === undefined ? {} : { folder: object.folder }),
  };
  const reject = (detail: string): never => {
    throw new PlanRejectedError(object.finalKey, detail);
  };
  const reencoded = isReencoded(object);
  if (object.folder !== undefined && parseTimeFolder(object.folder) === undefined)
    reject('not a time folder');
  if (
    object.format !== undefined &&
    (object.format !== 'parquet' || object.stream !== 'output' || object.gzip)
  ) {
    reject('only output objects may be Parquet');
  }
  if (object.finalKey !== finalObjectKey(pipeline, range, object.format ?? object.gzip)) {
    reject(
      `not the final key of ${object.stream} ${object.topic}/${object.partition} ${object.firstOffset}-${object.lastOffset}`,
    );
  }
  if (object.firstOffset > object.lastOffset) reject('empty offset range');
  // Members in offset order; a dead-letter object's misfit members (output staged files) in their own order, as
  // they may share a chunk's range with a dead-letter member.
  const after = { plain: object.firstOffset - 1, misfit: object.firstOffset - 1 };
  let records = 0;
  for (const m of object.members) {
    const lane = m.misfit === true ? 'misfit' : 'plain';
    after[lane] = assertMember(pipeline, object, m, reencoded, after[lane], reject);
    records += m.rows ?? m.recordCount;
  }
  if (records !== object.recordCount)
    reject(`members hold ${records} records, the plan says ${object.recordCount}`);
}

/**
 * One member's check within `object` (see {@link assertPlannedObject}): a staged key of this pipeline for the
 * object's partition, inside its range and after `after` (the last offset of the members before it in its lane).
 * Returns the last offset it takes.
 */
function assertMember(
  pipeline: string,
  object: PlannedObject,
  m: StagedMember,
  reencoded: boolean,
  after: number,
  reject: (detail: string) => never,
): number {
  const parts = parseStagedObjectKey(pipeline, m.key);
  const misfit = m.misfit === true;
  if (misfit && (!reencoded || object.stream !== 'deadletter')) {
    reject(`member ${m.key} gives schema misfits to an object that is not a re-encoded dead-letter object`);
  }
  if (
    !parts ||
    parts.stream !== (misfit ? 'output' : object.stream) ||
    parts.topic !== object.topic ||
    parts.partition !== object.partition ||
    (!reencoded && parts.gzip !== object.gzip) ||
    parts.firstOffset !== m.firstOffset ||
    parts.lastOffset !== m.lastOffset
  ) {
    reject(
      `member ${m.key} is not a staged ${object.stream} key of ${object.topic}/${object.partition} in this pipeline`,
    );
  }
  if (
    (m.fromOffset === undefined) !== (m.toOffset === undefined) ||
    (m.fromOffset !== undefined && !reencoded)
  ) {
    reject(`member ${m.key} names half a slice, or a slice of an object that is not re-encoded`);
  }
  const from = m.fromOffset ?? m.firstOffset;
  const to = m.toOffset ?? m.lastOffset;
  if (
    from <= after ||
    m.lastOffset < m.firstOffset ||
    from < m.firstOffset ||
    to > m.lastOffset ||
    to < from ||
    to > object.lastOffset
  ) {
    reject(`member ${m.key} lies outside the object's range or out of order`);
  }
  if (reencoded !== (m.rows !== undefined && m.stagedAt !== undefined)) {
    reject(`member ${m.key} must name its rows and staging time exactly when the object is re-encoded`);
  }
  if (m.rows !== undefined && (m.rows < 1 || m.rows > m.recordCount)) {
    reject(`member ${m.key} gives ${m.rows} of its ${m.recordCount} rows`);
  }
  return to;
}

export class Promoter {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly pipeline: string,
    /** Member objects read at once. */
    private readonly concurrency = 8,
    /**
     * A re-encoded member of at most this many rows is decoded once per shard and kept until its last object is
     * written; a larger one is streamed once per object that takes rows from it, holding only those rows (the
     * coordinator passes the row cap, so promote's decoded rows stay a function of it).
     */
    private readonly maxCachedRows = DEFAULT_PROMOTION_LIMITS.maxObjectRows!,
  ) {}

  /**
   * Writes one planned final object (idempotent) and returns its manifest entry. Refuses a forged object. Reads
   * each member from the copy `from`'s prepare verified, never from its staged key.
   */
  async promote(
    object: PlannedObject,
    from: PromotionSource,
    encoding: PlanEncoding = {},
  ): Promise<ManifestFile> {
    return (await this.promoteShard([object], from, encoding, 1))[0]!;
  }

  /**
   * Writes a shard's planned objects (`concurrency` at once), in plan order. A re-encoded member is read, checked
   * and decoded ONCE for the whole shard however many objects (folders, slices, misfits) take rows from it, and
   * released after the last of them: a staged file spread over many folders costs one GET and one decode, not one
   * per object. A member over `maxCachedRows` is instead streamed per object (one GET each),
   * holding only that object's rows.
   */
  async promoteShard(
    objects: readonly PlannedObject[],
    from: PromotionSource,
    encoding: PlanEncoding = {},
    concurrency = 2,
  ): Promise<ManifestFile[]> {
    for (const object of objects) assertPlannedObject(this.pipeline, object);
    const users = new Map<string, number>();
    for (const object of objects.filter(isReencoded))
      for (const m of new Set(object.members.map((member) => member.key)))
        users.set(m, (users.get(m) ?? 0) + 1);
    const decoded = new Map<string, Promise<ClassifiedRow[]>>();
    const rowsOf = async (object: PlannedObject, m: StagedMember): Promise<Record<string, unknown>[]> => {
      // assertPlannedObject checked every member is a staged key of this pipeline.
      const { gzip, stream } = parseStagedObjectKey(this.pipeline, m.key)!;
      const params = classifyParamsOf(object, m, stream, encoding);
      if (m.recordCount > this.maxCachedRows)
        return streamMemberRows(await this.readMember(m, from), gzip, params, m, object.folder);
      let rows = decoded.get(m.key);
      if (!rows) {
        rows = this.readMember(m, from).then((bytes) => classifyStaged(bytes, gzip, params));
        decoded.set(m.key, rows);
      }
      return memberRows(await rows, m, object.folder);
    };
    return mapLimit(objects, concurrency, async (object) => {
      if (!isReencoded(object)) {
        const parts = await mapLimit(object.members, this.concurrency, (m) => this.readMember(m, from));
        return this.write(object, Buffer.concat(parts));
      }
      const rows = await mapLimit(object.members, this.concurrency, (m) => rowsOf(object, m));
      const body = reencode(object, rows, encoding);
      for (const key of new Set(object.members.map((m) => m.key))) {
        const left = (users.get(key) ?? 1) - 1;
        users.set(key, left);
        if (left === 0) decoded.delete(key);
      }
      return this.write(object, body);
    });
  }

  /** A member's verified copy, checked against its voted SHA-256. */
  private async readMember(m: StagedMember, from: PromotionSource): Promise<Buffer> {
    const copy = stagedCopyKey(this.pipeline, from.checkpointId, from.attempt, m.key);
    const bytes = await getBytes(this.s3, this.bucket, copy);
    if (!bytes) throw new StagedObjectLostError(m.key, `missing its verified copy ${copy}`);
    if (createHash('sha256').update(bytes).digest('hex') !== m.sha256) {
      throw new StagedObjectLostError(m.key, `changed (its copy ${copy} differs from the voted SHA-256)`);
    }
    return bytes;
  }

  private async write(object: PlannedObject, body: Buffer): Promise<ManifestFile> {
    const sha256 = createHash('sha256').update(body).digest('hex');
    const md5 = createHash('md5').update(body).digest('hex');
    const outcome = await putIfAbsent(this.s3, this.bucket, object.finalKey, body, {
      md5,
      contentType: object.format === 'parquet' ? 'application/vnd.apache.parquet' : 'application/x-ndjson',
      metadata: { sha256, 'record-count': String(object.recordCount) },
    });
    if (outcome === 'exists') {
      const existing = await getBytes(this.s3, this.bucket, object.finalKey);
      const found = existing ? createHash('sha256').update(existing).digest('hex') : '(gone)';
      if (found !== sha256) throw new FinalObjectConflictError(object.finalKey, sha256, found);
    }
    return {
      key: object.finalKey,
      stream: object.stream,
      topic: object.topic,
      partition: object.partition,
      firstOffset: object.firstOffset,
      lastOffset: object.lastOffset,
      recordCount: object.recordCount,
      bytes: body.length,
      sha256,
      format: object.format ?? 'ndjson',
    };
  }
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
