/**
 * `eos status` reads what the real processor and coordinator write: batches staged by the processor, checkpoints
 * committed and aborted by the coordinator (run locally from its deployable definition), on the local parts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { formatStatus } from '../../shared/status/format.ts';
import { readLedgerStatus } from '../../shared/status/ledger-status.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('status-e2e');
});

describe('eos status on a pipeline run by the real processor and coordinator', () => {
  it('shows the committed cut, the staged offsets, the waiting files and an aborted attempt', async () => {
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('e2e'),
    });
    const clock = new ManualClock(Date.now());
    const processor = createProcessor({ settings, clients: res.clients, clock });
    let failPrepare = false;
    const coordinator = createLocalCoordinator({
      settings,
      clients: res.clients,
      clock,
      hooks: {
        beforeStep: async (step) => {
          if (failPrepare && step === 'prepare') throw new Error('prepare unavailable (injected)');
        },
      },
    });
    const status = () =>
      readLedgerStatus({
        dynamodb: res.clients.dynamodb,
        table: settings.ledgerTable,
        pipeline: settings.pipelineId,
        clock,
      });

    await processor.processEvent(mskEvent([...orderRecords(0, 0, 10), ...orderRecords(1, 0, 5)]));
    expect((await coordinator.runCheckpoint()).status).toBe('committed');
    clock.advance(60_000);
    await processor.processEvent(mskEvent(orderRecords(0, 10, 10)));
    clock.advance(120_000);

    const afterCommit = await status();
    expect(afterCommit.lastCommitted).toMatchObject({ id: 1, status: 'COMMITTED' });
    expect(Object.fromEntries(afterCommit.lastCommitted!.cut)).toEqual({ 'orders#0': 9, 'orders#1': 4 });
    expect(afterCommit.inFlight).toBeUndefined();
    expect(
      afterCommit.partitions.map((p) => [
        p.partition,
        p.stagedOffset,
        p.committedOffset,
        p.uncommittedRecords,
      ]),
    ).toEqual([
      [0, 19, 9, 10],
      [1, 4, 4, 0],
    ]);
    expect(afterCommit.oldestUncommittedStagedAgeSeconds).toBe(120);
    expect(afterCommit.lastCommitAgeSeconds).toBe(180);

    failPrepare = true;
    expect((await coordinator.runCheckpoint()).status).toBe('aborted');
    const afterAbort = await status();
    expect(afterAbort.head).toMatchObject({ committedId: 1, consecutiveAborts: 1, status: 'ABORTED' });
    expect(afterAbort.abortedSinceLastCommit).toEqual([
      expect.objectContaining({
        checkpointId: 2,
        attempt: 1,
        reason: expect.stringContaining('prepare unavailable'),
      }),
    ]);
    // Abort loses nothing (C6): the files still wait, and the next attempt of checkpoint 2 commits them.
    expect(afterAbort.partitions[0]?.uncommittedRecords).toBe(10);
    expect(formatStatus({ ledger: afterAbort })).toMatch(/consecutive aborts: 1/);

    failPrepare = false;
    expect((await coordinator.runCheckpoint()).status).toBe('committed');
    const recovered = await status();
    expect(recovered.lastCommitted).toMatchObject({ id: 2, attempt: 2 });
    expect(recovered.partitions[0]).toMatchObject({ committedOffset: 19, uncommittedRecords: 0 });
    expect(recovered.oldestUncommittedStagedAgeSeconds).toBe(0);
    expect(recovered.abortedSinceLastCommit).toEqual([]);
  });
});
