/**
 * The promoter: publishes a voted plan's final objects (C5); the plan itself is made in prepare (`final-plan.ts`,
 * `prepare/plan-shard.ts`).
 *
 * Each planned object names its candidate: the final object's bytes, merged and verified by prepare and written
 * once under the attempt's working prefix. Promote copies it to the final key server-side, with
 * `If-None-Match: *` (write-once) and `x-amz-copy-source-if-match: <the ETag prepare's write returned>`, so the
 * bytes published are exactly the bytes prepare verified and the vote covers, and none pass through Lambda. S3
 * answers both refusals with 412: then the final key is read, and an existing object must have the candidate's
 * SHA-256 (a retry, a concurrent roll-forward), else {@link FinalObjectConflictError}; no object there means the
 * candidate is not the voted one any more ({@link CandidateLostError}). A plan of the release before candidates
 * has none: its members' verified copies (`stagedCopyKey`) are read, checked against their recorded SHA-256,
 * merged (`object-bytes.ts`) and written with `If-None-Match: *`, as that release did.
 *
 * Trust: the promoter writes under `final/`, so it is the one place a forged plan could do harm. Before reading or
 * writing anything it checks the planned object in code ({@link assertPlannedObjects}): the final key must be
 * exactly the layout's key for the object's (stream, topic, partition, offset range) — so never a manifest, never
 * another pipeline's key, never a second spelling of a range — or, for a slice, the merged key of the plan's own
 * checkpoint, attempt, shard, lane and stream (`merged-plan.ts`), the candidate must be the content-addressed key
 * of this attempt (never a staged key a processor can write), and every member must be a staged key of this
 * pipeline for the same stream, topic and partition, inside the object's range, in offset order. Prepare applies
 * the same rule to staged entries before planning ({@link assertStagedEntry}).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { PipelineError } from '../../errors.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { finalObjectKey, type ObjectRange, parseStagedObjectKey } from '../../sink/layout.ts';
import type { ManifestFile } from '../../sink/manifest.ts';
import { copyPinned, getBytes, putIfAbsent } from '../../sink/objects.ts';
import { parseTimeFolder } from '../../sink/time-partitions.ts';
import { candidateKey, stagedCopyKey } from '../work-objects.ts';
import {
  DEFAULT_PROMOTION_LIMITS,
  type FinalCandidate,
  isReencoded,
  type PlanEncoding,
  type PlannedObject,
  type StagedMember,
} from './final-plan.ts';
import { assertMergedSlices } from './merged-plan.ts';
import { buildObjects, PlanRejectedError } from './object-bytes.ts';

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
/** A planned object is refused before anything is written (`object-bytes.ts`). */
export { PlanRejectedError } from './object-bytes.ts';

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
 * The verified bytes of a staged object a plan names are not there: at promote, the verified copy a plan without
 * candidates reads vanished or changed after the decision, and the checkpoint cannot roll forward until it is back
 * (only coordinator roles can write or delete a copy: a coordinator defect or an operator, see
 * docs/operations.md); at prepare, a planned member is not among the objects it verified (a defect).
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

/**
 * A decided checkpoint's candidate is gone or no longer has the voted ETag, and its final object is not there: the
 * checkpoint cannot roll forward until it is back. Only coordinator roles can write or delete a candidate, so this
 * means a coordinator defect or an operator (see docs/operations.md).
 */
export class CandidateLostError extends PipelineError {
  constructor(
    readonly finalKey: string,
    readonly candidateKey: string,
    detail: string,
  ) {
    super(
      `candidate ${candidateKey} of final object ${finalKey}, needed by a decided checkpoint, is ${detail}; the checkpoint cannot roll forward`,
    );
  }
}

/** Which attempt's working objects a promotion reads: the attempt that verified them and whose plan was voted. */
export interface PromotionSource {
  readonly checkpointId: number;
  readonly attempt: number;
  /** The shard whose plan it is: merged keys must name it (absent: any shard of the attempt). */
  readonly shard?: number;
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

/**
 * Promote's check of a plan's objects, `from` the plan voted for, before any is written: each object
 * ({@link assertPlannedObject}), then the slices of merged objects together (`merged-plan.ts`). Throws
 * {@link PlanRejectedError}: a plan with one forged object writes none.
 */
export function assertPlannedObjects(
  pipeline: string,
  objects: readonly PlannedObject[],
  from: PromotionSource,
): void {
  for (const object of objects) assertPlannedObject(pipeline, object, from);
  assertMergedSlices(pipeline, objects, from);
}

/**
 * Promote's check of a planned object (see the module comment) of the plan `from` voted for; throws
 * {@link PlanRejectedError}. A slice's merged key and its place are checked with the plan's other slices
 * ({@link assertPlannedObjects}).
 */
function assertPlannedObject(pipeline: string, object: PlannedObject, from: PromotionSource): void {
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
  // A slice's merged key is checked with the plan's other slices, by assertMergedSlices.
  if (!object.slice && object.finalKey !== finalObjectKey(pipeline, range, object.format ?? object.gzip)) {
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
  if (object.candidate) assertCandidate(pipeline, object.candidate, from, reject);
}

/** A candidate must be this attempt's content-addressed candidate key: never a key a processor can write. */
function assertCandidate(
  pipeline: string,
  candidate: FinalCandidate,
  from: PromotionSource,
  reject: (detail: string) => never,
): void {
  let expected: string | undefined;
  try {
    expected = candidateKey(pipeline, from.checkpointId, from.attempt, candidate.sha256);
  } catch {
    expected = undefined;
  }
  if (candidate.key !== expected)
    reject(
      `candidate ${candidate.key} is not a candidate key of checkpoint ${from.checkpointId} attempt ${from.attempt}`,
    );
  if (!Number.isSafeInteger(candidate.bytes) || candidate.bytes < 0 || candidate.etag.length === 0)
    reject(`candidate ${candidate.key} has no size or ETag`);
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
    /** Member objects read at once (plans without candidates). */
    private readonly concurrency = 8,
    /**
     * Plans without candidates: a re-encoded member of at most this many rows is decoded once per shard and kept
     * until its last object is written; a larger one is streamed once per object that takes rows from it (the
     * coordinator passes the row cap, so promote's decoded rows stay a function of it).
     */
    private readonly maxCachedRows = DEFAULT_PROMOTION_LIMITS.maxObjectRows!,
  ) {}

  /** Publishes one planned object (idempotent) and returns its manifest entry. Refuses a forged object. */
  async promote(
    object: PlannedObject,
    from: PromotionSource,
    encoding: PlanEncoding = {},
  ): Promise<ManifestFile> {
    return (await this.promoteShard([object], from, encoding, 1))[0]!;
  }

  /**
   * Publishes a shard's planned objects (`concurrency` at once), in plan order: each object with a candidate by
   * one pinned server-side copy; the objects of a plan without candidates are merged from the verified copies
   * (`object-bytes.ts`: a re-encoded member read and decoded once for the whole shard) and written.
   */
  async promoteShard(
    objects: readonly PlannedObject[],
    from: PromotionSource,
    encoding: PlanEncoding = {},
    concurrency = 2,
  ): Promise<ManifestFile[]> {
    assertPlannedObjects(this.pipeline, objects, from);
    // The slices of a merged object share its one copy.
    const copies = new Map<string, Promise<void>>();
    const copyOnce = (object: PlannedObject, candidate: FinalCandidate): Promise<void> => {
      let copy = copies.get(object.finalKey);
      if (!copy) {
        copy = this.copyCandidate(object, candidate);
        copies.set(object.finalKey, copy);
      }
      return copy;
    };
    const copied = await mapLimit(objects, Math.max(concurrency, this.concurrency), async (object) => {
      if (!object.candidate) return undefined;
      await copyOnce(object, object.candidate);
      return object.slice
        ? manifestFile(object, object.slice.bytes, object.slice.sha256, object.slice.start)
        : manifestFile(object, object.candidate.bytes, object.candidate.sha256);
    });
    const merged = objects.filter((object) => !object.candidate);
    const written = await buildObjects(
      this.pipeline,
      merged,
      encoding,
      (m) => this.readMember(m, from),
      { objects: concurrency, members: this.concurrency, maxCachedRows: this.maxCachedRows },
      (object, body) => this.write(object, body),
    );
    let next = 0;
    return copied.map((file) => file ?? written[next++]!);
  }

  /** One pinned copy of the candidate to the final key; a 412 is settled by what the final key holds. */
  private async copyCandidate(object: PlannedObject, candidate: FinalCandidate): Promise<void> {
    const outcome = await copyPinned(this.s3, this.bucket, {
      sourceKey: candidate.key,
      sourceEtag: candidate.etag,
      key: object.finalKey,
    });
    if (outcome !== 'copied') {
      const existing = await getBytes(this.s3, this.bucket, object.finalKey);
      if (!existing) {
        const detail =
          outcome === 'source-missing' ? 'missing' : `no longer the voted ETag ${candidate.etag}`;
        throw new CandidateLostError(object.finalKey, candidate.key, detail);
      }
      const found = sha256Hex(existing);
      if (found !== candidate.sha256)
        throw new FinalObjectConflictError(object.finalKey, candidate.sha256, found);
    }
  }

  /** A member's verified copy (plans without candidates), checked against its voted SHA-256. */
  private async readMember(m: StagedMember, from: PromotionSource): Promise<Buffer> {
    const copy = stagedCopyKey(this.pipeline, from.checkpointId, from.attempt, m.key);
    const bytes = await getBytes(this.s3, this.bucket, copy);
    if (!bytes) throw new StagedObjectLostError(m.key, `missing its verified copy ${copy}`);
    if (sha256Hex(bytes) !== m.sha256) {
      throw new StagedObjectLostError(m.key, `changed (its copy ${copy} differs from the voted SHA-256)`);
    }
    return bytes;
  }

  private async write(object: PlannedObject, body: Buffer): Promise<ManifestFile> {
    const sha256 = sha256Hex(body);
    const outcome = await putIfAbsent(
      this.s3,
      this.bucket,
      object.finalKey,
      body,
      finalObjectPut(object, body),
    );
    if (outcome === 'exists') {
      const existing = await getBytes(this.s3, this.bucket, object.finalKey);
      const found = existing ? sha256Hex(existing) : '(gone)';
      if (found !== sha256) throw new FinalObjectConflictError(object.finalKey, sha256, found);
    }
    return manifestFile(object, body.length, sha256);
  }
}

function sha256Hex(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * How a final object's bytes are written (a candidate by prepare, or a final object of a plan without candidates):
 * a content MD5 S3 checks, the content type, and the SHA-256 and record count as metadata (a candidate's are
 * carried to the final key by the copy).
 */
export function finalObjectPut(
  object: Pick<PlannedObject, 'format' | 'recordCount'>,
  body: Buffer,
): { md5: string; contentType: string; metadata: Record<string, string> } {
  return {
    md5: createHash('md5').update(body).digest('hex'),
    contentType: object.format === 'parquet' ? 'application/vnd.apache.parquet' : 'application/x-ndjson',
    metadata: { sha256: sha256Hex(body), 'record-count': String(object.recordCount) },
  };
}

function manifestFile(
  object: PlannedObject,
  bytes: number,
  sha256: string,
  sliceStart?: number,
): ManifestFile {
  return {
    key: object.finalKey,
    stream: object.stream,
    topic: object.topic,
    partition: object.partition,
    firstOffset: object.firstOffset,
    lastOffset: object.lastOffset,
    recordCount: object.recordCount,
    bytes,
    sha256,
    format: object.format ?? 'ndjson',
    ...(sliceStart === undefined ? {} : { sliceStart }),
  };
}
