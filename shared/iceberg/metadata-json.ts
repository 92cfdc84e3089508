/**
 * Table metadata JSON read and written exactly: snapshot ids use all 63 bits, more than a double holds, so every
 * snapshot id is a bigint in memory and an integer in the text, and any other integer beyond a double's exact range
 * (a field of another writer) is kept as a bigint rather than rounded.
 */
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
