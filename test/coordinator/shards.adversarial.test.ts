/**
 * Coordinator shards of one per 64 changed partitions (`shared/coordinator/shards.ts`) under interleavings where
 * the shard count changes: an attempt aborted at 64 partitions and retried at 129 (one shard, then three), with
 * the first attempt's zombie steps still running; a checkpoint begun by a coordinator that dealt one partition a
 * shard (the release before, or a test setting) and rolled forward by one that deals 64; the cleanup catch-up of
 * an earlier checkpoint of another shard count, racing a processor staging above the cut and a late retry of the
 * earlier cleanup. Whatever the counts, each attempt is worked by the shards its record names, the committed
 * output holds every staged row exactly once, and cleanup deletes what the committed cuts cover and nothing above.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { coordinatorParts } from '../../shared/coordinator/parts.ts';
import { dealToShards, PARTITIONS_PER_SHARD, shardCountFor } from '../../shared/coordinator/shards.ts';
import { forgetEntryDeleteRefusal } from '../../shared/ledger/entry-deletes.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { expectExactlyOnce, type FileSpec, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('shards-adversarial');
  forgetEntryDeleteRefusal();
});

/** One file of two offsets (`2n`, `2n + 1`) in each partition of `partitions`. */
function files(partitions: readonly number[], n: number): FileSpec[] {
  return partitions.map((partition) => ({ partition, firstOffset: 2 * n, lastOffset: 2 * n + 1 }));
}

const upTo = (count: number) => Array.from({ length: count }, (_, i) => i);

/** The lastOffsets of the staged entries left per partition (only partitions with any). */
async function entriesLeft(settings: Settings, partitions: number): Promise<Record<number, number[]>> {
  const { ledger } = coordinatorParts({ settings, clients: res.clients });
  const left: Record<number, number[]> = {};
  for (let partition = 0; partition < partitions; partition++) {
    const offsets: number[] = [];
    for await (const entry of ledger.entries('orders', partition, { above: -1, upTo: 1_000_000 }))
      offsets.push(entry.lastOffset);
    if (offsets.length > 0) left[partition] = offsets;
  }
  return left;
}

/** Runs a begun checkpoint through commit (no cleanup), its shards as begin named them. */
async function commitBegun(
  core: Coordinator,
  execution: string,
  begun: { checkpointId: number; attempt: number; shards: readonly number[] },
) {
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  return ref;
}

async function cleanAll(
  core: Coordinator,
  ref: { execution: string; checkpointId: number; attempt: number },
  shards: readonly number[],
) {
  for (const shard of shards) await core.cleanup({ ...ref, shard });
}

/** Every partition of `partitions` holds offsets [0, 2 × files). */
function expected(partitions: number, filesEach: number): Record<string, number[]> {
  return Object.fromEntries(upTo(partitions).map((p) => [`orders#${p}`, range(0, 2 * filesEach)]));
}

describe('shard counts', () => {
  it('one shard per 64 changed partitions at the boundaries, at most 16, and every partition dealt to exactly one shard', () => {
    const counts = [0, 1, 63, 64, 65, 128, 129, 1_024, 1_025, 5_000].map((n) => shardCountFor(n));
    expect(counts).toEqual([1, 1, 1, 1, 2, 2, 3, 16, 16, 16]);
    expect(PARTITIONS_PER_SHARD).toBe(64);
    for (const n of [65, 129, 1_025]) {
      const dealt = dealToShards(upTo(n), shardCountFor(n));
      expect(dealt.flat().sort((a, b) => a - b)).toEqual(upTo(n));
      const sizes = dealt.map((s) => s.length);
      expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
    }
  });
});

describe('shard counts changing between attempts and coordinators', () => {
  it('an attempt of 64 partitions (one shard) aborted and retried at 129 (three shards): the first attempt’s zombie steps change nothing, and the retry commits every row once', async () => {
    const settings = settingsIn(res, 'sh');
    const clock = new ManualClock(Date.now());
    const core = createCoordinator({ settings, clients: res.clients, clock });
    await stageFiles(res.clients, settings, files(upTo(64), 0));
    const first = await core.begin({ execution: 'first' });
    expect(first.shards).toEqual([0]);
    const firstRef = { execution: 'first', checkpointId: first.checkpointId, attempt: first.attempt };
    await core.prepare({ ...firstRef, shard: 0 });
    // 65 more partitions move; the first execution stalls past its lease and the next one takes over.
    await stageFiles(res.clients, settings, files(upTo(129).slice(64), 0));
    clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
    const second = await core.begin({ execution: 'second' });
    expect(second).toMatchObject({ checkpointId: first.checkpointId, attempt: first.attempt + 1 });
    expect(second.shards).toEqual([0, 1, 2]);
    const secondRef = { execution: 'second', checkpointId: second.checkpointId, attempt: second.attempt };
    // The first attempt's zombies: a prepare of its shard, its decide, its promote; each is refused.
    await expect(core.prepare({ ...firstRef, shard: 0 })).rejects.toThrow();
    await expect(core.decide(firstRef)).rejects.toThrow();
    await expect(core.promote({ ...firstRef, shard: 0 })).rejects.toThrow();
    // The second attempt's shards vote; a zombie of the first attempt between the votes and the decision still
    // changes nothing.
    for (const shard of second.shards) await core.prepare({ ...secondRef, shard });
    await expect(core.prepare({ ...firstRef, shard: 0 })).rejects.toThrow();
    await core.decide(secondRef);
    for (const shard of second.shards) await core.promote({ ...secondRef, shard });
    await core.commit(secondRef);
    await cleanAll(core, secondRef, second.shards);
    await expectExactlyOnce(res.clients, settings, expected(129, 1));
    expect(await entriesLeft(settings, 129)).toEqual({});
  });

  it('a checkpoint begun by a coordinator dealing one partition a shard (three shards) and rolled forward after a crash by one dealing 64: promoted, committed and cleaned by the shards its record names', async () => {
    const settings = settingsIn(res, 'sh');
    const clock = new ManualClock(Date.now());
    const before = createCoordinator({ settings, clients: res.clients, clock, partitionsPerShard: 1 });
    const after = createCoordinator({ settings, clients: res.clients, clock });
    await stageFiles(res.clients, settings, files(upTo(3), 0));
    const begun = await before.begin({ execution: 'before' });
    expect(begun.shards).toEqual([0, 1, 2]);
    const ref = { execution: 'before', checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await before.prepare({ ...ref, shard });
    await before.decide(ref);
    await before.promote({ ...ref, shard: 0 });
    // The execution dies after the decision; the new release's next execution rolls it forward.
    await stageFiles(res.clients, settings, files(upTo(3), 1));
    clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
    const recovered = await after.begin({ execution: 'after' });
    expect(recovered).toMatchObject({
      action: 'commit',
      checkpointId: begun.checkpointId,
      shards: [0, 1, 2],
    });
    const afterRef = { execution: 'after', checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of recovered.shards) await after.promote({ ...afterRef, shard });
    await after.commit(afterRef);
    await cleanAll(after, afterRef, recovered.shards);
    // The next checkpoint, one shard under the new release, commits what was staged meanwhile.
    const next = await after.begin({ execution: 'next' });
    expect(next.shards).toEqual([0]);
    const nextRef = await commitBegun(after, 'next', next);
    await cleanAll(after, nextRef, next.shards);
    await expectExactlyOnce(res.clients, settings, expected(3, 2));
    expect(await entriesLeft(settings, 3)).toEqual({});
  });

  it('the catch-up of an earlier cleanup of three shards by a checkpoint of one, racing a processor staging above the cut and a late retry of the earlier cleanup, deletes only what the cuts cover', async () => {
    const settings = settingsIn(res, 'sh');
    const clock = new ManualClock(Date.now());
    const before = createCoordinator({ settings, clients: res.clients, clock, partitionsPerShard: 1 });
    const after = createCoordinator({ settings, clients: res.clients, clock });
    // Checkpoint 1: three partitions, three shards; only shard 0 is cleaned (the execution is cut off).
    await stageFiles(res.clients, settings, files(upTo(3), 0));
    const one = await before.begin({ execution: 'one' });
    expect(one.shards).toEqual([0, 1, 2]);
    const oneRef = await commitBegun(before, 'one', one);
    await before.cleanup({ ...oneRef, shard: 0 });
    // Checkpoint 2 under the new release: one shard; while it runs, the processor stages above its cut.
    await stageFiles(res.clients, settings, files(upTo(3), 1));
    const two = await after.begin({ execution: 'two' });
    expect(two.shards).toEqual([0]);
    const twoRef = await commitBegun(after, 'two', two);
    await stageFiles(res.clients, settings, files(upTo(3), 2));
    // Its cleanup catches up on checkpoint 1's shards 1 and 2, then a late retry of checkpoint 1's shard 2 runs.
    await after.cleanup({ ...twoRef, shard: 0 });
    // The late retry finds checkpoint 1's cut pages gone (the catch-up deleted them) and deletes nothing.
    await expect(before.cleanup({ ...oneRef, shard: 2 })).rejects.toMatchObject({ name: 'CutPagesError' });
    // Only what checkpoint 3 still needs is left: each partition's file above checkpoint 2's cut.
    expect(await entriesLeft(settings, 3)).toEqual({ 0: [5], 1: [5], 2: [5] });
    const three = await after.begin({ execution: 'three' });
    const threeRef = await commitBegun(after, 'three', three);
    await cleanAll(after, threeRef, three.shards);
    await expectExactlyOnce(res.clients, settings, expected(3, 3));
    expect(await entriesLeft(settings, 3)).toEqual({});
  });

  it('a checkpoint crossing 128 partitions between two checkpoints cleans each by its own count: 128 (two shards) then 129 (three)', async () => {
    const settings = settingsIn(res, 'sh');
    const core = createCoordinator({ settings, clients: res.clients });
    await stageFiles(res.clients, settings, files(upTo(128), 0));
    const one = await core.begin({ execution: 'one' });
    expect(one.shards).toEqual([0, 1]);
    const oneRef = await commitBegun(core, 'one', one);
    // Checkpoint 1's cleanup never runs: checkpoint 2's catches up on it.
    await stageFiles(res.clients, settings, files(upTo(129), 1));
    const two = await core.begin({ execution: 'two' });
    expect(two.shards).toEqual([0, 1, 2]);
    const twoRef = await commitBegun(core, 'two', two);
    expect(oneRef.checkpointId).toBe(twoRef.checkpointId - 1);
    await cleanAll(core, twoRef, two.shards);
    expect(await entriesLeft(settings, 129)).toEqual({});
    const want = expected(129, 2);
    want['orders#128'] = [2, 3];
    await expectExactlyOnce(res.clients, settings, want);
  });

  // A vote must name a shard the record has: `decide` compares the votes with `shardCount`, so a vote of a shard
  // the attempt was not dealt would decide the checkpoint without a real shard's plan, and past the decision it
  // could neither abort nor roll forward (C4, L1-L3). The state machine hands each step the shards its begin
  // named; a stray input (an iteration re-run by hand with another shard count in mind) is refused by prepare and
  // by the vote's condition.
  it('a prepare naming a shard the attempt does not have casts no vote: the decision still waits for every shard the record names', async () => {
    const settings = settingsIn(res, 'sh');
    const core = createCoordinator({ settings, clients: res.clients });
    await stageFiles(res.clients, settings, files(upTo(3), 0));
    const begun = await core.begin({ execution: 'one' });
    expect(begun.shards).toEqual([0]);
    const ref = { execution: 'one', checkpointId: begun.checkpointId, attempt: begun.attempt };
    // Shard 1 exists only under a coordinator dealing fewer partitions a shard.
    await expect(core.prepare({ ...ref, shard: 1 })).rejects.toMatchObject({ name: 'UnknownShardError' });
    await expect(core.decide(ref)).rejects.toMatchObject({ name: 'VotesIncompleteError' });
    // The ledger refuses such a vote too, whoever sends it.
    const { store } = coordinatorParts({ settings, clients: res.clients });
    const now = Date.now();
    await expect(
      store.vote(ref.checkpointId, ref.attempt, 1, 'f'.repeat(64), now + 60_000, now),
    ).rejects.toThrow();
    expect((await store.readRecord(ref.checkpointId))?.votes?.has(1) ?? false).toBe(false);
  });
});
