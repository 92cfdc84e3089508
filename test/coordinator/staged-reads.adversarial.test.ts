/**
 * Adversarial interleavings of prepare's reads of every staged object, the cleaned-up mark and its catch-up, and
 * cleanup's own-key check. Against DynamoDB Local and s3rver; the attacks write only what a processor may write
 * (staged objects under its prefix, ledger items of its pipeline).
 */

import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DeleteCommand, DynamoDBDocumentClient, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { digestsOf } from '../../shared/sink/ndjson.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';

let res: TestResources;
let doc: DynamoDBDocumentClient;
beforeAll(async () => {
  res = await freshResources('staged-reads');
  doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
});

function setup(gzip = true) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('staged-reads'),
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
  };
}

/** Stages `body` as the object of offsets first..last of orders/0 with a matching entry, and moves the fence. */
async function stageRaw(
  settings: Settings,
  first: number,
  last: number,
  body: Buffer,
  recordCount: number,
  moveFence = true,
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
  if (moveFence) {
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
  }
  return entry;
}

function rowsText(first: number, last: number): string {
  let text = '';
  for (let n = first; n <= last; n++)
    text += `${JSON.stringify({ source: { topic: 'orders', partition: 0, offset: n }, n })}\n`;
  return text;
}

async function runThrough(core: Coordinator, execution: string, cleanup = true) {
  const begun = await core.begin({ execution });
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  if (cleanup) for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
  return { ...ref, shards: begun.shards };
}

async function countCommitted(settings: Settings): Promise<number> {
  let rows = 0;
  for await (const _ of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    rows++;
  return rows;
}

describe('prepare reads the objects, promote reads them again', () => {
  // Guard: prepare reads and verifies each covered object once and writes the candidates under the coordinator's
  // prefix; promote copies only those, so the processor's rewrite of its staged key after the vote changes nothing.
  it('a staged object the processor overwrites after the vote does not stall the decided checkpoint', async () => {
    const { settings, clock, core } = setup();
    const good = gzipSync(Buffer.from(rowsText(0, 2)));
    const entry = await stageRaw(settings, 0, 2, good, 3);
    const begun = await core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref); // COMMITTING: from here it may only roll forward (C4)
    // The processor's IAM allows PutObject on its staged prefix: it rewrites the covered object.
    await res.clients.s3.send(
      new PutObjectCommand({
        Bucket: settings.bucket,
        Key: entry.key,
        Body: gzipSync(Buffer.from('{"x":1}\n')),
      }),
    );
    // Abort is refused (decided), so the only way out is forward: every retry and every roll-forward must finish.
    expect((await core.abort({ ...ref, error: { Error: 'x', Cause: 'x' } } as never)).outcome).toBe(
      'decided',
    );
    clock.advance(601_000);
    const rolled = await core.begin({ execution: 'e2' });
    expect(rolled.action).toBe('commit');
    const ref2 = { execution: 'e2', checkpointId: rolled.checkpointId, attempt: rolled.attempt };
    for (const shard of rolled.shards) await core.promote({ ...ref2, shard });
    await core.commit(ref2);
    expect(await countCommitted(settings)).toBe(3);
  });

  it('two staged objects that each pass prepare concatenate into a final object the reader can read', async () => {
    const { settings, core } = setup();
    // ~303 MB of NDJSON per object (under V8's ~512 MiB string limit each, over it together), ~0.3 MB gzipped.
    const row = `{"p":"${'x'.repeat(1000)}"}\n`;
    const rows = 300_000;
    const body = gzipSync(Buffer.alloc(row.length * rows, row), { level: 1 });
    await stageRaw(settings, 0, 0, body, rows);
    await stageRaw(settings, 1, 1, body, rows);
    const done = await runThrough(core, 'e1'); // prepare passes: each object is fine alone
    expect(done.checkpointId).toBe(1);
    // The manifest lists one final object of 2 members (32 MiB compressed limit, 2000 members): the reader
    // gunzips it whole and converts it to one string, which V8 refuses (ERR_STRING_TOO_LONG) — on every read.
    expect(await countCommitted(settings)).toBe(2 * rows);
  }, 240_000);
});

describe('cleanup and its catch-up', () => {
  it('an entry without a string key below the cut only loses its ledger item; cleanup and the mark go on', async () => {
    const { settings, core, store } = setup();
    await stageRaw(settings, 0, 2, gzipSync(Buffer.from(rowsText(0, 2))), 3);
    await runThrough(core, 'e1');
    expect(await store.readCleanedMark()).toBe(1);
    // A compromised processor writes a ledger item at offset 1 (at or below the committed cut) whose key is a number.
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: {
          ...keys.staged(settings.pipelineId, 'orders', 0, 1, 'output'),
          pipeline: settings.pipelineId,
          stream: 'output',
          topic: 'orders',
          partition: 0,
          firstOffset: 1,
          lastOffset: 1,
          key: 42,
          recordCount: 0,
          bytes: 0,
          sha256: '',
          md5: '',
          gzip: true,
          attemptId: 'x',
          stagedAt: Date.now(),
        },
      }),
    );
    await stageRaw(settings, 3, 4, gzipSync(Buffer.from(rowsText(3, 4))), 2);
    const second = await runThrough(core, 'e2', false);
    // Cleanup of checkpoint 2 walks orders/0 from -1 to its cut and meets the item: TypeError (key.startsWith).
    for (const shard of second.shards) await core.cleanup({ ...second, shard });
    expect(await store.readCleanedMark()).toBe(2);
  });

  it('one poisoned cleanup does not stop every later cleanup (orphan sweep, superseded cut pages)', async () => {
    const { settings, core, store } = setup();
    await stageRaw(settings, 0, 2, gzipSync(Buffer.from(rowsText(0, 2))), 3);
    await runThrough(core, 'e1');
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: {
          ...keys.staged(settings.pipelineId, 'orders', 0, 1, 'output'),
          pipeline: settings.pipelineId,
          stream: 'output',
          topic: 'orders',
          partition: 0,
          firstOffset: 1,
          lastOffset: 1,
          recordCount: 0,
          gzip: true,
        },
      }),
    );
    await stageRaw(settings, 3, 4, gzipSync(Buffer.from(rowsText(3, 4))), 2);
    const second = await runThrough(core, 'e2', false);
    await Promise.allSettled(second.shards.map((shard) => core.cleanup({ ...second, shard })));
    // The hostile item is gone now (say an operator removed it) only if cleanup removed it; it did not. Later
    // checkpoints: each cleanup's shard 0 first catches up on checkpoint 2 and fails there, before its own work.
    for (let n = 0; n < 3; n++) {
      const first = 5 + n * 2;
      await stageRaw(settings, first, first + 1, gzipSync(Buffer.from(rowsText(first, first + 1))), 2);
      const later = await runThrough(core, `e${3 + n}`, false);
      for (const shard of later.shards) await core.cleanup({ ...later, shard });
    }
    expect(await store.readCleanedMark()).toBeGreaterThanOrEqual(4);
  });
});

describe("the checks trust an entry item's attributes, not where the item lies", () => {
  /** Copies `entry` (attributes unchanged) into a ledger item at sort position `at` — a processor-writable item. */
  async function misplace(settings: Settings, entry: StagedFileEntry, at: number): Promise<void> {
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: { ...keys.staged(settings.pipelineId, 'orders', 0, at, 'output'), ...entry },
      }),
    );
  }

  it('an item at offset 1 naming entry 3..10 does not make cleanup delete the uncommitted entry and object', async () => {
    const { settings, core } = setup();
    await stageRaw(settings, 0, 2, gzipSync(Buffer.from(rowsText(0, 2))), 3);
    const first = await runThrough(core, 'e1', false); // committed, cut 2; cleanup not yet run
    const honest = await stageRaw(settings, 3, 10, gzipSync(Buffer.from(rowsText(3, 10))), 8); // above the cut
    await misplace(settings, honest, 1);
    // Cleanup walks sort keys -1..2, meets the item at 1: its attributes name 3..10 and key K consistently, so
    // assertStagedEntry passes; it deletes K, and deleteEntries recomputes the item key from lastOffset=10 — the
    // honest entry, whose key condition (key = K) holds.
    for (const shard of first.shards) await core.cleanup({ ...first, shard });
    await runThrough(core, 'e2');
    expect(await countCommitted(settings)).toBe(11); // offsets 3..10 are lost: 3
  });

  it('an item inside the cut naming an entry above it is not promoted early (then again: duplicates)', async () => {
    const { settings, core } = setup();
    await stageRaw(settings, 0, 2, gzipSync(Buffer.from(rowsText(0, 2))), 3);
    const begun = await core.begin({ execution: 'e1' }); // cut 2
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    const honest = await stageRaw(settings, 3, 5, gzipSync(Buffer.from(rowsText(3, 5))), 3); // fence 5, above the cut
    await misplace(settings, honest, 1); // covered by checkpoint 1's query (sort key 1 ≤ cut 2)
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    await core.commit(ref);
    // Checkpoint 2 (cut 5, previous 2) covers the honest entry 3..5 again: first offset 3 > previous cut 2.
    await runThrough(core, 'e2', false);
    const offsets: number[] = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    }))
      offsets.push((row as { n: number }).n);
    expect(offsets).toEqual([0, 1, 2, 3, 4, 5]);
  });
});

describe('the cleaned-up mark on a pipeline from before it', () => {
  it('checkpoints cleaned up before the mark existed are not reported as cleanups that never completed', async () => {
    const { settings, core } = setup();
    for (let n = 0; n < 3; n++) {
      await stageRaw(settings, n * 2, n * 2 + 1, gzipSync(Buffer.from(rowsText(n * 2, n * 2 + 1))), 2);
      await runThrough(core, `old${n}`);
    }
    // The pipeline as the previous release left it: every cleanup completed, but no mark and no cleanedShards.
    await doc.send(new DeleteCommand({ TableName: res.table, Key: keys.cleanedMark(settings.pipelineId) }));
    for (let id = 1; id <= 3; id++) {
      await doc.send(
        new UpdateCommand({
          TableName: res.table,
          Key: keys.checkpoint(settings.pipelineId, id),
          UpdateExpression: 'REMOVE cleanedShards',
        }),
      );
    }
    const errors: string[] = [];
    const logged = createCoordinator({
      settings,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
      log: { info: () => {}, error: (message) => errors.push(message) },
    });
    await stageRaw(settings, 6, 7, gzipSync(Buffer.from(rowsText(6, 7))), 2);
    await runThrough(logged, 'new');
    // Each is logged at error level as a cleanup that "never completed" (10 per cleanup until the mark catches up).
    expect(errors).toEqual([]);
  });
});
