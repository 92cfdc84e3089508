/**
 * Adversarial interleavings of the commit path (cut pages, plan digests, layout checks, canonical manifests, the
 * incremental orphan sweep, the reader's and verify's key checks). Each test states a property of
 * docs/architecture.md (C4, C7, L3). The attacks use only what a compromised processor may write: objects under
 * `<pl>/_inprogress/<stream>/…` and the ledger items `<pl>#FENCE`, `<pl>#STAGED#*` (plus, for the liveness tests,
 * ordinary crashes of coordinator steps).
 */

import { gzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, PutCommand, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { BeginOutput } from '../../shared/coordinator/messages.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { stagedObjectKey } from '../../shared/sink/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { digestsOf } from '../../shared/sink/ndjson.ts';
import { headObject, listObjects } from '../../shared/sink/objects.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { defaultRows, stageFiles } from '../support/staging.ts';

let res: TestResources;
let doc: DynamoDBDocumentClient;
beforeAll(async () => {
  res = await freshResources('commit-path');
  doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
});

function setup() {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('commit-path'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  return {
    settings,
    clock,
    // One shard per partition: the interleavings are exercised across shards.
    core: createCoordinator({ settings, clients: res.clients, clock, partitionsPerShard: 1 }),
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    ledger: new StagedEntries(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    manifests: new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId),
  };
}

interface RunOptions {
  readonly cleanup?: boolean;
}

async function runThrough(
  core: Coordinator,
  execution = uniqueName('exec'),
  options: RunOptions = {},
): Promise<BeginOutput> {
  const begun = await core.begin({ execution });
  if (begun.action !== 'checkpoint') return begun;
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  if (options.cleanup !== false) for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
  return begun;
}

/** What a compromised processor can do: rewrite a staged-file entry (its own `<pl>#STAGED#*` item). */
async function rewriteEntry(entry: StagedFileEntry, changes: Partial<StagedFileEntry>): Promise<void> {
  const next = { ...entry, ...changes };
  await doc.send(
    new PutCommand({
      TableName: res.table,
      Item: {
        ...keys.staged(next.pipeline, next.topic, next.partition, next.lastOffset, next.stream),
        ...next,
      },
    }),
  );
}

/** A compromised processor stages an object of its own bytes, with an entry whose digests/size match them. */
async function stageRaw(
  settings: Settings,
  range: { partition: number; firstOffset: number; lastOffset: number },
  body: Buffer,
  recordCount: number,
  attemptId = 'evil',
): Promise<StagedFileEntry> {
  const full = { stream: 'output' as const, topic: 'orders', ...range };
  const key = stagedObjectKey(settings.pipelineId, full, attemptId, settings.gzip);
  await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: body }));
  const entry: StagedFileEntry = {
    pipeline: settings.pipelineId,
    ...full,
    key,
    recordCount,
    bytes: body.length,
    ...digestsOf(body),
    gzip: settings.gzip,
    attemptId,
    stagedAt: Date.now(),
  };
  await rewriteEntry(entry, {});
  await doc.send(
    new PutCommand({
      TableName: res.table,
      Item: {
        ...keys.fence(settings.pipelineId, 'orders', range.partition),
        topic: 'orders',
        partition: range.partition,
        stagedOffset: range.lastOffset,
        updatedAt: Date.now(),
      },
    }),
  );
  return entry;
}

async function readAll(settings: Settings): Promise<unknown[]> {
  const rows: unknown[] = [];
  for await (const record of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    rows.push(record.row);
  return rows;
}

/** Runs one checkpoint; a refusal before the decision is an acceptable outcome (it is loud and loses nothing). */
async function attempt(core: Coordinator): Promise<'committed' | 'refused'> {
  try {
    await runThrough(core);
    return 'committed';
  } catch {
    return 'refused';
  }
}

describe('the commit path must never publish a manifest the reader refuses (C7)', () => {
  it('a staged entry whose recordCount lies (size and checksums right) is refused before the decision, or the committed log stays readable', async () => {
    const s = setup();
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    // The compromised processor only changes the count in its own ledger item (5 rows are in the object).
    await rewriteEntry(entry!, { recordCount: 4 });
    const outcome = await attempt(s.core);
    // Whatever the coordinator decided, a committed manifest must be readable by the committed reader: a manifest
    // can never be changed again (C7), so a wrong count in it stops every reader forever.
    await expect(readAll(s.settings), `outcome ${outcome}`).resolves.toBeDefined();
    expect(
      (await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: s.settings.pipelineId })).ok,
    ).toBe(outcome === 'committed');
  });

  it('a staged object that is not NDJSON (entry consistent with its bytes) is refused before the decision, or the committed log stays readable', async () => {
    const s = setup();
    // Well-formed gzip (the pipeline's default) of a line that is not JSON: every digest and size matches.
    const text = Buffer.from('not json\n', 'utf8');
    const body = s.settings.gzip ? gzipSync(text) : text;
    await stageRaw(s.settings, { partition: 0, firstOffset: 0, lastOffset: 0 }, body, 1);
    const outcome = await attempt(s.core);
    await expect(readAll(s.settings), `outcome ${outcome}`).resolves.toBeDefined();
  });

  it('an entry whose first offset reaches below the previous committed cut is refused (no manifest range overlaps a committed one)', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    expect(await attempt(s.core)).toBe('committed');
    // Rows 5..9 (what the partition really holds next), but the entry and key claim offsets 0..9.
    const rows = defaultRows({ partition: 0, firstOffset: 5, lastOffset: 9 });
    const body = Buffer.from(rows.map((row) => `${JSON.stringify(row)}\n`).join(''), 'utf8');
    await stageRaw(s.settings, { partition: 0, firstOffset: 0, lastOffset: 9 }, body, 5);
    const outcome = await attempt(s.core);
    const manifest = await s.manifests.read(2);
    if (outcome === 'committed') {
      // Manifest 2 covers (4, 9]: a file it lists must not claim offsets of checkpoint 1's file.
      for (const file of manifest?.files ?? []) expect.soft(file.firstOffset, file.key).toBeGreaterThan(4);
      // …and eos verify, which checks every cut, must at least notice the overlap.
      const verified = await verifySink({
        s3: res.clients.s3,
        bucket: res.bucket,
        pipeline: s.settings.pipelineId,
      });
      expect
        .soft(verified.ok, 'verify accepts a manifest whose file starts below its previous cut')
        .toBe(false);
    } else {
      expect(manifest).toBeUndefined();
    }
  });
});

describe('after the decision the checkpoint only rolls forward (C4) — nothing a processor wrote before the vote may stop it', () => {
  it('an entry whose SHA-256 is wrong but MD5 right is refused by prepare (the checksum promote relies on is the one prepare verified)', async () => {
    const s = setup();
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    await rewriteEntry(entry!, { sha256: 'f'.repeat(64) });
    const execution = 'exec-1';
    const begun = await s.core.begin({ execution });
    const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
    const voted = await s.core.prepare({ ...ref, shard: 0 }).then(
      () => true,
      () => false,
    );
    if (!voted) return; // refused before the decision: loud, nothing decided, the operator can fix the entry
    await s.core.decide(ref);
    // Decided: from here only roll-forward exists, so promote must be able to succeed.
    await expect(s.core.promote({ ...ref, shard: 0 })).resolves.toMatchObject({ shard: 0 });
  });
});

describe('nothing the pipeline stores grows without bound (L3) — a cleanup that did not run is caught up', () => {
  it('after a checkpoint whose cleanup never ran (execution cut off after COMMITTED), later cleanups remove its staged entries, objects and superseded cut pages', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    // Checkpoint 1 runs to the end. Checkpoint 2 (partition 0 moved) commits, but its cleanup never runs (an
    // execution cut off after COMMITTED; the definition also routes a failed cleanup to Committed).
    expect(await runThrough(s.core, 'exec-1')).toMatchObject({ checkpointId: 1 });
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }], 'a2');
    expect(await runThrough(s.core, 'exec-2', { cleanup: false })).toMatchObject({ checkpointId: 2 });
    // Only partition 1 moves afterwards; checkpoints 3 and 4 run to the end, cleanup included.
    await stageFiles(res.clients, s.settings, [{ partition: 1, firstOffset: 5, lastOffset: 9 }], 'a3');
    expect(await runThrough(s.core, 'exec-3')).toMatchObject({ checkpointId: 3 });
    await stageFiles(res.clients, s.settings, [{ partition: 1, firstOffset: 10, lastOffset: 14 }], 'a4');
    expect(await runThrough(s.core, 'exec-4')).toMatchObject({ checkpointId: 4 });

    const left: string[] = [];
    for await (const e of s.ledger.entries('orders', 0, { above: -1, upTo: 1_000_000 })) left.push(e.key);
    const staged: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/_inprogress/`)) staged.push(o.key);
    const record4 = await s.store.readRecord(4);
    const pages = await doc.send(
      new ScanCommand({
        TableName: res.table,
        FilterExpression: 'begins_with(pk, :p)',
        ExpressionAttributeValues: { ':p': `${pl}#CHECKPOINT#CUT#` },
      }),
    );
    const cutIds = new Set(
      (pages.Items ?? []).map((item) => String(item.pk).slice(`${pl}#CHECKPOINT#CUT#`.length)),
    );
    // Partition 0's data at 5..9 was promoted by checkpoint 2: its staged entry and object are garbage now.
    expect.soft({ entries: left, objects: staged }).toEqual({ entries: [], objects: [] });
    // Only the last committed cut is ever read again (begin reads the last committed cut).
    expect.soft([...cutIds]).toEqual([record4!.cutId]);
  });
});

describe('a roll-forward after a crash writes what the first execution would have', () => {
  it('a roll-forward by a second execution after a crash mid-promote writes byte-identical final objects and manifest', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 9 },
      { partition: 2, firstOffset: 0, lastOffset: 2 },
    ]);
    const ref = { execution: 'exec-A', checkpointId: 1, attempt: 1 };
    const begun = await s.core.begin({ execution: ref.execution });
    for (const shard of begun.shards) await s.core.prepare({ ...ref, shard });
    await s.core.decide(ref);
    await s.core.promote({ ...ref, shard: 0 }); // then A dies
    s.clock.advance(601_000);
    const rolled = await s.core.begin({ execution: 'exec-B' });
    expect(rolled).toMatchObject({ action: 'commit', checkpointId: 1, attempt: 1 });
    const refB = { ...ref, execution: 'exec-B' };
    for (const shard of rolled.shards) await s.core.promote({ ...refB, shard });
    await s.core.commit(refB);
    const first = await headObject(res.clients.s3, res.bucket, `${pl}/_manifests/000000000001.json`);
    // A zombie of A now runs its promote and commit again: COMMITTED, so nothing is rewritten.
    for (const shard of begun.shards) await s.core.promote({ ...ref, shard });
    await s.core.commit(ref);
    const second = await headObject(res.clients.s3, res.bucket, `${pl}/_manifests/000000000001.json`);
    expect(second?.ETag).toBe(first?.ETag);
    for (const shard of rolled.shards) await s.core.cleanup({ ...refB, shard });
    expect(await readAll(s.settings)).toHaveLength(18);
    expect((await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: pl })).ok).toBe(true);
  });
});

describe('aborted attempts and zombie steps; long names', () => {
  it('abort after one shard voted, then attempt 2 with a different cut; zombie steps of attempt 1 change nothing', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const ref1 = { execution: 'exec-A', checkpointId: 1, attempt: 1 };
    const begun1 = await s.core.begin({ execution: ref1.execution });
    expect(begun1.shards).toEqual([0, 1]);
    await s.core.prepare({ ...ref1, shard: 0 });
    // A's lease expires mid-prepare; more data arrives, on a new partition too; B takes over and aborts attempt 1.
    await stageFiles(
      res.clients,
      s.settings,
      [
        { partition: 0, firstOffset: 5, lastOffset: 9 },
        { partition: 2, firstOffset: 0, lastOffset: 2 },
        { partition: 3, firstOffset: 0, lastOffset: 1 },
      ],
      'a2',
    );
    s.clock.advance(601_000);
    const refB = { execution: 'exec-B', checkpointId: 1, attempt: 2 };
    const begun2 = await s.core.begin({ execution: refB.execution });
    expect(begun2).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: 2 });
    // Zombies of attempt 1: each step refuses.
    await expect(s.core.prepare({ ...ref1, shard: 1 })).rejects.toThrow();
    await expect(s.core.decide(ref1)).rejects.toThrow();
    await expect(s.core.promote({ ...ref1, shard: 0 })).rejects.toThrow();
    expect(await s.core.abort({ ...ref1, error: { Error: 'Zombie', Cause: 'late' } })).toMatchObject({
      outcome: 'aborted',
    });
    for (const shard of begun2.shards) await s.core.prepare({ ...refB, shard });
    await s.core.decide(refB);
    for (const shard of begun2.shards) await s.core.promote({ ...refB, shard });
    await s.core.commit(refB);
    for (const shard of begun2.shards) await s.core.cleanup({ ...refB, shard });
    expect(await readAll(s.settings)).toHaveLength(10 + 5 + 3 + 2);
    const manifest = await s.manifests.read(1);
    expect(manifest?.cut).toEqual({ 'orders#0': 9, 'orders#1': 4, 'orders#2': 2, 'orders#3': 1 });
    expect(
      (await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: s.settings.pipelineId })).ok,
    ).toBe(true);
  });

  it('a 249-character topic name and the dead-letter stream: every item stays small, reader and verify accept the keys', async () => {
    const s = setup();
    const topic = `t.${'x_-'.repeat(82)}1`.slice(0, 249);
    expect(topic).toHaveLength(249);
    await stageFiles(res.clients, s.settings, [
      { topic, partition: 2147483647, firstOffset: 0, lastOffset: 4 },
      { topic, partition: 0, firstOffset: 0, lastOffset: 1, stream: 'deadletter' },
      { topic, partition: 0, firstOffset: 2, lastOffset: 3 },
    ]);
    expect(await runThrough(s.core)).toMatchObject({ action: 'checkpoint', checkpointId: 1 });
    expect(await readAll(s.settings)).toHaveLength(7);
    const result = await verifySink({
      s3: res.clients.s3,
      bucket: res.bucket,
      pipeline: s.settings.pipelineId,
    });
    expect(result.problems).toEqual([]);
  });
});

describe('cleanup deletes only staged keys (checks in code, not only IAM)', () => {
  it('a staged entry below the committed cut that names a manifest does not make cleanup delete the manifest', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    expect(await attempt(s.core)).toBe('committed');
    expect(await headObject(res.clients.s3, res.bucket, `${pl}/_manifests/000000000001.json`)).toBeDefined();
    // The compromised processor writes one of its own items: an entry at offset 3 (below the committed cut 4, so no
    // prepare ever looks at it) whose key is manifest 1.
    await rewriteEntry(entry!, {
      firstOffset: 3,
      lastOffset: 3,
      key: `${pl}/_manifests/000000000001.json`,
    });
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }], 'a2');
    await attempt(s.core);
    // Cleanup of checkpoint 2 walks every entry of partition 0 at or below its cut and deletes the keys they name.
    expect(await headObject(res.clients.s3, res.bucket, `${pl}/_manifests/000000000001.json`)).toBeDefined();
    await expect(readAll(s.settings)).resolves.toHaveLength(10);
  });
});
