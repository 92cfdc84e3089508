/**
 * The staged writer: puts one encoded object under a key the caller chose (in-progress for exactly-once, final
 * for at-least-once and none). It never commits anything: promotion is the coordinator's (Flink's FileSink
 * split between writer and committer).
 */
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { rethrowClassified } from '../aws/classify.ts';
import { MissingResourceError } from '../errors.ts';
import type { EncodedObject } from './ndjson.ts';

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
        }),
      );
    } catch (error) {
      if ((error as { name?: string }).name === 'NoSuchBucket') {
        throw new MissingResourceError(`bucket ${this.bucket}`, 'does not exist', { cause: error });
      }
      rethrowClassified('s3:PutObject', error);
    }
  }
}
