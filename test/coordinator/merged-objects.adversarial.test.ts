/**
 * Adversarial interleavings of merged final objects (C3, C5, C7; `prepare/plan-merged.ts`, `promote/merged-plan.ts`,
 * `promote/promoter.ts`, the readers of slices): a shard's partition objects of one stream and lane concatenated into
 * a few merged objects, one candidate and one copy each, the manifest listing each partition range as a slice.
 * Against DynamoDB Local and the local S3 server through the coordinator's own steps, with interleavings injected as
 * middleware on the coordinator's clients; the readers also on hand-written manifests. Each test names the property
 * it protects; its comment tells the interleaving and what would go wrong.
 */
import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { PromotionLimits } from '../../shared/coordinator/promote/final-plan.ts';
import {
  PlanStore,
  type ShardPlan,
  shardPlanSchema,
  workObjectJson,
} from '../../shared/coordinator/promote/plan-store.ts';
import { planKey } from '../../shared/coordinator/work-objects.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import {
  finalObjectKey,
  finalPrefix,
  manifestKey,
  mergedObjectKey,
  parseFinalKey,
  parseMergedObjectKey,
} from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { type CommittedObjects, readCommitted } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder } from '../support/checkpoint-steps.ts';
import { type ServiceHook as Hook, hookedClients } from '../support/hooked-clients.ts';
import { expectExactlyOnce, type FileSpec, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('merged-adv');
});

interface SetupOptions {
  readonly limits?: Partial<PromotionLimits>;
  readonly partitionsPerShard?: number;
  readonly finalObjects?: 'merged' | 'partition';
  readonly gzip?: boolean;
}

function setup(options: SetupOptions = {}) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('madv'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
    ...(options.gzip === undefined ? {} : { gzip: options.gzip }),
  });
  const clock = new ManualClock(Date.now());
  const coordinatorFor = (hook?: Hook, overrides: SetupOptions = {}): Coordinator => {
    const limits = overrides.limits ?? options.limits;
    const finalObjects = overrides.finalObjects ?? options.finalObjects;
    return createCoordinator({
      settings: finalObjects ? { ...settings, finalObjects } : settings,
      clients: hook ? hookedClients(hook) : res.clients,
      clock,
      partitionsPerShard: overrides.partitionsPerShard ?? options.partitionsPerShard ?? 64,
      ...(limits ? { promotionLimits: limits } : {}),
    });
  };
  return {
    settings,
    clock,
    pl: settings.pipelineId,
    core: coordinatorFor(),
    coordinatorFor,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    plans: new PlanStore(res.clients.s3, res.bucket, settings.pipelineId),
  };
}
type Setup = ReturnType<typeof setup>;

async function begin(s: Setup, execution = 'e1', core: Coordinator = s.core) {
  const b = await core.begin({ execution });
  const ref = { execution, checkpointId: b.checkpointId, attempt: b.attempt };
  return { ref, shards: b.shards, action: b.action };
}

async function manifestOf(s: Setup, id: number): Promise<Manifest> {
  const bytes = await getBytes(res.clients.s3, res.bucket, manifestKey(s.pl, id));
  return JSON.parse(bytes!.toString('utf8')) as Manifest;
}

async function finalKeys(s: Setup): Promise<string[]> {
  return (await keysUnder(res, finalPrefix(s.pl))).sort();
}

async function votedPlan(s: Setup, checkpointId: number, shard: number): Promise<ShardPlan> {
  const record = (await s.store.readRecord(checkpointId))!;
  const digest = record.planDigests![String(shard)]!;
  const bytes = await getBytes(
    res.clients.s3,
    res.bucket,
    planKey(s.pl, checkpointId, record.attempt, shard, digest),
  );
  return shardPlanSchema.parse(JSON.parse(workObjectJson(bytes!)!.toString()));
}

async function expectVerified(s: Setup): Promise<void> {
  const verdict = await verifySink({ s3: res.clients.s3, bucket: res.bucket, pipeline: s.pl });
  expect(verdict.problems).toEqual([]);
}

/** Rows whose lineage names `topic` (a lane keeps its topic: `orders~1` rows say `orders`). */
function rowsOf(topic: string, partition: number, first: number, last: number) {
  return range(first, last - first + 1).map((offset) => ({
    source: { topic, partition, offset },
    n: offset,
  }));
}

/** The offsets the committed reader shows, by lane and partition (`orders~1#0`), in read order. */
async function shownByLane(s: Setup): Promise<Record<string, number[]>> {
  const shown: Record<string, number[]> = {};
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: res.bucket,
    pipeline: s.pl,
  })) {
    const lane = `${file.topic}#${file.partition}`;
    shown[lane] = [...(shown[lane] ?? []), (row.source as { offset: number }).offset];
  }
  return shown;
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

describe('prepare, crashed and repeated, with merged objects', () => {
  it('a shard with one stamped member falls back to per-partition objects after merged candidates were written; each row once, and no unnamed candidate outlives the cleanup', async () => {
    // Partition 1's staged rows carry a staged Kafka timestamp (time folders switched off since): the shard is planned
    // per partition. Partition 0's merged group is written as a candidate FIRST (partition 1's read waits for it), so
    // the fallback leaves a merged candidate unnamed in the attempt's prefix; partition 0's per-partition candidate has
    // the very same bytes (one object, one group) and so the same content-addressed key: its write meets a 412 and
    // must take the existing one. What commits is per-partition objects, the stamp removed, each row once.
    const s = setup({ limits: { maxMembers: 1 } });
    const [, stamped] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      {
        partition: 1,
        firstOffset: 0,
        lastOffset: 4,
        rows: range(0, 5).map((offset) => ({
          source: { topic: 'orders', partition: 1, offset, timestamp: 1_700_000_000_000 + offset },
          n: offset,
        })),
      },
    ]);
    let candidatePut: () => void = () => {};
    const candidateWritten = new Promise<void>((resolve) => {
      candidatePut = resolve;
    });
    const candidates: string[] = [];
    const hooked = s.coordinatorFor(async (service, command, input, phase) => {
      if (service !== 's3') return;
      const key = String(input.Key);
      if (command === 'PutObjectCommand' && key.includes('/candidate-') && phase === 'after') {
        candidates.push(key);
        candidatePut();
      }
      if (command === 'GetObjectCommand' && key === stamped!.key && phase === 'before') {
        await candidateWritten;
      }
    });
    const { ref, shards } = await begin(s);
    expect(shards).toEqual([0]);
    await hooked.prepare({ ...ref, shard: 0 });
    const plan = await votedPlan(s, ref.checkpointId, 0);
    expect(plan.objects.map((o) => [o.partition, o.slice === undefined])).toEqual([
      [0, true],
      [1, true],
    ]);
    // The merged group of partition 0 was written before the fallback.
    expect(candidates.length).toBeGreaterThanOrEqual(2);
    await finish(s.core, ref, shards);
    const keys = await finalKeys(s);
    expect(keys.every((key) => parseFinalKey(s.pl, key) !== undefined)).toBe(true);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 5) });
    await expectVerified(s);
    expect(await keysUnder(res, `${s.pl}/_coordinator/`)).toEqual([]);
  });

  it('a prepare that crashed after writing some merged candidates, retried, names the same candidates and commits each row once', async () => {
    // Three merged groups (maxMembers 2); the first run dies right after its first candidate landed. The retry writes
    // every group again: the first meets its own content-addressed key (412) and takes it.
    const s = setup({ limits: { maxMembers: 2 } });
    const specs: FileSpec[] = [];
    for (let partition = 0; partition < 3; partition++) {
      specs.push({ partition, firstOffset: 0, lastOffset: 4 }, { partition, firstOffset: 5, lastOffset: 9 });
    }
    await stageFiles(res.clients, s.settings, specs);
    let crashed = false;
    const crashing = s.coordinatorFor(async (service, command, input, phase) => {
      if (crashed || service !== 's3' || command !== 'PutObjectCommand' || phase !== 'after') return;
      if (!String(input.Key).includes('/candidate-')) return;
      crashed = true;
      throw new Error('injected crash after a merged candidate');
    });
    const { ref, shards } = await begin(s);
    await expect(crashing.prepare({ ...ref, shard: 0 })).rejects.toThrow(/injected crash/);
    await s.core.prepare({ ...ref, shard: 0 });
    const plan = await votedPlan(s, ref.checkpointId, 0);
    expect(new Set(plan.objects.map((o) => o.finalKey)).size).toBe(3);
    await finish(s.core, ref, shards);
    await expectExactlyOnce(
      res.clients,
      s.settings,
      Object.fromEntries(range(0, 3).map((p) => [`orders#${p}`, range(0, 10)])),
    );
    await expectVerified(s);
  });

  it('two overlapping prepares of one shard that group it differently (limits changed by a deploy) leave one voted plan; only its merged objects are published, each row once', async () => {
    // Run A (one merged object for all partitions) pauses at its vote; run B (a deploy cut maxMembers to 2: three
    // merged objects, whose index 0 is another byte string at the same merged key) plans and votes; then A votes
    // last. The decided plan is A's: its key index 0 must hold A's candidate, and B's candidates are published nowhere.
    const s = setup();
    const specs: FileSpec[] = [];
    for (let partition = 0; partition < 3; partition++) {
      specs.push({ partition, firstOffset: 0, lastOffset: 4 }, { partition, firstOffset: 5, lastOffset: 9 });
    }
    await stageFiles(res.clients, s.settings, specs);
    const { ref, shards } = await begin(s);
    const runB = s.coordinatorFor(undefined, { limits: { maxMembers: 2 } });
    let paused = false;
    const runA = s.coordinatorFor(async (service, command, _input, phase) => {
      if (paused || service !== 'dynamodb' || !/^TransactWrite/.test(command) || phase !== 'before') return;
      paused = true;
      await runB.prepare({ ...ref, shard: 0 });
    });
    await runA.prepare({ ...ref, shard: 0 });
    expect(paused).toBe(true);
    const plan = await votedPlan(s, ref.checkpointId, 0);
    expect(new Set(plan.objects.map((o) => o.finalKey)).size).toBe(1);
    await finish(s.core, ref, shards);
    const keys = await finalKeys(s);
    expect(keys).toEqual([plan.objects[0]!.finalKey]);
    await expectExactlyOnce(
      res.clients,
      s.settings,
      Object.fromEntries(range(0, 3).map((p) => [`orders#${p}`, range(0, 10)])),
    );
    await expectVerified(s);
  });
});

describe('promote and commit of merged objects under crashes, zombies and concurrent roll-forwards', () => {
  /** Three partitions of two files each; partition 2's offset 7 is a dead letter, not output. */
  function threePartitions(): FileSpec[] {
    const specs: FileSpec[] = [];
    for (let partition = 0; partition < 3; partition++) {
      specs.push(
        { partition, firstOffset: 0, lastOffset: 4 },
        {
          partition,
          firstOffset: 5,
          lastOffset: 9,
          rows: rowsOf('orders', partition, 5, 9).filter((row) => partition !== 2 || row.n !== 7),
        },
      );
    }
    specs.push({
      partition: 2,
      firstOffset: 0,
      lastOffset: 9,
      stream: 'deadletter',
      rows: [{ source: { topic: 'orders', partition: 2, offset: 7 }, error: 'bad' }],
    });
    return specs;
  }
  const expected = () =>
    Object.fromEntries(
      range(0, 3).map((p) => [`orders#${p}`, range(0, 10).filter((o) => p !== 2 || o !== 7)]),
    );

  it('a promote that crashed after copying one merged object, before the next and before its record, is rolled forward after the lease by the next execution: each row once', async () => {
    const s = setup({ limits: { maxMembers: 2 } });
    await stageFiles(res.clients, s.settings, threePartitions());
    const { ref, shards } = await begin(s);
    for (const shard of shards) await s.core.prepare({ ...ref, shard });
    await s.core.decide(ref);
    let copies = 0;
    const crashing = s.coordinatorFor(async (service, command, _input, phase) => {
      if (service !== 's3' || command !== 'CopyObjectCommand' || phase !== 'after') return;
      copies++;
      throw new Error('injected crash after a merged copy');
    });
    await expect(crashing.promote({ ...ref, shard: 0 })).rejects.toThrow(/injected crash/);
    expect(copies).toBeGreaterThanOrEqual(1);
    expect((await finalKeys(s)).length).toBeGreaterThanOrEqual(1);
    s.clock.advance(601_000);
    const next = await begin(s, 'e2');
    expect(next.action).toBe('commit');
    expect(next.ref).toMatchObject({ checkpointId: ref.checkpointId, attempt: ref.attempt });
    await finish(s.core, next.ref, next.shards);
    await expectExactlyOnce(res.clients, s.settings, expected());
    await expectVerified(s);
    const manifest = await manifestOf(s, ref.checkpointId);
    expect(
      manifest.files.filter((f) => f.stream === 'output').map((f) => f.sliceStart !== undefined),
    ).toEqual([true, true, true]);
  });

  it('two executions rolling one decided checkpoint forward at once (one paused at its copy until the other committed and cleaned up) settle on the same merged objects', async () => {
    const s = setup({ limits: { maxMembers: 2 } });
    await stageFiles(res.clients, s.settings, threePartitions());
    const { ref, shards } = await begin(s);
    for (const shard of shards) await s.core.prepare({ ...ref, shard });
    await s.core.decide(ref);
    let fired = false;
    const slow = s.coordinatorFor(async (service, command, _input, phase) => {
      if (fired || service !== 's3' || command !== 'CopyObjectCommand' || phase !== 'before') return;
      fired = true;
      s.clock.advance(601_000);
      const other = await begin(s, 'e2');
      expect(other.action).toBe('commit');
      await finish(s.core, other.ref, other.shards);
    });
    await expect(slow.promote({ ...ref, shard: 0 })).resolves.toMatchObject({ shard: 0 });
    expect(fired).toBe(true);
    await expectExactlyOnce(res.clients, s.settings, expected());
    await expectVerified(s);
  });

  it('an abort asked for after a partial promote of merged objects is refused, and the checkpoint rolls forward (C4)', async () => {
    const s = setup({ partitionsPerShard: 1 });
    await stageFiles(res.clients, s.settings, threePartitions());
    const { ref, shards } = await begin(s);
    expect(shards).toEqual([0, 1, 2]);
    for (const shard of shards) await s.core.prepare({ ...ref, shard });
    await s.core.decide(ref);
    await s.core.promote({ ...ref, shard: 1 });
    await s.core.abort({ ...ref, error: { Error: 'States.TaskFailed' } }).catch(() => undefined);
    expect(await s.store.readRecord(ref.checkpointId)).toMatchObject({ status: 'COMMITTING' });
    await finish(s.core, ref, shards);
    await expectExactlyOnce(res.clients, s.settings, expected());
    await expectVerified(s);
    // One shard a partition: each shard's merged keys name it.
    const manifest = await manifestOf(s, ref.checkpointId);
    expect(
      manifest.files.map((f) => [f.stream, f.partition, parseMergedObjectKey(s.pl, f.key)?.shard]),
    ).toEqual([
      ['deadletter', 2, 2],
      ['output', 0, 0],
      ['output', 1, 1],
      ['output', 2, 2],
    ]);
  });
});

describe('what one shard packs into merged objects', () => {
  it('lanes of an epoch, a generation and a redrive round, dead letters and empty staged files in one shard: one merged object a lane and stream, each lane committed once, eos verify clean', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      // orders/0: offset 2 is a dead letter; offsets 5-9 were staged without rows (an empty file inside the object).
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 4,
        rows: rowsOf('orders', 0, 0, 4).filter((r) => r.n !== 2),
      },
      { partition: 0, firstOffset: 5, lastOffset: 9, rows: [] },
      { partition: 0, firstOffset: 10, lastOffset: 14, rows: rowsOf('orders', 0, 10, 14) },
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 4,
        stream: 'deadletter',
        rows: [{ source: { topic: 'orders', partition: 0, offset: 2 }, error: 'bad' }],
      },
      // orders/1: every staged file empty.
      { partition: 1, firstOffset: 0, lastOffset: 4, rows: [] },
      { partition: 1, firstOffset: 5, lastOffset: 9, rows: [] },
      { topic: 'orders~1', partition: 0, firstOffset: 0, lastOffset: 4, rows: rowsOf('orders', 0, 0, 4) },
      { topic: 'orders~1', partition: 1, firstOffset: 0, lastOffset: 2, rows: rowsOf('orders', 1, 0, 2) },
      { topic: 'orders~g1', partition: 0, firstOffset: 0, lastOffset: 4, rows: rowsOf('orders', 0, 0, 4) },
      { topic: 'orders~r1', partition: 0, firstOffset: 2, lastOffset: 2, rows: rowsOf('orders', 0, 2, 2) },
    ]);
    const { ref, shards } = await begin(s);
    expect(shards).toEqual([0]);
    await s.core.prepare({ ...ref, shard: 0 });
    await finish(s.core, ref, shards);
    const manifest = await manifestOf(s, ref.checkpointId);
    const byKey = new Map<string, string[]>();
    for (const f of manifest.files) {
      const name = parseMergedObjectKey(s.pl, f.key);
      expect(name).toMatchObject({ stream: f.stream, topic: f.topic, checkpointId: ref.checkpointId });
      byKey.set(f.key, [
        ...(byKey.get(f.key) ?? []),
        `${f.stream}:${f.topic}/${f.partition}:${f.firstOffset}-${f.lastOffset}`,
      ]);
    }
    expect([...byKey.values()].sort()).toEqual(
      [
        ['deadletter:orders/0:0-4'],
        ['output:orders/0:0-14'],
        ['output:orders~1/0:0-4', 'output:orders~1/1:0-2'],
        ['output:orders~g1/0:0-4'],
        ['output:orders~r1/0:2-2'],
      ].sort(),
    );
    // What the committed reader shows, by lane (a generation never switched to shows nothing).
    expect(await shownByLane(s)).toEqual({
      'orders#0': [0, 1, 3, 4, 10, 11, 12, 13, 14],
      'orders~1#0': range(0, 5),
      'orders~1#1': range(0, 3),
      'orders~r1#0': [2],
    });
    await expectVerified(s);
    expect(await keysUnder(res, `${s.pl}/_coordinator/`)).toEqual([]);
    expect(await keysUnder(res, `${s.pl}/_inprogress/`)).toEqual([]);
  });

  it('the byte limit at its edges: two objects exactly at maxObjectBytes share one merged object, one over it goes alone, an empty staged file weighs nothing, an all-empty partition has no slice', async () => {
    const s = setup({ gzip: false });
    const five = (partition: number): FileSpec => ({ partition, firstOffset: 10, lastOffset: 14 });
    const entries = await stageFiles(res.clients, s.settings, [
      five(0),
      five(1),
      { partition: 2, firstOffset: 10, lastOffset: 59 },
      five(3),
      five(4),
      five(5),
      { partition: 6, firstOffset: 0, lastOffset: 9, rows: [] },
      { partition: 7, firstOffset: 0, lastOffset: 9, rows: [] },
      five(7),
    ]);
    const size = entries[0]!.bytes;
    expect(entries.filter((e) => e.recordCount === 5).every((e) => e.bytes === size)).toBe(true);
    const core = s.coordinatorFor(undefined, { limits: { maxObjectBytes: 2 * size } });
    const { ref, shards } = await begin(s, 'e1', core);
    await core.prepare({ ...ref, shard: 0 });
    await finish(core, ref, shards);
    const manifest = await manifestOf(s, ref.checkpointId);
    const byKey = new Map<string, number[]>();
    for (const f of manifest.files) byKey.set(f.key, [...(byKey.get(f.key) ?? []), f.partition]);
    expect([...byKey.values()]).toEqual([[0, 1], [2], [3, 4], [5, 7]]);
    for (const key of byKey.keys()) {
      const body = (await getBytes(res.clients.s3, res.bucket, key))!;
      const slices = manifest.files.filter((f) => f.key === key);
      expect(body.length).toBe(slices.reduce((sum, f) => sum + f.bytes, 0));
    }
    expect(manifest.files.find((f) => f.partition === 7)).toMatchObject({ firstOffset: 0, lastOffset: 14 });
    await expectExactlyOnce(res.clients, s.settings, {
      'orders#0': range(10, 5),
      'orders#1': range(10, 5),
      'orders#2': range(10, 50),
      'orders#3': range(10, 5),
      'orders#4': range(10, 5),
      'orders#5': range(10, 5),
      'orders#7': range(10, 5),
    });
    await expectVerified(s);
  });

  it('a checkpoint whose shard 0 voted a per-partition plan with candidates (the release before merged objects) and shard 1 a merged plan rolls forward: each row once', async () => {
    const s = setup({ partitionsPerShard: 1 });
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 5, lastOffset: 9 },
    ]);
    const { ref, shards } = await begin(s);
    expect(shards).toEqual([0, 1]);
    const before = s.coordinatorFor(undefined, { finalObjects: 'partition' });
    await before.prepare({ ...ref, shard: 0 });
    await s.core.prepare({ ...ref, shard: 1 });
    expect((await votedPlan(s, ref.checkpointId, 0)).objects.every((o) => o.slice === undefined)).toBe(true);
    expect((await votedPlan(s, ref.checkpointId, 1)).objects.every((o) => o.slice !== undefined)).toBe(true);
    await finish(s.core, ref, shards);
    const keys = await finalKeys(s);
    expect(keys.map((k) => (parseMergedObjectKey(s.pl, k) ? 'merged' : 'partition')).sort()).toEqual([
      'merged',
      'partition',
    ]);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10), 'orders#1': range(0, 10) });
    await expectVerified(s);
  });
});

describe('a forged plan of merged objects', () => {
  it('a voted plan naming one partition range twice, as slices of two merged objects, never makes a reader yield its rows twice', async () => {
    // With per-partition keys a range has ONE final key: a plan naming it twice made the manifest list one key twice,
    // which every reader refuses (ListingCheck: "listed twice"). A merged key names the plan's place instead, so the
    // same range can be planned as a slice of merged object 0 and again of merged object 1 (the same candidate, each
    // tiling it exactly). Promote's checks (assertPlannedObjects: each object's members and key, each merged key's
    // tiling) pass it, commit's matchPromotion compares the promotion with the same plan, and the committed reader
    // checks keys, not ranges: each row of the range is read twice. Only `eos verify` (lineage-twice) notices.
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const { ref, shards } = await begin(s);
    await s.core.prepare({ ...ref, shard: 0 });
    const plan = await votedPlan(s, ref.checkpointId, 0);
    expect(plan.objects).toHaveLength(1);
    const object = plan.objects[0]!;
    const name = parseMergedObjectKey(s.pl, object.finalKey)!;
    const forged: ShardPlan = {
      ...plan,
      objects: [object, { ...object, finalKey: mergedObjectKey(s.pl, { ...name, index: 1 }) }],
    };
    const digest = await s.plans.writePlan(forged);
    await s.store.vote(ref.checkpointId, ref.attempt, 0, digest, s.clock.now() + 600_000, s.clock.now());
    await s.core.decide(ref);
    let refused: unknown;
    const rows: string[] = [];
    try {
      await finish(s.core, ref, shards);
      for await (const { file, row } of readCommitted({
        s3: res.clients.s3,
        bucket: res.bucket,
        pipeline: s.pl,
      })) {
        rows.push(`${file.partition}@${(row.source as { offset: number }).offset}`);
      }
    } catch (error) {
      refused = error;
    }
    // Refused somewhere (promote, commit or the reader), or each row read once.
    if (refused === undefined) expect(rows).toEqual(range(0, 5).map((o) => `0@${o}`));
  });
});

describe('the readers of slices accept exactly the good layouts', () => {
  const pl = 'rdr';
  const gzip = true;
  const body = (partition: number, first: number, last: number) =>
    encodeNdjson(rowsOf('orders', partition, first, last), gzip);
  const key = (index: number, over: Partial<Parameters<typeof mergedObjectKey>[1]> = {}) =>
    mergedObjectKey(pl, {
      stream: 'output',
      topic: 'orders',
      checkpointId: 1,
      attempt: 1,
      shard: 0,
      index,
      gzip,
      ...over,
    });
  const slice = (
    objectKey: string,
    partition: number,
    encoded: ReturnType<typeof body>,
    start: number,
    first = 0,
    last = 4,
  ): ManifestFile => ({
    key: objectKey,
    stream: 'output',
    topic: 'orders',
    partition,
    firstOffset: first,
    lastOffset: last,
    recordCount: encoded.recordCount,
    bytes: encoded.bytes,
    sha256: encoded.sha256,
    format: 'ndjson',
    sliceStart: start,
  });
  const manifest = (checkpointId: number, files: ManifestFile[], cut: Record<string, number>): Manifest => ({
    version: 1,
    pipeline: pl,
    checkpointId,
    previousCheckpointId: checkpointId - 1,
    cut,
    previousCut: {},
    committedAt: new Date(0).toISOString(),
    files,
  });
  /** An in-memory bucket: the readers' own sources over it. */
  function bucket(objects: Record<string, Buffer>, manifests: Manifest[]) {
    const committed: CommittedObjects = {
      async *manifests() {
        yield* manifests;
      },
      bytes: async (k) => objects[k],
      range: async (k, span) => objects[k]?.subarray(span.start, span.end),
    };
    const all: Record<string, Buffer> = { ...objects };
    for (const m of manifests) all[manifestKey(pl, m.checkpointId)] = Buffer.from(JSON.stringify(m));
    const keyed = {
      list: async (prefix: string) =>
        Object.keys(all)
          .filter((k) => k.startsWith(prefix))
          .sort(),
      get: async (k: string) => all[k],
    };
    return { committed, keyed };
  }
  async function read(committed: CommittedObjects): Promise<string[]> {
    const rows: string[] = [];
    for await (const { file, row } of readCommitted({ objects: committed, pipeline: pl })) {
      rows.push(`${file.partition}@${(row.source as { offset: number }).offset}`);
    }
    return rows;
  }

  it('a well-formed merged object (two partitions, two slices) is read once per row and verifies clean', async () => {
    const p0 = body(0, 0, 4);
    const p1 = body(1, 0, 4);
    const k = key(0);
    const { committed, keyed } = bucket({ [k]: Buffer.concat([p0.body, p1.body]) }, [
      manifest(1, [slice(k, 0, p0, 0), slice(k, 1, p1, p0.bytes)], { 'orders#0': 4, 'orders#1': 4 }),
    ]);
    expect(await read(committed)).toEqual([
      ...range(0, 5).map((o) => `0@${o}`),
      ...range(0, 5).map((o) => `1@${o}`),
    ]);
    expect((await verifySink({ objects: keyed, pipeline: pl })).problems).toEqual([]);
  });

  it('one partition range listed as slices of two merged objects is refused by the committed reader, as one range listed twice whole always was', async () => {
    // A plan (or manifest) naming partition 0's range twice, in two merged objects of the checkpoint (indexes 0 and
    // 1, each a whole gzip stream of the same rows). Per-partition keys made this one key listed twice, which every
    // reader refuses (ListingCheck). With merged keys the two entries have different keys, each tiles its object,
    // and promote's slice check does not ask whether two slices name one range: readCommitted, eos read and eos query
    // (the same ListingCheck) yield each of its rows twice. eos verify alone notices (lineage-twice).
    const p0 = body(0, 0, 4);
    const whole = finalObjectKey(
      pl,
      { stream: 'output', topic: 'orders', partition: 0, firstOffset: 0, lastOffset: 4 },
      gzip,
    );
    const wholeEntry: ManifestFile = { ...slice(whole, 0, p0, 0) };
    delete (wholeEntry as { sliceStart?: number }).sliceStart;
    const before = bucket({ [whole]: p0.body }, [manifest(1, [wholeEntry, wholeEntry], { 'orders#0': 4 })]);
    await expect(read(before.committed)).rejects.toThrow(/listed twice/);
    const merged = bucket({ [key(0)]: p0.body, [key(1)]: p0.body }, [
      manifest(1, [slice(key(0), 0, p0, 0), slice(key(1), 0, p0, 0)], { 'orders#0': 4 }),
    ]);
    expect((await verifySink({ objects: merged.keyed, pipeline: pl })).problems.map((p) => p.kind)).toContain(
      'lineage-twice',
    );
    await expect(read(merged.committed)).rejects.toThrow();
  });

  it('a slice listed twice, slices of one object in two manifests, a gap, a slice naming another pipeline, lane or checkpoint, and a merged object listed whole are refused before any row is read', async () => {
    const p0 = body(0, 0, 4);
    const p1 = body(1, 0, 4);
    const k = key(0);
    const objects = { [k]: Buffer.concat([p0.body, p1.body]) };
    const cut = { 'orders#0': 4, 'orders#1': 4 };
    const refused = async (manifests: Manifest[], why: RegExp) => {
      const { committed } = bucket(objects, manifests);
      await expect(read(committed)).rejects.toThrow(why);
    };
    await refused(
      [manifest(1, [slice(k, 0, p0, 0), slice(k, 0, p0, 0), slice(k, 1, p1, p0.bytes)], cut)],
      // The same range twice: refused for naming it twice (or, were the ranges distinct, for the bytes' overlap).
      /overlap|lists too/,
    );
    await refused(
      [
        manifest(1, [slice(k, 0, p0, 0)], cut),
        { ...manifest(2, [slice(k, 1, p1, p0.bytes)], cut), previousCut: cut },
      ],
      /listed twice|checkpoint/,
    );
    await refused([manifest(1, [slice(k, 1, p1, p0.bytes)], cut)], /leave bytes 0-/);
    const other = mergedObjectKey('rdr2', {
      stream: 'output',
      topic: 'orders',
      checkpointId: 1,
      attempt: 1,
      shard: 0,
      index: 0,
      gzip,
    });
    await refused([manifest(1, [slice(other, 0, p0, 0)], cut)], /not the final data key of a merged object/);
    await refused([manifest(1, [{ ...slice(key(0, { topic: 'clicks' }), 0, p0, 0) }], cut)], /lane clicks/);
    await refused([manifest(1, [slice(key(0, { checkpointId: 2 }), 0, p0, 0)], cut)], /checkpoint 2/);
    const asWhole: ManifestFile = { ...slice(k, 0, p0, 0) };
    delete (asWhole as { sliceStart?: number }).sliceStart;
    await refused([manifest(1, [asWhole], cut)], /not the final data key/);
  });

  it("slices whose bytes lie (a SHA-256 or a start not the bytes they name) are refused by the reader and reported by eos verify; bytes past the last slice are eos verify's to report", async () => {
    const p0 = body(0, 0, 4);
    const p1 = body(1, 0, 4);
    const k = key(0);
    const objects = { [k]: Buffer.concat([p0.body, p1.body]) };
    const cut = { 'orders#0': 4, 'orders#1': 4 };
    // Partition 0's entry names partition 1's bytes (starts swapped, sizes and digests kept): refused by digest.
    const swapped = bucket(objects, [
      manifest(1, [{ ...slice(k, 0, p0, p1.bytes) }, { ...slice(k, 1, p1, 0) }], cut),
    ]);
    // Equal sizes tile exactly and are refused by digest; unequal ones by their gap or overlap.
    await expect(read(swapped.committed)).rejects.toThrow(/does not match its manifest|overlap|leave bytes/);
    const lying = bucket(objects, [
      manifest(1, [{ ...slice(k, 0, p0, 0), sha256: sha256(p1.body) }, slice(k, 1, p1, p0.bytes)], cut),
    ]);
    await expect(read(lying.committed)).rejects.toThrow(/does not match its manifest/);
    expect((await verifySink({ objects: lying.keyed, pipeline: pl })).problems.map((p) => p.kind)).toContain(
      'object-mismatch',
    );
    const trailing = bucket(objects, [manifest(1, [slice(k, 0, p0, 0)], { 'orders#0': 4 })]);
    expect(await read(trailing.committed)).toEqual(range(0, 5).map((o) => `0@${o}`));
    expect(
      (await verifySink({ objects: trailing.keyed, pipeline: pl })).problems.map((p) => p.kind),
    ).toContain('object-mismatch');
  });
});

describe('staging that races the checkpoint, and the replay view over merged keys', () => {
  it('files staged between begin and prepare (new partitions and above the cut) join no merged object of this checkpoint; the next commits them, each row once', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 4 },
    ]);
    const first = await begin(s);
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 5, lastOffset: 9 },
      { partition: 2, firstOffset: 0, lastOffset: 4 },
      { topic: 'orders~1', partition: 1, firstOffset: 0, lastOffset: 4, rows: rowsOf('orders', 1, 0, 4) },
    ]);
    for (const shard of first.shards) await s.core.prepare({ ...first.ref, shard });
    await finish(s.core, first.ref, first.shards);
    const m1 = await manifestOf(s, first.ref.checkpointId);
    expect(m1.files.map((f) => `${f.topic}/${f.partition}:${f.firstOffset}-${f.lastOffset}`)).toEqual([
      'orders/0:0-4',
      'orders/1:0-4',
    ]);
    const second = await begin(s, 'e2');
    for (const shard of second.shards) await s.core.prepare({ ...second.ref, shard });
    await finish(s.core, second.ref, second.shards);
    const m2 = await manifestOf(s, second.ref.checkpointId);
    expect(m2.files.map((f) => `${f.topic}/${f.partition}:${f.firstOffset}-${f.lastOffset}`)).toEqual([
      'orders/0:5-9',
      'orders/2:0-4',
      'orders~1/1:0-4',
    ]);
    expect(new Set(m2.files.map((f) => parseMergedObjectKey(s.pl, f.key)?.checkpointId))).toEqual(
      new Set([2]),
    );
    expect(await shownByLane(s)).toEqual({
      'orders#0': range(0, 10),
      'orders#1': range(0, 5),
      'orders#2': range(0, 5),
      'orders~1#1': range(0, 5),
    });
    await expectVerified(s);
  });

  it('the replay view reads the lane, epoch lane and generation of a merged key as of a per-partition key (DuckDB)', async () => {
    const { epochLaneOf, generationOf } = await import('../../shared/replay/current-view.ts');
    const keys = [
      mergedObjectKey('pl', {
        stream: 'output',
        topic: 'orders~2~g3',
        checkpointId: 12,
        attempt: 4,
        shard: 15,
        index: 7,
        gzip: true,
      }),
      finalObjectKey(
        'pl',
        { stream: 'output', topic: 'orders~2~g3', partition: 5, firstOffset: 0, lastOffset: 9 },
        true,
      ),
      mergedObjectKey('pl', {
        stream: 'output',
        topic: 'orders~r1',
        checkpointId: 1,
        attempt: 1,
        shard: 0,
        index: 0,
        gzip: false,
      }),
      mergedObjectKey('pl', {
        stream: 'output',
        topic: 'orders',
        checkpointId: 1,
        attempt: 1,
        shard: 0,
        index: 0,
        gzip: false,
      }),
    ];
    const { DuckDBInstance } = await import('@duckdb/node-api');
    const instance = await DuckDBInstance.create(':memory:');
    const connection = await instance.connect();
    try {
      const found: string[] = [];
      for (const key of keys) {
        const path = `'s3://bucket/${key}'`;
        const reader = await connection.runAndReadAll(
          `SELECT ${epochLaneOf(path)} AS lane, ${generationOf(path)} AS generation`,
        );
        const [row] = reader.getRowObjectsJS() as Array<{ lane: string; generation: bigint | number }>;
        found.push(`${row!.lane}#${Number(row!.generation)}`);
      }
      expect(found).toEqual(['orders~2#3', 'orders~2#3', 'orders#0', 'orders#0']);
    } finally {
      connection.closeSync();
    }
  });
});
