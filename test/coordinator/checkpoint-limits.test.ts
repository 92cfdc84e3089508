/**
 * L3 for the coordinator: nothing it stores grows with the number of partitions or aborts. Against
 * DynamoDB Local and the S3 server: a checkpoint begins and commits with 20,000 partitions (topic names at Kafka's
 * 249-character maximum), every item the coordinator writes stays far under DynamoDB's 400 KB, and hundreds of
 * aborts with long reasons leave the record and head bounded while the next begin still works.
 */
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { BatchWriteCommand, DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { mapLimit } from '../../shared/concurrency.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import {
  type CheckpointHead,
  type CheckpointRecord,
  CheckpointStore,
  MAX_ABORT_REASON,
  RECENT_ABORTS,
} from '../../shared/ledger/checkpoints.ts';
import { CUT_PAGE_BUDGET_BYTES, keys } from '../../shared/ledger/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { scanPipeline } from '../support/ledger.ts';
import { range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cplim');
});

const ITEM_LIMIT = 400 * 1024;
/** "Well under": a quarter of the limit. */
const WELL_UNDER = ITEM_LIMIT / 4;

/** DynamoDB's item size rule (attribute names + values; numbers counted as their digits, an upper bound). */
function attributeSize(value: AttributeValue): number {
  if (value.S !== undefined) return Buffer.byteLength(value.S, 'utf8');
  if (value.N !== undefined) return value.N.length;
  if (value.B !== undefined) return value.B.length;
  if (value.BOOL !== undefined || value.NULL !== undefined) return 1;
  if (value.L !== undefined) return 3 + value.L.reduce((sum, v) => sum + 1 + attributeSize(v), 0);
  if (value.M !== undefined) return 3 + itemSize(value.M) + Object.keys(value.M).length;
  if (value.SS !== undefined) return value.SS.reduce((sum, s) => sum + Buffer.byteLength(s, 'utf8'), 0);
  if (value.NS !== undefined) return value.NS.reduce((sum, n) => sum + n.length, 0);
  return 0;
}

function itemSize(item: Record<string, AttributeValue>): number {
  return Object.entries(item).reduce(
    (sum, [name, value]) => sum + Buffer.byteLength(name, 'utf8') + attributeSize(value),
    0,
  );
}

/** Clients whose every PutItem (alone or in a transaction) is measured: the largest item written, by pk kind. */
function measuredClients() {
  const clients = createAwsClients(process.env);
  const largest = new Map<string, number>();
  const note = (item: Record<string, AttributeValue> | undefined) => {
    if (!item) return;
    const kind = (item.pk?.S ?? '').replace(/^[^#]*#/, '').replace(/#CUT#.*/, '#CUT');
    largest.set(kind, Math.max(largest.get(kind) ?? 0, itemSize(item)));
  };
  clients.dynamodb.middlewareStack.add(
    (next) => async (args) => {
      const input = args.input as {
        Item?: Record<string, AttributeValue>;
        TransactItems?: { Put?: { Item?: Record<string, AttributeValue> } }[];
      };
      note(input.Item);
      for (const item of input.TransactItems ?? []) note(item.Put?.Item);
      return next(args);
    },
    { step: 'build', name: 'measureItems' },
  );
  return { clients, largest };
}

/** The size of every coordinator item at rest (head, records, sweep mark, cut pages). */
async function coordinatorItemsAtRest(pipeline: string): Promise<Map<string, number>> {
  const sizes = new Map<string, number>();
  const { marshall } = await import('@aws-sdk/util-dynamodb');
  for (const item of await scanPipeline(res.clients, res.table, pipeline)) {
    const pk = String(item.pk);
    if (!pk.startsWith(`${pipeline}#CHECKPOINT`)) continue;
    sizes.set(`${pk}|${item.sk}`, itemSize(marshall(item, { convertClassInstanceToMap: true })));
  }
  return sizes;
}

function settingsFor(pipelineId: string): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId,
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
}

const ABORTS = 210;
const LONG_TOPIC = `t${'x'.repeat(248)}`;
const PARTITIONS = 20_000;

/**
 * Seeds a pipeline whose checkpoint 1 committed a cut of 20,000 partitions at offset 5 (fences at 5), written as the
 * coordinator writes it (cut pages through the store). Cheaper than committing 20,000 partitions' files, and the
 * state every later checkpoint of such a pipeline starts from.
 */
async function seedCommittedCut(settings: Settings): Promise<void> {
  const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
  const partitions = Array.from({ length: PARTITIONS }, (_, p) => p);
  const batches: number[][] = [];
  for (let i = 0; i < partitions.length; i += 25) batches.push(partitions.slice(i, i + 25));
  await mapLimit(batches, 8, async (batch) => {
    await doc.send(
      new BatchWriteCommand({
        RequestItems: {
          [settings.ledgerTable]: batch.map((partition) => ({
            PutRequest: {
              Item: {
                ...keys.fence(settings.pipelineId, LONG_TOPIC, partition),
                topic: LONG_TOPIC,
                partition,
                stagedOffset: 5,
                updatedAt: 0,
              },
            },
          })),
        },
      }),
    );
  });
  const store = new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId);
  const cutId = `000000000001#1#${uniqueName('seed')}`;
  const entries = partitions.map((p) => ({ partition: `${LONG_TOPIC}#${p}`, previous: -1, cut: 5 }));
  const cutPages = await store.writeCut(cutId, [entries], []);
  const record: CheckpointRecord = {
    pipeline: settings.pipelineId,
    checkpointId: 1,
    attempt: 1,
    status: 'COMMITTED',
    owner: 'seed',
    cutId,
    cutPages,
    partitions: PARTITIONS,
    changedPartitions: PARTITIONS,
    previousCheckpointId: 0,
    previousCutId: '',
    shardCount: 1,
    begunAt: 1,
    committedAt: 2,
  };
  const head: CheckpointHead = {
    checkpointId: 1,
    attempt: 1,
    status: 'COMMITTED',
    leaseUntil: 0,
    owner: 'seed',
    committedId: 1,
    consecutiveAborts: 0,
    updatedAt: 2,
  };
  await doc.send(
    new PutCommand({
      TableName: settings.ledgerTable,
      Item: { ...keys.checkpoint(settings.pipelineId, 1), ...record },
    }),
  );
  await doc.send(
    new PutCommand({
      TableName: settings.ledgerTable,
      Item: { ...keys.checkpointHead(settings.pipelineId), ...head },
    }),
  );
}

describe('L3: bounded checkpoint items', () => {
  it('L3: a checkpoint begins and commits with 20,000 partitions of 249-character topics; every item stays under 100 KB', async () => {
    const settings = settingsFor(uniqueName('wide'));
    await seedCommittedCut(settings);
    // Three partitions (first, middle, last) staged new data above the committed cut.
    const touched = [0, 9_999, 19_999];
    await stageFiles(
      res.clients,
      settings,
      touched.map((partition) => ({ topic: LONG_TOPIC, partition, firstOffset: 6, lastOffset: 9 })),
    );
    const { clients, largest } = measuredClients();
    const core = createCoordinator({
      settings,
      clients,
      clock: new ManualClock(Date.now()),
      partitionsPerShard: 1,
    });
    const execution = uniqueName('exec');
    const begun = await core.begin({ execution });
    expect(begun).toMatchObject({ action: 'checkpoint', checkpointId: 2, attempt: 1, shards: [0, 1, 2] });
    const ref = { execution, checkpointId: 2, attempt: 1 };
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    expect(await core.commit(ref)).toMatchObject({ checkpointId: 2, files: 3, records: 12 });
    const atRest = await coordinatorItemsAtRest(settings.pipelineId);
    for (const shard of begun.shards) await core.cleanup({ ...ref, shard });

    // The manifest carries the whole cut: all 20,000 partitions, three of them moved. (Checkpoint 1 was seeded in
    // the ledger only, so manifest 2 is read on its own.)
    const manifest = await new ManifestStore(res.clients.s3, res.bucket, settings.pipelineId).read(2);
    expect(Object.keys(manifest!.cut)).toHaveLength(PARTITIONS);
    expect(touched.map((p) => manifest!.cut[`${LONG_TOPIC}#${p}`])).toEqual([9, 9, 9]);
    expect(manifest!.cut[`${LONG_TOPIC}#1`]).toBe(5);
    expect(manifest!.files.map((f) => [f.partition, f.firstOffset, f.lastOffset])).toEqual(
      touched.map((p) => [p, 6, 9]),
    );

    // Every item the coordinator put, and every coordinator item at rest, is far under the limit.
    const largestPut = Math.max(...largest.values());
    const largestAtRest = Math.max(...atRest.values());
    expect(largest.get('CHECKPOINT#CUT')).toBeGreaterThan(CUT_PAGE_BUDGET_BYTES / 2); // pages are filled
    expect(largestPut).toBeLessThan(WELL_UNDER);
    expect(largestAtRest).toBeLessThan(WELL_UNDER);
    // The record itself does not grow with partitions: a few hundred bytes.
    const recordSize = atRest.get(`${settings.pipelineId}#CHECKPOINT|000000000002`)!;
    expect(recordSize).toBeLessThan(2_000);

    // The next execution reads the 20,000-partition committed cut back and finds nothing new.
    expect((await core.begin({ execution: uniqueName('exec') })).action).toBe('empty');
    // Cleanup deleted the superseded cut of checkpoint 1: only checkpoint 2's pages remain.
    const cutPks = new Set(
      (await scanPipeline(res.clients, res.table, settings.pipelineId))
        .map((item) => String(item.pk))
        .filter((pk) => pk.includes('#CHECKPOINT#CUT#')),
    );
    expect(cutPks.size).toBe(1);
    expect([...cutPks][0]).toContain('000000000002#1#');
  }, 600_000);

  // 210 aborts × 2,000 characters: past DynamoDB's 400 KB item limit, were the `aborts` list unbounded.
  it('L3: 210 aborts with 2,000-character reasons leave the record and head bounded, and begin still works', async () => {
    const settings = settingsFor(uniqueName('aborts'));
    await stageFiles(res.clients, settings, [{ partition: 0, firstOffset: 0, lastOffset: 2 }]);
    const core = createCoordinator({
      settings,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
      partitionsPerShard: 1,
    });
    const store = new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    const reason = 'r'.repeat(2_000);
    for (let i = 1; i <= ABORTS; i++) {
      const execution = `exec-${i}`;
      const begun = await core.begin({ execution });
      expect(begun).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: i });
      const out = await core.abort({
        execution,
        checkpointId: 1,
        attempt: i,
        error: { Error: 'StagedObjectInvalidError', Cause: `${i} ${reason}` },
      });
      expect(out.outcome).toBe('aborted');
    }
    const record = await store.readRecord(1);
    expect(record?.abortCount).toBe(ABORTS);
    expect(record?.recentAborts?.map((note) => note.attempt)).toEqual(range(ABORTS - 4, 5));
    expect(record?.recentAborts?.every((note) => note.reason.length <= MAX_ABORT_REASON)).toBe(true);
    expect(RECENT_ABORTS).toBe(5);
    const atRest = await coordinatorItemsAtRest(settings.pipelineId);
    expect(Math.max(...atRest.values())).toBeLessThan(10_000);
    // Aborted attempts' cut pages are deleted: none of them is left behind.
    expect([...atRest.keys()].filter((key) => key.includes('#CUT#'))).toEqual([]);
    // …and the pipeline goes on: the next attempt commits.
    const begun = await core.begin({ execution: 'exec-last' });
    const ref = { execution: 'exec-last', checkpointId: 1, attempt: ABORTS + 1 };
    expect(begun).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: ABORTS + 1 });
    await core.prepare({ ...ref, shard: 0 });
    await core.decide(ref);
    await core.promote({ ...ref, shard: 0 });
    expect(await core.commit(ref)).toMatchObject({ checkpointId: 1, records: 3 });
  }, 600_000);

  it('L3 upgrade: a committed record of the old shape (cut inline) is read once by the next begin, which writes pages', async () => {
    const settings = settingsFor(uniqueName('legacy'));
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    await stageFiles(res.clients, settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    await doc.send(
      new PutCommand({
        TableName: settings.ledgerTable,
        Item: {
          ...keys.checkpoint(settings.pipelineId, 1),
          pipeline: settings.pipelineId,
          checkpointId: 1,
          attempt: 1,
          status: 'COMMITTED',
          owner: 'old',
          cut: { 'orders#0': 4 },
          previousCut: {},
          previousCheckpointId: 0,
          shardCount: 1,
          begunAt: 1,
        },
      }),
    );
    const head: CheckpointHead = {
      checkpointId: 1,
      attempt: 1,
      status: 'COMMITTED',
      leaseUntil: 0,
      owner: 'old',
      committedId: 1,
      consecutiveAborts: 0,
      updatedAt: 1,
    };
    await doc.send(
      new PutCommand({
        TableName: settings.ledgerTable,
        Item: { ...keys.checkpointHead(settings.pipelineId), ...head },
      }),
    );
    const core = createCoordinator({
      settings,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
      partitionsPerShard: 1,
    });
    const ref = { execution: 'new', checkpointId: 2, attempt: 1 };
    expect(await core.begin({ execution: 'new' })).toMatchObject({ action: 'checkpoint', checkpointId: 2 });
    await core.prepare({ ...ref, shard: 0 });
    await core.decide(ref);
    await core.promote({ ...ref, shard: 0 });
    await core.commit(ref);
    await core.cleanup({ ...ref, shard: 0 });
    const manifest = await new ManifestStore(res.clients.s3, res.bucket, settings.pipelineId).read(2);
    expect(manifest).toMatchObject({ previousCut: { 'orders#0': 4 }, cut: { 'orders#0': 9 } });
    expect(manifest!.files.map((f) => [f.firstOffset, f.lastOffset])).toEqual([[5, 9]]);
  }, 120_000);
});
