/**
 * The deployed processor handler (`functions/processor.ts`) with its observability wiring, run on the local
 * parts: each batch emits the EMF counts the dashboard and the RecordDeadLettered alarm read, and logs with the
 * batch's correlation id.
 */

import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import type { Context } from 'aws-lambda';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { ENV_NAMES } from '../../shared/config/settings.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { METRIC } from '../../shared/observability/names.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { captureJsonLines } from '../support/captured-output.ts';
import { lambdaContext } from '../support/lambda-context.ts';
import { mskEvent, order, orderRecords } from '../support/msk.ts';

type Handler = (event: unknown, context: Context) => Promise<unknown>;
let handler: Handler;
let pipeline: string;
let resources: Awaited<ReturnType<typeof freshResources>>;

beforeAll(async () => {
  resources = await freshResources('obs-proc');
  pipeline = uniqueName('obs');
  vi.stubEnv(ENV_NAMES.ledgerTable, resources.table);
  vi.stubEnv(ENV_NAMES.bucket, resources.bucket);
  vi.stubEnv(ENV_NAMES.pipelineId, pipeline);
  vi.stubEnv(ENV_NAMES.maxFenceJump, '1000');
  // The handler builds settings and clients at import, as in Lambda.
  handler = (await import('../../functions/processor.ts')).handler as unknown as Handler;
});

/** Log lines and EMF blobs (stdout), then warnings and errors (the logger writes those to stderr). */
const jsonLines = captureJsonLines();

const context = lambdaContext('processor', 'req');

describe('the processor handler', () => {
  it('emits records staged, duplicates by offset and by key, and dead-lettered records per batch', async () => {
    const firstRecords = [
      ...orderRecords(0, 0, 4),
      { partition: 0, offset: 4, value: 'not json', headers: { 'idempotency-key': 'poison-4' } },
    ];
    const first = mskEvent(firstRecords);
    await handler(first, context);
    // Redelivery of the same batch, plus a producer duplicate (a resend of offset 1: same key, value and header).
    const second = mskEvent([...firstRecords, { ...orderRecords(0, 1, 1)[0]!, offset: 5, key: 'k-1' }]);
    await handler(second, context);

    const blobs = jsonLines().filter((line) => '_aws' in line);
    expect(blobs).toHaveLength(2);
    expect(blobs[0]).toMatchObject({
      pipeline,
      [METRIC.recordsStaged]: 5,
      [METRIC.duplicatesByOffset]: 0,
      [METRIC.duplicatesByKey]: 0,
      [METRIC.deadLettered]: 1,
    });
    expect(blobs[1]).toMatchObject({
      [METRIC.recordsStaged]: 0,
      [METRIC.duplicatesByOffset]: 5,
      [METRIC.duplicatesByKey]: 1,
      [METRIC.deadLettered]: 0,
    });
    const staged = jsonLines().filter((line) => line.message === 'batch staged');
    expect(staged.map((line) => line.correlation_id)).toEqual(['orders-0@0-4', 'orders-0@0-5']);
  });

  it('is followed by the monitor handler, which reports the staged files no checkpoint covers yet', async () => {
    const monitor = (await import('../../functions/monitor.ts')).handler as unknown as Handler;
    const report = (await monitor({}, context)) as { uncommittedFiles: number; consecutiveAborts: number };
    // The first batch staged one output and one dead-letter file; the redelivery staged nothing.
    expect(report).toMatchObject({ uncommittedFiles: 2, consecutiveAborts: 0 });
    const blob = jsonLines().find((line) => '_aws' in line);
    expect(blob).toMatchObject({ pipeline, [METRIC.consecutiveAborts]: 0 });
    expect(blob?.[METRIC.oldestUncommittedStagedAge]).toEqual(expect.any(Number));
  });

  it('emits FenceJumps, IdempotencyKeyConflicts, OffsetsWentBackwards and EventsRejected as they happen, failed invocations included', async () => {
    await handler(mskEvent(orderRecords(1, 0, 10)), context);
    await handler(mskEvent(orderRecords(1, 5000, 2)), context);
    const forged = {
      partition: 2,
      offset: 0,
      value: order('forged'),
      headers: { 'idempotency-key': 'p1-o0' },
    };
    await handler(mskEvent([forged]), context);
    // Another generation's records at offsets 0..3 (a recreated topic): 0 is a remembered batch start, with
    // another record there now.
    await expect(handler(mskEvent(orderRecords(1, 0, 4, 'recreated')), context)).rejects.toThrow(
      /went backwards/,
    );
    await expect(handler({ eventSource: 'aws:kafka', records: 'none' }, context)).rejects.toThrow();

    const blobs = jsonLines().filter((line) => '_aws' in line);
    expect(blobs).toHaveLength(5);
    expect(blobs[1]).toMatchObject({ [METRIC.fenceJumps]: 1 });
    expect(blobs[2]).toMatchObject({ [METRIC.keyConflicts]: 1, [METRIC.deadLettered]: 1 });
    expect(blobs[3]).toMatchObject({ [METRIC.offsetsWentBackwards]: 1 });
    expect(blobs[4]).toMatchObject({ [METRIC.eventsRejected]: 1 });
    for (const metric of [METRIC.fenceJumps, METRIC.keyConflicts, METRIC.offsetsWentBackwards]) {
      expect(
        blobs.filter((blob) => metric in blob),
        metric,
      ).toHaveLength(1);
    }
    const lines = jsonLines();
    expect(lines.find((line) => line.message === 'fence jumped further than maxFenceJump')).toMatchObject({
      level: 'WARN',
      topic: 'orders',
      partition: 1,
      fence: 9,
      firstOffset: 5000,
    });
    expect(lines.find((line) => line.message === 'partition stopped: offsets went backwards')).toMatchObject({
      level: 'ERROR',
      partition: 1,
      fence: 5001,
      firstOffset: 0,
      lastOffset: 3,
    });
    expect(
      lines.find((line) => line.message === 'idempotency key conflict: record dead-lettered'),
    ).toMatchObject({
      idempotencyKey: 'p1-o0',
      claimant: 'orders#1#0',
    });
  });

  it('emits PartitionsStopped (not OffsetsWentBackwards) when a partition stops for a malformed fence', async () => {
    // A fence no staging transaction wrote (a staged offset that is not an offset): the partition stops, loudly.
    await DynamoDBDocumentClient.from(resources.clients.dynamodb).send(
      new PutCommand({
        TableName: resources.table,
        Item: { ...keys.fence(pipeline, 'orders', 7), stagedOffset: 1.5, updatedAt: 1 },
      }),
    );
    await expect(handler(mskEvent(orderRecords(7, 0, 2)), context)).rejects.toThrow(/staged offset/);
    const blobs = jsonLines().filter((line) => '_aws' in line);
    expect(blobs).toHaveLength(1);
    expect(blobs[0]).toMatchObject({ [METRIC.partitionsStopped]: 1 });
    expect(blobs[0]).not.toHaveProperty(METRIC.offsetsWentBackwards);
    expect(jsonLines().find((line) => line.message === 'partition stopped: structural error')).toMatchObject({
      level: 'ERROR',
    });
  });
});
