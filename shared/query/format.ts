/**
 * Printing a query's result: `table` (aligned, for people), `csv` (RFC 4180, a header line) and `json` (one
 * object per row per line, as `eos read` prints records). Hand-written: each is a few lines over values that are
 * already JSON-ready (engine.ts), and none of the project's dependencies formats tables or CSV.
 */
import type { Json } from '@duckdb/node-api';
import type { QueryResult } from './engine.ts';

export const OUTPUT_FORMATS = ['table', 'csv', 'json'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

/** A value as text: strings as they are, nested values as JSON text; `null` is the caller's choice. */
function text(value: Json | null, nullText: string): string {
  if (value === null) return nullText;
  if (typeof value === 'string') return value;
  if (typeof value === 'object') return JSON.stringify(value);
  return String(value);
}

/** A CSV field, quoted when it holds a comma, a quote or a line break (RFC 4180); NULL is an empty field. */
export function csvField(value: Json | null): string {
  const raw = text(value, '');
  return /[",\r\n]/.test(raw) ? `"${raw.replaceAll('"', '""')}"` : raw;
}

/** Column names made unique for JSON objects (`SELECT 1 AS a, 2 AS a` gives `a` and `a_1`). */
export function uniqueNames(columns: readonly string[]): string[] {
  const used = new Set<string>();
  return columns.map((name) => {
    let candidate = name;
    for (let n = 1; used.has(candidate); n++) candidate = `${name}_${n}`;
    used.add(candidate);
    return candidate;
  });
}

async function writeCsv(result: QueryResult, write: (text: string) => void): Promise<number> {
  write(`${result.columns.map(csvField).join(',')}\n`);
  let rows = 0;
  for await (const batch of result.batches) {
    write(batch.map((row) => `${row.map(csvField).join(',')}\n`).join(''));
    rows += batch.length;
  }
  return rows;
}

async function writeJson(result: QueryResult, write: (text: string) => void): Promise<number> {
  const names = uniqueNames(result.columns);
  let rows = 0;
  for await (const batch of result.batches) {
    const lines = batch.map((row) => JSON.stringify(Object.fromEntries(names.map((n, i) => [n, row[i]]))));
    write(lines.map((line) => `${line}\n`).join(''));
    rows += batch.length;
  }
  return rows;
}

/** Display width in code points; wide and combining characters are not measured (a plain terminal table). */
const width = (value: string): number => [...value].length;

/** Numbers right-aligned, everything else left-aligned, `NULL` for null, a row count at the end. */
async function writeTable(result: QueryResult, write: (text: string) => void): Promise<number> {
  const rows: { cells: string[]; numeric: boolean[] }[] = [];
  for await (const batch of result.batches) {
    for (const row of batch) {
      rows.push({
        cells: row.map((value) => text(value, 'NULL').replaceAll(/\r?\n/g, '\\n')),
        numeric: row.map((value) => typeof value === 'number'),
      });
    }
  }
  const widths = result.columns.map((name, i) =>
    Math.max(width(name), ...rows.map((row) => width(row.cells[i] ?? ''))),
  );
  const pad = (cell: string, i: number, right: boolean) => {
    const fill = ' '.repeat((widths[i] ?? 0) - width(cell));
    return right ? fill + cell : cell + fill;
  };
  const line = (cells: readonly string[], numeric: readonly boolean[] = []) =>
    `${cells.map((cell, i) => pad(cell, i, numeric[i] ?? false)).join(' | ')}`.trimEnd();
  write(`${line(result.columns)}\n`);
  write(`${widths.map((w) => '-'.repeat(w)).join('-+-')}\n`);
  for (const row of rows) write(`${line(row.cells, row.numeric)}\n`);
  write(`(${rows.length} ${rows.length === 1 ? 'row' : 'rows'})\n`);
  return rows.length;
}

/** Prints the result in `format`; resolves to the number of rows printed. */
export function writeResult(
  result: QueryResult,
  format: OutputFormat,
  write: (text: string) => void,
): Promise<number> {
  if (format === 'csv') return writeCsv(result, write);
  if (format === 'json') return writeJson(result, write);
  return writeTable(result, write);
}
