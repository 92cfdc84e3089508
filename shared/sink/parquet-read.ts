/**
 * Reading Parquet final objects back with hyparquet, the reader from the same project as the writer
 * `parquet.ts` uses (pure JavaScript, no native code: it runs in the CLI and in Lambda alike). Rows come back as
 * the NDJSON reader gives them, so `eos read`, `eos verify` and the local runner treat both formats alike:
 * INT64 (`long`, lineage `offset`) as numbers (exact: the processor keeps longs within ±(2^53 − 1)), timestamps as
 * epoch milliseconds, json columns as their parsed value.
 */
import { parquetReadObjects } from 'hyparquet';
import { PipelineError } from '../errors.ts';

/** A Parquet object that cannot be read, or holds a value no NDJSON row could. */
export class ParquetReadError extends PipelineError {}

function plain(value: unknown, where: string): unknown {
  if (typeof value === 'bigint') {
    const number = Number(value);
    if (!Number.isSafeInteger(number)) throw new ParquetReadError(`${where}: ${value} is beyond ±(2^53 − 1)`);
    return number;
  }
  if (value instanceof Date) return value.getTime();
  return value;
}

function plainRow(row: Record<string, unknown>, index: number): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(row)) {
    const where = `row ${index + 1} column ${name}`;
    // Only the lineage struct is a group; json columns are parsed JSON (no bigint, no Date inside).
    out[name] =
      name === 'source' && typeof value === 'object' && value !== null
        ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v, `${where}.${k}`)]))
        : plain(value, where);
  }
  return out;
}

/**
 * Every row of a Parquet file, in file order; with `columns`, only those top-level columns of each row (the others
 * are not decoded). Throws {@link ParquetReadError} for a file that is not Parquet.
 */
export async function decodeParquetRows(
  body: Uint8Array,
  columns?: readonly string[],
): Promise<Record<string, unknown>[]> {
  const file = body.buffer.slice(body.byteOffset, body.byteOffset + body.byteLength) as ArrayBuffer;
  let rows: Record<string, unknown>[];
  try {
    rows = (await parquetReadObjects({ file, ...(columns ? { columns: [...columns] } : {}) })) as Record<
      string,
      unknown
    >[];
  } catch (error) {
    throw new ParquetReadError(`not a readable Parquet file: ${(error as Error).message}`, { cause: error });
  }
  return rows.map(plainRow);
}
