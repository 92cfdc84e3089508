/**
 * The coordinator's invariants C1–C7 (docs/architecture.md), step by step on the protocol core, against DynamoDB Local and
 * the S3 server. The state machine around these steps is tested in `state-machine.test.ts`.
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings, type SettingsInput } from '../../shared/config/settings.ts';
import { sweepOrphans } from '../../shared/coordinator/cleanup/orphans.ts';
import {
  CheckpointStateError,
  type Coordinator,
  createCoordinator,
} from '../../shared/coordinator/coordinator.ts';
import type { BeginOutput } from '../../shared/coordinator/messages.ts';
import {
  StagedObjectInvalidError,
  verifyStagedContents,
} from '../../shared/coordinator/prepare/staged-check.ts';
import { FinalObjectConflictError, planFinalObjects } from '../../shared/coordinator/promote/promoter.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { StagedEntries } from '../../shared/ledger/staged-entries.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix, manifestKey, mergedObjectKey } from '../../shared/sink/layout.ts';
import { ManifestLogError } from '../../shared/sink/manifest-store.ts';
import { getBytes, headObject, listObjects } from '../../shared/sink/objects.ts';
import { CommittedFileError, readCommitted, readManifests } from '../../shared/sink/reader.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, type FileSpec, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('coord');
});

const LEASE_S = 600;

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('c'),
    checkpointLeaseSeconds: LEASE_S,
    orphanGraceSeconds: 3600,
    ...overrides,
  });
}

interface Setup {
  readonly settings: Settings;
  readonly clock: ManualClock;
  readonly core: Coordinator;
  readonly store: CheckpointStore;
  readonly ledger: StagedEntries;
  stage(specs: readonly FileSpec[]): Promise<StagedFileEntry[]>;
}

function setup(overrides: Partial<SettingsInput> = {}, clients: AwsClients = res.clients): Setup {
  const settings = settingsFor(overrides);
  const clock = new ManualClock(Date.now());
  return {
    settings,
    clock,
    // One shard per partition: the protocol's interleavings are exercised across shards.
    core: createCoordinator({ settings, clients, clock, partitionsPerShard: 1 }),
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    ledger: new StagedEntries(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    stage: (specs) => stageFiles(res.clients, settings, specs),
  };
}

async function prepareAll(core: Coordinator, begun: BeginOutput, execution: string): Promise<void> {
  for (const shard of begun.shards) {
    await core.prepare({ execution, checkpointId: begun.checkpointId, attempt: begun.attempt, shard });
  }
}

async function finishAll(core: Coordinator, begun: BeginOutput, execution: string): Promise<void> {
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
}

/** One checkpoint through every step, as the state machine runs them. */
async function checkpoint(core: Coordinator, execution = uniqueName('exec')): Promise<BeginOutput> {
  const begun = await core.begin({ execution });
  if (begun.action !== 'checkpoint') return begun;
  await prepareAll(core, begun, execution);
  await core.decide({ execution, checkpointId: begun.checkpointId, attempt: begun.attempt });
  await finishAll(core, begun, execution);
  return begun;
}

async function finalKeys(settings: Settings): Promise<string[]> {
  const keys: string[] = [];
  for await (const object of listObjects(res.clients.s3, settings.bucket, finalPrefix(settings.pipelineId))) {
    keys.push(object.key);
  }
  return keys;
}

async function manifestIds(settings: Settings): Promise<number[]> {
  const ids: number[] = [];
  for await (const m of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    ids.push(m.checkpointId);
  }
  return ids;
}

describe('C1 one checkpoint in flight', () => {
  it('C1: the id is allocated by a conditional write: of two begins at once, one proceeds and the other exits', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const outcomes = await Promise.all([s.core.begin({ execution: 'a' }), s.core.begin({ execution: 'b' })]);
    expect(outcomes.map((o) => o.action).sort()).toEqual(['busy', 'checkpoint']);
    const head = await s.store.readHead();
    expect(head).toMatchObject({ checkpointId: 1, attempt: 1, status: 'BEGUN' });
    // A third execution while the lease is live: busy, the head untouched.
    expect((await s.core.begin({ execution: 'c' })).action).toBe('busy');
    expect(await s.store.readHead()).toEqual(head);
  });

  it('C1: a retried begin of the same execution resumes its own checkpoint', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const first = await s.core.begin({ execution: 'a' });
    expect(await s.core.begin({ execution: 'a' })).toEqual(first);
  });

  it('C1: every later write is conditioned on (id, attempt, status): a superseded attempt changes nothing', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const zombie = await s.core.begin({ execution: 'zombie' });
    s.clock.advance(LEASE_S * 1000 + 1);
    const successor = await s.core.begin({ execution: 'successor' });
    expect(successor).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: 2 });
    const ref = { execution: 'zombie', checkpointId: 1, attempt: zombie.attempt };
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(CheckpointStateError);
    await expect(s.core.decide(ref)).rejects.toBeInstanceOf(CheckpointStateError);
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(CheckpointStateError);
    await expect(s.core.commit(ref)).rejects.toBeInstanceOf(CheckpointStateError);
    const aborted = await s.core.abort({ ...ref, error: { Error: 'Zombie', Cause: 'late' } });
    expect(aborted.outcome).toBe('aborted');
    expect(await s.store.readHead()).toMatchObject({
      checkpointId: 1,
      attempt: 2,
      status: 'BEGUN',
      owner: 'successor',
    });
    // The successor completes undisturbed.
    await prepareAll(s.core, successor, 'successor');
    await s.core.decide({ execution: 'successor', checkpointId: 1, attempt: 2 });
    await finishAll(s.core, successor, 'successor');
    expect(await s.store.readHead()).toMatchObject({
      status: 'COMMITTED',
      committedId: 1,
      consecutiveAborts: 0,
    });
    expect((await s.store.readRecord(1))?.recentAborts?.map((a) => a.attempt)).toEqual([1]);
  });
});

describe('C2 the cut', () => {
  it('C2: the cut is each partition staged offset at begin; files staged later wait for the next checkpoint', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 10, lastOffset: 19 },
    ]);
    const begun = await s.core.begin({ execution: 'x' });
    // Staged while the checkpoint runs: above the cut.
    await s.stage([
      { partition: 0, firstOffset: 5, lastOffset: 7 },
      { partition: 2, firstOffset: 0, lastOffset: 0 },
    ]);
    await prepareAll(s.core, begun, 'x');
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    await finishAll(s.core, begun, 'x');
    const [first] = await readAllManifests(s.settings);
    expect(first!.cut).toEqual({ 'orders#0': 4, 'orders#1': 19 });
    expect(first!.previousCut).toEqual({});
    expect(first!.files.map((f) => [f.partition, f.firstOffset, f.lastOffset])).toEqual([
      [0, 0, 4],
      [1, 10, 19],
    ]);
    // The later files are still staged (cleanup removed only what is at or below the cut).
    const left: StagedFileEntry[] = [];
    for await (const e of s.ledger.entries('orders', 0, { above: -1, upTo: 100 })) left.push(e);
    expect(left.map((e) => e.lastOffset)).toEqual([7]);
    await checkpoint(s.core);
    const second = (await readAllManifests(s.settings))[1]!;
    expect(second.previousCut).toEqual(first!.cut);
    expect(second.cut).toEqual({ 'orders#0': 7, 'orders#1': 19, 'orders#2': 0 });
    expect(second.files.map((f) => [f.partition, f.firstOffset, f.lastOffset])).toEqual([
      [0, 5, 7],
      [2, 0, 0],
    ]);
  });
});

async function readAllManifests(settings: Settings) {
  const all = [];
  for await (const m of readManifests({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    all.push(m);
  return all;
}

describe('C3 prepare verifies every covered staged object', () => {
  const defects = [
    [
      'missing',
      async (key: string, bucket: string) =>
        res.clients.s3.send(new DeleteObjectCommand({ Bucket: bucket, Key: key })),
    ],
    [
      'size',
      async (key: string, bucket: string) => {
        const bytes = (await getBytes(res.clients.s3, bucket, key))!;
        await res.clients.s3.send(
          new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes.subarray(1) }),
        );
      },
    ],
    [
      'checksum',
      async (key: string, bucket: string) => {
        const bytes = Buffer.from((await getBytes(res.clients.s3, bucket, key))!);
        bytes[bytes.length - 6] = (bytes[bytes.length - 6]! + 1) % 256;
        await res.clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: bytes }));
      },
    ],
  ] as const;

  for (const [defect, damage] of defects) {
    it(`C3: a ${defect} staged object fails prepare with an error naming it; nothing is promoted`, async () => {
      const s = setup();
      const [, bad] = await s.stage([
        { partition: 0, firstOffset: 0, lastOffset: 4 },
        { partition: 0, firstOffset: 5, lastOffset: 9 },
      ]);
      await damage(bad!.key, s.settings.bucket);
      const begun = await s.core.begin({ execution: 'x' });
      const failure = await s.core
        .prepare({ execution: 'x', checkpointId: 1, attempt: 1, shard: 0 })
        .catch((e: unknown) => e);
      expect(failure).toBeInstanceOf(StagedObjectInvalidError);
      expect((failure as StagedObjectInvalidError).defect).toBe(defect);
      expect((failure as Error).message).toContain(bad!.key);
      // No vote: decide cannot pass, abort is the only way on.
      await expect(s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 })).rejects.toThrow(
        /0 of 1 shards voted/,
      );
      await s.core.abort({
        execution: 'x',
        checkpointId: begun.checkpointId,
        attempt: begun.attempt,
        error: { Error: 'StagedObjectInvalidError', Cause: (failure as Error).message },
      });
      expect(await finalKeys(s.settings)).toEqual([]);
      expect(await s.store.readHead()).toMatchObject({ status: 'ABORTED', consecutiveAborts: 1 });
    });
  }

  it('C3: verifies the SHA-256 of the bytes whatever the ETag says (SSE-KMS ETags are no MD5s; a right MD5 does not clear a wrong SHA-256)', async () => {
    const s = setup();
    const [entry] = await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 9 }]);
    // As real S3 answers for an SSE-KMS object: an ETag that is not the MD5 of the bytes.
    const kms = createAwsClients().s3;
    kms.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        if (context.commandName === 'HeadObjectCommand' || context.commandName === 'GetObjectCommand') {
          Object.assign(result.output as object, {
            ETag: '"0123456789abcdef0123456789abcdef"',
            ServerSideEncryption: 'aws:kms',
          });
        }
        return result;
      },
      { step: 'initialize', name: 'emulateKmsEtag' },
    );
    await expect(verifyStagedContents(kms, s.settings.bucket, [entry!])).resolves.toBeUndefined();
    // The MD5 (and the ETag on s3rver) still match; only the SHA-256 the candidates rely on is wrong.
    const wrong = { ...entry!, sha256: '0'.repeat(64) };
    for (const client of [kms, res.clients.s3]) {
      await expect(verifyStagedContents(client, s.settings.bucket, [wrong])).rejects.toThrow(
        StagedObjectInvalidError,
      );
      await expect(verifyStagedContents(client, s.settings.bucket, [wrong])).rejects.toThrow(/checksum/);
    }
  });
});

describe('C4 the decision', () => {
  it('C4: COMMITTING is written before any promotion; promotion refuses an undecided checkpoint', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'x' });
    await prepareAll(s.core, begun, 'x');
    await expect(
      s.core.promote({ execution: 'x', checkpointId: 1, attempt: 1, shard: 0 }),
    ).rejects.toBeInstanceOf(CheckpointStateError);
    await expect(s.core.commit({ execution: 'x', checkpointId: 1, attempt: 1 })).rejects.toBeInstanceOf(
      CheckpointStateError,
    );
    expect(await finalKeys(s.settings)).toEqual([]);
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    expect(await s.store.readRecord(1)).toMatchObject({ status: 'COMMITTING', decidedAt: s.clock.now() });
    // A retried decide is harmless.
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    await s.core.promote({ execution: 'x', checkpointId: 1, attempt: 1, shard: 0 });
    expect(await finalKeys(s.settings)).toHaveLength(1);
  });

  it('C4: recovery presumes abort before the decision: an expired BEGUN or PREPARED checkpoint is aborted', async () => {
    for (const stopAt of ['BEGUN', 'PREPARED'] as const) {
      const s = setup();
      await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
      const begun = await s.core.begin({ execution: 'crashed' });
      await prepareAll(s.core, begun, 'crashed');
      if (stopAt === 'PREPARED') {
        // decide's first half only: BEGUN -> PREPARED.
        await s.store.transition({
          checkpointId: 1,
          attempt: 1,
          from: ['BEGUN'],
          to: 'PREPARED',
          now: s.clock.now(),
        });
      }
      s.clock.advance(LEASE_S * 1000 - 1);
      expect((await s.core.begin({ execution: 'early' })).action).toBe('busy');
      s.clock.advance(2);
      const next = await s.core.begin({ execution: 'recoverer' });
      expect(next).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: 2 });
      const record = await s.store.readRecord(1);
      expect(record?.recentAborts?.[0]?.reason).toContain(`lease expired in ${stopAt}`);
      expect(await finalKeys(s.settings)).toEqual([]);
    }
  });

  it('C4: each prepare vote renews the lease: a slow prepare is not recovered while its shards keep voting', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'slow' });
    expect(begun.shards).toEqual([0, 1]);
    s.clock.advance(LEASE_S * 1000 - 1);
    await s.core.prepare({ execution: 'slow', checkpointId: 1, attempt: 1, shard: 0 });
    s.clock.advance(LEASE_S * 1000 - 1);
    expect((await s.core.begin({ execution: 'other' })).action).toBe('busy');
    await s.core.prepare({ execution: 'slow', checkpointId: 1, attempt: 1, shard: 1 });
    await s.core.decide({ execution: 'slow', checkpointId: 1, attempt: 1 });
    expect((await s.store.readHead())?.status).toBe('COMMITTING');
  });

  it('C4: each promote renews the lease: a slow roll-forward is not taken over while its shards keep promoting', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'slow' });
    await prepareAll(s.core, begun, 'slow');
    await s.core.decide({ execution: 'slow', checkpointId: 1, attempt: 1 });
    s.clock.advance(LEASE_S * 1000 - 1);
    await s.core.promote({ execution: 'slow', checkpointId: 1, attempt: 1, shard: 0 });
    s.clock.advance(LEASE_S * 1000 - 1);
    // Twice the lease since the decision: without the renewal this execution would take the checkpoint over.
    expect((await s.core.begin({ execution: 'other' })).action).toBe('busy');
    await s.core.promote({ execution: 'slow', checkpointId: 1, attempt: 1, shard: 1 });
    await s.core.commit({ execution: 'slow', checkpointId: 1, attempt: 1 });
    expect((await s.store.readHead())?.committedId).toBe(1);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 5) });
  });

  it('C4: after the decision only roll forward: an expired COMMITTING checkpoint is taken over and committed, abort refuses it', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'crashed' });
    await prepareAll(s.core, begun, 'crashed');
    await s.core.decide({ execution: 'crashed', checkpointId: 1, attempt: 1 });
    await s.core.promote({ execution: 'crashed', checkpointId: 1, attempt: 1, shard: 0 });
    // The crashed execution's Catch path: abort must refuse.
    const refused = await s.core.abort({
      execution: 'crashed',
      checkpointId: 1,
      attempt: 1,
      error: { Error: 'Boom' },
    });
    expect(refused.outcome).toBe('decided');
    expect((await s.store.readHead())?.status).toBe('COMMITTING');
    s.clock.advance(LEASE_S * 1000 + 1);
    const recovered = await s.core.begin({ execution: 'recoverer' });
    expect(recovered).toMatchObject({ action: 'commit', checkpointId: 1, attempt: 1, shards: begun.shards });
    // Two recoverers: only one takes over.
    expect((await s.core.begin({ execution: 'other' })).action).toBe('busy');
    await finishAll(s.core, recovered, 'recoverer');
    expect(await s.store.readHead()).toMatchObject({
      status: 'COMMITTED',
      committedId: 1,
      owner: 'recoverer',
    });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 5) });
  });
});

describe('C5 promotion', () => {
  it('C5: a retried promotion writes the same bytes under the same deterministic key, never a second object', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 9,
        stream: 'deadletter',
        rows: [{ source: { topic: 'orders', partition: 0, offset: 3 }, error: 'bad' }],
      },
    ]);
    const begun = await s.core.begin({ execution: 'x' });
    await prepareAll(s.core, begun, 'x');
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    const ref = { execution: 'x', checkpointId: 1, attempt: 1, shard: 0 };
    await s.core.promote(ref);
    const first = await finalKeys(s.settings);
    const bytes = await Promise.all(first.map((k) => getBytes(res.clients.s3, s.settings.bucket, k)));
    await s.core.promote(ref);
    await s.core.promote(ref);
    expect(await finalKeys(s.settings)).toEqual(first);
    expect(await Promise.all(first.map((k) => getBytes(res.clients.s3, s.settings.bucket, k)))).toEqual(
      bytes,
    );
    // The key names the decided attempt's plan: checkpoint, attempt, shard and place (merged final objects).
    const place = { topic: 'orders', checkpointId: 1, attempt: 1, shard: 0, index: 0, gzip: true };
    expect(first.sort()).toEqual(
      [
        mergedObjectKey(s.settings.pipelineId, { ...place, stream: 'deadletter' }),
        mergedObjectKey(s.settings.pipelineId, { ...place, stream: 'output' }),
      ].sort(),
    );
  });

  it('C5: a final object already there (412 to If-None-Match) is accepted for identical bytes and refused for others', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'x' });
    await prepareAll(s.core, begun, 'x');
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    const ref = { execution: 'x', checkpointId: 1, attempt: 1, shard: 0 };
    await s.core.promote(ref);
    await s.core.promote(ref); // 412, same bytes: fine
    const [key] = await finalKeys(s.settings);
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: s.settings.bucket, Key: key!, Body: 'tampered' }),
    );
    await expect(s.core.promote(ref)).rejects.toBeInstanceOf(FinalObjectConflictError);
    // The manifest too: rewriting identical bytes passes, and a commit retried after COMMITTED is a no-op.
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: s.settings.bucket, Key: key! }));
    await s.core.promote(ref);
    await s.core.commit(ref);
    await s.core.commit(ref);
    expect(await manifestIds(s.settings)).toEqual([1]);
  });

  it('C5: two executions rolling the same decided checkpoint forward at once leave one set of objects and one manifest', async () => {
    const s = setup();
    await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'slow' });
    await prepareAll(s.core, begun, 'slow');
    await s.core.decide({ execution: 'slow', checkpointId: 1, attempt: 1 });
    s.clock.advance(LEASE_S * 1000 + 1);
    const recovered = await s.core.begin({ execution: 'recoverer' });
    expect(recovered.action).toBe('commit');
    // The original execution is not dead, only slow: both finish the same checkpoint concurrently.
    await Promise.all([finishAll(s.core, begun, 'slow'), finishAll(s.core, recovered, 'recoverer')]);
    expect(await manifestIds(s.settings)).toEqual([1]);
    expect((await finalKeys(s.settings)).filter((k) => !k.includes('_manifests'))).toHaveLength(2);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10), 'orders#1': range(0, 5) });
  });

  it('C5: manifest first, then COMMITTED, then cleanup removes the promoted staged objects and entries', async () => {
    const s = setup();
    const staged = await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'x' });
    await prepareAll(s.core, begun, 'x');
    await s.core.decide({ execution: 'x', checkpointId: 1, attempt: 1 });
    for (const shard of begun.shards)
      await s.core.promote({ execution: 'x', checkpointId: 1, attempt: 1, shard });
    expect(
      await headObject(res.clients.s3, s.settings.bucket, manifestKey(s.settings.pipelineId, 1)),
    ).toBeUndefined();
    await s.core.commit({ execution: 'x', checkpointId: 1, attempt: 1 });
    expect(
      await headObject(res.clients.s3, s.settings.bucket, manifestKey(s.settings.pipelineId, 1)),
    ).toBeDefined();
    expect((await s.store.readHead())?.status).toBe('COMMITTED');
    for (const entry of staged)
      expect(await headObject(res.clients.s3, s.settings.bucket, entry.key)).toBeDefined();
    for (const shard of begun.shards)
      await s.core.cleanup({ execution: 'x', checkpointId: 1, attempt: 1, shard });
    for (const shard of begun.shards)
      await s.core.cleanup({ execution: 'x', checkpointId: 1, attempt: 1, shard });
    for (const entry of staged) {
      expect(await headObject(res.clients.s3, s.settings.bucket, entry.key)).toBeUndefined();
      expect(
        await s.ledger.entryAt(entry.topic, entry.partition, entry.lastOffset, entry.stream),
      ).toBeUndefined();
    }
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 5) });
  });

  it('C5: the plan packs a partition stream into deterministic final objects within the limits', () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.record({
            span: fc.integer({ min: 1, max: 5 }),
            bytes: fc.integer({ min: 0, max: 100 }),
            rows: fc.integer({ min: 0, max: 3 }),
          }),
          { maxLength: 40 },
        ),
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 1, max: 10 }),
        (files, maxObjectBytes, maxMembers) => {
          let offset = 0;
          const entries = files.map((f, i) => {
            const entry = {
              pipeline: 'p',
              stream: 'output' as const,
              topic: 't',
              partition: 0,
              firstOffset: offset,
              lastOffset: offset + f.span - 1,
              key: `k${i}`,
              recordCount: f.rows,
              bytes: f.bytes,
              sha256: 's',
              md5: 'm',
              gzip: true,
              attemptId: 'a',
              stagedAt: 0,
            };
            offset += f.span;
            return entry;
          });
          const limits = { maxObjectBytes, maxMembers };
          const plan = planFinalObjects('p', [...entries].reverse(), limits);
          expect(planFinalObjects('p', entries, limits)).toEqual(plan);
          const members = plan.flatMap((o) => o.members.map((m) => m.key));
          // Every file with records lands in exactly one object, in offset order.
          expect(members).toEqual(entries.filter((e) => e.recordCount > 0).map((e) => e.key));
          for (const object of plan) {
            expect(object.members.length).toBeLessThanOrEqual(maxMembers);
            const size = object.members.reduce((sum, m) => sum + m.bytes, 0);
            if (object.members.length > 1) expect(size).toBeLessThanOrEqual(maxObjectBytes);
            expect(object.finalKey).toContain(
              `${String(object.firstOffset).padStart(20, '0')}-${String(object.lastOffset).padStart(20, '0')}`,
            );
          }
          // Ranges never overlap.
          for (let i = 1; i < plan.length; i++)
            expect(plan[i]!.firstOffset).toBeGreaterThan(plan[i - 1]!.lastOffset);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('C6 abort loses nothing', () => {
  it('C6: after an abort the covered staged data stays and the next checkpoint commits it', async () => {
    const s = setup();
    const staged = await s.stage([
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
    ]);
    const begun = await s.core.begin({ execution: 'x' });
    await prepareAll(s.core, begun, 'x');
    const result = await s.core.abort({
      execution: 'x',
      checkpointId: 1,
      attempt: 1,
      error: { Error: 'States.Timeout', Cause: 'slow' },
    });
    expect(result).toMatchObject({ outcome: 'aborted' });
    expect(result.reason).toContain('States.Timeout: slow');
    for (const entry of staged) {
      expect(await headObject(res.clients.s3, s.settings.bucket, entry.key)).toBeDefined();
      expect(
        await s.ledger.entryAt(entry.topic, entry.partition, entry.lastOffset, entry.stream),
      ).toBeDefined();
    }
    expect(await finalKeys(s.settings)).toEqual([]);
    await checkpoint(s.core);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10) });
    expect(await s.store.readHead()).toMatchObject({ committedId: 1, attempt: 2, consecutiveAborts: 0 });
  });

  it('C6: abort deletes orphan staged objects older than the grace period, never referenced or young ones', async () => {
    const s = setup({ orphanGraceSeconds: 60 });
    const [referenced] = await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    // A crashed attempt's object: same range, no entry (its transaction never committed).
    const orphan = referenced!.key.replace('.a1.', '.crashed.');
    await res.clients.s3.send(new PutObjectCommand({ Bucket: s.settings.bucket, Key: orphan, Body: 'x' }));
    const sweep = () =>
      sweepOrphans({
        s3: res.clients.s3,
        bucket: s.settings.bucket,
        pipeline: s.settings.pipelineId,
        ledger: s.ledger,
        now: s.clock.now(),
        graceMs: 60_000,
      });
    expect(await sweep()).toEqual([]); // young
    s.clock.advance(61_000);
    const begun = await s.core.begin({ execution: 'x' });
    const result = await s.core.abort({
      execution: 'x',
      checkpointId: begun.checkpointId,
      attempt: begun.attempt,
      error: {},
    });
    expect(result.orphansDeleted).toBe(1);
    expect(await headObject(res.clients.s3, s.settings.bucket, orphan)).toBeUndefined();
    expect(await headObject(res.clients.s3, s.settings.bucket, referenced!.key)).toBeDefined();
  });
});

describe('P3 orphans on a healthy pipeline', () => {
  it('P3: cleanup after a commit deletes orphan staged objects once older than the grace period', async () => {
    const s = setup({ orphanGraceSeconds: 60 });
    const [referenced] = await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const orphan = referenced!.key.replace('.a1.', '.crashed.');
    await res.clients.s3.send(new PutObjectCommand({ Bucket: s.settings.bucket, Key: orphan, Body: 'x' }));
    s.clock.advance(30_000);
    await checkpoint(s.core);
    expect(await headObject(res.clients.s3, s.settings.bucket, orphan)).toBeDefined(); // still young
    await s.stage([{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    s.clock.advance(31_000);
    await checkpoint(s.core);
    expect(await headObject(res.clients.s3, s.settings.bucket, orphan)).toBeUndefined();
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10) });
  });
});

describe('C7 readers', () => {
  it('C7: manifests form a gap-free ordered log: empty checkpoints and aborted attempts leave no gap; final objects never change', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    await checkpoint(s.core);
    const firstObjects = await finalKeys(s.settings);
    const firstBytes = await Promise.all(
      firstObjects.map((k) => getBytes(res.clients.s3, s.settings.bucket, k)),
    );
    expect((await s.core.begin({ execution: 'e' })).action).toBe('empty');
    await s.stage([{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    const doomed = await s.core.begin({ execution: 'doomed' });
    await s.core.abort({
      execution: 'doomed',
      checkpointId: doomed.checkpointId,
      attempt: doomed.attempt,
      error: { Error: 'X' },
    });
    await checkpoint(s.core);
    expect((await s.core.begin({ execution: 'e2' })).action).toBe('empty');
    await s.stage([{ partition: 1, firstOffset: 0, lastOffset: 2 }]);
    await checkpoint(s.core);
    const manifests = await readAllManifests(s.settings);
    expect(manifests.map((m) => [m.checkpointId, m.previousCheckpointId])).toEqual([
      [1, 0],
      [2, 1],
      [3, 2],
    ]);
    expect(
      await Promise.all(firstObjects.map((k) => getBytes(res.clients.s3, s.settings.bucket, k))),
    ).toEqual(firstBytes);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10), 'orders#1': range(0, 3) });
  });

  it('C7: the reader yields each committed record once and refuses a log with a gap or a changed file', async () => {
    const s = setup();
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 2 }]);
    await checkpoint(s.core);
    await s.stage([{ partition: 0, firstOffset: 3, lastOffset: 5 }]);
    await checkpoint(s.core);
    const read = async () => {
      const rows = [];
      for await (const r of readCommitted({
        s3: res.clients.s3,
        bucket: s.settings.bucket,
        pipeline: s.settings.pipelineId,
      }))
        rows.push(r);
      return rows;
    };
    expect((await read()).map((r) => [r.checkpointId, r.row.n])).toEqual([
      [1, 0],
      [1, 1],
      [1, 2],
      [2, 3],
      [2, 4],
      [2, 5],
    ]);
    const [first] = (await readAllManifests(s.settings))[0]!.files;
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: s.settings.bucket, Key: first!.key, Body: 'changed' }),
    );
    await expect(read()).rejects.toBeInstanceOf(CommittedFileError);
    await res.clients.s3.send(
      new DeleteObjectCommand({ Bucket: s.settings.bucket, Key: manifestKey(s.settings.pipelineId, 1) }),
    );
    await expect(read()).rejects.toBeInstanceOf(ManifestLogError);
  });

  it('C7: the reader refuses a manifest log that lists a file twice rather than yield its records twice', async () => {
    // Whole objects, one a partition: a slice listed again is refused for naming another checkpoint
    // (test/sink/merged-slices.test.ts).
    const s = setup({ finalObjects: 'partition' });
    await s.stage([{ partition: 0, firstOffset: 0, lastOffset: 2 }]);
    await checkpoint(s.core);
    await s.stage([{ partition: 0, firstOffset: 3, lastOffset: 5 }]);
    await checkpoint(s.core);
    const [one, two] = await readAllManifests(s.settings);
    const key = manifestKey(s.settings.pipelineId, 2);
    const doubled = { ...two!, files: [...two!.files, one!.files[0]!] };
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: s.settings.bucket, Key: key, Body: JSON.stringify(doubled) }),
    );
    const read = async () => {
      for await (const _ of readCommitted({
        s3: res.clients.s3,
        bucket: s.settings.bucket,
        pipeline: s.settings.pipelineId,
      })) {
        // drain
      }
    };
    await expect(read()).rejects.toThrow(/is listed twice in the manifest log/);
  });

  it('C7: random staging and coordinator crash schedules end in every record exactly once (end-to-end property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.record({ partition: fc.integer({ min: 0, max: 2 }), count: fc.integer({ min: 1, max: 6 }) }),
          { minLength: 1, maxLength: 6 },
        ),
        fc.array(
          fc.option(
            fc.record({
              step: fc.constantFrom('begin', 'prepare', 'decide', 'promote', 'commit', 'cleanup'),
              phase: fc.constantFrom('before', 'after') as fc.Arbitrary<'before' | 'after'>,
              persistent: fc.boolean(),
            }),
            { nil: undefined },
          ),
          { minLength: 6, maxLength: 6 },
        ),
        async (batches, faults) => {
          const settings = settingsFor();
          const clock = new ManualClock(Date.now());
          const processor = createProcessor({ settings, clients: res.clients });
          let fault: (typeof faults)[number];
          let fired = false;
          const local = createLocalCoordinator({
            settings,
            clients: res.clients,
            clock,
            partitionsPerShard: 1,
            hooks: {
              beforeStep: (step) => crash(step, 'before'),
              afterStep: (step) => crash(step, 'after'),
            },
          });
          function crash(step: string, phase: string): void {
            if (!fault || fault.step !== step || fault.phase !== phase) return;
            if (!fault.persistent && fired) return;
            fired = true;
            throw new Error(`crash at ${step}:${phase}`);
          }
          const next = [0, 0, 0];
          const expected: Record<string, number[]> = {};
          for (const [i, batch] of batches.entries()) {
            const from = next[batch.partition]!;
            await processor.processEvent(mskEvent(orderRecords(batch.partition, from, batch.count)));
            const id = `orders#${batch.partition}`;
            expected[id] = [...(expected[id] ?? []), ...range(from, batch.count)];
            next[batch.partition] = from + batch.count;
            fault = faults[i];
            fired = false;
            await local.runCheckpoint();
            clock.advance(LEASE_S * 1000 + 1);
          }
          fault = undefined;
          for (let i = 0; i < 4; i++) {
            if ((await local.runCheckpoint()).status === 'empty') break;
            clock.advance(LEASE_S * 1000 + 1);
          }
          await expectExactlyOnce(res.clients, settings, expected);
        },
      ),
      { numRuns: 6, seed: 20261129 },
    );
  }, 120_000);
});
