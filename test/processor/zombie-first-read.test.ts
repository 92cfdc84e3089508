/**
 * A slow invocation whose first read of the fence comes after other invocations moved it (L2, P2, P4): a zombie that
 * stalled before reading anything must never stop the partition, and a batch below the last staged batch start is
 * never acknowledged without a fingerprint proving it a redelivery: it fails with a retryable error and writes
 * nothing. A real backwards batch (the fence ahead at the first read, unchanged since before the invocation began)
 * still stops the partition. Real DynamoDB Local and S3 server; the `eos epoch` command runs against the same ledger.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { isTransient } from '../../shared/aws/classify.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { OffsetsWentBackwardsError, UnprovenRedeliveryError } from '../../shared/errors.ts';
import { METRIC } from '../../shared/observability/names.ts';
import { processorObserver } from '../../shared/observability/processor-metrics.ts';
import { createTelemetry } from '../../shared/observability/telemetry.ts';
import {
  createProcessor,
  type PartitionStoppedError,
  type ProcessorDeps,
} from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { fenceOf, heldTransform, stageBatches, startNewEpoch } from '../support/cold-container.ts';
import { gate } from '../support/hooks.ts';
import { ledgerView } from '../support/ledger.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('zfr');
});

afterEach(() => {
  // `eos epoch` sets the exit code of a refused switch; the test runner must not inherit it.
  process.exitCode = undefined;
});

/** A processor instance (a container of its own) whose observer feeds the real processor metrics. */
function instance(settings: Settings, clock: ManualClock, extra: Partial<ProcessorDeps> = {}) {
  const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'processor' });
  const metrics = vi.spyOn(telemetry.metrics, 'addMetric');
  vi.spyOn(telemetry.logger, 'error').mockImplementation(() => undefined);
  const stopped: PartitionStoppedError[] = [];
  const observer = processorObserver(telemetry);
  const processor = createProcessor({
    settings,
    clients: res.clients,
    clock,
    observer: {
      ...observer,
      partitionStopped: (error) => {
        stopped.push(error);
        observer.partitionStopped?.(error);
      },
    },
    ...extra,
  });
  const emitted = () => metrics.mock.calls.map(([name]) => name);
  return { processor, stopped, emitted };
}

describe('a zombie whose first fence read comes after the partition moved on', () => {
  it('fails with a retryable error and acknowledges nothing: no stop record, no OffsetsWentBackwards, and eos epoch --start-new cannot open an epoch while a staged batch is being acknowledged', async () => {
    const settings = settingsIn(res, 'zfr');
    const clock = new ManualClock();
    const held = heldTransform();
    // Z: a cold container given batch 0..9, stalled in the transform's prepare before it reads the fence.
    const z = instance(settings, clock, { transform: held.transform });
    const zRun = z.processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await held.reached;
    // The mapping's retry stages 0..9 elsewhere, then nine more batches up to 89; the batch 90..99 is staged by an
    // invocation that has not returned yet (its acknowledgement is in flight).
    await stageBatches(res, settings, clock, 0, 80);
    const acknowledging = gate();
    const staged = gate();
    clock.advance(1_000);
    const last = createProcessor({
      settings,
      clients: res.clients,
      clock,
      hooks: {
        async onStep(step) {
          if (step !== 'before-return') return;
          staged.open();
          await acknowledging.opened;
        },
      },
    }).processEvent(mskEvent(orderRecords(0, 90, 10)));
    await staged.opened;
    const before = await ledgerView(res.clients, res.table, settings.pipelineId);
    expect(before.fences).toEqual({ 'orders#0': 99 });

    clock.advance(1_000);
    held.release();
    // Z's batch lies below every remembered batch start and nothing proves it a redelivery: Z fails, retryably,
    // and the mapping discards a zombie's answer anyway (its batch was retried and acknowledged).
    const failure = await zRun.then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failure).toBeInstanceOf(UnprovenRedeliveryError);
    expect(isTransient(failure)).toBe(true);
    expect(z.stopped).toEqual([]);
    expect(z.emitted()).not.toContain(METRIC.offsetsWentBackwards);
    expect(z.emitted()).toContain(METRIC.unprovenRedeliveries);
    expect((await fenceOf(res, settings)).stop).toBeUndefined();
    expect(await ledgerView(res.clients, res.table, settings.pipelineId)).toEqual(before);

    // Nothing stopped the partition, so the operator's command refuses to open a new epoch on it.
    const epoch = await startNewEpoch(res, settings);
    expect(epoch.switched?.[0]?.outcome).toEqual({ kind: 'not-stopped', epoch: 0, stagedOffset: 99 });
    expect((await fenceOf(res, settings)).closed).toBeUndefined();
    acknowledging.open();
    await last;
    // The partition goes on in epoch 0.
    clock.advance(1_000);
    const next = await createProcessor({ settings, clients: res.clients, clock }).processEvent(
      mskEvent(orderRecords(0, 100, 10)),
    );
    expect(next.partitions[0]).toMatchObject({ stagedOffset: 109, stagedRows: 10 });
  });

  it('a batch of another generation against a fence that did not move during the invocation still stops the partition', async () => {
    const settings = settingsIn(res, 'zfr');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 90);
    clock.advance(1_000);
    // The topic was recreated: offsets 0..9 hold other records. The invocation stalls too, but nothing stages meanwhile.
    const held = heldTransform();
    const z = instance(settings, clock, { transform: held.transform });
    const zRun = z.processor.processEvent(mskEvent(orderRecords(0, 0, 10, 'gen2')));
    await held.reached;
    clock.advance(1_000);
    held.release();
    await expect(zRun).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    expect(z.stopped).toHaveLength(1);
    expect(z.emitted()).toContain(METRIC.offsetsWentBackwards);
    expect((await fenceOf(res, settings)).stop).toMatchObject({ fence: 99, firstOffset: 0, lastOffset: 9 });
    // The mapping retries the batch: a second invocation confirms the stop, and the operator's switch opens.
    clock.advance(1_000);
    await expect(
      createProcessor({ settings, clients: res.clients, clock }).processEvent(
        mskEvent(orderRecords(0, 0, 10, 'gen2')),
      ),
    ).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    const epoch = await startNewEpoch(res, settings);
    expect(epoch.switched?.[0]?.outcome).toEqual({ kind: 'opened', epoch: 1, closedFence: 99 });
  });

  it('a batch below the last staged batch start, against a fence that moved before the invocation began, still stops the partition', async () => {
    const settings = settingsIn(res, 'zfr');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 90);
    clock.advance(1_000);
    // A consumer group reset deeper than the remembered batch starts, to a container that never saw the partition.
    const z = instance(settings, clock);
    await expect(z.processor.processEvent(mskEvent(orderRecords(0, 5, 3)))).rejects.toBeInstanceOf(
      OffsetsWentBackwardsError,
    );
    expect(z.stopped).toHaveLength(1);
    expect((await fenceOf(res, settings)).stop).toMatchObject({ fence: 99, firstOffset: 5 });
  });
});
