/**
 * Prepare holds a few final objects' worth of staged bytes at once whatever a partition's backlog, and plans what
 * the partition's entries and the census of every re-encoded or stamped object give (`final-plan.ts`
 * planFinalObjects), whichever way it reads them: a re-encoded stream (Parquet, time folders) read twice (census,
 * then merge), a concatenated stream read once, and a concatenated stream that turns out to hold rows staged with
 * a timestamp planned again from its census. Against DynamoDB Local and the local S3 server; S3 calls observed
 * with middleware on the coordinator's own client.
 */
import { gunzipSync } from 'node:zlib';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { StagedObjectInvalidError } from '../../shared/coordinator/prepare/staged-check.ts';
import {
  DEFAULT_PROMOTION_LIMITS,
  type PlannedObject,
  type PromotionLimits,
  planFinalObjects,
} from '../../shared/coordinator/promote/final-plan.ts';
import { censusOf, type FolderCounts, outputShapeOf } from '../../shared/coordinator/promote/folder-plan.ts';
import { PlanStore } from '../../shared/coordinator/promote/plan-store.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { mayHoldStagedTime } from '../../shared/sink/record-time.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder } from '../support/checkpoint-steps.ts';
import { expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('prep-mem');
});

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'pad', type: 'string', nullable: false },
];

type Call = { command: string; key: string; phase: 'before' | 'after'; length?: number };

/** Runs after each S3 call of the coordinator has returned, before the coordinator goes on. */
type AfterHook = (call: Call) => Promise<void>;

function setup(extra: Record<string, unknown>, limits?: Partial<PromotionLimits>, after?: AfterHook) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('prep-mem'),
    checkpointLeaseSeconds: 600,
    ...extra,
  });
  const calls: Call[] = [];
  const clients: AwsClients = createAwsClients();
  clients.s3.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      const call = { command: String(context.commandName), key: String(input.Key ?? '') };
      calls.push({ ...call, phase: 'before' });
      const result = await next(args);
      const done: Call = { ...call, phase: 'after', length: Number(input.ContentLength ?? 0) };
      calls.push(done);
      await after?.(done);
      return result;
    },
    { step: 'initialize', name: 'prepareMemoryHook' },
  );
  const core = createCoordinator({
    settings,
    clients,
    clock: new ManualClock(Date.now()),
    ...(limits ? { promotionLimits: limits } : {}),
  });
  const plans = new PlanStore(res.clients.s3, res.bucket, settings.pipelineId);
  const store = new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId);
  return { settings, calls, core, plans, store, limits: { ...DEFAULT_PROMOTION_LIMITS, ...limits } };
}

/** Output rows of offsets first..last, padded so that a staged file has some size. */
function rowsOf(first: number, last: number, stamp?: number): Record<string, unknown>[] {
  return range(first, last - first + 1).map((offset) => ({
    n: offset,
    pad: 'x'.repeat(64),
    source: {
      topic: 'orders',
      partition: 0,
      offset,
      ...(stamp === undefined ? {} : { timestamp: stamp }),
    },
  }));
}

/** The plan voted for shard 0, its candidates' keys aside. */
async function votedObjects(
  s: ReturnType<typeof setup>,
  checkpointId: number,
): Promise<readonly PlannedObject[]> {
  const record = (await s.store.readRecord(checkpointId))!;
  const plan = await s.plans.readPlan(checkpointId, record.attempt, 0, record.planDigests!['0']!);
  return plan.objects;
}

/** What planFinalObjects gives for `entries` with the census of each re-encoded or stamped object, read here. */
async function expectedObjects(s: ReturnType<typeof setup>, entries: readonly StagedFileEntry[]) {
  const shape = outputShapeOf(s.settings);
  const census = new Map<string, FolderCounts>();
  for (const entry of entries) {
    const body = (await getBytes(res.clients.s3, res.bucket, entry.key))!;
    const reencoded = shape.format === 'parquet' || shape.granularity !== undefined;
    if (reencoded || mayHoldStagedTime((entry.gzip ? gunzipSync(body) : body).toString('utf8')))
      census.set(entry.key, censusOf(entry, body, shape));
  }
  return planFinalObjects(s.settings.pipelineId, entries, s.limits, shape, census);
}

/**
 * Staged bytes held at once for merging, as the calls show them: a staged object's bytes from the end of its
 * `reads`-th GET (the read it is merged from) until the end of the candidate write of its object (the voted plan
 * says which). Earlier reads (the census) are not counted: prepare drops their bytes once the census is taken, and
 * at most 16 are read at once (the `16 * largest` the bound allows for reads in flight).
 */
function peakHeld(
  calls: readonly Call[],
  objects: readonly PlannedObject[],
  entries: readonly StagedFileEntry[],
  reads: number,
) {
  const bytesOf = new Map(entries.map((e) => [e.key, e.bytes]));
  const seen = new Map<string, number>();
  let held = 0;
  let peak = 0;
  for (const call of calls) {
    if (call.phase !== 'after') continue;
    if (call.command === 'GetObjectCommand' && bytesOf.has(call.key)) {
      const times = (seen.get(call.key) ?? 0) + 1;
      seen.set(call.key, times);
      if (times === reads) held += bytesOf.get(call.key)!;
    }
    if (call.command === 'PutObjectCommand' && call.key.includes('/candidate-')) {
      const object = objects.find((o) => o.candidate?.key === call.key)!;
      for (const m of object.members) held -= bytesOf.get(m.key)!;
    }
    peak = Math.max(peak, held);
  }
  return { peak, seen };
}

describe("prepare's memory and reads", () => {
  it('a re-encoded (Parquet) backlog: every staged object read twice, census then merge, a few objects held at once, the plan planFinalObjects gives', async () => {
    const files = 120;
    const probe = setup({ outputFormat: 'parquet', outputColumns: COLUMNS });
    const [one] = await stageFiles(res.clients, probe.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 9, rows: rowsOf(0, 9) },
    ]);
    const maxObjectBytes = one!.bytes * 4;
    const s = setup({ outputFormat: 'parquet', outputColumns: COLUMNS }, { maxObjectBytes });
    const entries = await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({
        partition: 0,
        firstOffset: i * 10,
        lastOffset: i * 10 + 9,
        rows: rowsOf(i * 10, i * 10 + 9),
      })),
    );
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    s.calls.length = 0;
    await s.core.prepare({ ...ref, shard: 0 });
    const objects = await votedObjects(s, ref.checkpointId);
    const withoutCandidates = objects.map(({ candidate: _c, ...object }) => object);
    expect(withoutCandidates).toEqual(await expectedObjects(s, entries));
    expect(objects.length).toBeGreaterThan(files / 8);
    // Each staged object gives its rows to one object here: read once for its census, once for its object.
    const { peak, seen } = peakHeld(s.calls, objects, entries, 2);
    expect([...seen.values()].every((times) => times === 2)).toBe(true);
    expect(seen.size).toBe(files);
    const largest = Math.max(...entries.map((e) => e.bytes));
    const total = entries.reduce((sum, e) => sum + e.bytes, 0);
    console.log(`re-encoded prepare held at most ${peak} staged bytes of ${total}`);
    expect(peak).toBeLessThanOrEqual(2 * maxObjectBytes + 16 * largest);
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, files * 10) });
  });

  it('a concatenated stream found to hold a stamped row after some candidates were written is planned from its census: the plan planFinalObjects gives, committed once, the unnamed candidates cleaned up', async () => {
    const files = 24;
    const probe = setup({});
    const [one] = await stageFiles(res.clients, probe.settings, [
      { partition: 0, firstOffset: 1000, lastOffset: 1009, rows: rowsOf(1000, 1009) },
    ]);
    // Objects of two or three staged files each (offsets of as many digits as the probe's).
    const s = setup({}, { maxObjectBytes: one!.bytes * 3 });
    // The last file holds rows staged with a timestamp (time folders on when it was staged, off since).
    const entries = await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({
        partition: 0,
        firstOffset: 1000 + i * 10,
        lastOffset: 1000 + i * 10 + 9,
        rows: rowsOf(1000 + i * 10, 1000 + i * 10 + 9, i === files - 1 ? Date.now() : undefined),
      })),
    );
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    s.calls.length = 0;
    await s.core.prepare({ ...ref, shard: 0 });
    const objects = await votedObjects(s, ref.checkpointId);
    expect(objects.map(({ candidate: _c, ...object }) => object)).toEqual(await expectedObjects(s, entries));
    expect(objects.length).toBeLessThan(files / 2 + 1);
    const written = s.calls.filter(
      (c) => c.phase === 'after' && c.command === 'PutObjectCommand' && c.key.includes('/candidate-'),
    );
    const named = new Set(objects.map((o) => o.candidate!.key));
    expect(written.some((c) => !named.has(c.key))).toBe(true);
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(1000, files * 10) });
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
  });

  it('a re-encoded staged object (of a backlog over the budget) rewritten between its census read and its merge read fails the check: no vote', async () => {
    let target: StagedFileEntry | undefined;
    let rewritten = false;
    // Once the census read of the object ended, the processor puts other rows under its key.
    // Objects of one byte at most: the staged bytes exceed what prepare keeps from the census to the merge.
    const s = setup(
      { outputFormat: 'parquet', outputColumns: COLUMNS },
      { maxObjectBytes: 1 },
      async (call) => {
        if (rewritten || call.command !== 'GetObjectCommand' || call.key !== target?.key) return;
        rewritten = true;
        const forged = Buffer.from(`${JSON.stringify({ ...rowsOf(0, 0)[0], n: -1 })}\n`);
        await res.clients.s3.send(
          new PutObjectCommand({ Bucket: res.bucket, Key: target.key, Body: forged }),
        );
      },
    );
    [target] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 9, rows: rowsOf(0, 9) },
    ]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(
      new RegExp(`${target!.key} is invalid \\((size|checksum)\\)`),
    );
    expect(rewritten).toBe(true);
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(StagedObjectInvalidError);
    expect((await s.store.readRecord(ref.checkpointId))?.votes?.size ?? 0).toBe(0);
  });
});
