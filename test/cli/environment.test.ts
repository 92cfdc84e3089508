/**
 * Every operator command resolves the same pipeline, table and bucket from the same environment: an empty `EOS_*`
 * variable counts as unset everywhere, so `eos verify`, `eos read` and `eos status` read one pipeline, not two.
 * Runs through `main()` against the real local parts, with a pipeline committed under the default id.
 */
import { Writable } from 'node:stream';
import { beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../cli/eos.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

interface Run {
  readonly code: number;
  readonly out: string;
  readonly err: string;
}

/** One command line with exactly this environment (the shell's AWS settings, these `EOS_*` variables). */
async function eosWith(args: readonly string[], eosEnv: Record<string, string>): Promise<Run> {
  const out: string[] = [];
  const err: string[] = [];
  const write = (text: string) => out.push(text);
  const env: NodeJS.ProcessEnv = { ...process.env, ...eosEnv };
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      out.push(chunk.toString());
      done();
    },
  });
  const code = await main(
    ['node', 'eos', ...args],
    {
      verify: { write, env, writeError: () => {} },
      status: { write, env },
      read: { out: sink, env },
      query: { write, env },
      epoch: { write, env },
      redrive: { write, env },
      replay: { write, env },
    },
    { writeError: (text) => err.push(text), writeOut: write },
  );
  return { code, out: out.join(''), err: err.join('') };
}

let res: TestResources;

/** Commits one checkpoint of `records` orders for `pipelineId` on this file's table and bucket. */
async function commitPipeline(pipelineId: string, records: number): Promise<Settings> {
  const settings = settingsIn(res, 'env', { pipelineId, idempotencyKey: 'none' });
  await createProcessor({ settings, clients: res.clients }).processEvent(
    mskEvent(orderRecords(0, 0, records)),
  );
  const result = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(result.status).toBe('committed');
  return settings;
}

beforeAll(async () => {
  res = await freshResources('cli-env');
  await commitPipeline('orders', 4);
  await commitPipeline('env-named', 3);
});

describe('the operator environment', () => {
  it('an empty EOS_PIPELINE_ID is unset for every command: verify, read and status all read the default pipeline', async () => {
    const env = { EOS_LEDGER_TABLE: res.table, EOS_BUCKET: res.bucket, EOS_PIPELINE_ID: '' };

    const status = await eosWith(['status', '--json'], env);
    expect(status.code).toBe(0);
    const ledger = (JSON.parse(status.out) as { ledger: { pipeline: string } }).ledger;
    expect(ledger.pipeline).toBe('orders');

    const verify = await eosWith(['verify', '--json'], env);
    expect(verify.err).toBe('');
    expect(verify.code).toBe(0);
    const verified = JSON.parse(verify.out) as { manifests: number; rows: { output: number } };
    expect(verified).toMatchObject({ manifests: 1, rows: { output: 4 } });

    const read = await eosWith(['read'], env);
    expect(read.code).toBe(0);
    expect(read.out.trim().split('\n')).toHaveLength(4);
  });

  it('a set EOS_PIPELINE_ID names the same pipeline for verify, read and status', async () => {
    const env = { EOS_LEDGER_TABLE: res.table, EOS_BUCKET: res.bucket, EOS_PIPELINE_ID: 'env-named' };

    const status = await eosWith(['status', '--json'], env);
    expect(status.code).toBe(0);
    expect((JSON.parse(status.out) as { ledger: { pipeline: string } }).ledger.pipeline).toBe('env-named');

    const verify = await eosWith(['verify', '--json'], env);
    expect(verify.code).toBe(0);
    expect(JSON.parse(verify.out)).toMatchObject({ manifests: 1, rows: { output: 3 } });

    const read = await eosWith(['read'], env);
    expect(read.out.trim().split('\n')).toHaveLength(3);
  });

  it('an empty EOS_LEDGER_TABLE or EOS_BUCKET is unset: the command asks for the flag (exit 2)', async () => {
    const env = { EOS_LEDGER_TABLE: '', EOS_BUCKET: '', EOS_PIPELINE_ID: '' };
    const status = await eosWith(['status'], env);
    expect(status.code).toBe(2);
    expect(status.err).toMatch(/--table is required \(or set EOS_LEDGER_TABLE\)/);
    const verify = await eosWith(['verify'], env);
    expect(verify.code).toBe(2);
    expect(verify.err).toMatch(/--bucket or --export-dir is required \(or set EOS_BUCKET\)/);
    const replay = await eosWith(['replay', '--athena-view'], env);
    expect(replay.code).toBe(2);
    expect(replay.err).toMatch(/--bucket is required \(or set EOS_BUCKET\)/);
  });
});
