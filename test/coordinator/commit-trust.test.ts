/**
 * Against DynamoDB Local and the S3 server: the commit path trusts nothing a
 * processor (or anyone else who can write the staged prefix or a working object) writes. The attacks are played
 * with direct S3/DynamoDB writes — the rights a compromised processor had before the layout moved plans out of its
 * prefix — so these tests prove the checks in code, independently of IAM and the bucket policy.
 */
import { CopyObjectCommand, DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { sweepOrphans } from '../../shared/coordinator/cleanup/orphans.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { BeginOutput } from '../../shared/coordinator/messages.ts';
import {
  PlanDigestMismatchError,
  PlanStore,
  workObjectJson,
} from '../../shared/coordinator/promote/plan-store.ts';
import {
  type PlannedObject,
  PlanRejectedError,
  Promoter,
} from '../../shared/coordinator/promote/promoter.ts';
import { planKey, stagedCopyKey } from '../../shared/coordinator/work-objects.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { finalObjectKey, manifestKey, stagedObjectKey } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { encodeManifest, ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes, headObject, listObjects } from '../../shared/sink/objects.ts';
import { CommittedFileError, readCommitted } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { keysUnder } from '../support/checkpoint-steps.ts';
import { expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('trust');
});

function setup() {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('t'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  return {
    settings,
    clock,
    core: createCoordinator({ settings, clients: res.clients, clock }),
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    ledger: new StagedEntries(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    plans: new PlanStore(res.clients.s3, settings.bucket, settings.pipelineId),
  };
}

async function runThrough(core: Coordinator, execution = uniqueName('exec')): Promise<BeginOutput> {
  const begun = await core.begin({ execution });
  if (begun.action !== 'checkpoint') return begun;
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
  return begun;
}

async function put(key: string, body: string | Buffer): Promise<void> {
  await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: body }));
}

describe('a forged plan has no effect', () => {
  it('17: a plan rewritten after the vote to promote onto manifest 2 writes nothing there and stops the roll-forward loudly; the plan restored, the real commit succeeds and the next checkpoint commits', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const execution = 'exec-1';
    const begun = await s.core.begin({ execution });
    const ref = { execution, checkpointId: 1, attempt: 1 };
    await s.core.prepare({ ...ref, shard: 0 });
    await s.core.decide(ref);
    // The attack: rewrite the voted plan so that promote writes manifest 2 (listing anything it likes).
    const record = await s.store.readRecord(1);
    const key = planKey(pl, 1, 1, 0, record!.planDigests!['0']!);
    const voted = (await getBytes(res.clients.s3, res.bucket, key))!;
    const plan = JSON.parse(workObjectJson(voted)!.toString('utf8'));
    plan.objects[0].finalKey = manifestKey(pl, 2);
    await put(key, JSON.stringify(plan));
    // Read alone, the forged plan is refused by its digest…
    await expect(s.plans.readPlan(1, 1, 0, record?.planDigests?.['0'])).rejects.toBeInstanceOf(
      PlanDigestMismatchError,
    );
    // …and so it is by promote and commit, every time: nothing at manifest 2, no final object, no manifest 1.
    for (let retry = 0; retry < 2; retry++) {
      await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(PlanDigestMismatchError);
      // Commit reads the plan and the (never written) promotion record at once: either refusal may come first.
      await expect(s.core.commit(ref)).rejects.toThrow(/is not the plan its shard voted for|is missing/);
    }
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 2))).toBeUndefined();
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 1))).toBeUndefined();
    expect(await keysUnder(res, `${pl}/final/`)).toEqual([]);
    // The voted plan restored (an operator: its previous version), the decided checkpoint rolls forward.
    await put(key, voted);
    for (const shard of begun.shards) await s.core.promote({ ...ref, shard });
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 2))).toBeUndefined();
    expect(await s.core.commit(ref)).toMatchObject({ checkpointId: 1, files: 1, records: 5 });
    for (const shard of begun.shards) await s.core.cleanup({ ...ref, shard });
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }], 'a2');
    expect(await runThrough(s.core)).toMatchObject({ action: 'checkpoint', checkpointId: 2 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10) });
    expect((await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: pl })).ok).toBe(true);
  });

  it('17: a forged plan the ledger does not back fails the roll-forward loudly and promotes nothing', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const ref = { execution: 'exec-1', checkpointId: 1, attempt: 1 };
    await s.core.begin({ execution: ref.execution });
    await s.core.prepare({ ...ref, shard: 0 });
    await s.core.decide(ref);
    const voted = (await s.store.readRecord(1))!.planDigests!['0']!;
    await put(
      planKey(pl, 1, 1, 0, voted),
      JSON.stringify({ checkpointId: 1, attempt: 1, shard: 0, objects: [] }),
    );
    // The ledger no longer yields the voted plan either (a covered entry was rewritten).
    await DynamoDBDocumentClient.from(res.clients.dynamodb).send(
      new PutCommand({
        TableName: res.table,
        Item: { ...keys.staged(pl, 'orders', 0, 4, 'output'), ...entry!, recordCount: 4 },
      }),
    );
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(PlanDigestMismatchError);
    const finals: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/final/`)) finals.push(o.key);
    expect(finals).toEqual([]);
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 1))).toBeUndefined();
  });

  it('17: promote refuses a planned object whose final key is not the layout key, or whose member is not a staged key of this pipeline', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const range04 = {
      stream: 'output',
      topic: 'orders',
      partition: 0,
      firstOffset: 0,
      lastOffset: 4,
    } as const;
    const member = {
      key: entry!.key,
      firstOffset: 0,
      lastOffset: 4,
      recordCount: 5,
      bytes: entry!.bytes,
      sha256: entry!.sha256,
    };
    const good: PlannedObject = {
      ...range04,
      finalKey: finalObjectKey(pl, range04, s.settings.gzip),
      gzip: s.settings.gzip,
      recordCount: 5,
      members: [member],
    };
    const promoter = new Promoter(res.clients.s3, res.bucket, pl);
    const from = { checkpointId: 1, attempt: 1 };
    const forged: PlannedObject[] = [
      { ...good, finalKey: manifestKey(pl, 2) },
      { ...good, finalKey: `${pl}/final/../_manifests/000000000002.json` },
      { ...good, finalKey: finalObjectKey('other', range04, s.settings.gzip) },
      { ...good, finalKey: finalObjectKey(pl, { ...range04, lastOffset: 3 }, s.settings.gzip) },
      // Members: a final object, another pipeline's staged key, another partition's staged key.
      { ...good, members: [{ ...member, key: finalObjectKey(pl, range04, s.settings.gzip) }] },
      { ...good, members: [{ ...member, key: stagedObjectKey('other', range04, 'a1', s.settings.gzip) }] },
      {
        ...good,
        members: [
          { ...member, key: stagedObjectKey(pl, { ...range04, partition: 1 }, 'a1', s.settings.gzip) },
        ],
      },
    ];
    for (const object of forged) {
      await expect(promoter.promote(object, from)).rejects.toBeInstanceOf(PlanRejectedError);
    }
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 2))).toBeUndefined();
    const finals: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/`)) finals.push(o.key);
    expect(finals.filter((key) => !key.startsWith(`${pl}/_inprogress/`))).toEqual([]);
    // The genuine object passes the same check (a plan without candidates: promote reads the copy the prepare of
    // the release before candidates would have verified).
    await res.clients.s3.send(
      new CopyObjectCommand({
        Bucket: res.bucket,
        Key: stagedCopyKey(pl, 1, 1, member.key),
        CopySource: `${res.bucket}/${member.key}`,
      }),
    );
    await expect(promoter.promote(good, from)).resolves.toMatchObject({ key: good.finalKey, recordCount: 5 });
  });
});

describe('a forged staged entry is refused', () => {
  it('17: a staged entry pointing outside the staged prefix aborts prepare with the reason; restored, the data commits', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    const writeEntry = (e: StagedFileEntry) =>
      doc.send(
        new PutCommand({
          TableName: res.table,
          Item: { ...keys.staged(pl, 'orders', 0, 4, 'output'), ...e },
        }),
      );
    for (const key of [
      manifestKey(pl, 1),
      finalObjectKey(pl, entry!, s.settings.gzip),
      stagedObjectKey('other', entry!, 'a1', s.settings.gzip),
      stagedObjectKey(pl, { ...entry!, partition: 3 }, 'a1', s.settings.gzip),
    ]) {
      // The forged target exists with the entry's very bytes, so size and checksum checks alone would pass.
      await put(key, (await getBytes(res.clients.s3, res.bucket, entry!.key))!);
      await writeEntry({ ...entry!, key });
      const execution = uniqueName('exec');
      const begun = await s.core.begin({ execution });
      const ref = { execution, checkpointId: 1, attempt: begun.attempt };
      const error = await s.core.prepare({ ...ref, shard: 0 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect((error as Error).name).toBe('StagedEntryRejectedError');
      const aborted = await s.core.abort({
        ...ref,
        error: { Error: (error as Error).name, Cause: (error as Error).message },
      });
      expect(aborted.outcome).toBe('aborted');
      expect(aborted.reason).toContain(key);
      await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: key }));
    }
    expect(await headObject(res.clients.s3, res.bucket, manifestKey(pl, 1))).toBeUndefined();
    await writeEntry(entry!);
    expect(await runThrough(s.core)).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: 5 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});

describe('readers accept only final data keys', () => {
  it('17: the committed reader and eos verify refuse a manifest entry whose key is not a final data key of the pipeline', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    await runThrough(s.core);
    const manifests = new ManifestStore(res.clients.s3, res.bucket, pl);
    const first = (await manifests.read(1))!;
    const real = first.files[0]!;
    // Manifest 2 (as a forged promote once wrote it) lists the bytes of manifest 1 and a staged object as "data".
    const forged: Manifest = {
      ...first,
      checkpointId: 2,
      previousCheckpointId: 1,
      previousCut: first.cut,
      files: [
        { ...real, key: manifestKey(pl, 1), firstOffset: 5, lastOffset: 5 },
        { ...real, key: `${pl}/_inprogress/output/x.ndjson`, firstOffset: 6, lastOffset: 6 },
      ],
    };
    await put(manifestKey(pl, 2), encodeManifest(forged));
    const read = async () => {
      for await (const _ of readCommitted({ s3: res.clients.s3, bucket: res.bucket, pipeline: pl })) {
        // drain
      }
    };
    await expect(read()).rejects.toBeInstanceOf(CommittedFileError);
    await expect(read()).rejects.toThrow(/not the final data key/);
    const verdict = await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: pl });
    expect(verdict.ok).toBe(false);
    expect(verdict.problems.filter((p) => p.kind === 'foreign-key').map((p) => p.key)).toEqual([
      manifestKey(pl, 1),
      `${pl}/_inprogress/output/x.ndjson`,
    ]);
    // The older --prefix form names the same pipeline.
    const byPrefix = await verifySink({ s3: res.clients.s3, bucket: res.bucket, prefix: `${pl}/final/` });
    expect(byPrefix.problems).toEqual(verdict.problems);
  });
});

describe('canonical manifests and an incremental orphan sweep', () => {
  it('9: a roll-forward from differently ordered inputs writes byte-identical manifests', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [
      { partition: 2, firstOffset: 0, lastOffset: 1 },
      { topic: 'alpha', partition: 10, firstOffset: 0, lastOffset: 1 },
      { partition: 1, firstOffset: 0, lastOffset: 1 },
      { topic: 'alpha', partition: 9, firstOffset: 0, lastOffset: 1 },
    ]);
    await runThrough(s.core);
    const written = (await getBytes(res.clients.s3, res.bucket, manifestKey(pl, 1)))!;
    const manifest = JSON.parse(written.toString('utf8')) as Manifest;
    expect(Object.keys(manifest.cut)).toEqual(['alpha#10', 'alpha#9', 'orders#1', 'orders#2']);
    // The same checkpoint, its cut, previous cut, files and fields in other orders: the same bytes.
    const reversed = (record: Record<string, number>) => Object.fromEntries(Object.entries(record).reverse());
    const shuffled = {
      files: [...manifest.files].reverse().map((f) => Object.fromEntries(Object.entries(f).reverse())),
      committedAt: manifest.committedAt,
      previousCut: reversed({ 'orders#1': -1, 'alpha#9': 3 }),
      cut: reversed(manifest.cut),
      previousCheckpointId: 0,
      checkpointId: 1,
      pipeline: pl,
      version: 1,
    } as unknown as Manifest;
    expect(encodeManifest(shuffled).toString()).toBe(
      encodeManifest({ ...manifest, previousCut: { 'alpha#9': 3, 'orders#1': -1 } }).toString(),
    );
    expect(encodeManifest({ ...shuffled, previousCut: {} }).equals(written)).toBe(true);
    // A second roll-forward of the committed checkpoint writes (or accepts) the identical bytes.
    await new ManifestStore(res.clients.s3, res.bucket, pl).write({ ...shuffled, previousCut: {} });
    expect((await getBytes(res.clients.s3, res.bucket, manifestKey(pl, 1)))!.equals(written)).toBe(true);
  });

  it('9: the orphan sweep continues across runs from a persisted mark, so every orphan is swept wherever its key sorts', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    const referenced = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 0 },
      { partition: 9, firstOffset: 0, lastOffset: 0 },
    ]);
    const orphans = Array.from({ length: 7 }, (_, p) =>
      stagedObjectKey(
        pl,
        {
          stream: p % 2 ? 'deadletter' : 'output',
          topic: 'orders',
          partition: p,
          firstOffset: 1,
          lastOffset: 1,
        },
        'zombie',
        s.settings.gzip,
      ),
    );
    for (const key of orphans) await put(key, '{}\n');
    const sweep = () =>
      sweepOrphans({
        s3: res.clients.s3,
        bucket: res.bucket,
        pipeline: pl,
        ledger: s.ledger,
        now: Date.now() + 7_200_000,
        graceMs: 3_600_000,
        limit: 3,
        mark: {
          read: () => s.store.readSweepMark(),
          write: (expected, after) => s.store.writeSweepMark(expected, after, Date.now()),
        },
      });
    const swept: string[][] = [];
    for (let run = 0; run < 3; run++) swept.push(await sweep());
    // 9 staged objects, 3 examined per sweep: each sweep saw only its slice (so the first could not have found
    // them all), and together the slices found every orphan exactly once.
    expect(swept.every((keys) => keys.length <= 3)).toBe(true);
    expect(swept[0]!.length).toBeLessThan(orphans.length);
    expect(swept.flat().sort()).toEqual([...orphans].sort());
    // The listing is exhausted: the next sweep finds nothing and starts over from the lowest key.
    expect(await s.store.readSweepMark()).not.toBe('');
    expect(await sweep()).toEqual([]);
    expect(await s.store.readSweepMark()).toBe('');
    const left: string[] = [];
    for await (const o of listObjects(res.clients.s3, res.bucket, `${pl}/_inprogress/`)) left.push(o.key);
    expect(left.sort()).toEqual(referenced.map((e) => e.key).sort());
  });
});
