/**
 * Parquet output end to end: `eos local` with Parquet output, hourly time folders and every fault kind commits output
 * that an independent reader (DuckDB, over the exported final objects the manifests list) counts exactly once per
 * input record, whose aggregates computed in SQL equal the ledger's keyed state, where every row sits in the time
 * folder of its record (late records in their own), and which `eos verify` passes. A second run checks gzip NDJSON
 * with day folders by the transform's own time field.
 *
 * Real local parts: DynamoDB Local and the S3 server the global setup started; MSK is the emulator (it cannot run
 * here). The settings come from EOS_* variables because `eos local --format/--partition-by` are added to
 * cli/local.ts by its owner (cli/local-settings.ts maps them); the columns are the orders transform's own.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import type { Command } from 'commander';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../cli/eos.ts';
import { runVerifyCommand } from '../../cli/verify.ts';
import type { RunReport } from '../../local/runner.ts';
import { parseFinalKey } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { timeFolder } from '../../shared/sink/time-partitions.ts';
import orders from '../../shared/transforms/orders.ts';

let dir: string;
let instance: DuckDBInstance;
let db: DuckDBConnection;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'parquet-pipeline-'));
  instance = await DuckDBInstance.create(':memory:');
  db = await instance.connect();
});

afterAll(() => {
  db?.closeSync();
  instance?.closeSync();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

async function query(sql: string): Promise<Record<string, unknown>[]> {
  const reader = await db.runAndReadAll(sql);
  return reader.getRowObjectsJS() as Record<string, unknown>[];
}

const sqlText = (text: string) => `'${text.replaceAll("'", "''")}'`;

// 21:30 UTC two days ago: the run crosses midnight, and every time lies inside the lateness window around the
// staging time (now), so each row's folder is its own time's (shared/sink/record-time.ts).
const DAY_MS = 86_400_000;
const T0 = (Math.floor(Date.now() / DAY_MS) - 2) * DAY_MS + (21 * 60 + 30) * 60_000;
const PARTITIONS = 3;
const PER_PARTITION = 160;

interface Input {
  readonly lines: string;
  /** `<partition>#<offset>` → Kafka timestamp and the order's own ts. */
  readonly times: ReadonlyMap<string, { kafka: number; ts: number }>;
}

/**
 * Orders spread over about seven hours of Kafka time per partition, every 11th one late by three hours (its own,
 * earlier folder), every 13th a producer duplicate (same idempotency key and payload), every 29th invalid (a dead
 * letter). The order's `ts` runs 90 minutes behind its Kafka timestamp, so the two rules file rows differently.
 */
function input(): Input {
  const lines: string[] = [];
  const times = new Map<string, { kafka: number; ts: number }>();
  for (let offset = 0; offset < PER_PARTITION; offset++) {
    for (let partition = 0; partition < PARTITIONS; partition++) {
      const late = offset % 11 === 5;
      const kafka = T0 + offset * 160_000 + partition * 1000 - (late ? 3 * 3_600_000 : 0);
      const ts = kafka - 90 * 60_000;
      const dup = offset % 13 === 7;
      const id = dup ? `o-${partition}-${offset - 1}` : `o-${partition}-${offset}`;
      const currency = (['USD', 'EUR', 'JPY'] as const)[offset % 3]!;
      const major = (offset % 50) + 1;
      const order = {
        orderId: id,
        customerId: `c-${(offset * 7 + partition) % 9}`,
        amount:
          offset % 29 === 3 ? 'lots' : currency === 'JPY' ? `${major * 100}` : `${major}.${offset % 10}5`,
        currency,
        ts,
      };
      // A duplicate carries its original's exact payload, so it is dropped by key, not dead-lettered.
      const value = dup ? originals.get(id)! : JSON.stringify(order);
      if (!dup) originals.set(id, value);
      lines.push(
        JSON.stringify({ partition, key: id, value, headers: { 'idempotency-key': id }, timestamp: kafka }),
      );
      times.set(`${partition}#${offset}`, {
        kafka,
        ts: (JSON.parse(value) as { ts: number }).ts,
      });
    }
  }
  return { lines: `${lines.join('\n')}\n`, times };
}
const originals = new Map<string, string>();

interface LocalRun {
  readonly code: number | undefined;
  readonly report: RunReport;
  readonly exportDir: string;
  readonly pipeline: string;
  readonly bucket: string;
}

let runs = 0;

async function runLocal(env: Record<string, string>, inputFile: string): Promise<LocalRun> {
  const id = `pq-${process.pid}-${++runs}`;
  const fullEnv = { EOS_LEDGER_TABLE: `eos-${id}`, EOS_BUCKET: `eos-${id}`, EOS_PIPELINE_ID: id, ...env };
  const reportFile = join(dir, `${id}-report.json`);
  const exportDir = join(dir, `${id}-export`);
  const errors: string[] = [];
  const root = buildProgram({
    local: {
      startParts: vi.fn(async () => ({ env: {}, stop: async () => {} })),
      write: () => {},
      writeError: (t) => errors.push(t),
      progress: false,
      env: fullEnv,
    },
  });
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (t) => errors.push(t), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  process.exitCode = undefined;
  await root.parseAsync([
    'node',
    'eos',
    'local',
    '--input',
    inputFile,
    '--partitions',
    String(PARTITIONS),
    '--faults',
    'all',
    '--batch-size',
    '40',
    '--checkpoint-interval',
    '300',
    '--report',
    reportFile,
    '--export',
    exportDir,
  ]);
  const code = typeof process.exitCode === 'number' ? process.exitCode : undefined;
  process.exitCode = 0;
  expect(errors.join('')).not.toMatch(/Error/);
  const report = JSON.parse(readFileSync(reportFile, 'utf8')) as RunReport;
  return { code, report, exportDir, pipeline: id, bucket: fullEnv.EOS_BUCKET };
}

/** The manifests of an export, in order, and the local path of every final object they list. */
function exported(run: LocalRun): {
  manifests: Manifest[];
  files: { path: string; manifest: Manifest; key: string }[];
} {
  const manifests: Manifest[] = [];
  for (let id = 1; ; id++) {
    const path = join(
      run.exportDir,
      'bucket',
      run.pipeline,
      '_manifests',
      `${String(id).padStart(12, '0')}.json`,
    );
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch {
      break;
    }
    manifests.push(JSON.parse(text) as Manifest);
  }
  const files = manifests.flatMap((manifest) =>
    manifest.files.map((file) => ({
      path: join(run.exportDir, 'bucket', file.key),
      manifest,
      key: file.key,
    })),
  );
  return { manifests, files };
}

const columns = JSON.stringify(orders.columns);

describe('Parquet, hourly folders, every fault (eos local, DuckDB, eos verify)', () => {
  it('counts each input record once, aggregates equal the ledger, rows in their record time folder, verify passes', {
    timeout: 240_000,
  }, async () => {
    const { lines, times } = input();
    const inputFile = join(dir, 'orders.jsonl');
    writeFileSync(inputFile, lines);
    const run = await runLocal(
      { EOS_OUTPUT_FORMAT: 'parquet', EOS_TIME_PARTITIONING: 'hour', EOS_OUTPUT_COLUMNS: columns },
      inputFile,
    );
    expect(run.report.verdict, run.report.violations.join('; ')).toBe('exactly-once');
    expect(run.code ?? 0).toBe(0);
    expect(run.report.faults).toMatchObject({ crash: expect.any(Number) });
    // Every kind injected into a run of a file's records (poison is a generated record's fault, not a file's).
    expect(run.report.faults.poison).toBe(0);
    expect(Object.values(run.report.faults).filter((n) => n > 0).length).toBeGreaterThanOrEqual(3);

    const { manifests, files } = exported(run);
    expect(manifests.length).toBeGreaterThanOrEqual(2);
    const output = files.filter((f) => f.key.includes('/final/output/'));
    expect(output.length).toBeGreaterThan(0);
    // Only Parquet data under dt=/hour= folders; dead letters stay NDJSON.
    for (const file of output) {
      expect(file.key).toMatch(
        /\/final\/output\/dt=\d{4}-\d{2}-\d{2}\/hour=\d{2}\/orders\+\d+\+\d{20}-\d{20}\.parquet$/,
      );
      expect(parseFinalKey(run.pipeline, file.key)?.encoding).toBe('parquet');
    }
    for (const file of files.filter((f) => f.key.includes('/final/deadletter/'))) {
      expect(file.key).toMatch(/\.ndjson\.gz$/);
    }
    // At most one file per checkpoint × folder × Kafka partition × stream (no size/row limit reached here).
    const perGroup = new Map<string, number>();
    for (const { manifest, key } of files) {
      const parts = parseFinalKey(run.pipeline, key)!;
      const group = `${manifest.checkpointId}|${parts.folder}|${parts.partition}|${parts.stream}`;
      perGroup.set(group, (perGroup.get(group) ?? 0) + 1);
    }
    expect(Math.max(...perGroup.values())).toBe(1);

    const list = `[${output.map((f) => sqlText(f.path)).join(', ')}]`;
    const scan = `read_parquet(${list}, hive_partitioning = true, hive_types_autocast = false)`;
    const [counts] = await query(
      `SELECT count(*) AS rows,
                count(DISTINCT (source.topic, source.partition, source.offset)) AS lineages
         FROM ${scan}`,
    );
    expect(Number(counts!.rows)).toBe(run.report.records.committed);
    expect(Number(counts!.lineages)).toBe(run.report.records.committed);
    expect(run.report.records.committed + run.report.records.deadLettered).toBe(run.report.records.expected);

    // Every row in the folder of its record's Kafka timestamp (UTC), late records included.
    const placed = await query(`SELECT source.partition AS p, source.offset AS o, dt, hour FROM ${scan}`);
    let late = 0;
    for (const row of placed) {
      const time = times.get(`${row.p}#${row.o}`);
      expect(time, `input record ${row.p}#${row.o}`).toBeDefined();
      expect(`dt=${row.dt}/hour=${row.hour}`).toBe(timeFolder(time!.kafka, 'hour'));
      if (Number(row.o) % 11 === 5) late++;
    }
    expect(late).toBeGreaterThan(0);
    const [folders] = await query(`SELECT count(DISTINCT (dt, hour)) AS n FROM ${scan}`);
    expect(Number(folders!.n)).toBeGreaterThan(6);

    // The aggregates in SQL equal the ledger's keyed state (aggregates.json, read from DynamoDB by the run).
    const sql = await query(
      `SELECT customerId, currency, count(*) AS count, sum(amountMinor) AS totalMinor
         FROM ${scan} GROUP BY customerId, currency ORDER BY customerId, currency`,
    );
    const ledger = JSON.parse(readFileSync(join(run.exportDir, 'aggregates.json'), 'utf8')) as Record<
      string,
      string | number
    >[];
    const fromLedger = ledger
      .map((a) => ({
        customerId: a.customerId,
        currency: a.currency,
        count: Number(a.count),
        totalMinor: Number(a.totalMinor),
      }))
      .sort((a, b) => (`${a.customerId}#${a.currency}` < `${b.customerId}#${b.currency}` ? -1 : 1));
    expect(sql.map((r) => ({ ...r, count: Number(r.count), totalMinor: Number(r.totalMinor) }))).toEqual(
      fromLedger,
    );
    expect(fromLedger.length).toBeGreaterThan(5);

    // The lineage struct is exactly {topic, partition, offset} (the staged timestamp is gone).
    const described = await query(`DESCRIBE SELECT source FROM ${scan}`);
    expect(String(described[0]!.column_type)).toBe(
      'STRUCT(topic VARCHAR, "partition" INTEGER, "offset" BIGINT)',
    );

    const out: string[] = [];
    const verified = await runVerifyCommand(
      { bucket: run.bucket, pipeline: run.pipeline },
      { write: (t) => out.push(t) },
    );
    expect(out.join(''), out.join('')).toMatch(/^OK: /);
    expect(verified.exitCode).toBe(0);
    expect(verified.result.rows.output).toBe(run.report.records.committed);
  });

  it('gzip NDJSON in day folders by the transform time field: verify passes, rows in the folder of their ts', {
    timeout: 240_000,
  }, async () => {
    const { lines, times } = input();
    const inputFile = join(dir, 'orders-day.jsonl');
    writeFileSync(inputFile, lines);
    const run = await runLocal(
      {
        EOS_TIME_PARTITIONING: 'day',
        EOS_TIME_FIELD: 'ts',
        EOS_OUTPUT_COLUMNS: columns,
      },
      inputFile,
    );
    expect(run.report.verdict, run.report.violations.join('; ')).toBe('exactly-once');
    const { files } = exported(run);
    const output = files.filter((f) => f.key.includes('/final/output/'));
    for (const file of output)
      expect(file.key).toMatch(
        /\/final\/output\/dt=\d{4}-\d{2}-\d{2}\/orders\+\d+\+\d{20}-\d{20}\.ndjson\.gz$/,
      );
    const list = `[${output.map((f) => sqlText(f.path)).join(', ')}]`;
    const rows = await query(
      `SELECT source.partition AS p, source.offset AS o, source AS s, ts, dt
         FROM read_json(${list}, format = 'newline_delimited', compression = 'gzip', hive_partitioning = true, hive_types_autocast = false)`,
    );
    expect(rows.length).toBe(run.report.records.committed);
    const days = new Set<string>();
    for (const row of rows) {
      const time = times.get(`${row.p}#${row.o}`)!;
      expect(`dt=${row.dt}`).toBe(timeFolder(time.ts, 'day'));
      expect(Object.keys(row.s as object)).toEqual(['topic', 'partition', 'offset']);
      days.add(String(row.dt));
    }
    expect(days.size).toBe(2);
    const verified = await runVerifyCommand(
      { bucket: run.bucket, pipeline: run.pipeline },
      { write: () => {} },
    );
    expect(verified.exitCode).toBe(0);
  });
});
