/**
 * Prepare reads every covered staged object and checks what promote and the manifest rely on:
 * size, SHA-256, NDJSON that concatenates safely (gzip fully consumed, every row newline-terminated) and the row
 * count. Cleanup deletes only staged keys and catches up on a cleanup that never completed, and the
 * pages of an aborted attempt whose abort crashed are deleted by the next begin. All against DynamoDB Local and
 * the s3rver S3 server; the attacks write only what a processor may write (staged objects and entries).
 */

import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, GetCommand, PutCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { StagedObjectInvalidError } from '../../shared/coordinator/prepare/staged-check.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys, padCheckpointId } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { digestsOf } from '../../shared/sink/ndjson.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { committedOffsets, stageFiles } from '../support/staging.ts';

let res: TestResources;
let doc: DynamoDBDocumentClient;
beforeAll(async () => {
  res = await freshResources('staged-content');
  doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
});

function setup(gzip = true) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('staged-content'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
    gzip,
  });
  const clock = new ManualClock(Date.now());
  return {
    settings,
    clock,
    core: createCoordinator({ settings, clients: res.clients, clock }),
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    manifests: new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId),
  };
}

/** Stages `body` as the object of offsets first..last of orders/0, with an entry whose size and digests match it. */
async function stageRaw(
  settings: Settings,
  first: number,
  last: number,
  body: Buffer,
  recordCount: number,
): Promise<StagedFileEntry> {
  const range = {
    stream: 'output' as const,
    topic: 'orders',
    partition: 0,
    firstOffset: first,
    lastOffset: last,
  };
  const key = stagedObjectKey(settings.pipelineId, range, 'raw', settings.gzip);
  await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: body }));
  const entry: StagedFileEntry = {
    pipeline: settings.pipelineId,
    ...range,
    key,
    recordCount,
    bytes: body.length,
    ...digestsOf(body),
    gzip: settings.gzip,
    attemptId: 'raw',
    stagedAt: Date.now(),
  };
  await doc.send(
    new PutCommand({
      TableName: res.table,
      Item: { ...keys.staged(settings.pipelineId, 'orders', 0, last, 'output'), ...entry },
    }),
  );
  await doc.send(
    new PutCommand({
      TableName: res.table,
      Item: {
        ...keys.fence(settings.pipelineId, 'orders', 0),
        topic: 'orders',
        partition: 0,
        stagedOffset: last,
        updatedAt: Date.now(),
      },
    }),
  );
  return entry;
}

function rowsText(first: number, last: number): string {
  let text = '';
  for (let n = first; n <= last; n++)
    text += `${JSON.stringify({ source: { topic: 'orders', partition: 0, offset: n }, n })}\n`;
  return text;
}

async function runThrough(core: Coordinator, execution: string, cleanup = true): Promise<number> {
  const begun = await core.begin({ execution });
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  if (cleanup) for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
  return begun.checkpointId;
}

/** Prepare's outcome for the first checkpoint: the defect it names, or 'voted'. */
async function prepareOutcome(core: Coordinator): Promise<string> {
  const begun = await core.begin({ execution: 'exec-1' });
  const ref = { execution: 'exec-1', checkpointId: begun.checkpointId, attempt: begun.attempt };
  try {
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    return 'voted';
  } catch (error) {
    if (error instanceof StagedObjectInvalidError) return error.defect;
    throw error;
  }
}

async function cutPageKeys(pipeline: string, cutId: string): Promise<number> {
  const result = await doc.send(
    new QueryCommand({
      TableName: res.table,
      KeyConditionExpression: 'pk = :pk',
      ExpressionAttributeValues: { ':pk': keys.cutPagesPk(pipeline, cutId) },
    }),
  );
  return result.Items?.length ?? 0;
}

describe('prepare reads the bytes promote will concatenate', () => {
  it('refuses a gzip object with bytes after its gzip data (alone they are ignored; concatenated they would swallow the next member)', async () => {
    const s = setup(true);
    const body = Buffer.concat([gzipSync(rowsText(0, 1)), Buffer.alloc(8)]);
    await stageRaw(s.settings, 0, 1, body, 2);
    expect(await prepareOutcome(s.core)).toBe('encoding');
  });

  it('refuses an uncompressed object whose last row has no newline (concatenation would join two rows)', async () => {
    const s = setup(false);
    const body = Buffer.from(rowsText(0, 1).trimEnd(), 'utf8');
    await stageRaw(s.settings, 0, 1, body, 2);
    expect(await prepareOutcome(s.core)).toBe('encoding');
  });

  it('refuses an object whose row count differs from its entry, and one whose SHA-256 differs', async () => {
    const counted = setup(true);
    await stageRaw(counted.settings, 0, 2, gzipSync(rowsText(0, 2)), 2);
    expect(await prepareOutcome(counted.core)).toBe('count');
    const hashed = setup(true);
    const entry = await stageRaw(hashed.settings, 0, 2, gzipSync(rowsText(0, 2)), 3);
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: {
          ...keys.staged(hashed.settings.pipelineId, 'orders', 0, 2, 'output'),
          ...entry,
          sha256: '0'.repeat(64),
        },
      }),
    );
    expect(await prepareOutcome(hashed.core)).toBe('checksum');
  });

  it('votes for well-formed objects, uncompressed too, and the committed log reads them', async () => {
    const s = setup(false);
    await stageRaw(s.settings, 0, 2, Buffer.from(rowsText(0, 2), 'utf8'), 3);
    await runThrough(s.core, 'exec-1');
    expect(await committedOffsets(res.clients, s.settings)).toHaveLength(3);
  });
});

describe('cleanup leaves nothing behind for good (L3)', () => {
  it('two checkpoints in a row whose cleanup never ran are caught up by the next cleanup, and the cleaned-up mark reaches it', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    await runThrough(s.core, 'exec-1', false);
    await stageFiles(res.clients, s.settings, [{ partition: 1, firstOffset: 0, lastOffset: 4 }], 'a2');
    await runThrough(s.core, 'exec-2', false);
    await stageFiles(res.clients, s.settings, [{ partition: 2, firstOffset: 0, lastOffset: 4 }], 'a3');
    const last = await runThrough(s.core, 'exec-3');
    expect(last).toBe(3);
    const staged: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/_inprogress/`)) staged.push(o.key);
    expect(staged).toEqual([]);
    const work: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/_coordinator/`)) work.push(o.key);
    expect(work).toEqual([]);
    const records = await Promise.all([1, 2].map((id) => s.store.readRecord(id)));
    for (const record of records) expect(await cutPageKeys(pl, record!.cutId)).toBe(0);
    expect(await cutPageKeys(pl, (await s.store.readRecord(3))!.cutId)).toBeGreaterThan(0);
    expect(await s.store.readCleanedMark()).toBe(3);
    const mark = await doc.send(new GetCommand({ TableName: res.table, Key: keys.cleanedMark(pl) }));
    expect(String(mark.Item?.pk)).toBe(`${pl}#CHECKPOINT`);
  });

  it('an aborted attempt whose abort crashed before deleting its cut pages has them deleted by the next begin', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'exec-A' });
    const attempt1 = (await s.store.readRecord(1))!;
    expect(await cutPageKeys(pl, attempt1.cutId)).toBeGreaterThan(0);
    // The abort's status change happens; its page deletion "crashes": the pages are written back afterwards, as
    // if deleteCut never ran (the record then names pages that still exist, exactly the crash's state).
    const pages = await doc.send(
      new QueryCommand({
        TableName: res.table,
        KeyConditionExpression: 'pk = :pk',
        ExpressionAttributeValues: { ':pk': keys.cutPagesPk(pl, attempt1.cutId) },
      }),
    );
    await s.core.abort({
      execution: 'exec-A',
      checkpointId: begun.checkpointId,
      attempt: begun.attempt,
      error: { Error: 'Crash', Cause: 'test' },
    });
    for (const item of pages.Items ?? [])
      await doc.send(new PutCommand({ TableName: res.table, Item: item }));
    expect(await cutPageKeys(pl, attempt1.cutId)).toBeGreaterThan(0);
    expect(await s.core.begin({ execution: 'exec-B' })).toMatchObject({ checkpointId: 1, attempt: 2 });
    expect(await cutPageKeys(pl, attempt1.cutId)).toBe(0);
  });

  it('a begin that crashed between writing its cut pages and allocating leaves pages the next cleanup deletes (once older than any step can run); a named cut keeps its pages', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    // What begin does before its allocation, then it dies: the note, then the pages, never the record.
    const crashed = `${padCheckpointId(1)}#1#crashed-begin`;
    await s.store.notePendingCut(crashed, s.clock.now());
    await s.store.writeCut(crashed, [[{ partition: 'orders#0', previous: -1, cut: 4 }]], []);
    expect(await cutPageKeys(pl, crashed)).toBe(1);
    // A young note is left alone (its begin might still be running).
    await runThrough(s.core, 'exec-1');
    expect(await cutPageKeys(pl, crashed)).toBe(1);
    s.clock.advance(3_600_000);
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }], 'a2');
    expect(await runThrough(s.core, 'exec-2')).toBe(2);
    expect(await cutPageKeys(pl, crashed)).toBe(0);
    expect(await s.store.pendingCuts(Number.MAX_SAFE_INTEGER, 100)).toEqual([]);
    // The committed cut's pages (named by record 2) are untouched; the log reads everything once.
    expect(await cutPageKeys(pl, (await s.store.readRecord(2))!.cutId)).toBeGreaterThan(0);
    expect(await committedOffsets(res.clients, s.settings)).toHaveLength(10);
  });
});
