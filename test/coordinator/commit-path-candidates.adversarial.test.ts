/**
 * Adversarial interleavings of the candidate commit path against the real local parts (DynamoDB Local, the local S3
 * server, the coordinator's steps): prepare merges each final object into a write-once, content-addressed
 * candidate of its attempt; promote copies it to the final key, pinned to its ETag. Each test names the property it
 * protects, its interleaving and what would go wrong told in its comment. Interleavings are injected with
 * middleware on the coordinator's own clients.
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import type { PromotionLimits } from '../../shared/coordinator/promote/final-plan.ts';
import { PlanStore, shardPlanSchema, workObjectJson } from '../../shared/coordinator/promote/plan-store.ts';
import { checkpointAttemptPrefix, planKey, stagedCopyKey } from '../../shared/coordinator/work-objects.ts';
import { CheckpointConflictError } from '../../shared/ledger/checkpoint-records.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { finalObjectKey, finalPrefix } from '../../shared/sink/layout.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder, swapEntry } from '../support/checkpoint-steps.ts';
import { type ServiceHook as Hook, hookedClients } from '../support/hooked-clients.ts';
import { committedOffsets, expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cand-commit-adv');
});

function setup(promotionLimits?: Partial<PromotionLimits>) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('cand-commit'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  const coordinatorFor = (hook?: Hook): Coordinator =>
    createCoordinator({
      settings,
      clients: hook ? hookedClients(hook) : res.clients,
      clock,
      partitionsPerShard: 1,
      ...(promotionLimits ? { promotionLimits } : {}),
    });
  return {
    settings,
    clock,
    core: coordinatorFor(),
    coordinatorFor,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    plans: new PlanStore(res.clients.s3, res.bucket, settings.pipelineId),
  };
}

describe("prepare's memory", () => {
  it("prepare holds a few final objects' worth of staged bytes at once, not a partition's whole backlog", async () => {
    // Prepare merges every final object from verified staged bytes before the vote; a partition's backlog (after an
    // outage, or a hot partition between checkpoints) may be gigabytes against a 1,024 MB coordinator Lambda. Held
    // all at once, a prepare runs out of memory before its vote, the attempt aborts, and the next checkpoint covers
    // the same backlog and more: it never commits again (L1). So prepare holds the objects being read (at most
    // `concurrency`) and a few final objects being merged (PromotionLimits.maxObjectBytes, as promote: "give it
    // twice this much memory"), shared by the partitions of its shard (prepare/plan-partition.ts). Here: one
    // partition of 200 staged objects planned into final objects of 4 objects each; the staged bytes read and not
    // yet written as a candidate stay within that.
    const files = 200;
    const probe = await stageFiles(res.clients, setup().settings, [
      { partition: 0, firstOffset: 0, lastOffset: 9 },
    ]);
    const maxObjectBytes = probe[0]!.bytes * 4;
    const s = setup({ maxObjectBytes });
    const entries = await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({
        partition: 0,
        firstOffset: i * 10,
        lastOffset: i * 10 + 9,
      })),
    );
    const bytesOf = new Map(entries.map((e) => [e.key, e.bytes]));
    const largest = Math.max(...entries.map((e) => e.bytes));
    let held = 0;
    let peak = 0;
    let candidates = 0;
    const measured = s.coordinatorFor(async (service, command, input, phase) => {
      if (service !== 's3' || phase !== 'after') return;
      const key = String(input.Key);
      if (command === 'GetObjectCommand' && bytesOf.has(key)) held += bytesOf.get(key)!;
      if (command === 'PutObjectCommand' && key.includes('/candidate-')) {
        held -= Number(input.ContentLength);
        candidates++;
      }
      peak = Math.max(peak, held);
    });
    const b = await measured.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: b.checkpointId, attempt: b.attempt };
    await measured.prepare({ ...ref, shard: 0 });
    const total = entries.reduce((sum, e) => sum + e.bytes, 0);
    console.log(
      `prepare held at most ${peak} staged bytes of ${total} (${candidates} candidates of at most ${maxObjectBytes} bytes)`,
    );
    expect(candidates).toBeGreaterThan(files / 8);
    // Two objects being built and every read in flight (16 at once) is what a bounded prepare needs.
    expect(peak).toBeLessThanOrEqual(2 * maxObjectBytes + 16 * largest);
  });
});

describe('zombies of the commit path across attempts and after cleanup', () => {
  it('a zombie prepare of attempt k resuming after attempt k+1 of the same checkpoint decided cannot vote; k+1 publishes only its own candidates', async () => {
    // Attempt 1's prepare verified the staged bytes and pauses at its candidate write; its lease expires, e2's
    // begin aborts attempt 1 and starts attempt 2 of the same id; the processor swaps the entry (other bytes under
    // another key); attempt 2 prepares and decides. Then the zombie writes its candidate and plan (under attempt
    // 1's prefix: content-addressed per attempt) and votes: refused. What commits is attempt 2's verified bytes.
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const b1 = await s.core.begin({ execution: 'e1' });
    const ref1 = { execution: 'e1', checkpointId: b1.checkpointId, attempt: b1.attempt };
    let ref2 = { ...ref1 };
    let fired = false;
    const zombie = s.coordinatorFor(async (service, command, input, phase) => {
      if (fired || service !== 's3' || command !== 'PutObjectCommand' || phase !== 'before') return;
      if (!String(input.Key).includes('/candidate-')) return;
      fired = true;
      s.clock.advance(601_000);
      const b2 = await s.core.begin({ execution: 'e2' });
      ref2 = { execution: 'e2', checkpointId: b2.checkpointId, attempt: b2.attempt };
      await swapEntry(res, s.settings, e1!, 'a2');
      for (const shard of b2.shards) await s.core.prepare({ ...ref2, shard });
      await s.core.decide(ref2);
    });
    await expect(zombie.prepare({ ...ref1, shard: 0 })).rejects.toBeInstanceOf(CheckpointConflictError);
    expect(fired).toBe(true);
    expect(ref2).toMatchObject({ checkpointId: ref1.checkpointId, attempt: ref1.attempt + 1 });
    // The zombie's candidate landed under attempt 1's prefix, where attempt 2's plan can never name it.
    const zombieWork = await keysUnder(res, checkpointAttemptPrefix(s.settings.pipelineId, 1, ref1.attempt));
    expect(zombieWork.some((key) => key.includes('/candidate-'))).toBe(true);
    await finish(s.core, ref2, [0]);
    const rows = await committedOffsets(res.clients, s.settings);
    expect(rows.map((r) => r.offset)).toEqual(range(0, 5));
    expect(rows.every((r) => r.row.swapped === 'a2')).toBe(true);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
  });

  it('a zombie promote resuming after commit and cleanup deleted its candidates settles on the final objects: nothing changes, its late record goes with the next cleanup', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const b = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: b.checkpointId, attempt: b.attempt };
    for (const shard of b.shards) await s.core.prepare({ ...ref, shard });
    await s.core.decide(ref);
    let fired = false;
    const zombie = s.coordinatorFor(async (service, command, _input, phase) => {
      if (fired || service !== 's3' || command !== 'CopyObjectCommand' || phase !== 'before') return;
      fired = true;
      // The retry of this promote (the zombie's response was lost) runs the checkpoint to its end.
      await finish(s.core, ref, b.shards);
    });
    const finals = async () => {
      const found = new Map<string, string>();
      for (const key of await keysUnder(res, finalPrefix(s.settings.pipelineId)))
        found.set(key, (await getBytes(res.clients.s3, res.bucket, key))!.toString('base64'));
      return found;
    };
    await expect(zombie.promote({ ...ref, shard: 0 })).resolves.toMatchObject({ shard: 0, count: 1 });
    expect(fired).toBe(true);
    const before = await finals();
    expect(before.size).toBe(1);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
    // Its promotion record is the one thing it left behind: the next checkpoint's cleanup removes it.
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([
      `${checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt)}promoted-0.json`,
    ]);
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    const b2 = await s.core.begin({ execution: 'e2' });
    const ref2 = { execution: 'e2', checkpointId: b2.checkpointId, attempt: b2.attempt };
    for (const shard of b2.shards) await s.core.prepare({ ...ref2, shard });
    await finish(s.core, ref2, b2.shards);
    const after = await finals();
    for (const [key, bytes] of before) expect(after.get(key)).toBe(bytes);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10) });
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
  });

  it('abort of a superseded attempt after the next attempt of the same checkpoint decided deletes only its own working objects; the decided attempt rolls forward', async () => {
    // A late Catch → Abort of attempt 1 (its execution learned of a failure long after the lease-expiry abort)
    // arrives while attempt 2 is COMMITTING: attempt 2's candidates and plans must stay.
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const b1 = await s.core.begin({ execution: 'e1' });
    const ref1 = { execution: 'e1', checkpointId: b1.checkpointId, attempt: b1.attempt };
    for (const shard of b1.shards) await s.core.prepare({ ...ref1, shard });
    s.clock.advance(601_000);
    const b2 = await s.core.begin({ execution: 'e2' });
    const ref2 = { execution: 'e2', checkpointId: b2.checkpointId, attempt: b2.attempt };
    expect(ref2).toMatchObject({ checkpointId: ref1.checkpointId, attempt: ref1.attempt + 1 });
    for (const shard of b2.shards) await s.core.prepare({ ...ref2, shard });
    await s.core.decide(ref2);
    const prefix1 = checkpointAttemptPrefix(s.settings.pipelineId, ref1.checkpointId, ref1.attempt);
    const prefix2 = checkpointAttemptPrefix(s.settings.pipelineId, ref2.checkpointId, ref2.attempt);
    const work2 = await keysUnder(res, prefix2);
    expect(work2.filter((key) => key.includes('/candidate-'))).toHaveLength(1);
    expect(await keysUnder(res, prefix1)).not.toEqual([]);
    await s.core.abort({ ...ref1, error: { Error: 'States.TaskFailed' } });
    expect(await keysUnder(res, prefix1)).toEqual([]);
    expect((await keysUnder(res, prefix2)).sort()).toEqual(work2.sort());
    expect(await s.store.readRecord(ref2.checkpointId)).toMatchObject({
      attempt: ref2.attempt,
      status: 'COMMITTING',
    });
    for (const shard of b2.shards) await s.core.promote({ ...ref2, shard });
    await s.core.commit(ref2);
    for (const shard of b2.shards) await s.core.cleanup({ ...ref2, shard });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});

describe('an upgrade in the middle of a checkpoint', () => {
  it('a checkpoint whose shards voted a plan without candidates (the release before) and a plan with them commits each row once', async () => {
    // Shard 0 voted under the release before the candidates (its plan names none; its prepare copied the staged
    // object to the attempt's staged/ folder), shard 1 under this one. Promote takes each plan by its own rule.
    const s = setup();
    const [e0] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 1, firstOffset: 0, lastOffset: 2 },
    ]);
    const b = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: b.checkpointId, attempt: b.attempt };
    expect(b.shards).toEqual([0, 1]);
    for (const shard of b.shards) await s.core.prepare({ ...ref, shard });
    // Shard 0's plan as the release before wrote it: no candidate, its member's verified copy beside it.
    const voted = (await s.store.readRecord(ref.checkpointId))!;
    const pl = s.settings.pipelineId;
    const newPlan = shardPlanSchema.parse(
      JSON.parse(
        workObjectJson(
          (await getBytes(
            res.clients.s3,
            res.bucket,
            planKey(pl, ref.checkpointId, ref.attempt, 0, voted.planDigests![`0`]!),
          ))!,
        )!.toString(),
      ),
    );
    expect(newPlan.objects.map((o) => o.members.map((m) => m.key))).toEqual([[e0!.key]]);
    // That release wrote one final object a partition, at its range's key.
    const oldPlan = {
      ...newPlan,
      objects: newPlan.objects.map(({ candidate: _c, slice: _s, ...object }) => ({
        ...object,
        finalKey: finalObjectKey(pl, object, object.gzip),
      })),
    };
    await res.clients.s3.send(
      new PutObjectCommand({
        Bucket: res.bucket,
        Key: stagedCopyKey(pl, ref.checkpointId, ref.attempt, e0!.key),
        Body: await getBytes(res.clients.s3, res.bucket, e0!.key),
      }),
    );
    const digest = await s.plans.writePlan(oldPlan);
    await s.store.vote(ref.checkpointId, ref.attempt, 0, digest, s.clock.now() + 600_000, s.clock.now());
    // Shard 0's candidate is not what its plan promotes from: gone, it changes nothing.
    await res.clients.s3.send(
      new DeleteObjectCommand({ Bucket: res.bucket, Key: newPlan.objects[0]!.candidate!.key }),
    );
    const seen: string[] = [];
    const promoter = s.coordinatorFor(async (service, command, input, phase) => {
      const key = String(input.Key);
      if (service !== 's3' || phase !== 'before' || !key.startsWith(finalPrefix(pl))) return;
      if (/^(Copy|Put)ObjectCommand$/.test(command))
        seen.push(`${command}:${key.includes('partition=0/') ? 0 : 1}`);
    });
    await s.core.decide(ref);
    for (const shard of b.shards) await promoter.promote({ ...ref, shard });
    await s.core.commit(ref);
    for (const shard of b.shards) await s.core.cleanup({ ...ref, shard });
    expect(seen.sort()).toEqual(['CopyObjectCommand:1', 'PutObjectCommand:0']);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 3) });
    expect(await keysUnder(res, `${pl}/_coordinator/`)).toEqual([]);
  });
});
