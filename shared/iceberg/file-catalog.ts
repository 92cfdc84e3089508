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
 * token is N. The hint is written after the metadata and only ever moves forward: it is put with `If-Match` on the
 * ETag it was read with (`If-None-Match: *` when there was none), and on 412 read again, until it names N or a newer
 * version. An unconditional put would let a slow writer of N put it back below a version another writer committed
 * and hinted meanwhile, and readers that follow the hint would miss the newest snapshot until the next commit. A
 * crash between the two puts, or a hint put that failed or gave up, still leaves the hint behind, never ahead, so
 * `load` reads the hint's version and then looks for newer ones upward until one is missing. Without a hint (the
 * first commit's hint lost), it lists the metadata folder for the highest N first.
 */
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { getBytes, getObject, isNotFound, listObjects } from '../sink/objects.ts';
import type { Catalog, Committed, TableState } from './catalog.ts';
import { parseTableMetadata, tableMetadataJson, writeMetadataJson } from './metadata-json.ts';
import type { TableMetadata } from './table-metadata.ts';

const VERSION_FILE = /\/v(\d+)\.metadata\.json$/;

/**
 * Conditional puts of the hint per commit or load. Each refused one means another writer moved the hint (forward,
 * as every writer does), so a few suffice; past them the hint is left behind, which `load` finds and corrects.
 */
export const HINT_ATTEMPTS = 4;

/** The hint object as read or written: the version it names (0: none) and its ETag (undefined: no object). */
interface HintSeen {
  readonly version: number;
  readonly etag: string | undefined;
}

export class FileCatalog implements Catalog {
  /**
   * The hint as this catalog last read or wrote it: a commit after a load puts its hint on that ETag without
   * reading the hint again. Only a guess: the put's `If-Match` decides, and a stale guess costs one refused put.
   */
  private lastHint: HintSeen | undefined;

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
    const hint = await this.readHint();
    let version = hint.version > 0 ? hint.version : await this.listedVersion();
    let bytes = version === 0 ? undefined : await getBytes(this.s3, this.bucket, this.metadataKey(version));
    for (;;) {
      const newer = await getBytes(this.s3, this.bucket, this.metadataKey(version + 1));
      if (newer === undefined) break;
      version += 1;
      bytes = newer;
    }
    if (bytes === undefined) return undefined;
    if (version !== hint.version) await this.advanceHint(version, hint);
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
    await this.advanceHint(version, this.lastHint);
    return { metadata: next, location, version: String(version) };
  }

  /** The hint now; a hint that is not a version reads as version 0 (its ETag still guards the put over it). */
  private async readHint(): Promise<HintSeen> {
    const object = await getObject(this.s3, this.bucket, this.hintKey);
    const text = object?.bytes.toString('utf8').trim();
    const version = text !== undefined && /^[1-9]\d{0,15}$/.test(text) ? Number(text) : 0;
    this.lastHint = { version, etag: object?.etag };
    return this.lastHint;
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
   * Moves the hint up to `version`, never down: from `seen` (read again when it is no guess below `version`), a put
   * conditional on it; when refused, the hint is read again and the put repeated on what is there, until the hint
   * names `version` or a newer one, or {@link HINT_ATTEMPTS} puts were refused. The commit is already done when
   * this runs, so a failure here is not the commit's: the hint is left to the next commit, and `load` finds newer
   * versions without it.
   */
  private async advanceHint(version: number, seen: HintSeen | undefined): Promise<void> {
    try {
      let hint = seen !== undefined && seen.version < version ? seen : await this.readHint();
      for (let attempt = 1; hint.version < version; attempt++) {
        if (await this.putHint(version, hint.etag)) return;
        if (attempt >= HINT_ATTEMPTS) return;
        hint = await this.readHint();
      }
    } catch {
      // The hint is only a hint (see above): its failure must not turn a done commit into a failed one. What the
      // hint is now is unknown, so the next commit reads it first.
      this.lastHint = undefined;
    }
  }

  /**
   * Puts `version` as the hint if the hint is still the object of `etag` (or still absent, `etag` undefined): true
   * when written; false when another writer changed it first (412, or 404 for an `If-Match` on a hint since
   * deleted, or 409 for a conditional put racing another, which S3 says to retry).
   */
  private async putHint(version: number, etag: string | undefined): Promise<boolean> {
    try {
      const answer = await this.s3.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: this.hintKey,
          Body: String(version),
          ContentType: 'text/plain',
          ...(etag === undefined ? { IfNoneMatch: '*' } : { IfMatch: etag }),
        }),
      );
      this.lastHint = answer.ETag ? { version, etag: answer.ETag } : undefined;
      return true;
    } catch (error) {
      if (refusedByCondition(error)) return false;
      throw error;
    }
  }
}

/** S3's answers to a conditional put whose condition no longer holds, or that raced another conditional put. */
function refusedByCondition(error: unknown): boolean {
  const { name, $metadata } = (error ?? {}) as { name?: string; $metadata?: { httpStatusCode?: number } };
  const status = $metadata?.httpStatusCode;
  return (
    status === 412 ||
    status === 409 ||
    name === 'PreconditionFailed' ||
    name === 'ConditionalRequestConflict' ||
    isNotFound(error)
  );
}
