/**
 * Observability: the EMF metrics carry exactly the namespace and dimensions the alarms watch, the middlewares
 * log JSON with correlation ids and flush metrics on success and failure, and the monitor reports the ledger
 * ages from DynamoDB Local.
 */

import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import middy from '@middy/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { TransientAwsError } from '../../shared/errors.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { fieldCorrelationId, mskBatchCorrelationId } from '../../shared/observability/correlation.ts';
import { observability } from '../../shared/observability/middleware.ts';
import { runMonitor } from '../../shared/observability/monitor.ts';
import { METRIC, METRICS_NAMESPACE, metricDimensionsMap } from '../../shared/observability/names.ts';
import { createTelemetry, recordBatch, recordCheckpoint } from '../../shared/observability/telemetry.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { captureJsonLines } from '../support/captured-output.ts';
import { lambdaContext } from '../support/lambda-context.ts';

/** Every JSON line written to stdout or stderr (where Powertools writes errors) since the spies started. */
const lines = captureJsonLines();

interface EmfBlob {
  _aws: {
    CloudWatchMetrics: Array<{
      Namespace: string;
      Dimensions: string[][];
      Metrics: Array<{ Name: string; Unit: string }>;
    }>;
  };
  [key: string]: unknown;
}
const emf = () => lines().filter((line) => '_aws' in line) as unknown as EmfBlob[];
const logs = () => lines().filter((line) => !('_aws' in line));

const context = lambdaContext('eos-processor', 'req-1');

const mskEvent = {
  eventSource: 'aws:kafka',
  records: {
    'orders-1': [{ offset: 17 }, { offset: 18 }],
    'orders-0': [{ offset: 5 }, { offset: 9 }, { offset: 7 }],
  },
};

describe('metrics', () => {
  it("are EMF under the namespace and exactly the dimensions the stack's alarms name", () => {
    const { metrics } = createTelemetry({ pipeline: 'orders', component: 'processor' });
    recordBatch(metrics, {
      staged: 90,
      duplicatesByOffset: 7,
      duplicatesByKey: 2,
      deadLettered: 1,
      missingKeys: 3,
    });
    recordCheckpoint(metrics, { outcome: 'committed', durationMs: 1234 });
    metrics.publishStoredMetrics();

    const [blob] = emf();
    const directive = blob!._aws.CloudWatchMetrics[0]!;
    expect(directive.Namespace).toBe(METRICS_NAMESPACE);
    expect(directive.Dimensions).toEqual([
      expect.arrayContaining(Object.keys(metricDimensionsMap('orders'))),
    ]);
    expect(directive.Dimensions[0]).toHaveLength(Object.keys(metricDimensionsMap('orders')).length);
    expect(blob).toMatchObject({
      ...metricDimensionsMap('orders'),
      [METRIC.recordsStaged]: 90,
      [METRIC.duplicatesByOffset]: 7,
      [METRIC.duplicatesByKey]: 2,
      [METRIC.deadLettered]: 1,
      [METRIC.missingKeys]: 3,
      [METRIC.checkpointsCommitted]: 1,
      [METRIC.checkpointDuration]: 1234,
    });
    expect(directive.Metrics).toContainEqual({ Name: METRIC.checkpointDuration, Unit: 'Milliseconds' });
  });
});

describe('correlation ids', () => {
  it('name a batch by its partitions and offset ranges, the same on every retry', () => {
    expect(mskBatchCorrelationId(mskEvent)).toBe('orders-0@5-9,orders-1@17-18');
    expect(mskBatchCorrelationId(structuredClone(mskEvent))).toBe(mskBatchCorrelationId(mskEvent));
    expect(mskBatchCorrelationId({ records: {} })).toBeUndefined();
    expect(mskBatchCorrelationId('nonsense')).toBeUndefined();
  });

  it('stay bounded for events with many partitions', () => {
    const records = Object.fromEntries(
      Array.from({ length: 200 }, (_, p) => [`a-long-topic-name-${p}`, [{ offset: p }]]),
    );
    expect(mskBatchCorrelationId({ records })!.length).toBeLessThanOrEqual(256);
  });

  it('can come from a field of a coordinator step payload', () => {
    expect(fieldCorrelationId('checkpointId')({ checkpointId: 12, attempt: 1 })).toBe('checkpointId:12');
    expect(fieldCorrelationId('checkpointId')({})).toBeUndefined();
  });
});

describe('the observability middlewares', () => {
  function handlerThat(body: () => Promise<string>) {
    const telemetry = createTelemetry({ pipeline: 'orders', component: 'processor' });
    const handler = middy(async (_event: unknown) => {
      telemetry.logger.info('staging batch');
      recordBatch(telemetry.metrics, {
        staged: 3,
        duplicatesByOffset: 0,
        duplicatesByKey: 0,
        deadLettered: 0,
        missingKeys: 0,
      });
      return body();
    }).use(observability(telemetry, { correlationId: mskBatchCorrelationId }));
    return handler;
  }

  it('log JSON with the pipeline, the Lambda context and the batch correlation id, and flush metrics', async () => {
    await expect(handlerThat(async () => 'ok')(mskEvent, context)).resolves.toBe('ok');
    const [line] = logs().filter((l) => l.message === 'staging batch');
    expect(line).toMatchObject({
      level: 'INFO',
      service: 'exactly-once-pipeline',
      pipeline: 'orders',
      component: 'processor',
      correlation_id: 'orders-0@5-9,orders-1@17-18',
      function_request_id: 'req-1',
      function_name: 'eos-processor',
    });
    expect(emf().some((blob) => blob[METRIC.recordsStaged] === 3)).toBe(true);
  });

  it('log a failed invocation once, saying whether the mapping will retry it, and still flush metrics', async () => {
    const failing = handlerThat(async () => {
      throw new TransientAwsError('dynamodb:TransactWriteItems');
    });
    await expect(failing(mskEvent, context)).rejects.toBeInstanceOf(TransientAwsError);
    const failures = logs().filter((l) => l.message === 'invocation failed');
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({
      level: 'ERROR',
      transient: true,
      correlation_id: 'orders-0@5-9,orders-1@17-18',
    });
    expect(emf().some((blob) => blob[METRIC.recordsStaged] === 3)).toBe(true);

    await expect(
      handlerThat(async () => {
        throw new Error('bug');
      })(mskEvent, context),
    ).rejects.toThrow('bug');
    expect(
      logs()
        .filter((l) => l.message === 'invocation failed')
        .at(-1),
    ).toMatchObject({ transient: false });
  });

  it("do not leak one invocation's correlation id into the next", async () => {
    const handler = handlerThat(async () => 'ok');
    await handler(mskEvent, context);
    await handler({ records: { 'orders-2': [{ offset: 1 }] } }, context);
    const ids = logs()
      .filter((l) => l.message === 'staging batch')
      .map((l) => l.correlation_id);
    expect(ids).toEqual(['orders-0@5-9,orders-1@17-18', 'orders-2@1-1']);
  });
});

describe('the monitor', () => {
  let table: string;
  let dynamodb: Awaited<ReturnType<typeof freshResources>>['clients']['dynamodb'];
  beforeAll(async () => {
    const resources = await freshResources('monitor');
    table = resources.table;
    dynamodb = resources.clients.dynamodb;
  });

  it('emits the age of the oldest uncommitted staged file, the last commit age and consecutive aborts', async () => {
    const pipeline = uniqueName('mon');
    const clock = new ManualClock();
    const now = clock.now();
    const documents = DynamoDBDocumentClient.from(dynamodb);
    const put = (item: Record<string, unknown>) =>
      documents.send(new PutCommand({ TableName: table, Item: item }));
    await put({
      ...keys.fence(pipeline, 'orders', 0),
      topic: 'orders',
      partition: 0,
      stagedOffset: 19,
      updatedAt: now,
    });
    await put({
      ...keys.staged(pipeline, 'orders', 0, 9, 'output'),
      stream: 'output',
      recordCount: 10,
      stagedAt: now - 600_000,
    });
    await put({
      ...keys.staged(pipeline, 'orders', 0, 19, 'output'),
      stream: 'output',
      recordCount: 10,
      stagedAt: now - 120_000,
    });
    await put({
      ...keys.checkpoint(pipeline, 1),
      checkpointId: 1,
      attempt: 1,
      status: 'COMMITTED',
      cut: { 'orders#0': 9 },
      begunAt: now - 900_000,
      committedAt: now - 840_000,
    });
    await put({
      ...keys.checkpointHead(pipeline),
      checkpointId: 2,
      attempt: 3,
      status: 'ABORTED',
      committedId: 1,
      consecutiveAborts: 3,
      leaseUntil: 0,
      owner: 'x',
      updatedAt: now,
    });

    const telemetry = createTelemetry({ pipeline, component: 'monitor' });
    const report = await runMonitor({ dynamodb, table, pipeline, clock, telemetry });
    telemetry.metrics.publishStoredMetrics();

    expect(report).toEqual({
      oldestUncommittedStagedAgeSeconds: 120,
      lastCommitAgeSeconds: 840,
      consecutiveAborts: 3,
      uncommittedFiles: 1,
      uncommittedRecords: 10,
    });
    expect(emf()[0]).toMatchObject({
      pipeline,
      [METRIC.oldestUncommittedStagedAge]: 120,
      [METRIC.lastCommitAge]: 840,
      [METRIC.consecutiveAborts]: 3,
    });
  });

  it('with an Iceberg table, emits the committed checkpoints the table does not hold yet', async () => {
    const pipeline = uniqueName('pub');
    const clock = new ManualClock();
    const now = clock.now();
    await DynamoDBDocumentClient.from(dynamodb).send(
      new PutCommand({
        TableName: table,
        Item: {
          ...keys.checkpointHead(pipeline),
          checkpointId: 5,
          attempt: 1,
          status: 'COMMITTED',
          committedId: 5,
          consecutiveAborts: 0,
          leaseUntil: 0,
          owner: 'x',
          updatedAt: now,
        },
      }),
    );
    // Checkpoints 1 and 2 published as the publish step publishes them: each recorded, then the mark moved.
    const snapshots = new TableSnapshots(dynamodb, table, pipeline);
    for (const checkpointId of [1, 2]) {
      const snapshot = await snapshots.record(
        { checkpointId, snapshotId: BigInt(1000 + checkpointId), sequenceNumber: checkpointId },
        now,
      );
      await snapshots.advanceMark(snapshot, now);
    }

    const telemetry = createTelemetry({ pipeline, component: 'monitor' });
    const report = await runMonitor({ dynamodb, table, pipeline, clock, telemetry, publishes: true });
    telemetry.metrics.publishStoredMetrics();
    expect(report.unpublishedCheckpoints).toBe(3);
    expect(emf()[0]).toMatchObject({ pipeline, [METRIC.unpublishedCheckpoints]: 3 });

    // Without a table the count is neither read nor emitted (a custom metric is billed).
    const without = createTelemetry({ pipeline, component: 'monitor' });
    expect(
      (await runMonitor({ dynamodb, table, pipeline, clock, telemetry: without })).unpublishedCheckpoints,
    ).toBe(undefined);
    without.metrics.publishStoredMetrics();
    expect(emf()[1]).not.toHaveProperty(METRIC.unpublishedCheckpoints);
  });

  it('reports zero age for an idle pipeline, so the NoCommit alarm stays quiet', async () => {
    const telemetry = createTelemetry({ pipeline: uniqueName('idle'), component: 'monitor' });
    const report = await runMonitor({
      dynamodb,
      table,
      pipeline: uniqueName('idle'),
      clock: new ManualClock(),
      telemetry,
    });
    expect(report).toMatchObject({
      oldestUncommittedStagedAgeSeconds: 0,
      consecutiveAborts: 0,
      uncommittedFiles: 0,
    });
    expect(report.lastCommitAgeSeconds).toBeUndefined();
  });
});
