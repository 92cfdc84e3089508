/**
 * `eos checkpoint` through `main()` (what bin/eos.mjs runs), against the real local parts: one execution of the
 * deployable state machine, its outcome on one line (or as JSON), and the exit code an operator's script tests.
 */
import { DeleteObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { formatCheckpoint, runCheckpoint } from '../../cli/checkpoint.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { planReplay, replayStatus, requestSwitch } from '../../shared/replay/replay.ts';
import { inProgressPrefix, manifestKey } from '../../shared/sink/layout.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos } from '../support/eos.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('clickpt');
});

const args = (settings: Settings) => [
  'checkpoint',
  '--table',
  settings.ledgerTable,
  '--bucket',
  settings.bucket,
  '--pipeline',
  settings.pipelineId,
];

async function stage(settings: Settings, records = orderRecords(0, 0, 6)): Promise<void> {
  await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(records));
}

async function committedRows(settings: Settings): Promise<number> {
  let rows = 0;
  for await (const _ of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    rows++;
  }
  return rows;
}

describe('eos checkpoint', () => {
  it('commits what is staged in one execution, then finds nothing to commit (both exit 0)', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings, [...orderRecords(0, 0, 6), ...orderRecords(1, 0, 4)]);
    expect(await committedRows(settings)).toBe(0);

    const first = await eos(args(settings));
    expect(first).toMatchObject({ code: 0, err: '' });
    // Two partitions, one shard: one merged final object.
    expect(first.out).toBe('checkpoint 1 committed: 10 rows in 1 file\n');
    expect(await committedRows(settings)).toBe(10);

    const again = await eos(args(settings));
    expect(again).toMatchObject({
      code: 0,
      out: 'nothing to commit: nothing staged waits for a checkpoint\n',
    });
  });

  it('prints the outcome as JSON with --json', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings);
    const run = await eos([...args(settings), '--json']);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.out)).toMatchObject({
      status: 'committed',
      checkpointId: 1,
      rows: 6,
      files: 1,
      rolledForward: false,
      switchedGenerations: [],
    });
    expect(JSON.parse((await eos([...args(settings), '--json'])).out)).toMatchObject({
      status: 'empty',
      checkpointId: 0,
    });
  });

  it('says busy and exits 1 while another execution holds a checkpoint', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings);
    await createCoordinator({ settings, clients: res.clients }).begin({ execution: 'another-execution' });
    const run = await eos(args(settings));
    expect(run.code).toBe(1);
    expect(run.out).toMatch(
      /^busy: checkpoint 1 is in flight \(BEGUN, execution another-execution, lease until \d{4}-\d\d-\d\dT[\d:.]+Z\); run again once it has ended or its lease has run out\n$/,
    );
  });

  it('rolls forward a checkpoint an earlier execution decided but did not commit, once its lease has run out', async () => {
    const settings = settingsIn(res, 'clickpt', { checkpointLeaseSeconds: 1 });
    await stage(settings);
    const crashing = createLocalCoordinator({
      settings,
      clients: res.clients,
      hooks: {
        beforeStep: (step) => {
          if (step === 'commit') throw new InjectedCrashError('commit');
        },
      },
    });
    expect((await crashing.runCheckpoint()).status).toBe('incomplete');
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const run = await eos(args(settings));
    expect(run).toMatchObject({
      code: 0,
      out: 'checkpoint 1 committed (rolled forward: an earlier execution had decided it): 6 rows in 1 file\n',
    });
    expect(await committedRows(settings)).toBe(6);
  });

  it('says why a checkpoint aborted and exits 1; the staged data waits for the next one', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings);
    const listed = await res.clients.s3.send(
      new ListObjectsV2Command({ Bucket: settings.bucket, Prefix: inProgressPrefix(settings.pipelineId) }),
    );
    const staged = listed.Contents?.[0]?.Key;
    expect(staged).toBeDefined();
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: settings.bucket, Key: staged }));
    const run = await eos(args(settings));
    expect(run.code).toBe(1);
    expect(run.out).toMatch(/^checkpoint 1 aborted: .+; the staged data waits for the next checkpoint\n$/);
    expect(run.out).toContain(staged);
  });

  it('says when a checkpoint is decided but not committed, and that the next execution after the lease rolls it forward', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings);
    // Another manifest where checkpoint 1's must go: the commit step fails on every retry.
    await res.clients.s3.send(
      new PutObjectCommand({
        Bucket: settings.bucket,
        Key: manifestKey(settings.pipelineId, 1),
        Body: '{"not": "this checkpoint\'s manifest"}',
      }),
    );
    const run = await eos(args(settings));
    expect(run.code).toBe(1);
    expect(run.out).toMatch(
      /^checkpoint 1 is decided but not committed \(ManifestConflictError: .+\): run eos checkpoint again once its lease has run out \(600 s, EOS_CHECKPOINT_LEASE_SECONDS\): it rolls the checkpoint forward\n$/,
    );
  });

  it('names the generation a checkpoint switched readers to', async () => {
    const settings = settingsIn(res, 'clickpt');
    const records = orderRecords(0, 0, 6);
    await stage(settings, records);
    expect((await eos(args(settings))).code).toBe(0);
    const target = { clients: res.clients, table: settings.ledgerTable, pipeline: settings.pipelineId };
    const { plan } = await planReplay({
      ...target,
      topic: 'orders',
      fromOffset: 2,
      toOffset: 4,
      clock: systemClock,
    });
    await requestSwitch(target, plan.generation, systemClock);
    await stage({ ...settings, replayGeneration: plan.generation }, records);
    const run = await eos(args(settings));
    expect(run).toMatchObject({
      code: 0,
      out: expect.stringMatching(
        /^checkpoint 2 committed: 3 rows in 1 file; readers switched to generation 1\n$/,
      ),
    });
    expect((await replayStatus(target))[0]).toMatchObject({ phase: 'switched' });
  });

  it('refuses a missing table or bucket (exit 2) and names a table that does not exist (exit 3)', async () => {
    expect(await eos(['checkpoint', '--bucket', res.bucket])).toMatchObject({
      code: 2,
      err: 'error: --table is required (or set EOS_LEDGER_TABLE)\n',
    });
    expect(await eos(['checkpoint', '--table', res.table])).toMatchObject({
      code: 2,
      err: 'error: --bucket is required (or set EOS_BUCKET)\n',
    });
    const missing = await eos(['checkpoint', '--table', 'no-such-table', '--bucket', res.bucket]);
    expect(missing.code).toBe(3);
    expect(missing.err).toMatch(
      /^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: .*no-such-table|^error: (?:(?:DynamoDB|S3)(?: at \S+)?: )?not found: /,
    );
    expect(missing.err.split('\n')).toHaveLength(2);
  });

  it('reports progress on stderr while a checkpoint runs longer than the interval', async () => {
    const settings = settingsIn(res, 'clickpt');
    await stage(settings);
    const out: string[] = [];
    const err: string[] = [];
    const outcome = await runCheckpoint(
      { table: settings.ledgerTable, bucket: settings.bucket, pipeline: settings.pipelineId, json: false },
      { write: (text) => out.push(text), writeError: (text) => err.push(text), progressEveryMs: 1 },
    );
    expect(outcome.status).toBe('committed');
    expect(err.join('')).toMatch(
      /^progress: (begin|prepare|decide|promote|commit|cleanup) \(\d+ steps? run, [\d.]+ s\)$/m,
    );
    expect(out.join('')).toBe('checkpoint 1 committed: 6 rows in 1 file\n');
  });

  it('says what failed when an execution fails outright', () => {
    const report = {
      status: 'failed' as const,
      checkpointId: 4,
      execution: 'x',
      rolledForward: false,
      switchedGenerations: [],
      reason:
        'CheckpointAbortFailed: the abort step failed; the next execution recovers the checkpoint once its lease expires',
      stepError: 'Error: boom',
      durationMs: 1,
    };
    expect(formatCheckpoint(report, 600)).toBe(
      'checkpoint 4 failed: CheckpointAbortFailed: the abort step failed; the next execution recovers the checkpoint once its lease expires (Error: boom)\n',
    );
  });
});
