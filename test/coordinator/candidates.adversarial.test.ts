/**
 * Adversarial interleavings of the candidates: prepare reads each covered staged object once, merges each final
 * object into a candidate under `<pl>/_coordinator/<N>/<attempt>/` (write-once, content-addressed), promote
 * copies only the candidates the voted plan names, cleanup and abort delete them. Against DynamoDB Local and
 * s3rver; attacks write only what a processor may write (staged objects under its prefix, ledger items of its
 * pipeline). Interleavings are injected with middleware on the coordinator's own clients.
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { shardPlanSchema, workObjectJson } from '../../shared/coordinator/promote/plan-store.ts';
import { candidateKey, checkpointAttemptPrefix } from '../../shared/coordinator/work-objects.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder, swapEntry } from '../support/checkpoint-steps.ts';
import { type ServiceHook as Hook, hookedClients } from '../support/hooked-clients.ts';
import { committedOffsets, expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('candidates-adv');
});

function setup() {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('candidates-adv'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  const coordinatorFor = (hook?: Hook): Coordinator =>
    createCoordinator({ settings, clients: hook ? hookedClients(hook) : res.clients, clock });
  return {
    settings,
    clock,
    core: coordinatorFor(),
    coordinatorFor,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
  };
}

describe('two prepare runs of one attempt and shard', () => {
  it('a processor that swaps an entry between two overlapping prepare runs of one shard cannot stall the decided checkpoint (plan file vs voted digest)', async () => {
    // Run A (a Step Functions retry's predecessor still running, e.g. after Lambda.SdkClientException) reads the
    // ledger and K1, writes its candidates and plan PA; the processor swaps the entry to K2; run B reads K2, writes
    // its candidates and plan PB and votes DB; then run A votes DA. The record says DA, the last plan file is PB.
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    expect(begun.shards).toEqual([0]);
    let fired = false;
    const runA = s.coordinatorFor(async (service, command, input, phase) => {
      if (
        !fired &&
        service === 's3' &&
        command === 'PutObjectCommand' &&
        phase === 'after' &&
        String(input.Key).includes('/plan-')
      ) {
        fired = true;
        await swapEntry(res, s.settings, e1!, 'a2');
        await s.core.prepare({ ...ref, shard: 0 }); // run B: reads K2, writes PB, votes DB
      }
    });
    await runA.prepare({ ...ref, shard: 0 }); // then votes DA
    expect(fired).toBe(true);
    // Both runs wrote a plan; every candidate under the attempt is one a plan names (none is overwritten: the
    // keys name their bytes); the vote counts one shard.
    const prefix = checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt);
    const work = await keysUnder(res, prefix);
    const plans = work.filter((key) => key.includes('/plan-'));
    expect(plans).toHaveLength(2);
    const named = new Set<string>();
    for (const key of plans) {
      const plan = shardPlanSchema.parse(
        JSON.parse(workObjectJson((await getBytes(res.clients.s3, res.bucket, key))!)!.toString()),
      );
      for (const object of plan.objects) named.add(object.candidate!.key);
    }
    expect(work.filter((key) => key.startsWith(`${prefix}candidate-`)).sort()).toEqual([...named].sort());
    expect((await s.store.readRecord(ref.checkpointId))?.votes).toEqual(new Set([0]));
    await s.core.decide(ref);
    expect(await s.store.readHead()).toMatchObject({ status: 'COMMITTING' });
    // C4: after the decision the checkpoint only rolls forward. It must be able to.
    await s.core.promote({ ...ref, shard: 0 });
    await s.core.commit(ref);
    await s.core.cleanup({ ...ref, shard: 0 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });

  it('a retried prepare after the vote whose staged object the processor deleted meanwhile keeps the vote instead of aborting the attempt', async () => {
    // Liveness only (before the decision, nothing is lost): a shard whose vote is in is not prepared again, so a
    // staged object gone since cannot fail it.
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await s.core.prepare({ ...ref, shard: 0 });
    // One member: the candidate's bytes are the staged bytes, its key named by the entry's SHA-256.
    const candidate = candidateKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, e1!.sha256);
    expect(await getBytes(res.clients.s3, res.bucket, candidate)).toBeDefined();
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: e1!.key }));
    // The retry (e.g. the first run's response was lost) finds the shard's vote in.
    await expect(s.core.prepare({ ...ref, shard: 0 })).resolves.toMatchObject({ shard: 0 });
    await s.core.decide(ref);
    await s.core.promote({ ...ref, shard: 0 });
    await s.core.commit(ref);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});

describe('cleanup of an earlier checkpoint against a later decided one', () => {
  it('a late cleanup of checkpoint 1 (catch-up and deleteCheckpointsBelow) while checkpoint 2 is COMMITTING leaves 2 its candidates; 2 rolls forward after lease expiry', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const b1 = await s.core.begin({ execution: 'e1' });
    const ref1 = { execution: 'e1', checkpointId: b1.checkpointId, attempt: b1.attempt };
    for (const shard of b1.shards) await s.core.prepare({ ...ref1, shard });
    await s.core.decide(ref1);
    for (const shard of b1.shards) await s.core.promote({ ...ref1, shard });
    await s.core.commit(ref1); // execution e1 is cut off here: no cleanup of 1
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 5, lastOffset: 9 },
      { partition: 1, firstOffset: 0, lastOffset: 3 },
    ]);
    const b2 = await s.core.begin({ execution: 'e2' });
    const ref2 = { execution: 'e2', checkpointId: b2.checkpointId, attempt: b2.attempt };
    expect(ref2.checkpointId).toBe(2);
    for (const shard of b2.shards) await s.core.prepare({ ...ref2, shard });
    await s.core.decide(ref2);
    const candidates2 = `${checkpointAttemptPrefix(s.settings.pipelineId, 2, ref2.attempt)}candidate-`;
    const copies2 = await keysUnder(res, candidates2);
    // Its two partitions share one merged object in the one shard: one candidate.
    expect(copies2).toHaveLength(1);
    // e1's cleanup arrives late (a retry), every shard of it, past the orphan grace (its sweep is live too).
    s.clock.advance(3_601_000);
    for (const shard of b1.shards) await s.core.cleanup({ ...ref1, shard });
    expect((await keysUnder(res, candidates2)).sort()).toEqual(copies2.sort());
    // e2 dies; e3 takes over after the lease and rolls 2 forward from its candidates.
    s.clock.advance(601_000);
    const b3 = await s.core.begin({ execution: 'e3' });
    expect(b3).toMatchObject({ action: 'commit', checkpointId: 2 });
    const ref3 = { execution: 'e3', checkpointId: 2, attempt: b3.attempt };
    for (const shard of b3.shards) await s.core.promote({ ...ref3, shard });
    await s.core.commit(ref3);
    for (const shard of b3.shards) await s.core.cleanup({ ...ref3, shard });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10), 'orders#1': range(0, 4) });
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
  });

  it.each([1, 2, 3])(
    "abort racing decide (decide lands after the abort's ledger read #%i) never deletes the decided attempt's candidates",
    async (at) => {
      const s = setup();
      await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
      const b = await s.core.begin({ execution: 'e1' });
      const ref = { execution: 'e1', checkpointId: b.checkpointId, attempt: b.attempt };
      for (const shard of b.shards) await s.core.prepare({ ...ref, shard });
      // A Catch → Abort of this attempt (say a zombie branch failed) reads the head while BEGUN; decide completes
      // right after that read, before the abort reads the record.
      let gets = 0;
      const aborter = s.coordinatorFor(async (service, command, _input, phase) => {
        if (service === 'dynamodb' && /Get/.test(command) && phase === 'after' && ++gets === at)
          await s.core.decide(ref);
      });
      const out = await aborter.abort({ ...ref, error: { Error: 'States.TaskFailed' } });
      expect(gets).toBeGreaterThan(at);
      expect(out.outcome).toBe('decided');
      for (const shard of b.shards) await s.core.promote({ ...ref, shard });
      await s.core.commit(ref);
      for (const shard of b.shards) await s.core.cleanup({ ...ref, shard });
      await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
    },
  );

  it('a zombie prepare of a lease-aborted attempt that writes a candidate after the checkpoint committed on a later attempt leaves it only until the next cleanup', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const b1 = await s.core.begin({ execution: 'dead' });
    const ref1 = { execution: 'dead', checkpointId: b1.checkpointId, attempt: b1.attempt };
    s.clock.advance(601_000);
    const b2 = await s.core.begin({ execution: 'e2' });
    const ref2 = { execution: 'e2', checkpointId: b2.checkpointId, attempt: b2.attempt };
    expect(ref2).toMatchObject({ checkpointId: 1, attempt: 2 });
    for (const shard of b2.shards) await s.core.prepare({ ...ref2, shard });
    await finish(s.core, ref2, b2.shards);
    // The zombie prepare of attempt 1 passed its status check long ago; its candidate lands now.
    const late = candidateKey(s.settings.pipelineId, 1, ref1.attempt, e1!.sha256);
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: late, Body: 'zombie' }));
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    const b3 = await s.core.begin({ execution: 'e3' });
    const ref3 = { execution: 'e3', checkpointId: b3.checkpointId, attempt: b3.attempt };
    for (const shard of b3.shards) await s.core.prepare({ ...ref3, shard });
    await finish(s.core, ref3, b3.shards);
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
    const rows = await committedOffsets(res.clients, s.settings);
    expect(rows.map((r) => r.offset)).toEqual(range(0, 10));
  });
});

describe('what prepare costs at scale (measured on s3rver, printed)', () => {
  it('one prepare shard with 1,000 covered objects: one read each, no copy, one candidate; abort deletes it in one step', async () => {
    const s = setup();
    const files = 1000;
    await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({ partition: 0, firstOffset: i * 2, lastOffset: i * 2 + 1 })),
    );
    const seen = { copies: 0, reads: 0, candidates: 0 };
    const counted = s.coordinatorFor(async (service, command, input, phase) => {
      if (service !== 's3' || phase !== 'before') return;
      if (command === 'CopyObjectCommand') seen.copies++;
      if (command === 'GetObjectCommand') seen.reads++;
      if (command === 'PutObjectCommand' && String(input.Key).includes('/candidate-')) seen.candidates++;
    });
    const b = await counted.begin({ execution: 'e1' });
    expect(b.shards).toEqual([0]);
    const ref = { execution: 'e1', checkpointId: b.checkpointId, attempt: b.attempt };
    const t0 = performance.now();
    await counted.prepare({ ...ref, shard: 0 });
    const prepareMs = performance.now() - t0;
    // 2,000 records in one partition: one final object (2,000 members at most), so one candidate.
    expect(seen).toEqual({ copies: 0, reads: files, candidates: 1 });
    const t1 = performance.now();
    expect((await counted.abort({ ...ref, error: { Error: 'States.Timeout' } })).outcome).toBe('aborted');
    const abortMs = performance.now() - t1;
    console.log(
      `candidates at scale: prepare of ${files} objects in one shard ${prepareMs.toFixed(0)} ms; abort ${abortMs.toFixed(0)} ms`,
    );
    expect(await keysUnder(res, `${s.settings.pipelineId}/_coordinator/`)).toEqual([]);
  }, 300_000);
});
