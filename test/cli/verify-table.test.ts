/**
 * `eos verify --iceberg-table`: the pipeline's Iceberg table checked after the layout, through `main()` against DynamoDB
 * Local and the local S3 server: a published table exits 0 (by its location or as `default`), a table that
 * disagrees with the manifest log exits 1 with one line per violation, the JSON carries the audit under `table`
 * with `ok` the verdict of both checks, and a table that is no file-catalog S3 location is refused before any call.
 * The table an `eos local --output iceberg` run under every fault kind published passes as `default`, and so does
 * a table that followed a replay switch (its files and hidden rows judged by the readers' rule).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { buildProgram, main } from '../../cli/eos.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { commitCheckpoint, deliver, records, replaySetup } from '../coordinator/publish-replay-harness.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { commitNext, type PublishSetup, publishSetup } from '../support/publish.ts';
import { nameCheckpoint } from '../support/table-writes.ts';

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

async function eos(...args: string[]): Promise<Run> {
  return eosWith(process.env, ...args);
}

async function eosWith(env: NodeJS.ProcessEnv, ...args: string[]): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    ['node', 'eos', 'verify', ...args],
    { verify: { env, write: (text) => out.push(text), writeError: () => {} } },
    { writeError: (text) => err.push(text), writeOut: (text) => out.push(text) },
  );
  process.exitCode = undefined;
  return { code, out: out.join(''), err: err.join('') };
}

let res: TestResources;
let s: PublishSetup;
beforeAll(async () => {
  res = await freshResources('verify-table');
  s = publishSetup(res, 'vt');
  await commitNext(res, s);
  await commitNext(res, s);
  await publishCheckpoint(s.parts, 2);
});

const flags = () => ['--bucket', res.bucket, '--pipeline', s.settings.pipelineId];

describe('eos verify --iceberg-table', () => {
  it("exits 0 on a table that followed a replay switch: the generation's files live, the hidden rows deleted", async () => {
    const r = replaySetup(res, 'vtrp');
    await deliver(r, records(0, 20));
    await commitCheckpoint(r);
    await plan(res, r.settings, 3, 14);
    await deliver(r, records(0, 20), { generation: 1, size: 4 });
    await switchTo(res, r.settings, 1);
    await commitCheckpoint(r);
    await publishCheckpoint(r.parts, 2);
    const run = await eos(
      '--bucket',
      res.bucket,
      '--pipeline',
      r.settings.pipelineId,
      '--iceberg-table',
      r.catalog.location,
      '--json',
    );
    expect(run.code).toBe(0);
    expect(JSON.parse(run.out).table).toMatchObject({
      ok: true,
      publishedCheckpoint: 2,
      // The live file and generation 1's of each partition; 12 rows of each live file deleted by position.
      committedFiles: 4,
      liveFiles: 4,
      violations: [],
      notes: [],
    });
  }, 120_000);

  it('exits 0 on a published table, named by its location or as default, with the audit in the JSON', async () => {
    const byLocation = await eos(...flags(), '--iceberg-table', s.catalog.location, '--json');
    expect(byLocation.err).toBe('');
    expect(byLocation.code).toBe(0);
    const result = JSON.parse(byLocation.out) as Record<string, unknown>;
    expect(result).toMatchObject({ ok: true, manifests: 2, problems: [] });
    expect(result.table).toEqual({
      ok: true,
      location: s.catalog.location,
      publishedCheckpoint: 2,
      checkpoints: 2,
      snapshots: 2,
      committedFiles: 4,
      liveFiles: 4,
      violations: [],
      notes: [],
    });
    const byDefault = await eos(...flags(), '--iceberg-table', 'default', '--json');
    expect(byDefault.code).toBe(0);
    expect(JSON.parse(byDefault.out)).toEqual(result);

    const text = await eos(...flags(), '--iceberg-table', `${s.catalog.location}/`);
    expect(text.code).toBe(0);
    expect(text.out).toMatch(/^OK: 2 manifests/);
    expect(text.out).toContain(
      `TABLE OK: ${s.catalog.location}: published-checkpoint 2 of 2 committed checkpoints, 2 snapshots of the pipeline, 4 committed data files, 4 live data files under final/`,
    );
  });

  it('without --iceberg-table checks the layout alone, and its JSON has no table', async () => {
    const run = await eos(...flags(), '--json');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.out)).not.toHaveProperty('table');
  });

  it('refuses a table that is no S3 location, and --iceberg-table without a bucket, before any call', async () => {
    for (const table of [
      'glue://analytics.orders',
      'arn:aws:s3tables:us-east-1:111111111111:bucket/t',
      's3://only-a-bucket',
    ]) {
      const run = await eos(...flags(), '--iceberg-table', table);
      expect(run.code).toBe(2);
      expect(run.err).toContain('--iceberg-table takes an S3 location of a file-catalog table');
    }
    const fromDir = await eos('--export-dir', '/nonexistent', '--iceberg-table', 'default');
    expect(fromDir.code).toBe(2);
    expect(fromDir.err).toContain('--iceberg-table checks a table against the manifests in a bucket');
  });

  it('exits 1 on a table that disagrees with the manifest log, one line per violation; the layout still passes', async () => {
    const other = publishSetup(res, 'vt');
    await commitNext(res, other);
    await publishCheckpoint(other.parts, 1);
    const forged = 5_000_000_000_000_000_010n;
    await nameCheckpoint(res.clients.s3, other.catalog, other.settings.pipelineId, '7', forged);
    const args = [
      '--bucket',
      res.bucket,
      '--pipeline',
      other.settings.pipelineId,
      '--iceberg-table',
      'default',
    ];
    const text = await eos(...args);
    expect(text.code).toBe(1);
    expect(text.out).toMatch(/^OK: 1 manifests/);
    expect(text.out).toContain(`TABLE FAILED: 3 violation(s) in ${other.catalog.location}`);
    expect(text.out).toContain(
      `  - snapshot ${forged} names checkpoint 7, which has no manifest (the manifest log ends at 1)`,
    );
    const json = await eos(...args, '--json');
    expect(json.code).toBe(1);
    const result = JSON.parse(json.out) as {
      ok: boolean;
      problems: unknown[];
      table: { ok: boolean; violations: string[] };
    };
    expect(result.ok).toBe(false);
    expect(result.problems).toEqual([]);
    expect(result.table.ok).toBe(false);
    expect(result.table.violations).toHaveLength(3);
  });
});

describe('eos verify --iceberg-table default after eos local --output iceberg', () => {
  it('passes the table a run under every fault kind published, coordinator crashes around the swap included', async () => {
    const env = {
      ...process.env,
      EOS_PIPELINE_ID: uniqueName('vt-local'),
      EOS_LEDGER_TABLE: uniqueName('vt-local-ledger'),
      EOS_BUCKET: uniqueName('vt-local-bucket'),
    };
    const out: string[] = [];
    const program = buildProgram({
      local: {
        startParts: async () => ({ env: {}, stop: async () => {} }),
        write: (text) => out.push(text),
        writeError: (text) => out.push(text),
        progress: false,
        env,
      },
    });
    await program.parseAsync([
      ...['node', 'eos', 'local', '--records', '240', '--partitions', '2', '--seed', '11'],
      ...['--faults', 'all', '--output', 'iceberg', '--partition-by', 'hour', '--checkpoint-interval', '300'],
    ]);
    const localCode = process.exitCode;
    process.exitCode = undefined;
    expect(out.join('')).toMatch(/verdict {2,}EXACTLY-ONCE/);
    expect(localCode).toBe(0);
    const run = await eosWith(env, '--iceberg-table', 'default', '--json');
    const result = JSON.parse(run.out) as { ok: boolean; table: Record<string, unknown> };
    expect(result.table).toMatchObject({ ok: true, violations: [], notes: [] });
    expect(result.table.publishedCheckpoint).toBe(result.table.checkpoints);
    expect(result.table.liveFiles).toBe(result.table.committedFiles);
    expect(result.table.checkpoints).toBeGreaterThan(1);
    expect(result.table.committedFiles).toBeGreaterThan(1);
    expect(result.ok).toBe(true);
    expect(run.code).toBe(0);
  }, 300_000);
});
