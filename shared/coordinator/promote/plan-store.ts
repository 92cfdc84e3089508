/**
 * The coordinator's working objects (keys in `work-objects.ts`): per checkpoint attempt and shard, the promotion
 * plan prepare wrote and the manifest entries promote produced; per attempt, the candidate final objects (written
 * by `prepare/candidates.ts`, deleted here with the rest of the attempt or checkpoint). Step Functions passes only
 * (checkpoint, attempt, shard); the lists live here.
 *
 * Trust: the bucket's layout keeps these under a prefix only coordinator roles may write, but the commit path does
 * not rely on that alone. A plan is written once under a key that names its SHA-256, the SHA-256 is recorded with
 * the shard's yes vote in the ledger (a coordinator-only item), and {@link PlanStore.readPlan} returns a plan only
 * if its bytes hash to that digest and parse with {@link shardPlanSchema}: a rewritten plan fails with
 * {@link PlanDigestMismatchError} before anything is promoted. Promotion results are parsed with a schema too, and
 * commit accepts them only if they match the digest-checked plans object for object (`commit/manifest.ts`).
 */
import { createHash } from 'node:crypto';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { S3Client } from '@aws-sdk/client-s3';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { rethrowClassified } from '../../aws/classify.ts';
import { PipelineError } from '../../errors.ts';
import { padCheckpointId, STREAMS } from '../../ledger/layout.ts';
import type { ManifestFile } from '../../sink/manifest.ts';
import { deleteKeys, getBytes, listObjects, putIfAbsent } from '../../sink/objects.ts';
import { COLUMN_TYPES } from '../../transforms/api.ts';
import {
  checkpointAttemptPrefix,
  checkpointWorkPrefix,
  planKey,
  promotedKey,
  workObjectCheckpointId,
} from '../work-objects.ts';
import type { PlanEncoding, PlannedObject } from './final-plan.ts';

export interface ShardPlan {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
  /** Staged files verified by prepare (including those without records). */
  readonly stagedFiles: number;
  readonly objects: readonly PlannedObject[];
  /** How re-encoded objects are encoded; absent when the plan has none. */
  readonly encoding?: PlanEncoding;
  /**
   * The earliest `stagedAt` of the covered entries, epoch ms: commit reads the plans anyway, so the commit latency
   * needs no read of the ledger. Absent when the shard covered none, and in plans of the release before it.
   */
  readonly oldestStagedAt?: number;
  /**
   * The shard's partitions (`<topic>#<partition>`) with covered entries inline in their fence item
   * (`ledger/inline-entries.ts`): cleanup removes entries from those fences only. Absent in plans of the release
   * before inline entries: cleanup then tries each fence, then the entry item.
   */
  readonly inlinePartitions?: readonly string[];
}

export interface ShardPromotion {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
  readonly files: readonly ManifestFile[];
}

const offset = z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const count = z.number().int().min(0);
const sha256 = z.string().regex(/^[0-9a-f]{64}$/);
const rangeFields = {
  stream: z.enum(STREAMS),
  topic: z.string().min(1),
  partition: z.number().int().min(0),
  firstOffset: offset,
  lastOffset: offset,
};

export const shardPlanSchema = z
  .object({
    checkpointId: z.number().int().positive(),
    attempt: z.number().int().positive(),
    shard: z.number().int().min(0),
    stagedFiles: count,
    objects: z.array(
      z
        .object({
          ...rangeFields,
          folder: z.string().min(1).optional(),
          finalKey: z.string().min(1),
          gzip: z.boolean(),
          format: z.literal('parquet').optional(),
          recordCount: count,
          members: z.array(
            z
              .object({
                key: z.string().min(1),
                firstOffset: offset,
                lastOffset: offset,
                recordCount: count,
                bytes: count,
                sha256,
                rows: count.optional(),
                stagedAt: z.number().int().optional(),
                fromOffset: offset.optional(),
                toOffset: offset.optional(),
                misfit: z.literal(true).optional(),
              })
              .strict(),
          ),
          // Absent in plans of the release before candidates: promote merges the verified copies instead.
          candidate: z
            .object({ key: z.string().min(1), sha256, etag: z.string().min(1), bytes: count })
            .strict()
            .optional(),
          // A slice of a merged final object (`merged-plan.ts`); absent in plans of earlier releases.
          slice: z.object({ start: count, bytes: count, sha256 }).strict().optional(),
        })
        .strict(),
    ),
    encoding: z
      .object({
        timeField: z.string().min(1).optional(),
        columns: z
          .array(
            z.object({ name: z.string().min(1), type: z.enum(COLUMN_TYPES), nullable: z.boolean() }).strict(),
          )
          .optional(),
        // Absent in plans of releases before the bound: promote then files rows as they did (unbounded).
        folderBounds: z
          .object({
            latenessMs: z.number().int().min(0),
            earlinessMs: z.number().int().min(0),
            maxFolders: z.number().int().min(1),
          })
          .strict()
          .optional(),
      })
      .strict()
      .optional(),
    oldestStagedAt: z.number().int().min(0).optional(),
    inlinePartitions: z.array(z.string()).optional(),
  })
  .strict();

export const shardPromotionSchema = z
  .object({
    checkpointId: z.number().int().positive(),
    attempt: z.number().int().positive(),
    shard: z.number().int().min(0),
    files: z.array(
      z
        .object({
          ...rangeFields,
          key: z.string().min(1),
          recordCount: count,
          bytes: count,
          sha256,
          format: z.enum(['ndjson', 'parquet']).optional(),
          sliceStart: count.optional(),
        })
        .strict(),
    ),
  })
  .strict();

/** A working object the protocol needs is not there (a step ran out of order, or cleanup ran early). */
export class WorkObjectMissingError extends PipelineError {
  constructor(readonly key: string) {
    super(`coordinator working object ${key} is missing`);
  }
}

/**
 * A plan's bytes do not hash to the digest its shard voted for, or do not parse: somebody rewrote it. Promote and
 * commit stop here, before writing anything; the checkpoint stays COMMITTING (loudly failing) until an operator
 * looks, because rolling forward from a forged plan could publish anything.
 */
export class PlanDigestMismatchError extends PipelineError {
  constructor(
    readonly key: string,
    detail: string,
  ) {
    super(`coordinator plan ${key} is not the plan its shard voted for: ${detail}`);
  }
}

/** A promotion result does not parse, or does not match its digest-checked plan. */
export class PromotionRecordError extends PipelineError {}

export function sha256Hex(bytes: Buffer): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** A plan's bytes: JSON of the plan as built (fixed field order), so planning the same entries gives the same bytes. */
export function encodePlan(plan: ShardPlan): Buffer {
  return Buffer.from(JSON.stringify(plan), 'utf8');
}

/**
 * Largest working object a step inflates. Plans name every staged member with its SHA-256, so they run to megabytes
 * at a thousand staged files; far above that, the object is not one a coordinator wrote.
 */
export const MAX_WORK_OBJECT_BYTES = 256 * 1024 * 1024;

const GZIP_MAGIC = Buffer.from([0x1f, 0x8b]);

/**
 * How a working object is stored: its JSON gzipped. Plans and promotion records are read back by promote, commit
 * and cleanup, three reads for each write, and JSON of keys and digests shrinks to about a third; digests and
 * content-addressed keys stay those of the JSON, so gzip's output (which may differ between zlib builds) never
 * names or decides anything.
 */
export function storedWorkObject(json: Buffer): Buffer {
  return gzipSync(json);
}

/**
 * A working object's JSON from its stored bytes: inflated when gzipped, as is when not (an object written before
 * they were compressed, still read during an upgrade). Undefined when it does not inflate within
 * {@link MAX_WORK_OBJECT_BYTES}: the caller reports it as it reports bytes that do not parse.
 */
export function workObjectJson(stored: Buffer): Buffer | undefined {
  if (stored.length < 2 || !stored.subarray(0, 2).equals(GZIP_MAGIC)) return stored;
  try {
    return gunzipSync(stored, { maxOutputLength: MAX_WORK_OBJECT_BYTES });
  } catch {
    return undefined;
  }
}

/** The digest a shard's vote records for `plan`. */
export function planDigest(plan: ShardPlan): string {
  return sha256Hex(encodePlan(plan));
}

export class PlanStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly pipeline: string,
  ) {}

  /**
   * Writes the plan under its content-addressed key (`planKey`) and returns the SHA-256 of its bytes,
   * which the shard's vote records. Write-once (`If-None-Match: *`): an object already under that key was written
   * by an earlier run of the same shard with the same bytes (the key names them), so `exists` is success.
   */
  async writePlan(plan: ShardPlan): Promise<string> {
    const body = encodePlan(plan);
    const digest = sha256Hex(body);
    const key = planKey(this.pipeline, plan.checkpointId, plan.attempt, plan.shard, digest);
    const outcome = await putIfAbsent(this.s3, this.bucket, key, storedWorkObject(body), {
      contentType: 'application/json',
    });
    // Never vote for a plan that is not there as written: what exists under the key must be these bytes.
    const stored = outcome === 'exists' ? await getBytes(this.s3, this.bucket, key) : body;
    const json = stored && workObjectJson(stored);
    if (json === undefined || sha256Hex(json) !== digest) {
      throw new PlanDigestMismatchError(key, 'another plan is stored under this plan key');
    }
    return digest;
  }

  /**
   * The plan the vote's `digest` names, only if its bytes hash to that digest and it is the plan of (id, attempt,
   * shard). The key is derived from the digest, so the plan of another (overlapping) run of the shard is never read.
   */
  async readPlan(
    checkpointId: number,
    attempt: number,
    shard: number,
    digest: string | undefined,
  ): Promise<ShardPlan> {
    const where = `${checkpointAttemptPrefix(this.pipeline, checkpointId, attempt)}plan-${shard}-*.json`;
    if (digest === undefined)
      throw new PlanDigestMismatchError(where, 'no digest was recorded with its vote');
    let key: string;
    try {
      key = planKey(this.pipeline, checkpointId, attempt, shard, digest);
    } catch {
      throw new PlanDigestMismatchError(where, `the recorded digest ${digest} is not a hex SHA-256`);
    }
    const bytes = workObjectJson(await this.get(key));
    if (bytes === undefined) throw new PlanDigestMismatchError(key, 'its gzip does not inflate');
    const found = sha256Hex(bytes);
    if (found !== digest) throw new PlanDigestMismatchError(key, `SHA-256 ${found}, voted for ${digest}`);
    const parsed = shardPlanSchema.safeParse(parseJson(bytes));
    if (!parsed.success) throw new PlanDigestMismatchError(key, `malformed: ${parsed.error.message}`);
    const plan = parsed.data;
    if (plan.checkpointId !== checkpointId || plan.attempt !== attempt || plan.shard !== shard) {
      throw new PlanDigestMismatchError(
        key,
        `names checkpoint ${plan.checkpointId}/${plan.attempt}/${plan.shard}`,
      );
    }
    return plan;
  }

  writePromotion(promotion: ShardPromotion): Promise<void> {
    return this.put(
      promotedKey(this.pipeline, promotion.checkpointId, promotion.attempt, promotion.shard),
      storedWorkObject(Buffer.from(JSON.stringify(promotion), 'utf8')),
    );
  }

  async readPromotion(checkpointId: number, attempt: number, shard: number): Promise<ShardPromotion> {
    const key = promotedKey(this.pipeline, checkpointId, attempt, shard);
    const json = workObjectJson(await this.get(key));
    const parsed = shardPromotionSchema.safeParse(json && parseJson(json));
    if (!parsed.success)
      throw new PromotionRecordError(`promotion record ${key} is malformed: ${parsed.error.message}`);
    return parsed.data;
  }

  /** Removes one attempt's working objects (abort). */
  async deleteAttempt(checkpointId: number, attempt: number): Promise<void> {
    await this.deletePrefix(checkpointAttemptPrefix(this.pipeline, checkpointId, attempt));
  }

  /** Removes every attempt's working objects of a checkpoint, candidates included (cleanup after commit). */
  async deleteCheckpoint(checkpointId: number): Promise<void> {
    await this.deletePrefix(`${checkpointWorkPrefix(this.pipeline)}${padCheckpointId(checkpointId)}/`);
  }

  /**
   * Removes working objects of checkpoints below `checkpointId` (which must be committed, so every one below it is
   * too, and none of their plans or candidates is read again): what a zombie step wrote after its checkpoint's
   * cleanup or its attempt's abort, or an attempt aborted by lease expiry whose checkpoint's cleanup was passed
   * over. Keys sort by checkpoint id, so the listing stops at the first key of `checkpointId` or above: when
   * nothing is left over, this costs one List request. Returns the keys deleted (at most `limit`).
   *
   * The listing starts at the lowest checkpoint, not after the cleaned-up mark: a zombie step writes under its
   * own, long cleaned-up checkpoint (a late candidate of attempt 1 after checkpoint 1 committed on attempt 2), so
   * leftovers sort below the mark too. What cleanup deleted before costs nothing to list again.
   */
  async deleteCheckpointsBelow(checkpointId: number, limit: number): Promise<string[]> {
    const found: string[] = [];
    for await (const object of listObjects(
      this.s3,
      this.bucket,
      checkpointWorkPrefix(this.pipeline),
      limit,
    )) {
      const id = workObjectCheckpointId(this.pipeline, object.key);
      // Not a key the layout writes (none should exist): not ours to judge; it expires with the prefix's backstop.
      if (id === undefined) continue;
      if (id >= checkpointId) break;
      found.push(object.key);
    }
    await deleteKeys(this.s3, this.bucket, found);
    return found;
  }

  private async deletePrefix(prefix: string): Promise<void> {
    const found: string[] = [];
    for await (const object of listObjects(this.s3, this.bucket, prefix)) found.push(object.key);
    await deleteKeys(this.s3, this.bucket, found);
  }

  private async put(key: string, body: Buffer): Promise<void> {
    try {
      await this.s3.send(
        new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, ContentType: 'application/json' }),
      );
    } catch (error) {
      rethrowClassified('s3:PutObject(coordinator working object)', error);
    }
  }

  private async get(key: string): Promise<Buffer> {
    const bytes = await getBytes(this.s3, this.bucket, key);
    if (!bytes) throw new WorkObjectMissingError(key);
    return bytes;
  }
}

function parseJson(bytes: Buffer): unknown {
  try {
    return JSON.parse(bytes.toString('utf8'));
  } catch {
    return undefined;
  }
}
