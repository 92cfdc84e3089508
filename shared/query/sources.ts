/**
 * Where `eos query` reads committed output from: a bucket (through the AWS SDK) or a directory written by
 * `eos local --export DIR` (`DIR/bucket/<key>`). Both give the manifest log in order, checked gap-free and chained
 * (C7), and each listed object's bytes by key. Nothing here lists a data prefix: data is only ever opened by a key
 * a manifest names.
 */
import { createReadStream, existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { type ByteSpan, getRange } from '../sink/entry-bytes.ts';
import { FINAL_DIR, manifestKey, manifestsPrefix } from '../sink/layout.ts';
import type { Manifest } from '../sink/manifest.ts';
import { ManifestLogError, ManifestStore } from '../sink/manifest-store.ts';
import { isNotFound } from '../sink/objects.ts';
import { ExportDirectoryError } from './errors.ts';

export interface CommittedSource {
  /** For messages: `s3://bucket/pipeline` or the export directory. */
  readonly description: string;
  /** Every manifest in id order, gap-free from 1 and each naming the previous one (else `ManifestLogError`). */
  manifests(): AsyncIterable<Manifest>;
  /**
   * The bytes of a key a manifest lists, as a stream (only bytes [span.start, span.end) when a span is given, fewer
   * when the object ends first); `undefined` when there is no such object.
   */
  open(key: string, span?: ByteSpan): Promise<Readable | undefined>;
}

export function bucketSource(s3: S3Client, bucket: string, pipeline: string): CommittedSource {
  return {
    description: `s3://${bucket}/${pipeline}`,
    manifests: () => new ManifestStore(s3, bucket, pipeline).all(),
    open: async (key, span) => {
      // A span is read as every slice is from a bucket: one ranged GET, its answer checked (`entry-bytes.ts`).
      if (span) {
        const bytes = await getRange(s3, bucket, key, span);
        return bytes === undefined ? undefined : Readable.from([bytes]);
      }
      try {
        const response = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        return response.Body as Readable;
      } catch (error) {
        if (isNotFound(error)) return undefined;
        throw error;
      }
    },
  };
}

const MANIFEST_NAME = /^(\d{12})\.json$/;

/**
 * An `eos local --export DIR` directory. The manifest log is checked as `ManifestStore` checks a bucket's (that
 * class reads through an S3 client, so the same two rules are restated here for files).
 */
export function exportDirectorySource(dir: string, pipeline: string): CommittedSource {
  const root = join(dir, 'bucket');
  const manifestsDir = join(root, ...manifestsPrefix(pipeline).split('/').filter(Boolean));
  if (!existsSync(manifestsDir)) {
    throw new ExportDirectoryError(
      `${dir} holds no export of pipeline ${pipeline}: ${manifestsDir} does not exist (write one with eos local --export ${dir})`,
    );
  }
  return {
    description: dir,
    manifests: () => directoryManifests(root, manifestsDir, pipeline),
    open: async (key, span) => {
      const path = join(root, ...key.split('/'));
      // Keys are final data keys checked by the caller (no `..`, no other prefix); refuse anything else anyway.
      if (!key.startsWith(`${pipeline}/${FINAL_DIR}/`) || !existsSync(path)) return undefined;
      return createReadStream(path, span ? { start: span.start, end: span.end - 1 } : {});
    },
  };
}

async function* directoryManifests(
  root: string,
  manifestsDir: string,
  pipeline: string,
): AsyncGenerator<Manifest> {
  const ids = readdirSync(manifestsDir)
    .map((name) => MANIFEST_NAME.exec(name))
    .filter((match) => match !== null)
    .map((match) => Number(match[1]))
    .sort((a, b) => a - b);
  let previous = 0;
  for (const [index, id] of ids.entries()) {
    if (id !== index + 1) {
      throw new ManifestLogError(`manifest log of ${pipeline} has a gap: expected ${index + 1}, found ${id}`);
    }
    const path = join(root, ...manifestKey(pipeline, id).split('/'));
    const manifest = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
    if (manifest.checkpointId !== id || manifest.previousCheckpointId !== previous) {
      throw new ManifestLogError(
        `manifest ${id} of ${pipeline} names checkpoint ${manifest.checkpointId} after ${manifest.previousCheckpointId}, expected ${id} after ${previous}`,
      );
    }
    previous = id;
    yield manifest;
  }
}
