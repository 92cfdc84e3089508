/**
 * `eos local --output iceberg`: a small run under every fault kind reports EXACTLY-ONCE and its table (location,
 * one snapshot per committed checkpoint, the rows icebird read back, each committed row once) in the text and the
 * JSON report, and `--export` says the table is not copied; wrong input stops before anything starts, in one line.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../cli/eos.ts';
import type { RunReport } from '../../local/runner.ts';
import { type CommittedRow, compareRows } from '../../local/table-check.ts';
import { uniqueName } from '../support/aws.ts';

/** Runs `eos local …` in this process against the suite's local parts; what it wrote and its exit code. */
async function local(args: readonly string[], env: NodeJS.ProcessEnv = process.env) {
  const out: string[] = [];
  const errors: string[] = [];
  const startParts = vi.fn(async () => ({ env: {}, stop: async () => {} }));
  const root = buildProgram({
    local: { startParts, write: (t) => out.push(t), writeError: (t) => errors.push(t), progress: false, env },
  });
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (t) => errors.push(t), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  const before = process.exitCode;
  let thrown: unknown;
  try {
    await root.parseAsync(['node', 'eos', 'local', ...args]);
  } catch (error) {
    thrown = error;
  }
  const exitCode = process.exitCode;
  process.exitCode = before;
  return {
    text: out.join(''),
    errors: errors.join(''),
    exitCode,
    thrown,
    started: startParts.mock.calls.length > 0,
  };
}

describe('eos local --output iceberg: wrong input', () => {
  it.each([
    [
      ['--output', 'iceberg', '--format', 'ndjson'],
      {},
      /^error: --output iceberg: .*Parquet, but --format is ndjson/,
    ],
    [
      ['--output', 'iceberg'],
      { EOS_OUTPUT_FORMAT: 'ndjson' },
      /^error: --output iceberg: .*Parquet, but EOS_OUTPUT_FORMAT is ndjson/,
    ],
    [
      ['--output', 'iceberg', '--guarantee', 'at-least-once'],
      {},
      /^error: --output iceberg: .*only exactly-once has \(--guarantee is at-least-once\)/,
    ],
  ])('refuses %j (env %j) in one line, starting nothing', async (args, env, message) => {
    const run = await local(args, { ...process.env, ...env });
    expect(run.errors).toMatch(message);
    expect(run.errors.trim().split('\n')).toHaveLength(1);
    expect(run.exitCode).toBe(2);
    expect(run.started).toBe(false);
  });

  it('refuses an output it does not know, naming the choices', async () => {
    const run = await local(['--output', 'tables']);
    expect(run.errors).toMatch(
      /option '--output <kind>' argument 'tables' is invalid\. Allowed choices are files, iceberg/,
    );
    expect(run.started).toBe(false);
  });
});

describe('eos local --output iceberg: a run', () => {
  it('reports EXACTLY-ONCE and the table icebird read back, in the text and the JSON report', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'eos-iceberg-'));
    const env = {
      ...process.env,
      EOS_PIPELINE_ID: uniqueName('ice-cli'),
      EOS_LEDGER_TABLE: uniqueName('ice-cli-ledger'),
      EOS_BUCKET: uniqueName('ice-cli-bucket'),
    };
    const run = await local(
      [
        ...['--records', '240', '--partitions', '2', '--seed', '5', '--faults', 'all'],
        ...['--output', 'iceberg', '--partition-by', 'hour', '--checkpoint-interval', '300'],
        ...['--report', join(dir, 'report.json'), '--export', dir],
      ],
      env,
    );
    expect(run.errors).toBe('');
    expect(run.exitCode).toBe(0);
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as RunReport;
    expect(report.verdict).toBe('exactly-once');
    const table = report.table!;
    const location = `s3://${env.EOS_BUCKET}/${env.EOS_PIPELINE_ID}/iceberg/output`;
    expect(table).toEqual({
      location,
      snapshots: table.committedUpTo,
      rows: report.records.committed,
      committedRows: report.records.committed,
      missing: 0,
      extra: 0,
      differing: 0,
      publishedUpTo: table.committedUpTo,
      committedUpTo: table.committedUpTo,
    });
    expect(table.committedUpTo).toBeGreaterThan(1);
    expect(report.records.committed).toBeGreaterThan(100);
    expect(run.text).toContain(`  iceberg table                   ${location}\n`);
    expect(run.text).toContain(
      `  iceberg snapshots               ${table.snapshots}, one per committed checkpoint; published up to checkpoint ${table.committedUpTo}\n`,
    );
    expect(run.text).toContain(
      `  iceberg rows (icebird)          ${table.rows} read back of ${table.rows} committed: each committed row once, contents equal\n`,
    );
    expect(run.text).toMatch(/verdict {2,}EXACTLY-ONCE\n/);
    expect(run.text).toContain(`the Iceberg table ${location} is not exported`);
  }, 300_000);
});

describe('the table check, on rows as icebird gives them', () => {
  const order = (offset: number, amountMinor: number, topic = 'orders') => ({
    orderId: `ord-${offset}`,
    amountMinor,
    source: { topic, partition: 0, offset },
  });
  const hour = new Map([
    ['dt', '2026-12-01'],
    ['hour', '07'],
  ]);
  // A recreated topic's second generation starts again at offset 0: one lineage, two rows.
  const orders = [order(1, 100), order(2, 200), order(1, 900)];
  const committed: CommittedRow[] = orders.map((row) => ({ row, folder: hour }));
  /** As icebird reads them: longs as bigint, the folder keys absent from the data files left undefined. */
  const read = (row: ReturnType<typeof order>, partition: Record<string, unknown> = {}) => ({
    ...row,
    amountMinor: BigInt(row.amountMinor),
    source: { ...row.source, offset: BigInt(row.source.offset) },
    dt: undefined,
    hour: undefined,
    ...partition,
  });
  const table = orders.map((row) => read(row));

  it.each([
    ['the committed rows, once each', table, { missing: 0, extra: 0, differing: 0 }],
    [
      'partition values a reader filled in from the manifests',
      orders.map((row) => read(row, { dt: '2026-12-01', hour: '07' })),
      { missing: 0, extra: 0, differing: 0 },
    ],
    ['a row twice', [...table, table[1]!], { missing: 0, extra: 1, differing: 0 }],
    ['a row left out', table.slice(1), { missing: 1, extra: 0, differing: 0 }],
    [
      'a row of other contents',
      [table[0]!, read(order(2, 201)), table[2]!],
      { missing: 0, extra: 0, differing: 1 },
    ],
    [
      'one generation row twice, the other left out',
      [table[0]!, table[1]!, table[0]!],
      { missing: 0, extra: 0, differing: 1 },
    ],
    [
      'a row in another partition',
      [read(order(1, 100), { dt: '2026-12-01', hour: '08' }), table[1]!, table[2]!],
      { missing: 0, extra: 0, differing: 1 },
    ],
  ])('%s', (_, rows, expected) => {
    expect(compareRows(rows, committed)).toEqual(expected);
  });
});
