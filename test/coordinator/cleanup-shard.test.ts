/**
 * A shard's cleanup from its voted plan (`cleanup/shard.ts`), against DynamoDB Local and the S3 server: after a
 * real checkpoint it deletes every covered staged object and entry with one GetObject for the plan and deletes
 * gathered across partitions — no ledger read a partition — and leaves what lies above the cut; without a readable
 * plan, or with one that does not account for every covered entry, it reads the ledger instead and still deletes
 * exactly what the cut covers.
 */
import { DeleteObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { cleanShard, plannedDeletes } from '../../shared/coordinator/cleanup/shard.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { coordinatorParts } from '../../shared/coordinator/parts.ts';
import type { ShardPlan } from '../../shared/coordinator/promote/plan-store.ts';
import { checkpointAttemptPrefix } from '../../shared/coordinator/work-objects.ts';
import { type CheckpointRecord, CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys as ledgerKeys, type Stream } from '../../shared/ledger/layout.ts';
import { inProgressPrefix, stagedObjectKey } from '../../shared/sink/layout.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { type FileSpec, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cleanup-shard');
});

function specs(partitions: number, files: number, from = 0): FileSpec[] {
  return Array.from({ length: partitions * files }, (_, i) => {
    const partition = i % partitions;
    const file = from + Math.floor(i / partitions);
    return { partition, firstOffset: 2 * file, lastOffset: 2 * file + 1 };
  });
}

async function stagedKeys(settings: Settings): Promise<string[]> {
  const found: string[] = [];
  for await (const object of listObjects(
    res.clients.s3,
    settings.bucket,
    inProgressPrefix(settings.pipelineId),
  ))
    found.push(object.key);
  return found.sort();
}

/**
 * Stages `partitions` x `files`, runs one checkpoint up to COMMITTED (no cleanup), then stages `later` more
 * files a partition above the cut. Returns the committed record and its shards.
 */
async function committed(
  partitions: number,
  files: number,
  later: number,
  input: Partial<SettingsInput> = {},
) {
  const settings = settingsIn(res, 'cs', input);
  await stageFiles(res.clients, settings, specs(partitions, files));
  const core = createCoordinator({ settings, clients: res.clients, partitionsPerShard: 1 });
  const begun = await core.begin({ execution: 'exec' });
  expect(begun.action).toBe('checkpoint');
  const ref = { execution: 'exec', checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  const above = await stageFiles(res.clients, settings, specs(partitions, later, files));
  const store = new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId);
  const record = (await store.readRecord(begun.checkpointId)) as CheckpointRecord;
  expect(record.status).toBe('COMMITTED');
  return { settings, record, shards: begun.shards, above: above.map((e) => e.key).sort() };
}

/** Cleans every shard with counted clients; returns the items deleted and the calls. */
async function cleanAll(settings: Settings, record: CheckpointRecord, shards: readonly number[]) {
  const clients = createAwsClients();
  const calls = new CallCounter().attach(clients);
  const parts = coordinatorParts({ settings, clients });
  let removed = 0;
  for (const shard of shards) removed += await cleanShard(parts, record, shard);
  return { removed, calls: calls.snapshot() };
}

describe('cleanShard', () => {
  it('deletes what the voted plans name, without a ledger read a partition, and nothing above the cut', async () => {
    const { settings, record, shards, above } = await committed(40, 3, 2);
    expect(shards).toHaveLength(16);
    const { removed, calls } = await cleanAll(settings, record, shards);
    expect(removed).toBe(120);
    expect(await stagedKeys(settings)).toEqual(above);
    // Per shard: its cut pages (one Query), its plan (one GetObject), one DeleteObjects and one batch of deletes.
    // No fence is written: the plans name no partition with entries inline in its fence (these were staged as items).
    expect(calls).toEqual({
      'dynamodb:Query': 16,
      'dynamodb:BatchExecuteStatement': 16,
      's3:DeleteObjects': 16,
      's3:GetObject': 16,
    });
    // A retried cleanup finds every entry gone: the same calls, no delete per entry, nothing counted deleted.
    const again = await cleanAll(settings, record, shards);
    expect(again).toEqual({ removed: 0, calls });
    // The entries above the cut are still there for the next checkpoint.
    const { ledger } = coordinatorParts({ settings, clients: res.clients });
    for (let partition = 0; partition < 40; partition++) {
      const left = [];
      for await (const entry of ledger.entries('orders', partition, { above: -1, upTo: 100 }))
        left.push(entry);
      expect(left.map((e) => e.lastOffset)).toEqual([7, 9]);
    }
  });

  it('cleans re-encoded (time-folder) plans the same way', async () => {
    const { settings, record, shards, above } = await committed(4, 3, 1, { timePartitioning: 'hour' });
    const { removed, calls } = await cleanAll(settings, record, shards);
    expect(removed).toBe(12);
    expect(await stagedKeys(settings)).toEqual(above);
    expect(calls['dynamodb:Query']).toBe(shards.length);
  });

  it('reads the ledger instead when the plan is gone, and still deletes exactly what the cut covers', async () => {
    const { settings, record, shards, above } = await committed(6, 2, 1);
    const prefix = checkpointAttemptPrefix(settings.pipelineId, record.checkpointId, record.attempt);
    for await (const object of listObjects(res.clients.s3, settings.bucket, prefix)) {
      await res.clients.s3.send(new DeleteObjectCommand({ Bucket: settings.bucket, Key: object.key }));
    }
    const { removed, calls } = await cleanAll(settings, record, shards);
    expect(removed).toBe(12);
    expect(await stagedKeys(settings)).toEqual(above);
    // The cut pages' Query and one Query a partition of the shard.
    expect(calls['dynamodb:Query']).toBe(shards.length + 6);
  });
});

describe('plannedDeletes', () => {
  const pipeline = 'pd';
  const key = (partition: number, first: number, last: number, stream: 'output' | 'deadletter' = 'output') =>
    stagedObjectKey(
      pipeline,
      { stream, topic: 'orders', partition, firstOffset: first, lastOffset: last },
      'a1',
      true,
    );
  const member = (k: string) => ({
    key: k,
    firstOffset: 0,
    lastOffset: 0,
    recordCount: 1,
    bytes: 1,
    sha256: '0'.repeat(64),
  });
  const planOf = (keys: string[], stagedFiles = keys.length): ShardPlan => ({
    checkpointId: 2,
    attempt: 1,
    shard: 0,
    stagedFiles,
    objects: [
      {
        stream: 'output',
        topic: 'orders',
        partition: 0,
        firstOffset: 0,
        lastOffset: 0,
        finalKey: 'f',
        gzip: true,
        recordCount: keys.length,
        members: keys.map(member),
      },
    ],
  });
  const cuts = [
    { partition: 'orders#0', previous: 9, cut: 19 },
    { partition: 'orders#1', previous: -1, cut: 5 },
  ];

  it('names each member once, inline in its fence or at its own ledger key, conditioned on its object (a plan that does not say where)', () => {
    const keys = [key(0, 10, 14), key(0, 15, 19, 'deadletter'), key(1, 0, 5)];
    const planned = plannedDeletes(pipeline, planOf([...keys, keys[0]!], 3), cuts);
    if ('refused' in planned) throw new Error(planned.refused);
    expect(planned.objects).toEqual(keys);
    const target = (partition: number, lastOffset: number, stream: Stream, object: string) => ({
      at: ledgerKeys.staged(pipeline, 'orders', partition, lastOffset, stream),
      key: object,
      inline: {
        fence: ledgerKeys.fence(pipeline, 'orders', partition),
        attribute: `e:${lastOffset}:${stream}`,
      },
      orItem: true,
    });
    expect(planned.targets).toEqual([
      target(0, 14, 'output', keys[0]!),
      target(0, 19, 'deadletter', keys[1]!),
      target(1, 5, 'output', keys[2]!),
    ]);
  });

  it('removes from a fence only in the partitions the plan says had entries inline there', () => {
    const keys = [key(0, 10, 14), key(1, 0, 5)];
    const planned = plannedDeletes(pipeline, { ...planOf(keys), inlinePartitions: ['orders#0'] }, cuts);
    if ('refused' in planned) throw new Error(planned.refused);
    expect(planned.targets).toEqual([
      {
        at: ledgerKeys.staged(pipeline, 'orders', 0, 14, 'output'),
        key: keys[0],
        inline: { fence: ledgerKeys.fence(pipeline, 'orders', 0), attribute: 'e:14:output' },
        orItem: true,
      },
      { at: ledgerKeys.staged(pipeline, 'orders', 1, 5, 'output'), key: keys[1] },
    ]);
  });

  it('refuses a plan that does not account for every covered entry, or names anything outside the cut', () => {
    const refused = (plan: ShardPlan) => 'refused' in plannedDeletes(pipeline, plan, cuts);
    expect(refused(planOf([key(0, 10, 14)], 2))).toBe(true);
    expect(refused(planOf([key(0, 5, 9)]))).toBe(true);
    expect(refused(planOf([key(0, 15, 20)]))).toBe(true);
    expect(refused(planOf([key(2, 0, 1)]))).toBe(true);
    expect(refused(planOf(['pd/final/orders/x.ndjson.gz']))).toBe(true);
    expect(refused(planOf([key(0, 10, 14)]))).toBe(false);
  });
});

describe("the coordinator's cleanup step", () => {
  /** Cleans every shard through the coordinator, shard 0 first, with counted clients; what each shard called. */
  async function cleanupSteps(settings: Settings, record: CheckpointRecord, shards: readonly number[]) {
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const core = createCoordinator({ settings, clients, partitionsPerShard: 1 });
    const ref = { execution: 'exec', checkpointId: record.checkpointId, attempt: record.attempt };
    const perShard: Array<Record<string, number>> = [];
    let removed = 0;
    for (const shard of shards) {
      calls.reset();
      removed += (await core.cleanup({ ...ref, shard })).count;
      perShard.push(calls.snapshot());
    }
    return { removed, perShard, core, ref };
  }

  it('cleans every shard from its voted plan, shard 0 first: no ledger read a partition, plans gone at the end', async () => {
    const few = await committed(16, 2, 1);
    const many = await committed(48, 2, 1);
    const runs: Array<Awaited<ReturnType<typeof cleanupSteps>>> = [];
    for (const run of [few, many]) {
      expect(run.shards).toHaveLength(16);
      const cleaned = await cleanupSteps(run.settings, run.record, run.shards);
      expect(cleaned.removed).toBe(run.settings === few.settings ? 32 : 96);
      expect(await stagedKeys(run.settings)).toEqual(run.above);
      // The plans stay until every shard is clean (each shard reads its own), then go.
      const work = checkpointAttemptPrefix(
        run.settings.pipelineId,
        run.record.checkpointId,
        run.record.attempt,
      );
      const left = [];
      for await (const object of listObjects(res.clients.s3, run.settings.bucket, work))
        left.push(object.key);
      expect(left).toEqual([]);
      runs.push(cleaned);
    }
    // Three times the partitions, the same ledger reads: every shard after the first read its plan, not the ledger.
    const queries = (run: (typeof runs)[number]) => run.perShard.map((calls) => calls['dynamodb:Query'] ?? 0);
    expect(queries(runs[1]!)).toEqual(queries(runs[0]!));
    for (const calls of runs[1]!.perShard.slice(1)) expect(calls['s3:GetObject']).toBe(1);
  });

  it('a shard cleaned again after the plans are gone deletes nothing more and fails nothing', async () => {
    const { settings, record, shards, above } = await committed(6, 2, 1);
    const { core, ref } = await cleanupSteps(settings, record, shards);
    for (const shard of shards) expect((await core.cleanup({ ...ref, shard })).count).toBe(0);
    expect(await stagedKeys(settings)).toEqual(above);
  });
});
