/**
 * Lag and redelivery observability: the monitor emits `UncommittedRecords` (the sum) with the
 * per-partition detail in its log line only; the processor handler logs, per partition of a batch that dropped
 * redelivered records, a line with topic, partition and the count (what the stack's Contributor Insights rule
 * keys on). Real processor, coordinator and handler on DynamoDB Local and the S3 server.
 */
import type { Context } from 'aws-lambda';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { ENV_NAMES, parseSettings } from '../../shared/config/settings.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { MAX_LOGGED_PARTITIONS, runMonitor } from '../../shared/observability/monitor.ts';
import { METRIC, REDELIVERY_DROPS_LOG } from '../../shared/observability/names.ts';
import { createTelemetry } from '../../shared/observability/telemetry.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { captureJsonLines } from '../support/captured-output.ts';
import { lambdaContext } from '../support/lambda-context.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fresh-lag');
});

const jsonLines = captureJsonLines();

const SECOND = 1000;

describe('the monitor', () => {
  it('emits UncommittedRecords summed over partitions, and logs each lagging partition, the longest behind first', async () => {
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('lag'),
    });
    const clock = new ManualClock(Date.now());
    const processor = createProcessor({ settings, clients: res.clients, clock });
    const core = createCoordinator({ settings, clients: res.clients, clock });
    // Partition 2 is committed and caught up; 0 and 1 wait, 1 for longer.
    await processor.processEvent(mskEvent(orderRecords(2, 0, 4)));
    const execution = uniqueName('exec');
    const begun = await core.begin({ execution });
    if (begun.action !== 'checkpoint') throw new Error('expected a checkpoint');
    const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    await core.commit(ref);
    for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
    await processor.processEvent(mskEvent(orderRecords(1, 0, 5)));
    clock.advance(30 * SECOND);
    await processor.processEvent(mskEvent([...orderRecords(0, 0, 3), ...orderRecords(1, 5, 2)]));
    clock.advance(15 * SECOND);

    const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'monitor' });
    const report = await runMonitor({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline: settings.pipelineId,
      clock,
      telemetry,
    });
    telemetry.metrics.publishStoredMetrics();

    expect(report).toMatchObject({ uncommittedRecords: 10, oldestUncommittedStagedAgeSeconds: 45 });
    const lines = jsonLines();
    const blob = lines.find((line) => '_aws' in line);
    expect(blob).toMatchObject({ pipeline: settings.pipelineId, [METRIC.uncommittedRecords]: 10 });
    // No per-partition metric: one blob, no partition dimension.
    expect(JSON.stringify((blob as { _aws: unknown })._aws)).not.toContain('partition"');
    const logged = lines.find((line) => line.message === 'ledger ages');
    expect(logged).toMatchObject({
      uncommittedRecords: 10,
      laggingPartitionsOmitted: 0,
      laggingPartitions: [
        {
          topic: 'orders',
          partition: 1,
          stagedOffset: 6,
          committedOffset: -1,
          uncommittedRecords: 7,
          behindSeconds: 45,
        },
        {
          topic: 'orders',
          partition: 0,
          stagedOffset: 2,
          committedOffset: -1,
          uncommittedRecords: 3,
          behindSeconds: 15,
        },
      ],
    });
    expect(MAX_LOGGED_PARTITIONS).toBeGreaterThan(0);
  });

  it('emits UncommittedRecords 0 for an idle pipeline', async () => {
    const pipeline = uniqueName('idle');
    const telemetry = createTelemetry({ pipeline, component: 'monitor' });
    await runMonitor({
      dynamodb: res.clients.dynamodb,
      table: res.table,
      pipeline,
      clock: new ManualClock(),
      telemetry,
    });
    telemetry.metrics.publishStoredMetrics();
    expect(jsonLines().find((line) => '_aws' in line)).toMatchObject({ [METRIC.uncommittedRecords]: 0 });
    expect(jsonLines().find((line) => line.message === 'ledger ages')).toMatchObject({
      laggingPartitions: [],
    });
  });
});

describe('the processor handler', () => {
  type Handler = (event: unknown, context: Context) => Promise<unknown>;
  let handler: Handler;
  beforeAll(async () => {
    vi.stubEnv(ENV_NAMES.ledgerTable, res.table);
    vi.stubEnv(ENV_NAMES.bucket, res.bucket);
    vi.stubEnv(ENV_NAMES.pipelineId, uniqueName('drops'));
    handler = (await import('../../functions/processor.ts')).handler as unknown as Handler;
  });

  it('logs topic, partition and the count of each partition that dropped redelivered records', async () => {
    const context = lambdaContext('processor', 'req');
    await handler(mskEvent([...orderRecords(0, 0, 4), ...orderRecords(3, 0, 2)]), context);
    expect(jsonLines().filter((line) => line.message === REDELIVERY_DROPS_LOG.message)).toEqual([]);
    // Partition 0 redelivered 3 of its 4 with one new record; partition 3 all of it again; partition 5 is new.
    await handler(
      mskEvent([...orderRecords(0, 1, 4), ...orderRecords(3, 0, 2), ...orderRecords(5, 0, 2)]),
      context,
    );
    const drops = jsonLines().filter((line) => line.message === REDELIVERY_DROPS_LOG.message);
    expect(
      drops.map(({ topic, partition, duplicatesDroppedByOffset }) => ({
        topic,
        partition,
        duplicatesDroppedByOffset,
      })),
    ).toEqual(
      expect.arrayContaining([
        { topic: 'orders', partition: 0, duplicatesDroppedByOffset: 3 },
        { topic: 'orders', partition: 3, duplicatesDroppedByOffset: 2 },
      ]),
    );
    expect(drops).toHaveLength(2);
    // The batch's correlation id rides along, as on every line of the batch.
    expect(drops[0]?.correlation_id).toEqual(expect.stringContaining('orders-0@1-4'));
  });
});
