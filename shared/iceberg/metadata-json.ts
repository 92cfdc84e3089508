/**
 * Table metadata JSON read and written exactly: snapshot ids use all 63 bits, more than a double holds, so every
 * snapshot id is a bigint in memory and an integer in the text, and any other integer beyond a double's exact range
 * (a field of another writer) is kept as a bigint rather than rounded. And where the catalogs put it in S3: each
 * metadata file is written once and never replaced.
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { getBytes, putIfAbsent } from '../sink/objects.ts';
import { IcebergMetadataError, type TableMetadata } from './table-metadata.ts';

const BIG = '\u0000eos-bigint:';
const BIG_TEXT = /"\\u0000eos-bigint:(-?\d+)"/g;
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;
const ID_KEYS = new Set(['snapshot-id', 'parent-snapshot-id', 'current-snapshot-id']);

/** The metadata's JSON text, bigint values written as the integers they are. */
export function tableMetadataJson(metadata: TableMetadata): string {
  const text = JSON.stringify(
    metadata,
    (_key, value) => (typeof value === 'bigint' ? `${BIG}${value}` : value),
    2,
  );
  return text.replace(BIG_TEXT, '$1');
}

/** Metadata JSON (any writer's), integers beyond a double's exact range and every snapshot id read as bigint. */
export function parseTableMetadata(text: string): TableMetadata {
  const marked = text.replace(TOKENS, (token) =>
    token.startsWith('"') || !/^-?\d{16,}$/.test(token) ? token : `"\\u0000eos-bigint:${token}"`,
  );
  const parsed = JSON.parse(marked, (key, value) => {
    if (typeof value === 'string' && value.startsWith(BIG)) return BigInt(value.slice(BIG.length));
    if (ID_KEYS.has(key) && typeof value === 'number') return value < 0 ? undefined : BigInt(value);
    return value;
  }) as TableMetadata;
  if (parsed['format-version'] !== 2) {
    throw new IcebergMetadataError(
      `table metadata of format version ${String(parsed['format-version'])}, not 2`,
    );
  }
  return {
    ...parsed,
    refs: parsed.refs ?? {},
    snapshots: parsed.snapshots ?? [],
    'snapshot-log': parsed['snapshot-log'] ?? [],
    'metadata-log': parsed['metadata-log'] ?? [],
  };
}

/** `s3://bucket/key` (or `s3a://`) as its parts. */
export function s3ObjectOf(location: string): { bucket: string; key: string } {
  const match = /^s3a?:\/\/([^/]+)\/(.+)$/.exec(location);
  if (!match) throw new IcebergMetadataError(`${location} is not an s3:// location`);
  return { bucket: match[1] as string, key: match[2] as string };
}

/**
 * Writes metadata JSON text to `location` unless an object is already there (`If-None-Match: *`): `created` when
 * this call wrote it, `exists` when the key was taken. A metadata file is never overwritten: a reader that found it
 * through a catalog, or a metadata log naming it, must keep reading the same table state.
 */
export async function writeMetadataJson(
  s3: S3Client,
  location: string,
  text: string,
): Promise<'created' | 'exists'> {
  const { bucket, key } = s3ObjectOf(location);
  return putIfAbsent(s3, bucket, key, Buffer.from(text), { contentType: 'application/json' });
}

/** The metadata at `location`, or undefined when there is no object there. */
export async function readMetadataJson(s3: S3Client, location: string): Promise<TableMetadata | undefined> {
  const { bucket, key } = s3ObjectOf(location);
  const bytes = await getBytes(s3, bucket, key);
  return bytes === undefined ? undefined : parseTableMetadata(bytes.toString('utf8'));
}

const VERSIONED_NAME = /\/(\d+)-[^/]*\.metadata\.json$/;

/**
 * Where a catalog that points at one metadata file (S3 Tables, Glue) gets `text`, the next metadata after the file
 * at `previous`: `<location>/metadata/<NNNNN>-<id>.metadata.json`, the name Iceberg's own catalogs give it (the
 * version one above the previous file's, 0 for a new table). The id is a digest of the text in a UUID's shape where
 * they put a random UUID, so that a retry writing the same metadata writes the same key, and writers of different
 * metadata never share one.
 */
export function catalogMetadataLocation(
  next: TableMetadata,
  previous: string | undefined,
  text: string,
): string {
  const parsed = previous === undefined ? undefined : VERSIONED_NAME.exec(previous)?.[1];
  const version =
    previous === undefined ? 0 : parsed === undefined ? next['metadata-log'].length : Number(parsed) + 1;
  const hex = createHash('sha256').update(text).digest('hex');
  const id = [
    hex.slice(0, 8),
    hex.slice(8, 12),
    hex.slice(12, 16),
    hex.slice(16, 20),
    hex.slice(20, 32),
  ].join('-');
  return `${next.location.replace(/\/+$/, '')}/metadata/${String(version).padStart(5, '0')}-${id}.metadata.json`;
}
