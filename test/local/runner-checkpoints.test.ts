import { describe, expect, it } from 'vitest';
import { Checkpointer, type CoordinatorCrashPlan } from '../../local/checkpoints.ts';
import { FaultLog, FaultPlanner, NO_FAULTS } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { PartitionedLog } from '../../local/kafka-log.ts';
import { MskEmulator } from '../../local/msk-emulator.ts';
import { seededRandom } from '../../local/prng.ts';
import { RunClock } from '../../local/run-clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { freshResources, uniqueName } from '../support/aws.ts';

/** A pipeline with one partition's batch staged, and a checkpointer for it. */
async function staged() {
  const { clients, table, bucket } = await freshResources('ckpt');
  const settings = parseSettings({
    pipelineId: uniqueName('ckpt'),
    ledgerTable: table,
    bucket,
    checkpointLeaseSeconds: 30,
  });
  const clock = new RunClock('virtual');
  const log = new PartitionedLog('orders', 2, clock);
  const emulator = new MskEmulator({ log, clock, maxPartitionsPerEvent: 2 });
  for (const record of generateOrders({ seed: 3, records: 40, partitions: 2 }))
    emulator.produce(record.partition, record);
  log.close();
  const processor = createProcessor({ settings, clients, clock });
  for (let d = emulator.poll(); d; d = emulator.poll()) {
    await processor.processEvent(d.event);
    emulator.commit(d);
  }
  const faults = new FaultLog();
  const checkpointer = new Checkpointer({
    settings,
    clients,
    clock,
    planner: new FaultPlanner(NO_FAULTS, seededRandom(1)),
    random: seededRandom(2),
    faults,
  });
  const verify = () => verifySink({ s3: clients.s3, bucket, prefix: finalPrefix(settings.pipelineId) });
  return { checkpointer, faults, verify };
}

describe('local runner checkpoints under coordinator crashes', () => {
  it('absorbs a one-off crash with the state machine retry and commits', async () => {
    const { checkpointer, faults, verify } = await staged();
    const crash: CoordinatorCrashPlan = { step: 'promote', when: 'after', persistent: false };
    expect((await checkpointer.run(crash)).status).toBe('committed');
    expect(faults.count('coordinator-crash')).toBe(1);
    expect((await verify()).rows.output).toBeGreaterThan(30);
  });

  it('aborts on a persistent crash before the decision; the next checkpoint commits the same data', async () => {
    const { checkpointer, faults, verify } = await staged();
    expect((await checkpointer.run({ step: 'prepare', when: 'before', persistent: true })).status).toBe(
      'aborted',
    );
    expect(faults.count('coordinator-crash')).toBeGreaterThan(1);
    expect((await verify()).files).toBe(0);
    expect((await checkpointer.final()).status).toBe('empty');
    // The attempt after the abort ran on the Standard workflow, handed off by the Express execution.
    expect(checkpointer.counts).toMatchObject({ aborted: 1, committed: 1, empty: 1, handedOff: 1 });
    const result = await verify();
    expect(result.ok).toBe(true);
    expect(result.rows.output + result.rows.deadletter).toBeGreaterThan(30);
  });

  it('rolls a checkpoint forward after a persistent crash past the decision, once its lease has run out', async () => {
    const { checkpointer, verify } = await staged();
    const first = await checkpointer.run({ step: 'commit', when: 'before', persistent: true });
    expect(first.status).toBe('incomplete');
    expect((await checkpointer.final()).status).toBe('empty');
    expect(checkpointer.counts.committed).toBe(1);
    expect(checkpointer.counts.handedOff).toBe(1);
    expect((await verify()).ok).toBe(true);
  });

  it.each([
    { kind: 'throttle', call: 3 },
    { kind: 'server-error', call: 9 },
    { kind: 'conflict', call: 1 },
  ] as const)('rides out a transient $kind in the middle of a checkpoint and commits', async (transient) => {
    const { checkpointer, faults, verify } = await staged();
    expect((await checkpointer.run('none', transient)).status).toBe('committed');
    expect(faults.count(transient.kind)).toBe(1);
    expect((await verify()).ok).toBe(true);
  });
});
