/**
 * Prepare reads every covered staged object once, verifies it and merges each final object's bytes into a
 * candidate under the coordinator's prefix (write-once, content-addressed); promote publishes each candidate with
 * one server-side copy pinned to the ETag prepare's write returned. A processor may rewrite its staged object at
 * any moment (its role may put under its staged prefix): before prepare's read, the attempt aborts on the
 * checksum (no decision on bad bytes); after it, nothing that is published changes. Candidates are cleaned up
 * with their attempt or checkpoint. Against DynamoDB Local and s3rver; the rewrites are injected at exact points
 * with middleware on the coordinator's own S3 client (the rewrite itself goes through another client, as the
 * processor's would).
 */
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { CandidateConflictError } from '../../shared/coordinator/prepare/candidates.ts';
import { StagedObjectInvalidError } from '../../shared/coordinator/prepare/staged-check.ts';
import { PlanStore, type ShardPlan } from '../../shared/coordinator/promote/plan-store.ts';
import { CandidateLostError } from '../../shared/coordinator/promote/promoter.ts';
import {
  candidateKey,
  checkpointAttemptPrefix,
  checkpointWorkPrefix,
  planKey,
} from '../../shared/coordinator/work-objects.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { finalPrefix, inProgressPrefix } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder } from '../support/checkpoint-steps.ts';
import { committedOffsets, defaultRows, expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('candidates');
});

type S3Hook = (command: string, input: Record<string, unknown>, phase: 'before' | 'after') => Promise<void>;

/** Clients for the coordinator whose S3 calls pass `hook` before and after they are sent. */
function hookedClients(hook: S3Hook): AwsClients {
  const clients = createAwsClients();
  clients.s3.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as Record<string, unknown>;
      await hook(String(context.commandName), input, 'before');
      const result = await next(args);
      await hook(String(context.commandName), input, 'after');
      return result;
    },
    { step: 'initialize', name: 'testHook' },
  );
  return clients;
}

function setup(hook?: S3Hook) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('candidates'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  const coordinatorFor = (h?: S3Hook): Coordinator =>
    createCoordinator({ settings, clients: h ? hookedClients(h) : res.clients, clock });
  return {
    settings,
    clock,
    core: coordinatorFor(hook),
    coordinatorFor,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
  };
}

/** What a compromised processor writes over its staged object: as many rows, other content (another SHA-256). */
async function rewrite(settings: Settings, entry: StagedFileEntry): Promise<void> {
  const forged = defaultRows(entry).map((row) => ({ ...row, forged: true }));
  const body = encodeNdjson(forged, settings.gzip).body;
  await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: entry.key, Body: body }));
}

async function prepareAll(core: Coordinator, execution: string) {
  const begun = await core.begin({ execution });
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  for (const shard of begun.shards) await core.prepare({ ...ref, shard });
  return { ref, shards: begun.shards };
}

/** Every committed row is one the processor staged honestly (none carries the forger's mark). */
async function expectHonestRows(settings: Settings, offsets: readonly number[]): Promise<void> {
  await expectExactlyOnce(res.clients, settings, { 'orders#0': offsets });
  const rows = await committedOffsets(res.clients, settings);
  expect(rows.map(({ row }) => row)).toEqual(
    defaultRows({ partition: 0, firstOffset: offsets[0]!, lastOffset: offsets.at(-1)! }),
  );
}

/** The plan shard 0 of `ref` voted for. */
async function votedPlan(
  s: ReturnType<typeof setup>,
  ref: { checkpointId: number; attempt: number },
): Promise<ShardPlan> {
  const voted = (await s.store.readRecord(ref.checkpointId))!.planDigests!['0']!;
  return new PlanStore(res.clients.s3, res.bucket, s.settings.pipelineId).readPlan(
    ref.checkpointId,
    ref.attempt,
    0,
    voted,
  );
}

/** The candidate keys under an attempt's folder. */
async function candidatesOf(s: ReturnType<typeof setup>, ref: { checkpointId: number; attempt: number }) {
  const prefix = checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt);
  return (await keysUnder(res, prefix)).filter((key) => key.startsWith(`${prefix}candidate-`));
}

describe('prepare verifies what it reads once, promote publishes only the candidate merged from it', () => {
  it('a staged object rewritten just before prepare reads it fails verification: no vote, the attempt aborts, nothing is committed', async () => {
    let target: StagedFileEntry | undefined;
    const s = setup(async (command, input, phase) => {
      if (command === 'GetObjectCommand' && phase === 'before' && target && input.Key === target.key)
        await rewrite(s.settings, target);
    });
    [target] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(StagedObjectInvalidError);
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(
      new RegExp(`${target!.key} is invalid \\((size|checksum)\\)`),
    );
    // No decision on bad bytes: the shard never voted, decide refuses, and the abort goes through.
    expect((await s.store.readRecord(ref.checkpointId))?.votes?.size ?? 0).toBe(0);
    await expect(s.core.decide(ref)).rejects.toThrow(/0 of 1 shards voted/);
    expect((await s.core.abort({ ...ref, error: { Error: 'StagedObjectInvalidError' } })).outcome).toBe(
      'aborted',
    );
    expect(await s.store.readHead()).toMatchObject({ status: 'ABORTED' });
    expect(await committedOffsets(res.clients, s.settings)).toEqual([]);
    // Nothing was merged from bad bytes, and the abort left no working object.
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it('a staged object rewritten right after prepare read it, before the vote, changes nothing: the candidate holds the verified bytes', async () => {
    let target: StagedFileEntry | undefined;
    const s = setup(async (command, input, phase) => {
      if (command === 'GetObjectCommand' && phase === 'after' && target && input.Key === target.key)
        await rewrite(s.settings, target);
    });
    [target] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const original = await getBytes(res.clients.s3, res.bucket, target!.key);
    const { ref, shards } = await prepareAll(s.core, 'e1');
    // One member: the candidate is the staged bytes as read; the staged key now holds the forgery.
    const [object] = (await votedPlan(s, ref)).objects;
    expect(await getBytes(res.clients.s3, res.bucket, object!.candidate!.key)).toEqual(original);
    expect(await getBytes(res.clients.s3, res.bucket, target!.key)).not.toEqual(original);
    await finish(s.core, ref, shards);
    await expectHonestRows(s.settings, range(0, 5));
  });

  it('a staged object rewritten after the vote is not what promote publishes: the committed output equals what prepare verified', async () => {
    const s = setup();
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const { ref, shards } = await prepareAll(s.core, 'e1');
    await rewrite(s.settings, entry!);
    // Promote is watched: it reads its plan and copies the plan's candidate, and touches no staged key at all.
    const promoteReads: string[] = [];
    const promoteCopies: string[] = [];
    const watched = s.coordinatorFor(async (command, input, phase) => {
      if (command === 'GetObjectCommand' && phase === 'before') promoteReads.push(String(input.Key));
      if (command === 'CopyObjectCommand' && phase === 'before')
        promoteCopies.push(
          `${String(input.CopySource)} -> ${String(input.Key)} if ${String(input.CopySourceIfMatch)}`,
        );
    });
    await s.core.decide(ref);
    for (const shard of shards) await watched.promote({ ...ref, shard });
    const voted = (await s.store.readRecord(ref.checkpointId))!.planDigests!['0']!;
    const planned = await votedPlan(s, ref);
    expect(promoteReads).toEqual([planKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, 0, voted)]);
    expect(promoteCopies).toEqual(
      planned.objects.map(
        (o) => `${res.bucket}/${o.candidate!.key} -> ${o.finalKey} if ${o.candidate!.etag}`,
      ),
    );
    expect(
      [...promoteReads, ...promoteCopies].filter((key) =>
        key.includes(inProgressPrefix(s.settings.pipelineId)),
      ),
    ).toEqual([]);
    await s.core.commit(ref);
    for (const shard of shards) await s.core.cleanup({ ...ref, shard });
    await expectHonestRows(s.settings, range(0, 5));
  });

  it('a prepare that crashes after its candidates and before its vote is retried harmlessly; the candidates go with cleanup', async () => {
    let crashes = 1;
    const s = setup(async (command, input, phase) => {
      // Between the candidates (merged and written) and the vote: the plan's write.
      if (
        command === 'PutObjectCommand' &&
        phase === 'before' &&
        String(input.Key).includes('/plan-') &&
        crashes-- > 0
      )
        throw new InjectedCrashError('prepare: before the plan');
    });
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
    ]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(InjectedCrashError);
    const written = await candidatesOf(s, ref);
    expect(written).toHaveLength(1); // one final object: both files of the partition, concatenated
    // The retry merges the same bytes: its write is refused (412), it reads the candidate back, then votes for it.
    await s.core.prepare({ ...ref, shard: 0 });
    expect((await votedPlan(s, ref)).objects.map((o) => o.candidate!.key)).toEqual(written);
    await finish(s.core, ref, begun.shards);
    await expectHonestRows(s.settings, range(0, 10));
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it('the candidates of an attempt that crashed before its decision and was never retried go when its checkpoint commits on a later attempt', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    // Attempt 1 merges and votes, then its execution dies (no decide): its lease runs out.
    const first = await prepareAll(s.core, 'dead');
    expect(await candidatesOf(s, first.ref)).toHaveLength(1);
    s.clock.advance(601_000);
    const second = await prepareAll(s.core, 'e2'); // begin aborts attempt 1 (lease expired), allocates attempt 2
    expect(second.ref).toMatchObject({ checkpointId: first.ref.checkpointId, attempt: 2 });
    await finish(s.core, second.ref, second.shards);
    await expectHonestRows(s.settings, range(0, 5));
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it("abort deletes the attempt's candidates; the next checkpoint merges and commits the same data afresh", async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const { ref } = await prepareAll(s.core, 'e1');
    expect(
      await keysUnder(res, checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt)),
    ).toHaveLength(2); // plan + candidate
    expect((await s.core.abort({ ...ref, error: { Error: 'States.Timeout' } })).outcome).toBe('aborted');
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
    const next = await prepareAll(s.core, 'e2');
    await finish(s.core, next.ref, next.shards);
    await expectHonestRows(s.settings, range(0, 5));
  });

  it('working objects a zombie step leaves under an earlier checkpoint are deleted by the next cleanup, later ones kept', async () => {
    const s = setup();
    const pl = s.settings.pipelineId;
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const one = await prepareAll(s.core, 'e1');
    await finish(s.core, one.ref, one.shards);
    // A zombie prepare of checkpoint 1 writes a candidate after its cleanup; something of checkpoint 3 exists.
    const late = candidateKey(pl, 1, 1, 'b'.repeat(64));
    const ahead = planKey(pl, 3, 1, 0, 'a'.repeat(64));
    for (const key of [late, ahead])
      await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: 'x' }));
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 5, lastOffset: 9 }]);
    const two = await prepareAll(s.core, 'e2');
    await finish(s.core, two.ref, two.shards);
    expect(await keysUnder(res, checkpointWorkPrefix(pl))).toEqual([ahead]);
    await expectHonestRows(s.settings, range(0, 10));
  });
});

describe('what the commit path costs', () => {
  it('prepare reads each covered staged object once and writes one candidate per final object and one plan per shard; promote makes one copy per final object and reads nothing staged', async () => {
    const calls: Array<{ command: string; key: string }> = [];
    const s = setup(async (command, input, phase) => {
      if (phase === 'before') calls.push({ command, key: String(input.Key ?? input.Prefix ?? '') });
    });
    const files = 40;
    const partitions = 4;
    await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({
        partition: i % partitions,
        firstOffset: i * 5,
        lastOffset: i * 5 + 4,
      })),
    );
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    calls.length = 0;
    for (const shard of begun.shards) await s.core.prepare({ ...ref, shard });
    const staged = inProgressPrefix(s.settings.pipelineId);
    const count = (command: string, where: (key: string) => boolean = () => true) =>
      calls.filter((c) => c.command === command && where(c.key)).length;
    expect(count('GetObjectCommand', (key) => key.startsWith(staged))).toBe(files);
    expect(count('GetObjectCommand')).toBe(files);
    expect(count('CopyObjectCommand')).toBe(0);
    // One merged final object per shard here (its partitions' objects as slices): one candidate each, and one
    // plan per shard. No other S3 request.
    const objects = begun.shards.length;
    expect(count('PutObjectCommand', (key) => key.includes('/candidate-'))).toBe(objects);
    expect(count('PutObjectCommand')).toBe(begun.shards.length + objects);
    expect(calls.filter((c) => !c.command.startsWith('Get') && !c.command.startsWith('Put'))).toEqual([]);
    calls.length = 0;
    await s.core.decide(ref);
    for (const shard of begun.shards) await s.core.promote({ ...ref, shard });
    // Promote: its plan, one pinned copy per final object, its promotion record. Nothing else.
    expect(count('GetObjectCommand')).toBe(begun.shards.length);
    expect(count('CopyObjectCommand', (key) => key.startsWith(finalPrefix(s.settings.pipelineId)))).toBe(
      objects,
    );
    expect(count('PutObjectCommand')).toBe(begun.shards.length);
    expect(calls).toHaveLength(2 * begun.shards.length + objects);
    calls.length = 0;
    await s.core.commit(ref);
    for (const shard of begun.shards) await s.core.cleanup({ ...ref, shard });
    // Commit and cleanup read no staged object either (cleanup deletes them and its orphan sweep lists them).
    expect(count('GetObjectCommand', (key) => key.startsWith(staged))).toBe(0);
    await expectExactlyOnce(res.clients, s.settings, {
      'orders#0': range(0, files * 5).filter((o) => Math.floor(o / 5) % partitions === 0),
      'orders#1': range(0, files * 5).filter((o) => Math.floor(o / 5) % partitions === 1),
      'orders#2': range(0, files * 5).filter((o) => Math.floor(o / 5) % partitions === 2),
      'orders#3': range(0, files * 5).filter((o) => Math.floor(o / 5) % partitions === 3),
    });
  });
});

describe('candidates are write-once, and promote copies only the voted one (x-amz-copy-source-if-match)', () => {
  it('a retried prepare after the vote, the processor having rewritten its object since, keeps the vote and writes nothing', async () => {
    const puts: string[] = [];
    const s = setup(async (command, input, phase) => {
      if (command === 'PutObjectCommand' && phase === 'before') puts.push(String(input.Key));
    });
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const { ref, shards } = await prepareAll(s.core, 'e1');
    const voted = (await s.store.readRecord(ref.checkpointId))!.planDigests!['0'];
    const [candidate] = await candidatesOf(s, ref);
    const verified = await getBytes(res.clients.s3, res.bucket, candidate!);
    await rewrite(s.settings, entry!);
    puts.length = 0;
    // The retry (its predecessor's answer was lost): the shard's vote is in, so it neither reads nor writes.
    await expect(s.core.prepare({ ...ref, shard: 0 })).resolves.toMatchObject({ shard: 0 });
    expect(puts).toEqual([]);
    expect((await s.store.readRecord(ref.checkpointId))!.planDigests!['0']).toBe(voted);
    expect(await getBytes(res.clients.s3, res.bucket, candidate!)).toEqual(verified);
    await finish(s.core, ref, shards);
    await expectHonestRows(s.settings, range(0, 5));
  });

  it('a candidate key that holds other bytes than its name says (only a coordinator role could put them) is refused: no vote', async () => {
    const s = setup();
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    // One member: the candidate's bytes are the staged bytes, so its key is named by the entry's SHA-256.
    const key = candidateKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, entry!.sha256);
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: 'not those bytes' }),
    );
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(CandidateConflictError);
    expect((await s.store.readRecord(ref.checkpointId))?.votes?.size ?? 0).toBe(0);
    expect(await getBytes(res.clients.s3, res.bucket, key)).toEqual(Buffer.from('not those bytes'));
  });

  it('a candidate replaced or deleted after the decision is never published: promote fails with CandidateLostError, writes nothing, and rolls forward once it is back', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const { ref, shards } = await prepareAll(s.core, 'e1');
    await s.core.decide(ref);
    const [object] = (await votedPlan(s, ref)).objects;
    const key = object!.candidate!.key;
    const verified = (await getBytes(res.clients.s3, res.bucket, key))!;
    // Replaced (an operator deletes it, then puts other bytes there): its ETag is not the voted one.
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: key }));
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: 'other bytes' }));
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toThrow(CandidateLostError);
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toThrow(/no longer the voted ETag/);
    // Deleted.
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: key }));
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toThrow(/is missing/);
    expect(await keysUnder(res, finalPrefix(s.settings.pipelineId))).toEqual([]);
    // Restored as it was (its ETag is the MD5 of the same bytes): the decided checkpoint rolls forward.
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: verified }));
    await finish(s.core, ref, shards);
    await expectHonestRows(s.settings, range(0, 5));
  });
});
