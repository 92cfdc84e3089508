/**
 * Adversarial interleavings of promote's slices and hour folders: a checkpoint decided under an older plan
 * layout, rows whose lineage lies outside their entry, the row cap for one staged file, and deterministic slices
 * across crash, retry and zombie. Each comment gives the interleaving.
 * Real DynamoDB Local and S3 server (the vitest global setup); staged files written as the processor writes them
 * (test/support/staging.ts stamps stagedAt with the current time, so record times are relative to Date.now()).
 */
import { CopyObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import {
  PlanStore,
  type ShardPlan,
  shardPlanSchema,
  workObjectJson,
} from '../../shared/coordinator/promote/plan-store.ts';
import type { PlannedObject } from '../../shared/coordinator/promote/promoter.ts';
import { checkpointAttemptPrefix, stagedCopyKey } from '../../shared/coordinator/work-objects.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { finalObjectKey } from '../../shared/sink/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { timeFolder } from '../../shared/sink/time-partitions.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { committedOffsets, range, stageFiles } from '../support/staging.ts';

/**
 * How many rows each decode of a staged object held during promote (see the memory test): whole decodes
 * (classifyStaged) and streamed reads of one member's rows (streamMemberRows).
 */
const decodes = vi.hoisted(() => ({ recording: false, sizes: [] as number[], streamed: 0 }));
vi.mock('../../shared/coordinator/promote/folder-plan.ts', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../shared/coordinator/promote/folder-plan.ts')>();
  return {
    ...original,
    classifyStaged: (...args: Parameters<typeof original.classifyStaged>) => {
      const rows = original.classifyStaged(...args);
      if (decodes.recording) decodes.sizes.push(rows.length);
      return rows;
    },
    streamMemberRows: async (...args: Parameters<typeof original.streamMemberRows>) => {
      const rows = await original.streamMemberRows(...args);
      if (decodes.recording) {
        decodes.sizes.push(rows.length);
        decodes.streamed += 1;
      }
      return rows;
    },
  };
});

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvpq2');
});

function settingsFor(pipelineId: string, extra: Record<string, unknown> = {}): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId,
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: COLUMNS,
    ...extra,
  });
}

/** Rows as the processor stages them with time folders: lineage plus the Kafka timestamp. */
function rows(
  partition: number,
  offsets: readonly number[],
  times: readonly number[],
): Record<string, unknown>[] {
  return offsets.map((offset, i) => ({
    n: offset,
    at: times[i]!,
    source: { topic: 'orders', partition, offset, timestamp: times[i]! },
  }));
}

async function verified(settings: Settings) {
  return verifySink({ s3: res.clients.s3, bucket: settings.bucket, pipeline: settings.pipelineId });
}

/** Each partition's committed offsets, sorted (with time folders the read order is per folder). */
async function offsetsOf(settings: Settings, stream: 'output' | 'deadletter' = 'output') {
  const found: Record<string, number[]> = {};
  for (const { partition, offset } of await committedOffsets(res.clients, settings, stream)) {
    found[partition] ??= [];
    found[partition]!.push(offset);
  }
  for (const list of Object.values(found)) list.sort((a, b) => a - b);
  return found;
}

/** Keys and bytes of everything under final/. */
async function finalObjects(settings: Settings): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for await (const o of listObjects(res.clients.s3, settings.bucket, `${settings.pipelineId}/final/`)) {
    out.set(o.key, (await getBytes(res.clients.s3, settings.bucket, o.key))!.toString('base64'));
  }
  return out;
}

type Ref = { execution: string; checkpointId: number; attempt: number };

async function beginAndPrepare(
  core: Coordinator,
  execution: string,
): Promise<{ ref: Ref; shards: number[] }> {
  const begun = await core.begin({ execution });
  expect(begun.action).toBe('checkpoint');
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  return { ref, shards: [...begun.shards] };
}

async function finish(core: Coordinator, ref: Ref, shards: readonly number[]): Promise<void> {
  for (const shard of shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of shards) await core.cleanup({ ...ref, shard });
}

/** The plan prepare wrote for (checkpoint, attempt, shard): the one object under its content-addressed key. */
async function writtenPlan(settings: Settings, ref: Ref, shard: number): Promise<ShardPlan> {
  const prefix = `${checkpointAttemptPrefix(settings.pipelineId, ref.checkpointId, ref.attempt)}plan-${shard}-`;
  const keys: string[] = [];
  for await (const o of listObjects(res.clients.s3, settings.bucket, prefix)) keys.push(o.key);
  expect(keys).toHaveLength(1);
  const body = (await getBytes(res.clients.s3, settings.bucket, keys[0]!))!;
  return shardPlanSchema.parse(JSON.parse(workObjectJson(body)!.toString('utf8'))) as ShardPlan;
}

describe('promote of a decided checkpoint: plans from before an upgrade, row lineage, memory', () => {
  /**
   * Hazard (stall after the decision, on upgrade): a checkpoint decided under an older folder rule must roll forward under
   * the new one.
   *
   * Interleaving: the coordinator of the previous release prepares and decides checkpoint N. Its plan files every
   * row by its own record time (no lateness window, no folder cap): a record with Kafka's "no timestamp" (-1) gets
   * an object in dt=1970-01-01/hour=00, a replayed record from 10 days ago one in its own hour. Before promote
   * runs (or after a promote that crashed half way), the stack is redeployed with a new folder rule. The plan is voted and
   * content-addressed, so the new promote reads it as it is: promoteShard (promoter.ts) decodes each member and
   * classifies its rows with the NEW rule (folder-plan.ts classifyRows → record-time.ts assignFolders: a time
   * outside [stagedAt − 7 d, stagedAt + 1 h] goes to the stagedAt folder), then reencode() finds 0 rows of the
   * member in the 1970 folder where the voted plan says 1 and throws PlanRejectedError. After the decision the
   * checkpoint can only roll forward (C4), every retry fails the same way, and with one checkpoint in flight (C1)
   * the whole pipeline stops committing. The plan schema records no folder rule (nothing tells the new promote
   * that the plan was made under another one), although docs/output.md promises "a checkpoint in flight finishes
   * as it was planned".
   *
   * The old plan is built here exactly as the previous prepare wrote it (its census counted rows per
   * `folderOfRow`, unbounded; members without fromOffset/toOffset/misfit): the new plan's object split per
   * record-time folder, then voted for as that prepare would have (`CheckpointStore.vote`).
   *
   * Guard: the plan records the bound its census used (`encoding.folderBounds`), and promote classifies with the
   * plan's bound, with none when the plan has none (a plan made before the bound existed). The old plan here has
   * no `folderBounds`, as the previous release's plans had none.
   */
  it('a checkpoint decided before the upgrade (plan filed by unbounded record time) rolls forward after it', async () => {
    const settings = settingsFor(uniqueName('rvpq2'));
    const now = Date.now();
    const times = [now, -1, now - 10 * DAY];
    const [entry] = await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 2, rows: rows(0, [0, 1, 2], times) },
    ]);
    const clock = new ManualClock(Date.now());
    const core = createCoordinator({ settings, clients: res.clients, clock });
    const { ref, shards } = await beginAndPrepare(core, 'e1');
    expect(shards).toEqual([0]);
    // The plan as the previous release's prepare wrote it: one object per record-time folder.
    const plan = await writtenPlan(settings, ref, 0);
    expect(plan.objects).toHaveLength(1);
    const [object] = plan.objects as PlannedObject[];
    const byFolder = new Map<string, number>();
    for (const time of times) {
      const folder = timeFolder(time, 'hour');
      byFolder.set(folder, (byFolder.get(folder) ?? 0) + 1);
    }
    const oldObjects = [...byFolder]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([folder, count]): PlannedObject => {
        // The previous release's plans named no candidates: promote merges the verified copies for them.
        const { candidate: _candidate, ...planned } = object!;
        const where = { ...planned, folder };
        return {
          ...where,
          finalKey: finalObjectKey(settings.pipelineId, where, 'parquet'),
          recordCount: count,
          members: object!.members.map((m) => ({ ...m, rows: count })),
        };
      });
    expect(oldObjects).toHaveLength(3);
    // This release records its bound; the previous release's plan had none.
    expect(plan.encoding?.folderBounds).toBeDefined();
    const { folderBounds: _bounds, ...oldEncoding } = plan.encoding ?? {};
    const oldPlan: ShardPlan = { ...plan, encoding: oldEncoding, objects: oldObjects };
    // That prepare verified a copy of each member under the attempt's folder, which its promote reads.
    for (const m of object!.members) {
      await res.clients.s3.send(
        new CopyObjectCommand({
          Bucket: settings.bucket,
          Key: stagedCopyKey(settings.pipelineId, ref.checkpointId, ref.attempt, m.key),
          CopySource: `${settings.bucket}/${m.key}`,
        }),
      );
    }
    const digest = await new PlanStore(res.clients.s3, settings.bucket, settings.pipelineId).writePlan(
      oldPlan,
    );
    await new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId).vote(
      ref.checkpointId,
      ref.attempt,
      0,
      digest,
      clock.now() + 600_000,
      clock.now(),
    );
    await core.decide(ref);
    // The new release rolls the decided checkpoint forward.
    let failure: unknown;
    try {
      await finish(core, ref, shards);
    } catch (error) {
      failure = error;
    }
    // Without the guard: PlanRejectedError "member … holds 0 rows for it, the plan says 1", on every retry.
    expect(String(failure ?? 'rolled forward')).toBe('rolled forward');
    expect(await offsetsOf(settings)).toEqual({ 'orders#0': [0, 1, 2] });
    const manifest = (await new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId).read(1))!;
    expect(manifest.files.map((f) => f.key)).toEqual(oldObjects.map((o) => o.finalKey));
    expect(entry!.stagedAt).toBeGreaterThan(0);
  });

  /**
   * Hazard (silent loss of staged rows; a processor-writable input): a slice drops every row whose lineage offset lies
   * outside its staged entry's range.
   *
   * Interleaving: a staged file's rows are processor-written bytes, verified only against the SHA-256 the same
   * processor recorded. A faulty or compromised processor stages entry [100, 10100] whose rows include one with
   * lineage offset 50 (or a non-number offset). Its folder is large enough to have offset runs
   * (> CENSUS_RUNS_MIN_ROWS) and above the row cap, so folder-pack.ts slicesOf cuts it: the first slice is
   * [firstOffset, …] = [100, …], the last ends at lastOffset, and each slice counts only the runs inside it
   * (slicesOf again), so the row at offset 50 belongs to no slice; promote's memberRows filters by the same
   * range, every member count matches, and the row vanishes: no object holds it, the manifest's counts agree with
   * the objects, `eos verify` passes, nothing is logged. Unsliced (any smaller folder) the same row is written and
   * verify reports it as `outside-range`: the slicing turned a loud defect into a silent loss. (A row whose
   * offset lies above lastOffset and starts a slice of its own gives a slice [from > to], which
   * assertPlannedObject refuses after the decision: a stall.)
   *
   * The cap is lowered with the coordinator's promotionLimits to keep the test small (12,001 rows, cap 6,000);
   * with the default cap the same happens at 250,001 rows.
   *
   * Guard: censusOf refuses a row whose offset is not a safe integer within [entry.firstOffset, entry.lastOffset]
   * (StagedRowLineageError), before the vote, as assertStagedEntry does a bad key: the attempt aborts naming the
   * object and the offset, and nothing is committed past it.
   */
  it('a staged row whose lineage lies outside its entry range is refused before the vote', {
    timeout: 60_000,
  }, async () => {
    const settings = settingsFor(uniqueName('rvpq2'));
    const now = Date.now();
    const offsets = [50, ...range(100, 12_000)];
    await stageFiles(res.clients, settings, [
      {
        partition: 0,
        firstOffset: 100,
        lastOffset: 12_099,
        rows: rows(
          0,
          offsets,
          offsets.map(() => now),
        ),
      },
    ]);
    const core = createCoordinator({
      settings,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
      promotionLimits: { maxObjectRows: 6_000 },
    });
    let outcome = 'committed';
    const { ref, shards } = await beginAndPrepare(core, 'e1').catch((error) => {
      outcome = `refused: ${error}`;
      return { ref: undefined, shards: [] };
    });
    if (ref) {
      await core.decide(ref);
      await finish(core, ref, shards);
    }
    // Without the guard: committed, 12,000 of the 12,001 staged rows, and verify found nothing wrong.
    // Prepare reports it as an invalid staged object (the attempt aborts), naming the object, the row and offset.
    expect(outcome).toMatch(
      /^refused: StagedObjectInvalidError: .*_inprogress\/output\/topic=orders\/partition=0\/0+100-0+12099\..*row 1's lineage offset 50 lies outside its entry's offsets 100-12099$/,
    );
    expect(await offsetsOf(settings)).toEqual({});
    expect(await finalObjects(settings)).toEqual(new Map());
  });

  /**
   * Hazard (the row cap does not bound promote's memory; a stall after the decision remains): one staged file
   * over the cap matters because promote "holds a re-encoded object's rows decoded in memory"
   * and fails after the decision on every retry when they do not fit. slicesOf splits the final objects,
   * but promoteShard (promoter.ts:411-427) still decodes and classifies the WHOLE member once and keeps every
   * classified row of it until its last slice is written: a staged file of 10 M rows is 10 M decoded rows in the
   * promote Lambda, whatever maxObjectRows says. The staged file itself has no row bound (a record may emit many
   * rows, and a chunk is bounded by transaction items, not rows).
   *
   * Asserted: no decode during promote materialises more rows than the row cap. Cap lowered to 6,000 with the
   * coordinator's promotionLimits, file of 12,000 rows in one folder (sliced into two objects).
   *
   * Guard: a member over the row cap is not decoded whole; promote streams it once per object that takes rows
   * from it (folder-plan.ts streamMemberRows), holding only that object's rows. Smaller members keep the
   * decode-once cache.
   */
  it('promote never holds more decoded rows of one staged file than the row cap', {
    timeout: 60_000,
  }, async () => {
    const settings = settingsFor(uniqueName('rvpq2'));
    const now = Date.now();
    const offsets = range(0, 12_000);
    await stageFiles(res.clients, settings, [
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 11_999,
        rows: rows(
          0,
          offsets,
          offsets.map(() => now),
        ),
      },
    ]);
    const core = createCoordinator({
      settings,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
      promotionLimits: { maxObjectRows: 6_000 },
    });
    // Prepare merges the candidates, so the decodes that build them are prepare's; promote copies the candidates
    // and decodes nothing.
    decodes.recording = true;
    decodes.sizes = [];
    decodes.streamed = 0;
    let ref: Awaited<ReturnType<typeof beginAndPrepare>>['ref'];
    let shards: number[];
    try {
      ({ ref, shards } = await beginAndPrepare(core, 'e1'));
    } finally {
      decodes.recording = false;
    }
    const built = { sizes: decodes.sizes, streamed: decodes.streamed };
    await core.decide(ref);
    decodes.recording = true;
    decodes.sizes = [];
    decodes.streamed = 0;
    try {
      await finish(core, ref, shards);
    } finally {
      decodes.recording = false;
    }
    expect(decodes.sizes).toEqual([]);
    const manifest = (await new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId).read(1))!;
    // The objects do respect the cap: two slices of 6,000.
    expect(manifest.files.map((f) => f.recordCount)).toEqual([6_000, 6_000]);
    expect((await offsetsOf(settings))['orders#0']).toHaveLength(12_000);
    // Without the guard: one decode of 12,000 rows; with it, one streamed read per slice, each holding its 6,000 rows.
    expect(built.streamed).toBe(2);
    expect(built.sizes).toEqual([6_000, 6_000]);
  });
});

describe('slices and hour folders are deterministic', () => {
  /**
   * Why it holds: slices of one staged file over the cap, with offsets that have gaps (a compacted topic) and a
   * crashed promote retried next to a zombie: the pieces tile the entry's range without overlap or gap (first
   * starts at firstOffset, last ends at lastOffset, boundaries at a row's offset), keys and bytes are the same on
   * every run, each row is committed once, verify passes. Misfits of the same file (a schema change) become
   * schema-mismatch dead letters merged with the chunk's real dead letters, in offset order, also deterministic.
   */
  it('slices over gapped offsets + misfit dead letters are deterministic across crash, retry and zombie', {
    timeout: 60_000,
  }, async () => {
    const pipelineId = uniqueName('rvpq2');
    const v1 = settingsFor(pipelineId);
    const now = Date.now();
    // Offsets with gaps (every third missing), 12,000 rows; every 1,000th row carries a string `n` (misfit).
    const offsets = range(0, 18_000).filter((o) => o % 3 !== 2);
    const staged = rows(
      0,
      offsets,
      offsets.map(() => now),
    ).map((row, i) => (i % 1000 === 7 ? { ...row, n: `x${i}` } : row));
    const dead = [11, 5_000].map((offset) => ({
      source: { topic: 'orders', partition: 0, offset: offset * 3 + 2, timestamp: now },
      error: 'boom',
      raw: { key: null, value: 'eA==', headers: [] },
    }));
    await stageFiles(res.clients, v1, [
      { partition: 0, firstOffset: 0, lastOffset: 17_999, rows: staged },
      { partition: 0, firstOffset: 0, lastOffset: 17_999, stream: 'deadletter', rows: dead },
    ]);
    const clock = new ManualClock(Date.now());
    const limits = { maxObjectRows: 5_000 };
    let puts = 0;
    const crashing = createAwsClients();
    crashing.s3.middlewareStack.add(
      (next, context) => async (args) => {
        const key = String((args.input as { Key?: string }).Key ?? '');
        // Promote publishes a candidate by one copy to its final key.
        if (context.commandName === 'CopyObjectCommand' && key.includes('/final/') && ++puts > 1)
          throw new Error('injected crash');
        return next(args);
      },
      { step: 'initialize', name: 'slicesCrash' },
    );
    const first = createCoordinator({ settings: v1, clients: crashing, clock, promotionLimits: limits });
    const zombie = createCoordinator({
      settings: v1,
      clients: createAwsClients(),
      clock,
      promotionLimits: limits,
    });
    const retry = createCoordinator({ settings: v1, clients: res.clients, clock, promotionLimits: limits });
    const { ref, shards } = await beginAndPrepare(first, 'e1');
    await first.decide(ref);
    await expect(first.promote({ ...ref, shard: shards[0]! })).rejects.toThrow(/injected crash/);
    // The crashed run's other PUT (two objects at once) may still land: let it.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const partial = await finalObjects(v1);
    expect(partial.size).toBeGreaterThan(0);
    await Promise.all(
      shards.flatMap((shard) => [zombie.promote({ ...ref, shard }), retry.promote({ ...ref, shard })]),
    );
    await retry.commit(ref);
    for (const shard of shards) await retry.cleanup({ ...ref, shard });
    const all = await finalObjects(v1);
    for (const [key, bytes] of partial) expect(all.get(key)).toBe(bytes);
    const manifest = (await new ManifestStore(res.clients.s3, v1.bucket, pipelineId).read(1))!;
    expect(manifest.files.map((f) => f.key).sort()).toEqual([...all.keys()].sort());
    const outputs = manifest.files
      .filter((f) => f.stream === 'output')
      .map((f) => [f.firstOffset, f.lastOffset, f.recordCount]);
    // Tiling: first piece from 0, last to 17,999, each next starting right after the previous.
    expect(outputs[0]![0]).toBe(0);
    expect(outputs[outputs.length - 1]![1]).toBe(17_999);
    for (let i = 1; i < outputs.length; i++) expect(outputs[i]![0]).toBe(outputs[i - 1]![1]! + 1);
    for (const [, , count] of outputs) expect(count).toBeLessThanOrEqual(5_000);
    const misfitOffsets = offsets.filter((_, i) => i % 1000 === 7);
    expect((await offsetsOf(v1))['orders#0']).toEqual(offsets.filter((o) => !misfitOffsets.includes(o)));
    const deadRows = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: v1.bucket,
      pipeline: pipelineId,
      stream: 'deadletter',
    }))
      deadRows.push(row);
    const deadOffsets = deadRows.map((r) => (r.source as { offset: number }).offset);
    expect(deadOffsets).toEqual([...misfitOffsets, 35, 15_002].sort((a, b) => a - b));
    expect(deadRows.filter((r) => String(r.error).startsWith('schema-mismatch: ')).length).toBe(12);
    expect((await verified(v1)).problems).toEqual([]);
  });

  /**
   * Why it holds: a hostile stagedAt (a compromised processor writes the ledger entry) spreads one staged file over at
   * most 48 folders (the home folder of stagedAt included), and the 'staged order' cap is deterministic: the first
   * 47 distinct in-window hours in row order keep their folder, the rest go home. 200 rows with 200 distinct hours
   * inside the 7-day window.
   */
  it('a file of 200 distinct in-window hours uses 48 folders, the first 47 in staged order', {
    timeout: 60_000,
  }, async () => {
    const settings = settingsFor(uniqueName('rvpq2'));
    const now = Date.now();
    const offsets = range(0, 200);
    const times = offsets.map((i) => now - (i + 2) * HOUR);
    const [entry] = await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 199, rows: rows(0, offsets, times) },
    ]);
    const core = createCoordinator({ settings, clients: res.clients, clock: new ManualClock(Date.now()) });
    const { ref, shards } = await beginAndPrepare(core, 'e1');
    await core.decide(ref);
    await finish(core, ref, shards);
    const manifest = (await new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId).read(1))!;
    expect(manifest.files).toHaveLength(48);
    const home = timeFolder(entry!.stagedAt, 'hour');
    const expectedFolders = new Set([home, ...times.slice(0, 47).map((t) => timeFolder(t, 'hour'))]);
    expect(new Set(manifest.files.map((f) => f.key.split('/').slice(3, 5).join('/')))).toEqual(
      expectedFolders,
    );
    expect((await offsetsOf(settings))['orders#0']).toEqual(offsets);
    expect((await verified(settings)).problems).toEqual([]);
  });
});
