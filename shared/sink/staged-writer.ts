/**
 * The staged writer: puts one encoded object under a key the caller chose (in-progress for exactly-once, final
 * for at-least-once and none). It never commits anything: promotion is the coordinator's (Flink's FileSink
 * split between writer and committer).
 *
 * Write-once (`If-None-Match: *`), like every other write under `final/`: the bucket may refuse a write there
 * without it. Every key the processor passes names its own attempt (and, staged, the write's number in it), so
 * no two puts share a key; a 412 can only answer the SDK's retry of this very put whose first try landed (its
 * answer was lost), and is taken as written. The processor may not read these keys back to compare, and need
 * not: a staged object is verified byte for byte against its ledger entry before anything is promoted, and
 * at-least-once output accepts duplicates, never a rewrite.
 */
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { rethrowClassified } from '../aws/classify.ts';
import { MissingResourceError } from '../errors.ts';
import type { EncodedObject } from './ndjson.ts';
import { writeOnceRefused } from './objects.ts';

export class StagedWriter {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
  ) {}

  async put(key: string, object: EncodedObject): Promise<void> {
    try {
      await this.s3.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          Body: object.body,
          ContentLength: object.bytes,
          // S3 rejects the upload if the bytes it received do not hash to this: no silently corrupted object.
          ContentMD5: Buffer.from(object.md5, 'hex').toString('base64'),
          ContentType: 'application/x-ndjson',
          IfNoneMatch: '*',
        }),
      );
    } catch (error) {
      if (writeOnceRefused('s3:PutObject', error)) return;
      if ((error as { name?: string }).name === 'NoSuchBucket') {
        throw new MissingResourceError(`bucket ${this.bucket}`, 'does not exist', { cause: error });
      }
      rethrowClassified('s3:PutObject', error);
    }
  }
}
