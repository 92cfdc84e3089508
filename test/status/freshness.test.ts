/**
 * Freshness in `eos status`: per partition, how far committed output lags staging and when its last
 * committed data was staged; pipeline-wide, "committed output is at most N s behind staging". Real processor and
 * coordinator on DynamoDB Local and the S3 server, one manual clock for all.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { runStatus } from '../../cli/status.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { createProcessor, type Processor } from '../../shared/processor/processor.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fresh-status');
});

const SECOND = 1000;

async function checkpoint(core: Coordinator): Promise<void> {
  const execution = uniqueName('exec');
  const begun = await core.begin({ execution });
  if (begun.action !== 'checkpoint') throw new Error(`nothing to checkpoint: ${begun.action}`);
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
}

describe('freshness in eos status', () => {
  let settings: Settings;
  let clock: ManualClock;
  let processor: Processor;
  let core: Coordinator;
  let t0: number;
  beforeAll(async () => {
    settings = parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId: uniqueName('fs') });
    clock = new ManualClock(Date.UTC(2026, 11, 1, 12, 0, 0));
    processor = createProcessor({ settings, clients: res.clients, clock });
    core = createCoordinator({ settings, clients: res.clients, clock });
    t0 = clock.now();
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 3), ...orderRecords(1, 0, 2)]));
    clock.advance(10 * SECOND);
    await checkpoint(core); // #1 commits both partitions and cleans their entries up
    clock.advance(10 * SECOND);
    await processor.processEvent(mskEvent(orderRecords(0, 3, 3))); // staged at t0 + 20 s, not committed
    clock.advance(60 * SECOND);
  });

  const read = () =>
    readLedgerStatus({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock,
    });

  it('tells per partition how far committed output lags staging, and when its last committed data was staged', async () => {
    const status = await read();
    expect(status.partitions).toMatchObject([
      {
        partition: 0,
        stagedOffset: 5,
        committedOffset: 2,
        uncommittedRecords: 3,
        lastStagedAt: t0 + 20 * SECOND,
        freshness: {
          committedBehindStagingSeconds: 60,
          // Checkpoint 1's entries are cleaned up: the ledger knows only that they were staged no later.
          lastCommittedStaged: { at: t0 + 20 * SECOND, bound: 'at-or-before' },
        },
      },
      {
        partition: 1,
        stagedOffset: 1,
        committedOffset: 1,
        uncommittedRecords: 0,
        lastStagedAt: t0,
        // Nothing waits: the fence's last staging is committed data.
        freshness: { committedBehindStagingSeconds: 0, lastCommittedStaged: { at: t0, bound: 'exact' } },
      },
    ]);
    expect(status.freshness).toEqual({
      committedBehindStagingSeconds: 60,
      worstPartition: { topic: 'orders', partition: 0 },
    });
  });

  it('prints them, and the same in --json', async () => {
    let text = '';
    await runStatus(
      { table: res.table, pipeline: settings.pipelineId, history: 5, json: false },
      { dynamodb: res.clients.dynamodb, clock, write: (chunk) => (text += chunk) },
    );
    expect(text).toMatch(
      /orders\s+0\s+5\s+2\s+1\/0\s+3\s+1m 0s\s+at or before 2026-12-01T12:00:20\.000Z \(1m 0s ago\)\n/,
    );
    expect(text).toMatch(/orders\s+1\s+1\s+1\s+0\/0\s+0\s+-\s+2026-12-01T12:00:00\.000Z \(1m 20s ago\)\n/);
    expect(text).toContain(
      'Freshness: committed output is at most 1m 0s (60 s) behind staging (worst: orders partition 0)',
    );

    let json = '';
    await runStatus(
      { table: res.table, pipeline: settings.pipelineId, history: 5, json: true },
      { dynamodb: res.clients.dynamodb, clock, write: (chunk) => (json += chunk) },
    );
    const parsed = JSON.parse(json) as {
      ledger: { freshness: unknown; partitions: Array<{ partition: number; freshness: unknown }> };
    };
    expect(parsed.ledger.freshness).toEqual({
      committedBehindStagingSeconds: 60,
      worstPartition: { topic: 'orders', partition: 0 },
    });
    expect(parsed.ledger.partitions.map((p) => p.freshness)).toEqual([
      {
        committedBehindStagingSeconds: 60,
        lastCommittedStaged: { at: t0 + 20 * SECOND, bound: 'at-or-before' },
      },
      { committedBehindStagingSeconds: 0, lastCommittedStaged: { at: t0, bound: 'exact' } },
    ]);
  });

  it('once the waiting data commits, committed output holds everything staged', async () => {
    clock.advance(5 * SECOND);
    await checkpoint(core);
    const status = await read();
    expect(status.partitions.map((p) => p.freshness)).toEqual([
      { committedBehindStagingSeconds: 0, lastCommittedStaged: { at: t0 + 20 * SECOND, bound: 'exact' } },
      { committedBehindStagingSeconds: 0, lastCommittedStaged: { at: t0, bound: 'exact' } },
    ]);
    expect(status.freshness).toEqual({ committedBehindStagingSeconds: 0 });
    let text = '';
    await runStatus(
      { table: res.table, pipeline: settings.pipelineId, history: 5, json: false },
      { dynamodb: res.clients.dynamodb, clock, write: (chunk) => (text += chunk) },
    );
    expect(text).toContain('Freshness: committed output holds everything staged');
  });

  it('says nothing is staged yet for an untouched pipeline, and nothing committed for a waiting partition', async () => {
    const fresh = new ManualClock(t0);
    const pipelineId = uniqueName('fs-new');
    let text = '';
    await runStatus(
      { table: res.table, pipeline: pipelineId, history: 5, json: false },
      { dynamodb: res.clients.dynamodb, clock: fresh, write: (chunk) => (text += chunk) },
    );
    expect(text).toContain('Freshness: nothing staged yet');

    const newSettings = parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId });
    await createProcessor({ settings: newSettings, clients: res.clients, clock: fresh }).processEvent(
      mskEvent(orderRecords(0, 0, 2)),
    );
    fresh.advance(90 * SECOND);
    const status = await readLedgerStatus({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: pipelineId,
      clock: fresh,
    });
    // Waiting, but nothing committed before it: no claim about committed data.
    expect(status.partitions[0]?.freshness).toEqual({ committedBehindStagingSeconds: 90 });
    text = '';
    await runStatus(
      { table: res.table, pipeline: pipelineId, history: 5, json: false },
      { dynamodb: res.clients.dynamodb, clock: fresh, write: (chunk) => (text += chunk) },
    );
    expect(text).toMatch(/orders\s+0\s+1\s+-1\s+1\/0\s+2\s+1m 30s\s+nothing committed\n/);
    expect(text).toContain('at most 1m 30s (90 s) behind staging');
  });
});
