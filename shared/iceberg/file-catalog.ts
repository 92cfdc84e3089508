/**
 * The file catalog: a table's metadata in the bucket itself, as Iceberg's file-system tables keep it and as
 * readers without a catalog find it (icebird, DuckDB's `iceberg_scan`, Spark's Hadoop catalog).
 *
 * ```
 * <table>/metadata/v<N>.metadata.json   the table's N-th metadata, written once
 * <table>/metadata/version-hint.text    N of a recent version: a hint only
 * ```
 *
 * A commit of version N writes `v<N>.metadata.json` with `If-None-Match: *`: of two writers of the same N one wins
 * and the other gets 412, its `conflict`. Versions are therefore written in order without gaps, and the version
 * token is N. The hint is written after the metadata, without a condition; a crash between the two, or a slow writer
 * putting back an older N, leaves it behind, never ahead, so `load` reads the hint's version and then looks for
 * newer ones upward until one is missing. Without a hint (the first commit's hint lost), it lists the metadata
 * folder for the highest N first.
 */
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { getBytes, listObjects } from '../sink/objects.ts';
import type { Catalog, Committed, TableState } from './catalog.ts';
import { parseTableMetadata, tableMetadataJson, writeMetadataJson } from './metadata-json.ts';
import type { TableMetadata } from './table-metadata.ts';

const VERSION_FILE = /\/v(\d+)\.metadata\.json$/;

export class FileCatalog implements Catalog {
  /**
   * @param root the table's key prefix in `bucket`, without a trailing slash (`<pipeline>/iceberg/output`); the
   *   table's location is `s3://<bucket>/<root>`.
   */
  constructor(
    private readonly s3: S3Client,
    readonly bucket: string,
    readonly root: string,
  ) {}

  /** `s3://<bucket>/<root>`: the table's location, its metadata under `metadata/`. */
  get location(): string {
    return `s3://${this.bucket}/${this.root}`;
  }

  metadataKey(version: number): string {
    return `${this.root}/metadata/v${version}.metadata.json`;
  }

  get hintKey(): string {
    return `${this.root}/metadata/version-hint.text`;
  }

  /**
   * The newest version. A hint found behind it (a commit cut off before its hint, a hint write that failed) is
   * written again: readers without a catalog go by the hint alone, and a retried commit that finds its version
   * already made writes no metadata, so it would otherwise never move the hint.
   */
  async load(): Promise<TableState | undefined> {
    const hinted = await this.hintedVersion();
    let version = hinted ?? (await this.listedVersion());
    let bytes = version === 0 ? undefined : await getBytes(this.s3, this.bucket, this.metadataKey(version));
    for (;;) {
      const newer = await getBytes(this.s3, this.bucket, this.metadataKey(version + 1));
      if (newer === undefined) break;
      version += 1;
      bytes = newer;
    }
    if (bytes === undefined) return undefined;
    if (version !== hinted) await this.writeHint(version);
    return {
      metadata: parseTableMetadata(bytes.toString('utf8')),
      location: `s3://${this.bucket}/${this.metadataKey(version)}`,
      version: String(version),
    };
  }

  async commit(expected: TableState | undefined, next: TableMetadata): Promise<Committed | 'conflict'> {
    const version = expected === undefined ? 1 : Number(expected.version) + 1;
    if (!Number.isSafeInteger(version) || version < 1) {
      throw new RangeError(`version token ${expected?.version} is not one of this catalog's`);
    }
    const location = `s3://${this.bucket}/${this.metadataKey(version)}`;
    if ((await writeMetadataJson(this.s3, location, tableMetadataJson(next))) === 'exists') return 'conflict';
    await this.writeHint(version);
    return { metadata: next, location, version: String(version) };
  }

  /** The hint's version; undefined when there is none (or it is not a version). */
  private async hintedVersion(): Promise<number | undefined> {
    const text = (await getBytes(this.s3, this.bucket, this.hintKey))?.toString('utf8').trim();
    return text !== undefined && /^[1-9]\d{0,15}$/.test(text) ? Number(text) : undefined;
  }

  /** The highest version listed under `metadata/` (0: none). */
  private async listedVersion(): Promise<number> {
    let highest = 0;
    for await (const object of listObjects(this.s3, this.bucket, `${this.root}/metadata/v`)) {
      const match = VERSION_FILE.exec(object.key);
      if (match) highest = Math.max(highest, Number(match[1]));
    }
    return highest;
  }

  /**
   * Writes the hint. The commit is already done when this runs, so a failure here is not the commit's: it is
   * left to the next commit's hint, and `load` finds newer versions without it.
   */
  private async writeHint(version: number): Promise<void> {
    try {
      await this.s3.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.hintKey,
          Body: String(version),
          ContentType: 'text/plain',
        }),
      );
    } catch {
      // The hint is only a hint (see above): its failure must not turn a done commit into a failed one.
    }
  }
}
