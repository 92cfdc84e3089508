/**
 * The coordinator's working objects (keys in `work-objects.ts`): per checkpoint attempt and shard, the promotion
 * plan prepare wrote and the manifest entries promote produced. Step Functions passes only (checkpoint, attempt,
 * shard); the lists live here.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { rethrowClassified } from '../aws/classify.ts';
import { PipelineError } from '../errors.ts';
import { padCheckpointId } from '../ledger/layout.ts';
import type { ManifestFile } from './manifest.ts';
import { deleteKeys, getBytes, listObjects } from './objects.ts';
import type { PlannedObject } from './promoter.ts';
import { checkpointAttemptPrefix, checkpointWorkPrefix, planKey, promotedKey } from './work-objects.ts';

export interface ShardPlan {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
  /** Staged files verified by prepare (including those without records). */
  readonly stagedFiles: number;
  readonly objects: readonly PlannedObject[];
}

export interface ShardPromotion {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly shard: number;
  readonly files: readonly ManifestFile[];
}

/** A working object the protocol needs is not there (a step ran out of order, or cleanup ran early). */
export class WorkObjectMissingError extends PipelineError {
  constructor(readonly key: string) {
    super(`coordinator working object ${key} is missing`);
  }
}

export class PlanStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly pipeline: string,
  ) {}

  writePlan(plan: ShardPlan): Promise<void> {
    return this.put(planKey(this.pipeline, plan.checkpointId, plan.attempt, plan.shard), plan);
  }

  readPlan(checkpointId: number, attempt: number, shard: number): Promise<ShardPlan> {
    return this.get(planKey(this.pipeline, checkpointId, attempt, shard));
  }

  writePromotion(promotion: ShardPromotion): Promise<void> {
    return this.put(
      promotedKey(this.pipeline, promotion.checkpointId, promotion.attempt, promotion.shard),
      promotion,
    );
  }

  readPromotion(checkpointId: number, attempt: number, shard: number): Promise<ShardPromotion> {
    return this.get(promotedKey(this.pipeline, checkpointId, attempt, shard));
  }

  /** Removes one attempt's working objects (abort). */
  async deleteAttempt(checkpointId: number, attempt: number): Promise<void> {
    await this.deletePrefix(checkpointAttemptPrefix(this.pipeline, checkpointId, attempt));
  }

  /** Removes every attempt's working objects of a checkpoint (cleanup after commit). */
  async deleteCheckpoint(checkpointId: number): Promise<void> {
    await this.deletePrefix(`${checkpointWorkPrefix(this.pipeline)}${padCheckpointId(checkpointId)}/`);
  }

  private async deletePrefix(prefix: string): Promise<void> {
    const found: string[] = [];
    for await (const object of listObjects(this.s3, this.bucket, prefix)) found.push(object.key);
    await deleteKeys(this.s3, this.bucket, found);
  }

  private async put(key: string, value: unknown): Promise<void> {
    try {
      await this.s3.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          Body: JSON.stringify(value),
          ContentType: 'application/json',
        }),
      );
    } catch (error) {
      rethrowClassified('s3:PutObject(coordinator working object)', error);
    }
  }

  private async get<T>(key: string): Promise<T> {
    const bytes = await getBytes(this.s3, this.bucket, key);
    if (!bytes) throw new WorkObjectMissingError(key);
    return JSON.parse(bytes.toString('utf8')) as T;
  }
}
