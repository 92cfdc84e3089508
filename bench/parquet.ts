/**
 * Parquet writers for Node compared, to choose the sink's by measurement:
 * - bundle: esbuild, minified, platform node, of a tiny script that writes one file (plus any .wasm it loads);
 * - cold start: import of that bundle in a fresh `node` process (median of several processes);
 * - write speed: rows/s encoding 100k rows of a realistic schema to bytes in memory (median of runs after a warm-up);
 * - compression: snappy file size, and the ratio against the same rows as NDJSON (plain and gzip, what the sink
 *   writes by default);
 * - correctness: DuckDB reads each file back (row count, the `source` struct's type, the timestamp's type).
 *
 * The schema: strings, an int, longs, a double, a boolean, a timestamp, a nullable string, a json column and the
 * lineage struct `source {topic, partition, offset}`. hyparquet-writer is measured through `encodeParquet`, the
 * encoder the sink uses; the others through their documented APIs with the same columns and codec.
 *
 * Output formats: the same rows as the sink writes them — NDJSON plain, NDJSON gzip (the sink's default
 * format, the baseline) and Parquet (the sink's encoder) — side by side: write throughput in rows/s and MB/s (the
 * rows' NDJSON text per second, the same volume for every format, and the file bytes per second), file size and
 * bytes per row, each with its ratio to the baseline timed in the same process, round-robin with the others.
 *
 * Candidates are loaded by name at run time, so the project typechecks without them; install the ones to measure:
 *   npm install --no-save hyparquet-writer parquet-wasm apache-arrow @dsnp/parquetjs @duckdb/node-api
 * Run: npx tsx bench/parquet.ts [rows] [--docs] (prints both tables; writes bench/out/parquet/results.json; with
 * --docs, also the "Output formats" section of docs/benchmark.md, leaving the rest of the page as it is).
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { digestsOf, encodeNdjson } from '../shared/sink/ndjson.ts';
import type { ColumnDefinition } from '../shared/transforms/api.ts';
import type { OutputRow } from '../shared/transforms/types.ts';
import { median } from './stats.ts';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'bench', 'out', 'parquet');
const ARGS = process.argv.slice(2);
const ROWS = Number(ARGS.find((arg) => !arg.startsWith('--')) ?? 100_000);
const WRITE_DOCS = ARGS.includes('--docs');
const DOCS_PAGE = join(ROOT, 'docs', 'benchmark.md');
const WRITE_RUNS = 5;
const COLD_RUNS = 5;
const require = createRequire(import.meta.url);

const COLUMNS: readonly ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'customer', type: 'string', nullable: false },
  { name: 'quantity', type: 'int', nullable: false },
  { name: 'amountCents', type: 'long', nullable: false },
  { name: 'price', type: 'double', nullable: false },
  { name: 'paid', type: 'boolean', nullable: false },
  { name: 'placedAt', type: 'timestamp', nullable: false },
  { name: 'coupon', type: 'string', nullable: true },
  { name: 'attributes', type: 'json', nullable: false },
];

/** Deterministic rows shaped like a real order stream: ids unique, customers and channels repeating. */
function makeRows(count: number): OutputRow[] {
  const channels = ['web', 'ios', 'android', 'partner'];
  return Array.from({ length: count }, (_, offset) => ({
    orderId: `ord-${(1_000_000 + offset).toString(36)}-${(offset * 2_654_435_761) % 1_000_003}`,
    customer: `cust-${(offset * 7_919) % 5_000}`,
    quantity: 1 + (offset % 9),
    amountCents: 2 ** 33 + ((offset * 104_729) % 9_999_991),
    price: ((offset * 31) % 100_000) / 100,
    paid: offset % 5 !== 0,
    placedAt: 1_764_547_200_000 + offset * 37,
    coupon: offset % 4 === 0 ? `SPRING${offset % 50}` : null,
    attributes: {
      channel: channels[offset % 4],
      items: [{ sku: `sku-${offset % 300}`, qty: 1 + (offset % 3) }],
    },
    source: { topic: 'orders', partition: offset % 6, offset: 3_000_000_000 + offset },
  }));
}

/** What each candidate provides: an encoder and the tiny script its bundle is measured from. */
interface Candidate {
  readonly name: string;
  readonly packages: readonly string[];
  /** Body of the tiny script (CommonJS-bundled: parquet-wasm's Node build finds its .wasm through __dirname). */
  readonly script: string;
  /** Files a bundle needs beside it at run time (copied next to it). */
  readonly assets: readonly string[];
  encode(rows: readonly OutputRow[]): Promise<Uint8Array>;
}

// Loaded by name so that the project typechecks without the candidates installed (only the chosen one is a
// dependency). Each is described by the few members used here.
async function load<T>(specifier: string): Promise<T> {
  return (await import(specifier)) as T;
}

interface HyparquetEncoder {
  encodeParquet(columns: readonly ColumnDefinition[], rows: readonly OutputRow[]): Uint8Array;
}

async function hyparquet(): Promise<Candidate> {
  const { encodeParquet } = await load<HyparquetEncoder>('../shared/sink/parquet.ts');
  return {
    name: 'hyparquet-writer',
    packages: ['hyparquet-writer'],
    script: `import { encodeParquet } from ${JSON.stringify(join(ROOT, 'shared/sink/parquet.ts'))};
export const write = () => encodeParquet([{ name: 'a', type: 'string', nullable: false }],
  [{ a: 'x', source: { topic: 't', partition: 0, offset: 0 } }]);`,
    assets: [],
    encode: async (rows) => encodeParquet(COLUMNS, rows),
  };
}

type ArrowModule = Record<string, unknown> & {
  vectorFromArray(values: readonly unknown[], type: unknown): unknown;
  Table: new (columns: Record<string, unknown>) => unknown;
  tableToIPC(table: unknown, format: 'stream'): Uint8Array;
  Field: { new: (name: string, type: unknown, nullable?: boolean) => unknown };
  Struct: new (fields: unknown[]) => unknown;
};
interface ParquetWasmModule {
  Table: { fromIPCStream(bytes: Uint8Array): unknown };
  WriterPropertiesBuilder: new () => {
    setCompression(codec: number): { build(): unknown };
  };
  Compression: { SNAPPY: number; ZSTD: number };
  writeParquet(table: unknown, properties: unknown): Uint8Array;
}

async function parquetWasm(codec: 'SNAPPY' | 'ZSTD'): Promise<Candidate> {
  const arrow = await load<ArrowModule>('apache-arrow');
  const wasm = await load<ParquetWasmModule>('parquet-wasm/node');
  const type = (name: string, ...args: unknown[]): unknown =>
    new (arrow[name] as new (...a: unknown[]) => unknown)(...args);
  const types: Record<ColumnDefinition['type'], () => unknown> = {
    string: () => type('Utf8'),
    int: () => type('Int32'),
    long: () => type('Int64'),
    double: () => type('Float64'),
    boolean: () => type('Bool'),
    timestamp: () => type('TimestampMillisecond', 'UTC'),
    // Arrow has no JSON type (only an extension parquet-wasm does not map): the text goes as a plain string.
    json: () => type('Utf8'),
  };
  const source = new arrow.Struct([
    arrow.Field.new('topic', types.string(), false),
    arrow.Field.new('partition', types.int(), false),
    arrow.Field.new('offset', types.long(), false),
  ]);
  // Built per file: writeParquet takes the properties by value (wasm-bindgen moves them), so a second call with
  // the same object silently falls back to the defaults (uncompressed).
  const properties = () => new wasm.WriterPropertiesBuilder().setCompression(wasm.Compression[codec]).build();
  return {
    name: `parquet-wasm (${codec.toLowerCase()})`,
    packages: ['parquet-wasm', 'apache-arrow'],
    script: `import { tableFromArrays, tableToIPC } from 'apache-arrow';
import { Table, writeParquet, WriterPropertiesBuilder, Compression } from 'parquet-wasm/node';
export const write = () => writeParquet(Table.fromIPCStream(tableToIPC(tableFromArrays({ a: ['x'] }), 'stream')),
  new WriterPropertiesBuilder().setCompression(Compression.${codec}).build());`,
    assets: [join(dirname(require.resolve('parquet-wasm/node')), 'parquet_wasm_bg.wasm')],
    encode: async (rows) => {
      const vectors: Record<string, unknown> = {};
      for (const column of COLUMNS) {
        const values = rows.map((row) => {
          const value = row[column.name];
          if (value === null || value === undefined) return null;
          if (column.type === 'long') return BigInt(value as number);
          return column.type === 'json' ? JSON.stringify(value) : value;
        });
        vectors[column.name] = arrow.vectorFromArray(values, types[column.type]());
      }
      vectors.source = arrow.vectorFromArray(
        rows.map(({ source: s }) => ({ topic: s.topic, partition: s.partition, offset: BigInt(s.offset) })),
        source,
      );
      const ipc = arrow.tableToIPC(new arrow.Table(vectors), 'stream');
      return wasm.writeParquet(wasm.Table.fromIPCStream(ipc), properties());
    },
  };
}

interface ParquetjsModule {
  ParquetSchema: new (definition: Record<string, unknown>) => unknown;
  ParquetWriter: {
    openStream(
      schema: unknown,
      stream: Writable,
      options?: Record<string, unknown>,
    ): Promise<{ appendRow(row: Record<string, unknown>): Promise<void>; close(): Promise<void> }>;
  };
}

async function parquetjs(): Promise<Candidate> {
  const { ParquetSchema, ParquetWriter } = await load<ParquetjsModule>('@dsnp/parquetjs');
  const TYPES: Record<ColumnDefinition['type'], string> = {
    string: 'UTF8',
    int: 'INT32',
    long: 'INT64',
    double: 'DOUBLE',
    boolean: 'BOOLEAN',
    timestamp: 'TIMESTAMP_MILLIS',
    json: 'JSON',
  };
  const field = (type: string, optional = false) => ({ type, optional, compression: 'SNAPPY' });
  const schema = new ParquetSchema({
    ...Object.fromEntries(COLUMNS.map((c) => [c.name, field(TYPES[c.type], c.nullable)])),
    source: { fields: { topic: field('UTF8'), partition: field('INT32'), offset: field('INT64') } },
  });
  return {
    name: '@dsnp/parquetjs',
    packages: ['@dsnp/parquetjs'],
    script: `import { ParquetSchema, ParquetWriter } from '@dsnp/parquetjs';
import { Writable } from 'node:stream';
export const write = async () => {
  const w = await ParquetWriter.openStream(new ParquetSchema({ a: { type: 'UTF8', compression: 'SNAPPY' } }),
    new Writable({ write(_c, _e, done) { done(); } }));
  await w.appendRow({ a: 'x' });
  await w.close();
};`,
    assets: [],
    encode: async (rows) => {
      const chunks: Buffer[] = [];
      const sink = new Writable({
        write(chunk: Buffer, _encoding, done) {
          chunks.push(chunk);
          done();
        },
      });
      const writer = await ParquetWriter.openStream(schema, sink, { rowGroupSize: 100_000 });
      for (const row of rows) {
        // parquetjs takes a Date for TIMESTAMP_MILLIS, and null only as an absent optional field.
        const { placedAt, coupon, ...rest } = row;
        await writer.appendRow({
          ...rest,
          placedAt: new Date(placedAt as number),
          ...(coupon === null ? {} : { coupon }),
        });
      }
      await writer.close();
      return new Uint8Array(Buffer.concat(chunks));
    },
  };
}

interface Measured {
  candidate: string;
  packages: string;
  bundleKb?: number;
  coldStartMs?: number;
  writeMs?: number;
  rowsPerSecond?: number;
  fileKb?: number;
  vsNdjson?: number;
  vsNdjsonGzip?: number;
  readBack?: string;
  error?: string;
}

function versionOf(name: string): string {
  const manifest = JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as {
    version: string;
  };
  return `${name}@${manifest.version.replace(/^v/, '')}`;
}

async function bundleAndColdStart(candidate: Candidate): Promise<{ bundleKb: number; coldStartMs: number }> {
  const dir = join(OUT, candidate.name.replace(/[^a-z0-9-]+/gi, '_'));
  mkdirSync(dir, { recursive: true });
  const entry = join(dir, 'entry.mjs');
  writeFileSync(entry, candidate.script);
  const outfile = join(dir, 'bundle.cjs');
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    minify: true,
    platform: 'node',
    format: 'cjs',
    target: 'node20',
    nodePaths: [join(ROOT, 'node_modules')],
    logLevel: 'error',
  });
  let bytes = statSync(outfile).size;
  for (const asset of candidate.assets) {
    const copy = join(dir, asset.split('/').at(-1) ?? 'asset');
    copyFileSync(asset, copy);
    bytes += statSync(copy).size;
  }
  const script = `const t = performance.now(); const m = await import(${JSON.stringify(outfile)});
const loaded = performance.now() - t; await m.write(); process.stdout.write(String(loaded));`;
  const runs = Array.from({ length: COLD_RUNS }, () =>
    Number(execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })),
  );
  return { bundleKb: bytes / 1024, coldStartMs: median(runs) };
}

interface DuckDb {
  runAndReadAll(sql: string): Promise<{ getRowObjectsJS(): Record<string, unknown>[] }>;
}

async function readBack(db: DuckDb, bytes: Uint8Array, name: string): Promise<string> {
  const path = join(OUT, `${name.replace(/[^a-z0-9-]+/gi, '_')}.parquet`);
  writeFileSync(path, bytes);
  const [count] = (await db.runAndReadAll(`SELECT count(*) AS n FROM '${path}'`)).getRowObjectsJS();
  const types = Object.fromEntries(
    (await db.runAndReadAll(`DESCRIBE SELECT * FROM '${path}'`))
      .getRowObjectsJS()
      .map((row) => [String(row.column_name), String(row.column_type)]),
  );
  const struct = types.source?.startsWith('STRUCT(') ? 'struct' : `source ${types.source}`;
  return `${count?.n} rows, ${struct}, placedAt ${types.placedAt}, attributes ${types.attributes}`;
}

/** Loads a candidate, bundles it and times its cold start; a candidate that fails is reported, not fatal. */
async function prepare(
  make: () => Promise<Candidate>,
  label: string,
  warmUp: readonly OutputRow[],
): Promise<{ candidate?: Candidate; result: Measured }> {
  let candidate: Candidate;
  try {
    candidate = await make();
  } catch (error) {
    return {
      result: {
        candidate: label,
        packages: '',
        error: `not loaded: ${(firstLine(error) ?? '').replace(/ imported from .*$/, '')}`,
      },
    };
  }
  const result: Measured = {
    candidate: candidate.name,
    packages: candidate.packages.map(versionOf).join(' + '),
  };
  try {
    Object.assign(result, await bundleAndColdStart(candidate));
    await candidate.encode(warmUp); // JIT, wasm instantiation
    return { candidate, result };
  } catch (error) {
    return { result: { ...result, error: firstLine(error) } };
  }
}

const firstLine = (error: unknown) => (error instanceof Error ? error.message : String(error)).split('\n')[0];

/**
 * Times every encoder on the same rows, round-robin (one run of each, then the next round): the machine may be
 * shared, and interleaving spreads any background load over all candidates instead of penalising one.
 */
async function timeRoundRobin(
  encoders: readonly { readonly encode: () => Promise<Uint8Array> }[],
): Promise<{ ms: number; bytes: Uint8Array }[]> {
  const times = encoders.map(() => [] as number[]);
  const outputs = encoders.map(() => new Uint8Array() as Uint8Array);
  for (let run = 0; run < WRITE_RUNS; run += 1) {
    for (const [index, { encode }] of encoders.entries()) {
      const start = performance.now();
      outputs[index] = await encode();
      times[index]?.push(performance.now() - start);
    }
  }
  return encoders.map((_, index) => ({
    ms: median(times[index] ?? []),
    bytes: outputs[index] ?? new Uint8Array(),
  }));
}

const fixed = (value: number | undefined, digits = 0) => (value === undefined ? '—' : value.toFixed(digits));

function table(results: readonly Measured[], baseline: { name: string; ms: number; kb: number }[]): string {
  const fastest = Math.max(...results.map((r) => r.rowsPerSecond ?? 0));
  const smallest = Math.min(...results.map((r) => r.bundleKb ?? Number.POSITIVE_INFINITY));
  const quickest = Math.min(...results.map((r) => r.coldStartMs ?? Number.POSITIVE_INFINITY));
  const lines = [
    '| writer | package | bundle KB (× smallest) | cold start ms (× quickest) | write ms | rows/s (× fastest) | file KB | × smaller than NDJSON / NDJSON.gz | DuckDB read-back |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of results) {
    if (r.error !== undefined && r.writeMs === undefined) {
      lines.push(`| ${r.candidate} | ${r.packages} | ${r.error} |||||||`);
      continue;
    }
    lines.push(
      `| ${r.candidate} | ${r.packages} | ${fixed(r.bundleKb)} (${fixed((r.bundleKb ?? 0) / smallest, 1)}) | ` +
        `${fixed(r.coldStartMs, 1)} (${fixed((r.coldStartMs ?? 0) / quickest, 1)}) | ${fixed(r.writeMs)} | ` +
        `${fixed(r.rowsPerSecond)} (${fixed((r.rowsPerSecond ?? 0) / fastest, 2)}) | ${fixed(r.fileKb)} | ` +
        `${fixed(r.vsNdjson, 1)} / ${fixed(r.vsNdjsonGzip, 2)} | ${r.readBack ?? r.error ?? ''} |`,
    );
  }
  for (const b of baseline) {
    lines.push(
      `| ${b.name} (NDJSON sink encoder) | node:zlib | — | — | ${fixed(b.ms)} | ${fixed(ROWS / (b.ms / 1000))} | ${fixed(b.kb)} | — | — |`,
    );
  }
  return lines.join('\n');
}

/** Median time of the sink's upload digests (SHA-256 and MD5) over `bytes`. */
function digestMs(bytes: Uint8Array): number {
  const body = Buffer.from(bytes);
  const times = Array.from({ length: WRITE_RUNS }, () => {
    const start = performance.now();
    digestsOf(body);
    return performance.now() - start;
  });
  return median(times);
}

/** One output format's figures on the benchmark's rows. */
export interface FormatFigure {
  readonly format: string;
  readonly writer: string;
  readonly writeMs: number;
  readonly rowsPerSecond: number;
  /** The rows' NDJSON text per second: the same data volume for every format, so the figures compare. */
  readonly textMbPerSecond: number;
  /** File bytes written per second. */
  readonly fileMbPerSecond: number;
  readonly fileBytes: number;
  readonly bytesPerRow: number;
  /** rows/s against the baseline's (above 1: faster). */
  readonly speedVsBaseline: number;
  /** File size against the baseline's (below 1: smaller). */
  readonly sizeVsBaseline: number;
}

const MB = 1024 * 1024;

/** The figures of each timed format, with ratios against the one named `baseline` (timed in the same process). */
export function formatFigures(
  timings: readonly { format: string; writer: string; ms: number; bytes: number }[],
  rows: number,
  textBytes: number,
  baseline: string,
): FormatFigure[] {
  const base = timings.find((t) => t.format === baseline);
  if (base === undefined) throw new Error(`no baseline ${baseline} among ${timings.map((t) => t.format)}`);
  return timings.map((t) => ({
    format: t.format,
    writer: t.writer,
    writeMs: t.ms,
    rowsPerSecond: rows / (t.ms / 1000),
    textMbPerSecond: textBytes / MB / (t.ms / 1000),
    fileMbPerSecond: t.bytes / MB / (t.ms / 1000),
    fileBytes: t.bytes,
    bytesPerRow: t.bytes / rows,
    speedVsBaseline: base.ms / t.ms,
    sizeVsBaseline: t.bytes / base.bytes,
  }));
}

function formatsTable(figures: readonly FormatFigure[], baseline: string): string {
  return [
    `| format | encoder | write ms | rows/s (× ${baseline}) | MB/s of rows (NDJSON text) | file MB/s | file KB (× ${baseline}) | bytes per row |`,
    '|---|---|---|---|---|---|---|---|',
    ...figures.map(
      (f) =>
        `| ${f.format} | ${f.writer} | ${fixed(f.writeMs)} | ${fixed(f.rowsPerSecond)} (${fixed(f.speedVsBaseline, 2)}) | ` +
        `${fixed(f.textMbPerSecond, 1)} | ${fixed(f.fileMbPerSecond, 1)} | ${fixed(f.fileBytes / 1024)} (${fixed(f.sizeVsBaseline, 2)}) | ${fixed(f.bytesPerRow, 1)} |`,
    ),
  ].join('\n');
}

export const OUTPUT_FORMATS_HEADING = '## Output formats';

/** What the writer comparison shows, in words derived from the figures (nothing here is asserted by hand). */
function writerVerdict(results: readonly Measured[]): string {
  const measured = results.filter((r) => r.rowsPerSecond !== undefined);
  const missing = results.filter((r) => r.rowsPerSecond === undefined).map((r) => r.candidate);
  const notMeasured = missing.length
    ? ` Not measured in this run (not installed): ${missing.join(', ')}; install them as the top of bench/parquet.ts says and rerun to compare.`
    : '';
  if (measured.length < 2) {
    return `Only ${measured[0]?.candidate ?? 'no writer'} was measured in this run, so these figures describe it but compare it with no other writer.${notMeasured}`;
  }
  const best = (pick: (r: Measured) => number | undefined, least: boolean) =>
    [...measured].sort((a, b) => ((pick(a) ?? 0) - (pick(b) ?? 0)) * (least ? 1 : -1))[0]?.candidate ?? '—';
  return (
    `Fastest write: ${best((r) => r.rowsPerSecond, false)}; smallest file: ${best((r) => r.fileKb, true)}; ` +
    `smallest bundle: ${best((r) => r.bundleKb, true)}; quickest cold start: ${best((r) => r.coldStartMs, true)}.${notMeasured}`
  );
}

export interface OutputFormatsRun {
  readonly generatedAt: string;
  readonly node: string;
  readonly rows: number;
  readonly baseline: string;
  readonly formats: readonly FormatFigure[];
  readonly writers: readonly Measured[];
  readonly writerTable: string;
}

/** The "Output formats" section of docs/benchmark.md, from one run's figures. */
export function renderOutputFormats(run: OutputFormatsRun): string {
  return [
    OUTPUT_FORMATS_HEADING,
    '',
    `Measured by \`npx tsx bench/parquet.ts ${run.rows} --docs\` on ${run.generatedAt} (Node ${run.node}; a shared 2-core`,
    `machine, so the ratios, timed round-robin in one process, are the point): ${run.rows} rows of an order-like schema`,
    '(strings, an int, longs, a double, a boolean, a timestamp, a nullable string, a json column and the `source`',
    `struct), each encoded in memory by the sink's own encoders, median of ${WRITE_RUNS} writes; every time includes the`,
    'SHA-256 and MD5 the sink computes of each object it uploads (inside encodeNdjson; timed and added for Parquet).',
    "MB/s of rows is the rows' NDJSON text (the same volume for every format) per second of writing; file MB/s is",
    `the bytes written per second. The ratios are against ${run.baseline}, what the sink wrote before Parquet.`,
    '',
    formatsTable(run.formats, run.baseline),
    '',
    '### Parquet writers',
    '',
    `Candidates for the sink's Parquet encoder, on the same rows: the bundle of a minimal script that writes one file`,
    `(esbuild, minified, with any .wasm it loads), its cold start (import in a fresh process, median of ${COLD_RUNS}),`,
    'write speed, snappy file size, and DuckDB reading each file back.',
    '',
    run.writerTable,
    '',
    writerVerdict(run.writers),
    '',
  ].join('\n');
}

/**
 * `page` with its "Output formats" section replaced by `section` (appended when it has none); the sections
 * around it are left as they are.
 */
export function spliceOutputFormats(page: string, section: string): string {
  const start = page.indexOf(`\n${OUTPUT_FORMATS_HEADING}\n`);
  if (start < 0) return `${page.trimEnd()}\n\n${section.trimEnd()}\n`;
  const next = page.indexOf('\n## ', start + 1);
  const rest = next < 0 ? '' : page.slice(next);
  return `${page.slice(0, start)}\n${section.trimEnd()}\n${rest}`;
}

/** A page's "Output formats" section as it stands (for a generator that rewrites the rest of the page). */
export function outputFormatsSection(page: string): string | undefined {
  const start = page.indexOf(`\n${OUTPUT_FORMATS_HEADING}\n`);
  if (start < 0) return undefined;
  const next = page.indexOf('\n## ', start + 1);
  return `${page.slice(start + 1, next < 0 ? undefined : next).trimEnd()}\n`;
}

async function main(): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  const rows = makeRows(ROWS);
  let db: DuckDb | undefined;
  try {
    const duckdb = await load<{
      DuckDBInstance: { create(path: string): Promise<{ connect(): Promise<DuckDb> }> };
    }>('@duckdb/node-api');
    db = await (await duckdb.DuckDBInstance.create(':memory:')).connect();
  } catch {
    db = undefined;
  }
  const prepared = [];
  for (const [label, make] of [
    ['hyparquet-writer', hyparquet],
    ['parquet-wasm (snappy)', () => parquetWasm('SNAPPY')],
    ['parquet-wasm (zstd)', () => parquetWasm('ZSTD')],
    ['@dsnp/parquetjs', parquetjs],
  ] as const) {
    prepared.push(await prepare(make, label, rows.slice(0, 1_000)));
  }
  const ready = prepared.filter((p) => p.candidate !== undefined);
  const ndjsonEncoders = [false, true].map((gzip) => ({
    name: gzip ? 'NDJSON gzip' : 'NDJSON',
    encode: async () => new Uint8Array(encodeNdjson(rows, gzip).body),
  }));
  // Warmed like the candidates (prepare): JSON.stringify on these shapes and zlib are compiled before timing.
  for (const encoder of ndjsonEncoders) encodeNdjson(rows.slice(0, 1_000), encoder.name !== 'NDJSON');
  const timed = await timeRoundRobin([
    ...ndjsonEncoders,
    ...ready.map(({ candidate }) => ({ encode: () => (candidate as Candidate).encode(rows) })),
  ]);
  const baseline = ndjsonEncoders.map((encoder, index) => ({
    name: encoder.name,
    ms: timed[index]?.ms ?? Number.NaN,
    kb: (timed[index]?.bytes.length ?? 0) / 1024,
  }));
  const [plain, gzipped] = baseline.map((b) => b.kb * 1024);
  for (const [index, { candidate, result }] of ready.entries()) {
    const { ms, bytes } = timed[ndjsonEncoders.length + index] ?? { ms: Number.NaN, bytes: new Uint8Array() };
    result.writeMs = ms;
    result.rowsPerSecond = Math.round(rows.length / (ms / 1000));
    result.fileKb = bytes.length / 1024;
    result.vsNdjson = (plain ?? 0) / bytes.length;
    result.vsNdjsonGzip = (gzipped ?? 0) / bytes.length;
    try {
      result.readBack =
        db === undefined ? 'DuckDB not installed' : await readBack(db, bytes, (candidate as Candidate).name);
    } catch (error) {
      result.readBack = `DuckDB failed: ${firstLine(error)}`;
    }
  }
  const results = prepared.map((p) => p.result);
  const sinkParquet = ready.findIndex(({ candidate }) => candidate?.name === 'hyparquet-writer');
  const timing = (index: number, format: string, writer: string, extraMs = 0) => ({
    format,
    writer,
    ms: (timed[index]?.ms ?? Number.NaN) + extraMs,
    bytes: timed[index]?.bytes.length ?? 0,
  });
  // The sink hashes every object it uploads (SHA-256 and MD5): encodeNdjson does it inside, so the Parquet file's
  // digests are timed too and added, for both formats to be measured as the sink writes them.
  const parquetIndex = ndjsonEncoders.length + sinkParquet;
  const parquetDigestMs = sinkParquet < 0 ? 0 : digestMs(timed[parquetIndex]?.bytes ?? new Uint8Array());
  const BASELINE = 'NDJSON gzip';
  const formats = formatFigures(
    [
      timing(0, 'NDJSON', 'encodeNdjson (JSON.stringify, digests)'),
      timing(1, BASELINE, 'encodeNdjson (JSON.stringify, node:zlib gzip, digests)'),
      ...(sinkParquet < 0
        ? []
        : [
            timing(
              parquetIndex,
              'Parquet (snappy)',
              'encodeParquet (hyparquet-writer), digests',
              parquetDigestMs,
            ),
          ]),
    ],
    ROWS,
    plain ?? 0,
    BASELINE,
  );
  writeFileSync(
    join(OUT, 'results.json'),
    `${JSON.stringify({ rows: ROWS, results, baseline, formats }, null, 2)}\n`,
  );
  const writerTable = table(results, baseline);
  console.log(
    `${ROWS} rows; Node ${process.version}; medians of ${WRITE_RUNS} writes and ${COLD_RUNS} cold starts\n`,
  );
  console.log(`${formatsTable(formats, BASELINE)}\n`);
  console.log(writerTable);
  if (WRITE_DOCS) {
    const section = renderOutputFormats({
      generatedAt: new Date().toISOString(),
      node: process.version,
      rows: ROWS,
      baseline: BASELINE,
      formats,
      writers: results,
      writerTable,
    });
    writeFileSync(DOCS_PAGE, spliceOutputFormats(readFileSync(DOCS_PAGE, 'utf8'), section));
    console.log(`\nwrote the "Output formats" section of ${DOCS_PAGE}`);
  }
}

// Run only as a script: the docs generators import the section helpers above without running the benchmark.
if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url))
  await main();
