/**
 * `eos query` against real committed output: a local run (emulated MSK, the processor, the state machine's
 * checkpoints, on DynamoDB Local and the S3 server) read through its bucket and through its `--export`
 * directory, with DuckDB as the engine. Counts are checked against the run's own report and against the
 * exported files read independently (gunzip and JSON.parse), never against the query itself.
 */
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { Command } from 'commander';
import { beforeAll, describe, expect, it } from 'vitest';
import { reportFailure } from '../../cli/failures.ts';
import { type QueryCommandOptions, registerQueryCommand, runQueryCommand } from '../../cli/query.ts';
import { NO_FAULTS } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { exportRun } from '../../local/results.ts';
import { type RunReport, runLocal } from '../../local/runner.ts';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { finalObjectKey, finalPrefix } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import orders from '../../shared/transforms/orders.ts';
import { freshResources, settingsIn } from '../support/aws.ts';

let clients: AwsClients;
let bucket: string;
let pipeline: string;
let report: RunReport;
/** The run's export: `exportDir/bucket/<pipeline>/final/…` and `…/_manifests/…`. */
let exportDir: string;

beforeAll(async () => {
  const resources = await freshResources('query');
  ({ clients, bucket } = resources);
  const settings = settingsIn(resources, 'query');
  pipeline = settings.pipelineId;
  const input = generateOrders({ seed: 11, records: 300, partitions: 3, poisonRate: 0.03 });
  const result = await runLocal({
    settings,
    input,
    partitions: 3,
    faults: NO_FAULTS,
    seed: 11,
    checkpointIntervalMs: 500,
    clock: 'virtual',
    batchSize: 25,
  });
  report = result.report;
  expect(report.verdict).toBe('exactly-once');
  exportDir = mkdtempSync(join(tmpdir(), 'eos-query-export-'));
  await exportRun(clients, bucket, finalPrefix(pipeline), result.aggregates, exportDir);
}, 120_000);

/** Runs the command's logic; returns what it printed. */
async function query(options: Partial<QueryCommandOptions> & { sql: string }): Promise<string> {
  const out: string[] = [];
  await runQueryCommand(
    { format: 'json', stream: 'output', pipeline, exportDir, ...options },
    { write: (text) => out.push(text) },
  );
  return out.join('');
}

/** Runs `query <args>` through commander as `eos` does; the exit code and stderr as cli/failures.ts gives them. */
async function command(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const program = new Command('eos').exitOverride().configureOutput({ writeErr: (t) => err.push(t) });
  registerQueryCommand(program, { write: (text) => out.push(text) }).exitOverride();
  try {
    await program.parseAsync(['node', 'eos', 'query', ...args]);
    return { code: 0, out: out.join(''), err: err.join('') };
  } catch (error) {
    const code = reportFailure(error, (t) => err.push(t), false);
    return { code, out: out.join(''), err: err.join('') };
  }
}

const jsonLines = (text: string) =>
  text
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

/** The exported rows of one stream, read with nothing but the file system, gunzip and JSON.parse. */
function exportedRows(dir: string, stream: string): Record<string, unknown>[] {
  const root = join(dir, 'bucket', pipeline, 'final', stream);
  return readdirSync(root, { recursive: true })
    .map(String)
    .filter((file) => file.endsWith('.ndjson.gz'))
    .flatMap((file) => jsonLines(gunzipSync(readFileSync(join(root, file))).toString()));
}

describe('eos query over a local run', () => {
  it('counts exactly the committed records of each stream, from the export and from the bucket', async () => {
    expect(report.records.committed).toBeGreaterThan(0);
    expect(report.records.deadLettered).toBeGreaterThan(0);
    const count = 'SELECT count(*) AS n FROM output';
    expect(jsonLines(await query({ sql: count }))).toEqual([{ n: report.records.committed }]);
    expect(jsonLines(await query({ sql: count, exportDir: undefined, bucket }))).toEqual([
      { n: report.records.committed },
    ]);
    const dead = 'SELECT count(*) AS n FROM deadletter';
    expect(jsonLines(await query({ sql: dead, stream: 'deadletter' }))).toEqual([
      { n: report.records.deadLettered },
    ]);
    expect(jsonLines(await query({ sql: dead, stream: 'deadletter', exportDir: undefined, bucket }))).toEqual(
      [{ n: report.records.deadLettered }],
    );
  });

  it('reads the rows themselves: the same order ids and lineage as the exported files', async () => {
    const expected = exportedRows(exportDir, 'output')
      .map((row) => {
        const source = row.source as { partition: number; offset: number };
        return { orderId: row.orderId, partition: source.partition, offset: source.offset };
      })
      .sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    const sql =
      'SELECT orderId, source.partition AS partition, source.offset AS offset FROM output ORDER BY 2, 3';
    expect(jsonLines(await query({ sql }))).toEqual(expected);
  });

  it('does not read an unlisted file planted in the final prefix (bucket and export)', async () => {
    const rows = [{ orderId: 'planted', source: { topic: 'orders', partition: 0, offset: 999_999 } }];
    const body = gzipSync(rows.map((row) => `${JSON.stringify(row)}\n`).join(''));
    const range = {
      stream: 'output',
      topic: 'orders',
      partition: 0,
      firstOffset: 999_999,
      lastOffset: 999_999,
    };
    const key = finalObjectKey(pipeline, range as Parameters<typeof finalObjectKey>[1], true);
    await clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    const planted = mkdtempSync(join(tmpdir(), 'eos-query-planted-'));
    cpSync(exportDir, planted, { recursive: true });
    // Its folder may not exist in the export (merged final objects sit elsewhere).
    mkdirSync(join(planted, 'bucket', ...key.split('/').slice(0, -1)), { recursive: true });
    writeFileSync(join(planted, 'bucket', ...key.split('/')), body);
    // The plant is where a prefix listing would pick it up.
    expect(exportedRows(planted, 'output')).toHaveLength(report.records.committed + 1);

    const sql = "SELECT count(*) AS n, count(*) FILTER (WHERE orderId = 'planted') AS planted FROM output";
    const want = [{ n: report.records.committed, planted: 0 }];
    expect(jsonLines(await query({ sql, exportDir: planted }))).toEqual(want);
    expect(jsonLines(await query({ sql, exportDir: undefined, bucket }))).toEqual(want);
  });

  it('fails on a listed file whose bytes differ from its manifest: exit 1, one line naming the file', async () => {
    const tampered = mkdtempSync(join(tmpdir(), 'eos-query-tampered-'));
    cpSync(exportDir, tampered, { recursive: true });
    const root = join(tampered, 'bucket', pipeline, 'final', 'output');
    const file = readdirSync(root, { recursive: true })
      .map(String)
      .find((name) => name.endsWith('.ndjson.gz'))!;
    const lines = gunzipSync(readFileSync(join(root, file)))
      .toString()
      .trim()
      .split('\n');
    // One record dropped, still a valid gzip NDJSON file: only the manifest's checksum can tell.
    writeFileSync(join(root, file), gzipSync(`${lines.slice(1).join('\n')}\n`));

    const result = await command([
      'SELECT count(*) FROM output',
      '--export-dir',
      tampered,
      '--pipeline',
      pipeline,
    ]);
    expect(result.code).toBe(1);
    expect(result.out).toBe('');
    expect(result.err).toMatch(
      /^error: committed file \S+\.ndjson\.gz does not match its manifest \(\d+ bytes, SHA-256 [0-9a-f]{64};/,
    );
    expect(result.err.trim().split('\n')).toHaveLength(1);
  });

  it('prints table, csv and json', async () => {
    const perPartition = new Map<number, number>();
    for (const row of exportedRows(exportDir, 'output')) {
      const { partition } = row.source as { partition: number };
      perPartition.set(partition, (perPartition.get(partition) ?? 0) + 1);
    }
    const partitions = [...perPartition.entries()].sort(([a], [b]) => a - b);
    const sql = 'SELECT source.partition AS p, count(*) AS n FROM output GROUP BY 1 ORDER BY 1';
    const args = [sql, '--export-dir', exportDir, '--pipeline', pipeline];

    const csv = await command([...args, '--format', 'csv']);
    expect(csv.code).toBe(0);
    expect(csv.out).toBe(`p,n\n${partitions.map(([p, n]) => `${p},${n}\n`).join('')}`);

    const json = await command([...args, '--format', 'json']);
    expect(jsonLines(json.out)).toEqual(partitions.map(([p, n]) => ({ p, n })));

    const table = await command(args);
    const width = Math.max(1, ...partitions.map(([, n]) => String(n).length));
    expect(table.out).toBe(
      [
        `p | ${'n'.padEnd(width)}`.trimEnd(),
        `--+-${'-'.repeat(width)}`,
        ...partitions.map(([p, n]) => `${p} | ${String(n).padStart(width)}`),
        `(${partitions.length} rows)`,
        '',
      ].join('\n'),
    );
  });

  it('quotes CSV fields, prints NULL, nested values and large integers faithfully', async () => {
    const sql = `SELECT 'a,"b"' AS s, NULL AS z, {'k': [1, 2]} AS nested, 9007199254740993 AS big, 'two\nlines' AS t`;
    const csv = await query({ sql, format: 'csv' });
    expect(csv).toBe('s,z,nested,big,t\n"a,""b""",,"{""k"":[1,2]}",9007199254740993,"two\nlines"\n');
    const json = jsonLines(await query({ sql, format: 'json' }));
    expect(json).toEqual([
      { s: 'a,"b"', z: null, nested: { k: [1, 2] }, big: '9007199254740993', t: 'two\nlines' },
    ]);
    const table = await query({ sql, format: 'table' });
    expect(table.split('\n')[2]).toBe('a,"b" | NULL | {"k":[1,2]} | 9007199254740993 | two\\nlines');
  });

  it('refuses bad SQL with exit 2 and one line, printing nothing', async () => {
    for (const sql of ['SELEC count(*) FROM output', 'SELECT * FROM orders_table', 'SELECT 1; SELECT 2']) {
      const result = await command([sql, '--export-dir', exportDir, '--pipeline', pipeline]);
      expect(result.code, sql).toBe(2);
      expect(result.out).toBe('');
      expect(result.err).toMatch(/^error: the query failed: /);
      expect(result.err.trim().split('\n'), sql).toHaveLength(1);
    }
  });

  it('usage errors: no location, both locations, an export that is not one (exit 2)', async () => {
    const none = await command(['SELECT 1']);
    expect(none).toMatchObject({
      code: 2,
      err: 'error: --bucket or --export-dir is required (or set EOS_BUCKET)\n',
    });
    const both = await command(['SELECT 1', '--bucket', bucket, '--export-dir', exportDir]);
    expect(both).toMatchObject({ code: 2, err: 'error: --bucket and --export-dir cannot be combined\n' });
    const empty = mkdtempSync(join(tmpdir(), 'eos-query-empty-'));
    const notExport = await command(['SELECT 1', '--export-dir', empty]);
    expect(notExport.code).toBe(2);
    expect(notExport.err).toMatch(/holds no export of pipeline orders/);
  });

  it('AWS unusable or the SQL missing: exit 3 or 2, one line', async () => {
    const cases: [string[], number, RegExp][] = [
      [[], 2, /^error: missing required argument 'sql'$/],
      [
        ['SELECT 1', '--bucket', 'b', '--endpoint', 'http://127.0.0.1:1'],
        3,
        /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?cannot reach AWS: /,
      ],
      [
        ['SELECT 1', '--bucket', 'eos-no-such-bucket'],
        3,
        /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*NoSuchBucket/,
      ],
      [
        ['SELECT 1', '--bucket', bucket, '--format', 'xml'],
        2,
        /^error: option '--format <format>' argument 'xml' is invalid/,
      ],
    ];
    for (const [args, code, line] of cases) {
      const result = await command(args);
      expect(result.code, args.join(' ')).toBe(code);
      expect(result.err.trim().split('\n'), args.join(' ')).toHaveLength(1);
      expect(result.err.trim(), args.join(' ')).toMatch(line);
    }
  });

  it('without DuckDB installed: exit 3, one line saying how to install it, nothing fetched', async () => {
    const out: string[] = [];
    const err: string[] = [];
    const program = new Command('eos').exitOverride();
    const missing = Object.assign(
      new Error("Cannot find package '@duckdb/node-api' imported from cli/query.ts"),
      {
        code: 'ERR_MODULE_NOT_FOUND',
      },
    );
    registerQueryCommand(program, {
      write: (text) => out.push(text),
      loadDuckDb: () => Promise.reject(missing),
    }).exitOverride();
    let code = 0;
    try {
      await program.parseAsync(['node', 'eos', 'query', 'SELECT 1', '--bucket', 'no-such-bucket-anywhere']);
    } catch (error) {
      code = reportFailure(error, (t) => err.push(t), false);
    }
    expect(code).toBe(3);
    expect(err.join('')).toMatch(
      /^error: eos query: needs DuckDB's Node API, .*npm install @duckdb\/node-api/,
    );
    expect(err.join('').trim().split('\n')).toHaveLength(1);
    expect(out).toEqual([]);
  });
});

describe('eos query over a Parquet run with hourly time folders', () => {
  let parquet: { pipeline: string; report: RunReport; dir: string; bucket: string };

  beforeAll(async () => {
    const resources = await freshResources('query-pq');
    const settings = settingsIn(resources, 'query-pq', {
      outputFormat: 'parquet',
      timePartitioning: 'hour',
      outputColumns: [...orders.columns],
    });
    const input = generateOrders({ seed: 12, records: 300, partitions: 2, poisonRate: 0.03 });
    const result = await runLocal({
      settings,
      input,
      partitions: 2,
      faults: NO_FAULTS,
      seed: 12,
      checkpointIntervalMs: 500,
      clock: 'virtual',
      batchSize: 25,
    });
    expect(result.report.verdict).toBe('exactly-once');
    const dir = mkdtempSync(join(tmpdir(), 'eos-query-parquet-'));
    await exportRun(
      resources.clients,
      resources.bucket,
      finalPrefix(settings.pipelineId),
      result.aggregates,
      dir,
    );
    parquet = { pipeline: settings.pipelineId, report: result.report, dir, bucket: resources.bucket };
  }, 120_000);

  /** Rows per `dt hour` folder of a stream, from the exported manifests' entries (no query engine involved). */
  function perFolder(stream: string): Map<string, number> {
    const manifests = join(parquet.dir, 'bucket', parquet.pipeline, '_manifests');
    const counts = new Map<string, number>();
    for (const name of readdirSync(manifests)) {
      const manifest = JSON.parse(readFileSync(join(manifests, name), 'utf8')) as Manifest;
      for (const file of manifest.files.filter((f) => f.stream === stream)) {
        const [, dt, hour] = /\/dt=([^/]+)\/hour=([^/]+)\//.exec(file.key) ?? [];
        const folder = `${dt} ${hour}`;
        counts.set(folder, (counts.get(folder) ?? 0) + file.recordCount);
      }
    }
    return counts;
  }

  it('reads the Parquet objects: the count, and dt/hour columns as the Glue table has them', async () => {
    const { pipeline: pl, report: run, dir } = parquet;
    const keys = readdirSync(join(dir, 'bucket', pl, 'final', 'output'), { recursive: true }).map(String);
    expect(keys.some((key) => /^dt=[^/]+\/hour=\d{2}\/.+\.parquet$/.test(key))).toBe(true);
    const count = 'SELECT count(*) AS n FROM output';
    expect(jsonLines(await query({ sql: count, pipeline: pl, exportDir: dir }))).toEqual([
      { n: run.records.committed },
    ]);

    const sql =
      'SELECT dt, hour, count(*) AS n, any_value(typeof(dt)) AS t FROM output GROUP BY ALL ORDER BY ALL';
    const rows = jsonLines(await query({ sql, pipeline: pl, exportDir: dir }));
    const expected = [...perFolder('output').entries()].sort(([a], [b]) => (a < b ? -1 : 1));
    expect(expected.length).toBeGreaterThan(0);
    expect(rows).toEqual(
      expected.map(([folder, n]) => ({
        dt: folder.split(' ')[0],
        hour: folder.split(' ')[1],
        n,
        t: 'VARCHAR',
      })),
    );
    // Typed columns from the transform's schema, and the lineage struct.
    const types = jsonLines(await query({ sql: 'DESCRIBE output', pipeline: pl, exportDir: dir }));
    expect(Object.fromEntries(types.map((c) => [c.column_name, c.column_type]))).toMatchObject({
      amountMinor: 'BIGINT',
      ts: 'TIMESTAMP WITH TIME ZONE',
      source: 'STRUCT(topic VARCHAR, "partition" INTEGER, "offset" BIGINT)',
    });
  });

  it('reads the NDJSON dead letters in their folders, and both streams from the bucket', async () => {
    const { pipeline: pl, report: run, dir } = parquet;
    const sql = 'SELECT count(*) AS n FROM deadletter';
    expect(run.records.deadLettered).toBeGreaterThan(0);
    expect(jsonLines(await query({ sql, pipeline: pl, exportDir: dir, stream: 'deadletter' }))).toEqual([
      { n: run.records.deadLettered },
    ]);
    const fromBucket = { pipeline: pl, exportDir: undefined, bucket: parquet.bucket };
    expect(jsonLines(await query({ sql, ...fromBucket, stream: 'deadletter' }))).toEqual([
      { n: run.records.deadLettered },
    ]);
    expect(jsonLines(await query({ sql: 'SELECT count(*) AS n FROM output', ...fromBucket }))).toEqual([
      { n: run.records.committed },
    ]);
  });
});
