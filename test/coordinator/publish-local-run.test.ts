/**
 * The local runner with an Iceberg table: every committed checkpoint published once through the state machine's
 * Publish step, under the fault schedule (publish crashes among them: before the step, after it, and right after
 * the catalog accepted the swap, before the ledger recorded it), and the table read back by icebird holding each
 * committed row once. The crashes are also forced one at a time at the publish step.
 */
import { describe, expect, it } from 'vitest';
import { Checkpointer, type CoordinatorCrashPlan } from '../../local/checkpoints.ts';
import { FaultLog, FaultPlanner, NO_FAULTS, parseFaultSpec } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { PartitionedLog } from '../../local/kafka-log.ts';
import { MskEmulator } from '../../local/msk-emulator.ts';
import { seededRandom } from '../../local/prng.ts';
import { RunClock } from '../../local/run-clock.ts';
import { runLocal } from '../../local/runner.ts';
import { judgeTable, runTableRoot } from '../../local/table-check.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { loadTransform } from '../../shared/transforms/load.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

async function parquetSettings(res: TestResources, prefix: string): Promise<Settings> {
  const { definition } = await loadTransform('orders');
  return parseSettings({
    pipelineId: uniqueName(prefix),
    ledgerTable: res.table,
    bucket: res.bucket,
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: [...definition.columns],
    checkpointLeaseSeconds: 30,
  });
}

describe('a local run publishing to an Iceberg table', () => {
  it('stays exactly-once under every fault kind, the table holding each committed row once', async () => {
    const res = await freshResources('icerun');
    const faults = parseFaultSpec(
      'crash=0.2,redeliver=0.1,zombie=0.1,throttle=0.1,server-error=0.1,conflict=0.1,coordinator-crash=0.6,poison=0.02',
    );
    let crashes = 0;
    for (const seed of [11, 12]) {
      const settings = await parquetSettings(res, 'icerun');
      const input = generateOrders({ seed, records: 300, partitions: 3, poisonRate: 0.02 });
      const { report } = await runLocal({
        settings,
        input,
        partitions: 3,
        faults,
        seed,
        checkpointIntervalMs: 100,
        clock: 'virtual',
        batchSize: 10,
        iceberg: true,
      });
      expect(report.violations).toEqual([]);
      expect(report.verdict).toBe('exactly-once');
      crashes += report.faults['coordinator-crash'];
      expect(report.table).toMatchObject({
        snapshots: report.table?.committedUpTo,
        publishedUpTo: report.table?.committedUpTo,
        rows: report.records.committed,
      });
      expect(report.table?.committedUpTo).toBeGreaterThan(1);
    }
    expect(crashes).toBeGreaterThan(1);
  });
});

/** A pipeline with batches staged on two partitions, and a checkpointer publishing to a table. */
async function staged(res: TestResources) {
  const settings = await parquetSettings(res, 'icepub');
  const clock = new RunClock('virtual');
  const log = new PartitionedLog('orders', 2, clock);
  const emulator = new MskEmulator({ log, clock, maxPartitionsPerEvent: 2 });
  for (const record of generateOrders({ seed: 3, records: 40, partitions: 2 }))
    emulator.produce(record.partition, record);
  log.close();
  const { transform } = await loadTransform('orders');
  const processor = createProcessor({ settings, clients: res.clients, clock, transform });
  for (let d = emulator.poll(); d; d = emulator.poll()) {
    await processor.processEvent(d.event);
    emulator.commit(d);
  }
  const faults = new FaultLog();
  const checkpointer = new Checkpointer({
    settings,
    clients: res.clients,
    clock,
    planner: new FaultPlanner(NO_FAULTS, seededRandom(1)),
    random: seededRandom(2),
    faults,
    iceberg: { root: runTableRoot(settings.pipelineId) },
  });
  return { settings, checkpointer, faults };
}

describe('the publish step of a local run under a forced crash', () => {
  const cases: [string, CoordinatorCrashPlan, number][] = [
    ['once before it', { step: 'publish', when: 'before', persistent: false }, 1],
    [
      'once after the catalog swap, before the ledger record',
      { step: 'publish', when: 'swap', persistent: false },
      1,
    ],
    ['once after it, its answer lost', { step: 'publish', when: 'after', persistent: false }, 1],
    // Retried into the unknown state each time: the retry finds the checkpoint, commits nothing, crashes no more.
    ['after the swap on every attempt', { step: 'publish', when: 'swap', persistent: true }, 1],
  ];
  for (const [name, crash, crashes] of cases) {
    it(`commits and publishes the checkpoint once: crash ${name}`, async () => {
      const res = await freshResources('icepub');
      const { settings, checkpointer, faults } = await staged(res);
      const outcome = await checkpointer.run(crash);
      expect(outcome.status).toBe('committed');
      expect(faults.count('coordinator-crash')).toBe(crashes);
      const { report, violations } = await judgeTable(res.clients, settings);
      expect(violations).toEqual([]);
      expect(report).toMatchObject({ snapshots: 1, publishedUpTo: 1, committedUpTo: 1 });
      expect(report.rows).toBeGreaterThan(20);
    });
  }

  it('leaves the table behind when every publish attempt crashes before it, and the next execution, with nothing to commit, catches it up', async () => {
    const res = await freshResources('icepub');
    const { settings, checkpointer } = await staged(res);
    const outcome = await checkpointer.run({ step: 'publish', when: 'before', persistent: true });
    expect(outcome.status).toBe('committed');
    const behind = await judgeTable(res.clients, settings);
    expect(behind.violations).toEqual([
      'the Iceberg table is published up to checkpoint 0 of 1 committed',
      "the Iceberg table's snapshots name checkpoints , not 1 to 1 once each",
      expect.stringMatching(/^the Iceberg table lacks \d+ committed rows$/),
    ]);
    expect(await new FileCatalog(res.clients.s3, res.bucket, runTableRoot(settings.pipelineId)).load()).toBe(
      undefined,
    );
    const idle = await checkpointer.run('none');
    expect(idle.status).toBe('empty');
    expect(idle.invocations.map((i) => [i.step, i.failed])).toEqual([
      ['begin', false],
      ['publish', false],
    ]);
    expect((await judgeTable(res.clients, settings)).violations).toEqual([]);
    // Nothing lags any more: the run's end finds nothing to commit and nothing to publish.
    const last = await checkpointer.final();
    expect(last.status).toBe('empty');
    expect(last.invocations.map((i) => i.step)).toEqual(['begin']);
  });
});
