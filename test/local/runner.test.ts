import { describe, expect, it } from 'vitest';
import { BatchRetriesExhaustedError } from '../../local/errors.ts';
import { NO_FAULTS, parseFaultSpec } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { runLocal } from '../../local/runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { freshResources, uniqueName } from '../support/aws.ts';

describe('local runner', () => {
  it('runs emulator, processor and coordinator to an exactly-once result without faults', async () => {
    const { table, bucket } = await freshResources('runner');
    const settings = parseSettings({ pipelineId: uniqueName('run'), ledgerTable: table, bucket });
    const input = generateOrders({ seed: 1, records: 300, partitions: 3 });
    const { report, aggregates } = await runLocal({
      settings,
      input,
      partitions: 3,
      faults: NO_FAULTS,
      seed: 1,
      checkpointIntervalMs: 1000,
      clock: 'virtual',
      batchSize: 20,
    });
    expect(report.violations).toEqual([]);
    expect(report.verdict).toBe('exactly-once');
    expect(report.records.committed + report.records.deadLettered).toBe(report.records.expected);
    expect(report.records.duplicatesDroppedByKey).toBeGreaterThan(0);
    expect(report.checkpoints.committed).toBeGreaterThan(1);
    expect(aggregates.size).toBeGreaterThan(0);
  });

  it('stays exactly-once under every fault kind', async () => {
    const { table, bucket } = await freshResources('runner');
    const settings = parseSettings({ pipelineId: uniqueName('run'), ledgerTable: table, bucket });
    const faults = parseFaultSpec(
      'crash=0.2,redeliver=0.1,zombie=0.1,throttle=0.1,server-error=0.1,conflict=0.1,coordinator-crash=0.5,poison=0.02',
    );
    const input = generateOrders({ seed: 2, records: 300, partitions: 3, poisonRate: 0.02 });
    const { report } = await runLocal({
      settings,
      input,
      partitions: 3,
      faults,
      seed: 2,
      checkpointIntervalMs: 500,
      clock: 'virtual',
      batchSize: 20,
    });
    expect(report.violations).toEqual([]);
    // The schedule really hit the pipeline: crashes and retries happened, and redeliveries were dropped by offset.
    expect(report.faults.crash + report.faults.zombie).toBeGreaterThan(0);
    expect(report.invocations.failed).toBeGreaterThan(0);
    expect(report.records.duplicatesDroppedByOffset).toBeGreaterThan(0);
  });

  it('gives up with a clear error when a batch keeps failing for a reason nobody injected', async () => {
    const { table } = await freshResources('runner');
    const settings = parseSettings({
      pipelineId: uniqueName('run'),
      ledgerTable: table,
      bucket: uniqueName('no-such-bucket'),
    });
    const input = generateOrders({ seed: 3, records: 20, partitions: 2 });
    const run = runLocal({
      settings,
      input,
      partitions: 2,
      faults: NO_FAULTS,
      seed: 3,
      checkpointIntervalMs: 1000,
      clock: 'virtual',
      maxAttemptsPerBatch: 3,
    });
    await expect(run).rejects.toBeInstanceOf(BatchRetriesExhaustedError);
    await expect(run).rejects.toThrow(/batch of partitions \d failed 3 times: /);
  });
});
