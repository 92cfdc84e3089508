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
 * Promotion (after the decision): the members' bytes are read, checked against their recorded SHA-256, and
 * concatenated in offset order (concatenated gzip members are one valid gzip stream; NDJSON concatenates). The
 * result is written with `If-None-Match: *`; on a 412 the existing object's SHA-256 must equal ours, else
 * {@link FinalObjectConflictError}. Servers that ignore the header (s3rver) simply get the same bytes again.
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../errors.ts';
import { STREAMS } from '../ledger/layout.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import { finalObjectKey, type ObjectRange } from './layout.ts';
import type { ManifestFile } from './manifest.ts';
import { getBytes, mapLimit, putIfAbsent } from './objects.ts';

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

/** A staged object vanished or changed after the decision: the checkpoint cannot roll forward until it is back. */
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
    /** Member objects read at once. */
    private readonly concurrency = 8,
  ) {}

  /** Writes one planned final object (idempotent) and returns its manifest entry. */
  async promote(object: PlannedObject): Promise<ManifestFile> {
    const parts = await mapLimit(object.members, this.concurrency, async (m) => {
      const bytes = await getBytes(this.s3, this.bucket, m.key);
      if (!bytes) throw new StagedObjectLostError(m.key, 'missing');
      if (createHash('sha256').update(bytes).digest('hex') !== m.sha256) {
        throw new StagedObjectLostError(m.key, 'changed (SHA-256 differs from the ledger)');
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
