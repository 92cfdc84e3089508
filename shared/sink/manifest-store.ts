/**
 * Manifests (format in `manifest.ts`, keys in `layout.ts`): written once per committed checkpoint, read in id
 * order. A manifest's bytes are a pure function of the checkpoint (its `committedAt` is the decision time
 * recorded in the ledger), so a retried or recovering commit writes the same bytes; with `If-None-Match: *` a
 * 412 is accepted only if the existing manifest is byte-identical.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { PipelineError } from '../errors.ts';
import { checkRanges } from './generation-switch.ts';
import { manifestKey, manifestsPrefix } from './layout.ts';
import type { Manifest, ManifestFile } from './manifest.ts';
import { getBytes, listObjects, putIfAbsent } from './objects.ts';

/** A manifest exists with other content: C7 forbids changing a visible manifest. */
export class ManifestConflictError extends PipelineError {
  constructor(readonly key: string) {
    super(`manifest ${key} already exists with different content`);
  }
}

/** The manifest log is not gap-free or not chained: somebody wrote or deleted under the final prefix. */
export class ManifestLogError extends PipelineError {}

const byCodeUnits = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** A cut with its partitions in code-unit order (JSON keeps insertion order for non-index keys). */
export function canonicalCut(cut: Readonly<Record<string, number>>): Record<string, number> {
  const sorted: Record<string, number> = {};
  for (const partition of Object.keys(cut).sort(byCodeUnits)) sorted[partition] = cut[partition]!;
  return sorted;
}

/**
 * The manifest's bytes: canonical, so that every roll-forward of a checkpoint writes identical bytes whatever order
 * its inputs came in — fields in one fixed order, cut and previousCut keys sorted by code units, files in
 * {@link sortManifestFiles} order, each file's fields in one fixed order.
 */
export function encodeManifest(manifest: Manifest): Buffer {
  const canonical: Manifest = {
    version: manifest.version,
    pipeline: manifest.pipeline,
    checkpointId: manifest.checkpointId,
    previousCheckpointId: manifest.previousCheckpointId,
    cut: canonicalCut(manifest.cut),
    previousCut: canonicalCut(manifest.previousCut),
    committedAt: manifest.committedAt,
    files: sortManifestFiles(manifest.files).map((file) => ({
      key: file.key,
      stream: file.stream,
      topic: file.topic,
      partition: file.partition,
      firstOffset: file.firstOffset,
      lastOffset: file.lastOffset,
      recordCount: file.recordCount,
      bytes: file.bytes,
      sha256: file.sha256,
      ...(file.format === undefined ? {} : { format: file.format }),
      ...(file.sliceStart === undefined ? {} : { sliceStart: file.sliceStart }),
    })),
    ...(manifest.generations === undefined || manifest.generations.length === 0
      ? {}
      : {
          generations: [...manifest.generations]
            .sort((a, b) => a.generation - b.generation)
            .map((change) => ({ generation: change.generation, ranges: checkRanges(change.ranges) })),
        }),
  };
  return Buffer.from(`${JSON.stringify(canonical, null, 2)}\n`, 'utf8');
}

/**
 * The manifest's file order: stream, topic, partition, firstOffset, then key (code-unit order: no locale
 * involved). The key orders the files of one range in several time folders, folder by folder.
 */
export function sortManifestFiles(files: readonly ManifestFile[]): ManifestFile[] {
  return [...files].sort(
    (a, b) =>
      byCodeUnits(a.stream, b.stream) ||
      byCodeUnits(a.topic, b.topic) ||
      a.partition - b.partition ||
      a.firstOffset - b.firstOffset ||
      byCodeUnits(a.key, b.key),
  );
}

export class ManifestStore {
  constructor(
    private readonly s3: S3Client,
    private readonly bucket: string,
    private readonly pipeline: string,
  ) {}

  async write(manifest: Manifest): Promise<void> {
    const key = manifestKey(this.pipeline, manifest.checkpointId);
    const body = encodeManifest(manifest);
    const outcome = await putIfAbsent(this.s3, this.bucket, key, body, { contentType: 'application/json' });
    if (outcome === 'exists') {
      const existing = await getBytes(this.s3, this.bucket, key);
      if (!existing?.equals(body)) throw new ManifestConflictError(key);
    }
  }

  async read(checkpointId: number): Promise<Manifest | undefined> {
    const bytes = await getBytes(this.s3, this.bucket, manifestKey(this.pipeline, checkpointId));
    return bytes ? (JSON.parse(bytes.toString('utf8')) as Manifest) : undefined;
  }

  /** The ids of all manifests, ascending, checked gap-free from 1 (C7). */
  async ids(): Promise<number[]> {
    const prefix = manifestsPrefix(this.pipeline);
    const ids: number[] = [];
    for await (const object of listObjects(this.s3, this.bucket, prefix)) {
      const match = /^(\d{12})\.json$/.exec(object.key.slice(prefix.length));
      if (match) ids.push(Number(match[1]));
    }
    ids.sort((a, b) => a - b);
    ids.forEach((id, index) => {
      if (id !== index + 1)
        throw new ManifestLogError(
          `manifest log of ${this.pipeline} has a gap: expected ${index + 1}, found ${id}`,
        );
    });
    return ids;
  }

  /** Every manifest in id order, each checked to follow the previous one. */
  async *all(): AsyncGenerator<Manifest> {
    let previous = 0;
    for (const id of await this.ids()) {
      const manifest = await this.read(id);
      if (!manifest)
        throw new ManifestLogError(`manifest ${id} of ${this.pipeline} disappeared while reading`);
      if (manifest.checkpointId !== id || manifest.previousCheckpointId !== previous) {
        throw new ManifestLogError(
          `manifest ${id} of ${this.pipeline} names checkpoint ${manifest.checkpointId} after ${manifest.previousCheckpointId}, expected ${id} after ${previous}`,
        );
      }
      previous = id;
      yield manifest;
    }
  }
}
