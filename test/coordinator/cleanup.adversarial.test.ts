/**
 * The cleanup step under the interleavings a real run can produce, against DynamoDB Local and the S3 server: each
 * shard cleans from the plan it voted for (`cleanup/shard.ts`), and the checkpoint's plans go only once every
 * shard is clean. A shard cut off between its deletes and its mark, then retried, still reads its plan; a shard
 * retried after the plans are gone reads the ledger and still deletes everything its cut covers; a lost delete of
 * the plans is redone by a retry or swept by the next checkpoint; a plan of another attempt is never what a
 * shard deletes from; a late cleanup of an older checkpoint deletes nothing a later cut covers. Whatever the
 * order, what lies at or below the committed cut goes (objects and entries) and what lies above it stays.
 */
import type { DeleteObjectsCommandInput } from '@aws-sdk/client-s3';
import type { InitializeMiddleware, MetadataBearer, MiddlewareStack } from '@smithy/types';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { coordinatorParts } from '../../shared/coordinator/parts.ts';
import {
  CHECKPOINT_WORK_DIR,
  checkpointAttemptPrefix,
  checkpointWorkPrefix,
  workObjectCheckpointId,
} from '../../shared/coordinator/work-objects.ts';
import { CutPagesError } from '../../shared/ledger/checkpoints.ts';
import { inProgressPrefix } from '../../shared/sink/layout.ts';
import { listObjects } from '../../shared/sink/objects.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { type FileSpec, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('cleanup-adversarial');
});

const PARTITIONS = 6;

/** `files` files of two offsets each in every partition, from file number `from`. */
function specs(files: number, from: number): FileSpec[] {
  return Array.from({ length: PARTITIONS * files }, (_, i) => ({
    partition: i % PARTITIONS,
    firstOffset: 2 * (from + Math.floor(i / PARTITIONS)),
    lastOffset: 2 * (from + Math.floor(i / PARTITIONS)) + 1,
  }));
}

/** Staged object keys, sorted. */
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

/** The lastOffsets of the staged entries left in each partition. */
async function entriesLeft(settings: Settings): Promise<number[][]> {
  const { ledger } = coordinatorParts({ settings, clients: res.clients });
  const left: number[][] = [];
  for (let partition = 0; partition < PARTITIONS; partition++) {
    const offsets: number[] = [];
    for await (const entry of ledger.entries('orders', partition, { above: -1, upTo: 1_000 }))
      offsets.push(entry.lastOffset);
    left.push(offsets);
  }
  return left;
}

/** The working objects (plans, candidates, promotion records) left of `checkpointId`. */
async function workObjectsOf(settings: Settings, checkpointId: number): Promise<string[]> {
  const found: string[] = [];
  for await (const object of listObjects(
    res.clients.s3,
    settings.bucket,
    checkpointWorkPrefix(settings.pipelineId),
  ))
    if (workObjectCheckpointId(settings.pipelineId, object.key) === checkpointId) found.push(object.key);
  return found;
}

/** Runs one checkpoint from begin to COMMITTED (no cleanup). */
async function commitOne(core: Coordinator, execution = 'exec') {
  const begun = await core.begin({ execution });
  expect(begun.action).toBe('checkpoint');
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  await core.decide(ref);
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  return { ref, shards: begun.shards };
}

/**
 * Clients that fail, once armed, the calls `fails` picks, as a Lambda cut off at that call would (before the SDK's
 * retries: the call is never sent), and count every call.
 */
function faultyClients(fails: (command: string, input: Record<string, unknown>) => boolean) {
  const clients: AwsClients = createAwsClients();
  const calls = new CallCounter().attach(clients);
  const state = { armed: false, failed: 0 };
  const middleware: InitializeMiddleware<object, MetadataBearer> = (next, context) => async (args) => {
    if (state.armed && fails(String(context.commandName), args.input as Record<string, unknown>)) {
      state.armed = false;
      state.failed++;
      throw new Error(`cut off at ${String(context.commandName)}`);
    }
    return next(args);
  };
  for (const stack of [clients.dynamodb.middlewareStack, clients.s3.middlewareStack])
    (stack as unknown as MiddlewareStack<object, MetadataBearer>).add(middleware, {
      step: 'initialize',
      name: 'cutOff',
      priority: 'high',
    });
  return { clients, calls, state };
}

/** A DeleteObjects of working objects (the plans' delete once every shard is clean). */
function deletesWorkObjects(command: string, input: Record<string, unknown>): boolean {
  const objects = (input as Partial<DeleteObjectsCommandInput>).Delete?.Objects ?? [];
  return (
    command === 'DeleteObjectsCommand' &&
    objects.some((object) => String(object.Key).includes(`/${CHECKPOINT_WORK_DIR}/`))
  );
}

/** Six partitions of two files committed by one checkpoint, then one more file a partition above its cut. */
async function committedPipeline(
  idPrefix: string,
  fails: (command: string, input: Record<string, unknown>) => boolean = () => false,
) {
  const settings = settingsIn(res, idPrefix);
  await stageFiles(res.clients, settings, specs(2, 0));
  const faulty = faultyClients(fails);
  const core = createCoordinator({ settings, clients: faulty.clients, partitionsPerShard: 1 });
  const { ref, shards } = await commitOne(core);
  expect(shards).toHaveLength(PARTITIONS);
  const above = (await stageFiles(res.clients, settings, specs(1, 2))).map((e) => e.key).sort();
  return { settings, core, ref, shards, above, ...faulty };
}

describe('cleanup interleavings', () => {
  it('a shard cut off between its deletes and its mark keeps the plans for its retry, which still reads its plan', async () => {
    const run = await committedPipeline('ci-cut', (command) => command === 'BatchExecuteStatementCommand');
    const [, first, cutOff, ...rest] = run.shards;
    const perShard = new Map<number, Record<string, number>>();
    for (const shard of run.shards) {
      run.state.armed = shard === cutOff;
      run.calls.reset();
      if (shard === cutOff) {
        // Its staged objects went, its entries' transaction did not.
        await expect(run.core.cleanup({ ...run.ref, shard })).rejects.toThrow(/cut off/);
      } else {
        await run.core.cleanup({ ...run.ref, shard });
        perShard.set(shard, run.calls.snapshot());
      }
    }
    expect(run.state.failed).toBe(1);
    // Every other shard is clean, shard 0 and the last included: the plans stay, since one shard still needs its.
    expect(rest.length).toBeGreaterThan(0);
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).not.toEqual([]);
    expect((await entriesLeft(run.settings))[cutOff!]).toEqual([1, 3, 5]);

    run.calls.reset();
    expect((await run.core.cleanup({ ...run.ref, shard: cutOff! })).count).toBe(2);
    const retry = run.calls.snapshot();
    // The retry read its plan, as a shard cleaned at once did (no ledger read of its partition), and deleted the
    // plans, being the last shard to finish.
    expect(retry['s3:GetObject']).toBe(1);
    expect(retry['dynamodb:Query']).toBe(perShard.get(first!)!['dynamodb:Query']);
    expect(await stagedKeys(run.settings)).toEqual(run.above);
    expect(await entriesLeft(run.settings)).toEqual(Array.from({ length: PARTITIONS }, () => [5]));
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).toEqual([]);
  });

  it('a shard retried after the plans are gone reads the ledger and still deletes everything its cut covers', async () => {
    const run = await committedPipeline('ci-gone', (command) => command === 'BatchExecuteStatementCommand');
    const cutOff = run.shards[3]!;
    for (const shard of run.shards) {
      run.state.armed = shard === cutOff;
      if (shard === cutOff) await expect(run.core.cleanup({ ...run.ref, shard })).rejects.toThrow(/cut off/);
      else await run.core.cleanup({ ...run.ref, shard });
    }
    // The plans go from under it (a catch-up by a later checkpoint, or an operator).
    await coordinatorParts({ settings: run.settings, clients: res.clients }).plans.deleteCheckpoint(
      run.ref.checkpointId,
    );
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).toEqual([]);

    run.calls.reset();
    expect((await run.core.cleanup({ ...run.ref, shard: cutOff })).count).toBe(2);
    // Its cut pages, then its one partition from the ledger.
    expect(run.calls.snapshot()['dynamodb:Query']).toBe(2);
    expect(await stagedKeys(run.settings)).toEqual(run.above);
    expect(await entriesLeft(run.settings)).toEqual(Array.from({ length: PARTITIONS }, () => [5]));
  });

  it('a lost delete of the plans is redone by the retry of the last shard', async () => {
    const run = await committedPipeline('ci-lost', deletesWorkObjects);
    const last = run.shards.at(-1)!;
    for (const shard of run.shards) {
      run.state.armed = shard === last;
      if (shard === last) await expect(run.core.cleanup({ ...run.ref, shard })).rejects.toThrow(/cut off/);
      else await run.core.cleanup({ ...run.ref, shard });
    }
    expect(run.state.failed).toBe(1);
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).not.toEqual([]);
    expect(await stagedKeys(run.settings)).toEqual(run.above);

    expect((await run.core.cleanup({ ...run.ref, shard: last })).count).toBe(0);
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).toEqual([]);
    expect(await entriesLeft(run.settings)).toEqual(Array.from({ length: PARTITIONS }, () => [5]));
  });

  it('a lost delete of the plans never retried is swept by the next checkpoint', async () => {
    const run = await committedPipeline('ci-next', deletesWorkObjects);
    const last = run.shards.at(-1)!;
    for (const shard of run.shards) {
      run.state.armed = shard === last;
      if (shard === last) await expect(run.core.cleanup({ ...run.ref, shard })).rejects.toThrow(/cut off/);
      else await run.core.cleanup({ ...run.ref, shard });
    }
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).not.toEqual([]);

    const next = await commitOne(run.core);
    for (const shard of next.shards) await run.core.cleanup({ ...next.ref, shard });
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).toEqual([]);
    expect(await workObjectsOf(run.settings, next.ref.checkpointId)).toEqual([]);
    expect(await stagedKeys(run.settings)).toEqual([]);
    expect(await entriesLeft(run.settings)).toEqual(Array.from({ length: PARTITIONS }, () => []));
  });

  it("cleans from its own attempt's plan, not from an earlier attempt's left beside it", async () => {
    const settings = settingsIn(res, 'ci-attempt');
    await stageFiles(res.clients, settings, specs(1, 0));
    const clock = new ManualClock(Date.now());
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const core = createCoordinator({ settings, clients, clock, partitionsPerShard: 1 });
    // Attempt 1 prepares (its plans written and voted for), then its execution dies before the decision.
    const first = await core.begin({ execution: 'crashed' });
    const firstRef = { execution: 'crashed', checkpointId: first.checkpointId, attempt: first.attempt };
    for (const shard of first.shards) await core.prepare({ ...firstRef, shard });
    const staleAttempt = await workObjectsOf(settings, first.checkpointId);
    const attemptPlans = `${checkpointAttemptPrefix(settings.pipelineId, first.checkpointId, 1)}plan-`;
    expect(staleAttempt.filter((key) => key.startsWith(attemptPlans))).toHaveLength(PARTITIONS);
    // More files arrive; the lease runs out and the next execution aborts attempt 1 and begins attempt 2 of the
    // same checkpoint, whose cut covers the new files too. Attempt 1's working objects stay until cleanup.
    await stageFiles(res.clients, settings, specs(1, 1));
    clock.advance(settings.checkpointLeaseSeconds * 1000 + 1);
    const { ref, shards } = await commitOne(core);
    expect(ref).toMatchObject({ checkpointId: first.checkpointId, attempt: 2 });
    for (const key of staleAttempt)
      expect((await workObjectsOf(settings, ref.checkpointId)).includes(key), key).toBe(true);
    const above = (await stageFiles(res.clients, settings, specs(1, 2))).map((e) => e.key).sort();

    for (const shard of shards) {
      calls.reset();
      await core.cleanup({ ...ref, shard });
      // Each shard read one plan and no partition of the ledger (its cut pages are its one Query).
      expect(calls.snapshot()['s3:GetObject'], `shard ${shard}`).toBe(1);
      if (shard !== 0) expect(calls.snapshot()['dynamodb:Query'], `shard ${shard}`).toBe(1);
    }
    // Attempt 1's plans name only the first files: cleaned from them, the second files would stay.
    expect(await stagedKeys(settings)).toEqual(above);
    expect(await entriesLeft(settings)).toEqual(Array.from({ length: PARTITIONS }, () => [5]));
    expect(await workObjectsOf(settings, ref.checkpointId)).toEqual([]);
  });

  it('a late cleanup of an older checkpoint deletes nothing a later cut covers', async () => {
    const run = await committedPipeline('ci-zombie');
    // Checkpoint 1's execution is cut off after COMMITTED; checkpoint 2 commits the files above its cut.
    const next = await commitOne(run.core);
    const aboveNext = (await stageFiles(res.clients, run.settings, specs(1, 3))).map((e) => e.key).sort();

    // A late cleanup of checkpoint 1 (its plans still there) deletes only what its own cut covers.
    const lateShard = run.shards[2]!;
    expect((await run.core.cleanup({ ...run.ref, shard: lateShard })).count).toBe(2);
    expect(await stagedKeys(run.settings)).toHaveLength(PARTITIONS * 4 - 2);
    expect((await entriesLeft(run.settings))[lateShard]).toEqual([5, 7]);

    // Checkpoint 2's cleanup catches up on checkpoint 1 and supersedes its cut.
    for (const shard of next.shards) await run.core.cleanup({ ...next.ref, shard });
    expect(await stagedKeys(run.settings)).toEqual(aboveNext);
    expect(await workObjectsOf(run.settings, run.ref.checkpointId)).toEqual([]);

    // Later still, another shard of checkpoint 1: its plans and cut pages are gone; it fails loudly, deleting
    // nothing of what lies above checkpoint 2's cut.
    await expect(run.core.cleanup({ ...run.ref, shard: run.shards[4]! })).rejects.toThrow(CutPagesError);
    expect(await stagedKeys(run.settings)).toEqual(aboveNext);
    expect(await entriesLeft(run.settings)).toEqual(Array.from({ length: PARTITIONS }, () => [7]));
  });
});
