/**
 * Prepare's candidates (C3, C5): each planned final object's bytes, merged from the staged bytes prepare verified
 * (`promote/object-bytes.ts`), written once under the attempt's working prefix (`candidateKey`, content-addressed)
 * before the vote. The plan records each candidate's key, SHA-256, size and the ETag S3 answered the write with, so
 * the plan's digest (the vote) covers them, and promote copies exactly that object (`promote/promoter.ts`).
 *
 * Write-once: with `If-None-Match: *` a candidate is never replaced; a 412 means an earlier run of this attempt
 * (a retried or overlapping prepare) wrote the key first. The key names the SHA-256 of the bytes, so what is there
 * should be these bytes: it is read back and hashed, and its ETag taken, before the plan may name it (a rare path:
 * only a retried prepare meets it).
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../../errors.ts';
import { getObject, putOnce } from '../../sink/objects.ts';
import type { FinalCandidate, PlannedObject } from '../promote/final-plan.ts';
import { finalObjectPut } from '../promote/promoter.ts';
import { candidateKey } from '../work-objects.ts';

/** The candidate key holds other bytes than its name says: only a coordinator role or an operator can cause it. */
export class CandidateConflictError extends PipelineError {
  constructor(
    readonly key: string,
    detail: string,
  ) {
    super(`candidate ${key} cannot be used: ${detail}`);
  }
}

/** Which attempt a candidate belongs to. */
export interface CandidateRef {
  readonly pipeline: string;
  readonly checkpointId: number;
  readonly attempt: number;
}

/** Writes `body` as the candidate of `object` (write-once) and returns what the plan records of it. */
export async function writeCandidate(
  s3: S3Client,
  bucket: string,
  ref: CandidateRef,
  object: Pick<PlannedObject, 'format' | 'recordCount'>,
  body: Buffer,
): Promise<FinalCandidate> {
  const sha256 = createHash('sha256').update(body).digest('hex');
  const key = candidateKey(ref.pipeline, ref.checkpointId, ref.attempt, sha256);
  let etag = await putOnce(s3, bucket, key, body, finalObjectPut(object, body));
  if (etag === undefined) {
    const stored = await getObject(s3, bucket, key);
    if (!stored)
      throw new CandidateConflictError(key, 'S3 refused the write as existing, but it is not there');
    const found = createHash('sha256').update(stored.bytes).digest('hex');
    if (found !== sha256) throw new CandidateConflictError(key, `it holds bytes of SHA-256 ${found}`);
    etag = stored.etag;
  }
  return { key, sha256, etag, bytes: body.length };
}
