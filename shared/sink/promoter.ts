/**
 * The promoter: turns covered staged objects into final objects (C5).
 *
 * Planning (in prepare, before the decision): per partition and stream, the covered staged files are taken in
 * offset order and packed greedily into groups of at most {@link PromotionLimits}; each group becomes ONE final
 * object whose key is `finalObjectKey(pipeline, {stream, topic, partition, first offset of the group, last
 * offset of the group})`. The plan is persisted (see `plan-store.ts`), so a retried or recovering promotion
 * works from the same groups and writes the same bytes under the same keys. A group whose files hold no
 * records yields no final object.
 *
 * Promotion (after the decision): the members' bytes are read from the copies prepare made and verified
 * (`stagedCopyKey`, under the coordinator's prefix: issue 17, review R2b-1 — never from the staged keys, which the
 * processor may still rewrite), checked against their recorded SHA-256, and concatenated in offset order (concatenated gzip members are one valid gzip stream; NDJSON concatenates). The
 * result is written with `If-None-Match: *`; on a 412 the existing object's SHA-256 must equal ours, else
 * {@link FinalObjectConflictError}. Servers that ignore the header (s3rver) simply get the same bytes again.
 *
 * Trust (issue 17): the promoter writes under `final/`, so it is the one place a forged plan could do harm. Before
 * reading or writing anything it checks the planned object in code ({@link assertPlannedObject}): the final key
 * must be exactly the layout's key for the object's (stream, topic, partition, offset range) — so never a
 * manifest, never another pipeline's key, never a second spelling of a range — and every member must be a staged
 * key of this pipeline for the same stream, topic and partition, inside the object's range, in offset order.
 * Prepare applies the same rule to staged entries before planning ({@link assertStagedEntry}).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../errors.ts';
import { STREAMS } from '../ledger/layout.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import { finalObjectKey, type ObjectRange, parseStagedObjectKey } from './layout.ts';
import type { ManifestFile } from './manifest.ts';
import { getBytes, mapLimit, putIfAbsent } from './objects.ts';
import { stagedCopyKey } from './work-objects.ts';

export interface StagedMember {
  readonly key: string;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly recordCount: number;
  readonly bytes: number;
  readonly sha256: string;
}

export interface PlannedObject extends ObjectRange {
  readonly finalKey: string;
  readonly gzip: boolean;
  readonly recordCount: number;
  /** In offset order; only members with records. */
  readonly members: readonly StagedMember[];
}

export interface PromotionLimits {
  /** Largest final object (the promoter holds one in memory: give it twice this much memory). */
  readonly maxObjectBytes: number;
  /** Most staged files merged into one final object. */
  readonly maxMembers: number;
}

export const DEFAULT_PROMOTION_LIMITS: PromotionLimits = {
  maxObjectBytes: 32 * 1024 * 1024,
  maxMembers: 2000,
};

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
  };
  const reject = (detail: string): never => {
    throw new PlanRejectedError(object.finalKey, detail);
  };
  if (object.finalKey !== finalObjectKey(pipeline, range, object.gzip)) {
    reject(
      `not the final key of ${object.stream} ${object.topic}/${object.partition} ${object.firstOffset}-${object.lastOffset}`,
    );
  }
  if (object.firstOffset > object.lastOffset) reject('empty offset range');
  let after = object.firstOffset - 1;
  let records = 0;
  for (const m of object.members) {
    const parts = parseStagedObjectKey(pipeline, m.key);
    if (
      !parts ||
      parts.stream !== object.stream ||
      parts.topic !== object.topic ||
      parts.partition !== object.partition ||
      parts.gzip !== object.gzip ||
      parts.firstOffset !== m.firstOffset ||
      parts.lastOffset !== m.lastOffset
    ) {
      reject(
        `member ${m.key} is not a staged ${object.stream} key of ${object.topic}/${object.partition} in this pipeline`,
      );
    }
    if (m.firstOffset <= after || m.lastOffset < m.firstOffset || m.lastOffset > object.lastOffset) {
      reject(`member ${m.key} lies outside the object's range or out of order`);
    }
    after = m.lastOffset;
    records += m.recordCount;
  }
  if (records !== object.recordCount)
    reject(`members hold ${records} records, the plan says ${object.recordCount}`);
}

function member(entry: StagedFileEntry): StagedMember {
  return {
    key: entry.key,
    firstOffset: entry.firstOffset,
    lastOffset: entry.lastOffset,
    recordCount: entry.recordCount,
    bytes: entry.bytes,
    sha256: entry.sha256,
  };
}

/** Groups one partition's covered entries (any streams) into final objects. Pure and deterministic. */
export function planFinalObjects(
  pipeline: string,
  entries: readonly StagedFileEntry[],
  limits: PromotionLimits = DEFAULT_PROMOTION_LIMITS,
): PlannedObject[] {
  const planned: PlannedObject[] = [];
  for (const stream of STREAMS) {
    const ofStream = entries.filter((e) => e.stream === stream).sort((a, b) => a.lastOffset - b.lastOffset);
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
  const members = group.filter((e) => e.recordCount > 0).map(member);
  return {
    ...range,
    finalKey: finalObjectKey(pipeline, range, first.gzip),
    gzip: first.gzip,
    recordCount: members.reduce((sum, m) => sum + m.recordCount, 0),
    members,
  };
}

export class Promoter {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly pipeline: string,
    /** Member objects read at once. */
    private readonly concurrency = 8,
  ) {}

  /**
   * Writes one planned final object (idempotent) and returns its manifest entry. Refuses a forged object. Reads
   * each member from the copy `from`'s prepare verified, never from its staged key.
   */
  async promote(object: PlannedObject, from: PromotionSource): Promise<ManifestFile> {
    assertPlannedObject(this.pipeline, object);
    const parts = await mapLimit(object.members, this.concurrency, async (m) => {
      const copy = stagedCopyKey(this.pipeline, from.checkpointId, from.attempt, m.key);
      const bytes = await getBytes(this.s3, this.bucket, copy);
      if (!bytes) throw new StagedObjectLostError(m.key, `missing its verified copy ${copy}`);
      if (createHash('sha256').update(bytes).digest('hex') !== m.sha256) {
        throw new StagedObjectLostError(m.key, `changed (its copy ${copy} differs from the voted SHA-256)`);
      }
      return bytes;
    });
    const body = Buffer.concat(parts);
    const sha256 = createHash('sha256').update(body).digest('hex');
    const md5 = createHash('md5').update(body).digest('hex');
    const outcome = await putIfAbsent(this.s3, this.bucket, object.finalKey, body, {
      md5,
      contentType: 'application/x-ndjson',
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
    };
  }
}
