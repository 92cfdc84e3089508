/**
 * Prepare copies every covered staged object under the coordinator's prefix and verifies
 * the COPY; promote reads only the copies. A processor may rewrite its staged object at any moment (its role may
 * put under its staged prefix): before the copy, the attempt aborts on the copy's checksum (no decision on bad
 * bytes); after it, nothing that is promoted changes. Copies are cleaned up with their attempt or checkpoint.
 * Against DynamoDB Local and s3rver; the rewrites are injected at exact points with middleware on the
 * coordinator's own S3 client (the rewrite itself goes through another client, as the processor's would).
 */
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { StagedObjectInvalidError } from '../../shared/coordinator/prepare/staged-check.ts';
import { PlanStore } from '../../shared/coordinator/promote/plan-store.ts';
import {
  checkpointAttemptPrefix,
  checkpointWorkPrefix,
  planKey,
  stagedCopyKey,
} from '../../shared/coordinator/work-objects.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { inProgressPrefix } from '../../shared/sink/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder } from '../support/checkpoint-steps.ts';
import { committedOffsets, defaultRows, expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('copies');
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
    pipelineId: uniqueName('copies'),
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

describe('prepare verifies a copy the processor cannot write, promote reads only that copy', () => {
  it('a staged object rewritten just before prepare copies it fails verification: no vote, the attempt aborts, nothing is committed', async () => {
    let target: StagedFileEntry | undefined;
    const s = setup(async (command, _input, phase) => {
      if (command === 'CopyObjectCommand' && phase === 'before' && target) await rewrite(s.settings, target);
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
    // The abort removed the attempt's copy along with its other working objects.
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it('a staged object rewritten right after the copy, before the vote, changes nothing: the verified bytes are committed', async () => {
    let target: StagedFileEntry | undefined;
    const s = setup(async (command, _input, phase) => {
      if (command === 'CopyObjectCommand' && phase === 'after' && target) await rewrite(s.settings, target);
    });
    [target] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const original = await getBytes(res.clients.s3, res.bucket, target!.key);
    const { ref, shards } = await prepareAll(s.core, 'e1');
    // The copy holds what was staged; the staged key now holds the forgery.
    const copy = stagedCopyKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, target!.key);
    expect(await getBytes(res.clients.s3, res.bucket, copy)).toEqual(original);
    expect(await getBytes(res.clients.s3, res.bucket, target!.key)).not.toEqual(original);
    await finish(s.core, ref, shards);
    await expectHonestRows(s.settings, range(0, 5));
  });

  it('a staged object rewritten after the vote is not what promote reads: the committed output equals what prepare verified', async () => {
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
        promoteCopies.push(`${String(input.CopySource)} -> ${String(input.Key)}`);
    });
    await s.core.decide(ref);
    for (const shard of shards) await watched.promote({ ...ref, shard });
    const voted = (await s.store.readRecord(ref.checkpointId))!.planDigests!['0']!;
    const planned = await new PlanStore(res.clients.s3, res.bucket, s.settings.pipelineId).readPlan(
      ref.checkpointId,
      ref.attempt,
      0,
      voted,
    );
    expect(promoteReads).toEqual([planKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, 0, voted)]);
    expect(promoteCopies).toEqual(
      planned.objects.map((o) => `${res.bucket}/${o.candidate!.key} -> ${o.finalKey}`),
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

  it('a prepare that crashes after its copies and before its vote is retried harmlessly; the copies go with cleanup', async () => {
    let crashes = 1;
    const s = setup(async (command, input, phase) => {
      // Between the copies (made and verified) and the vote: the plan's write.
      if (
        command === 'PutObjectCommand' &&
        phase === 'before' &&
        String(input.Key).includes('/plan-') &&
        crashes-- > 0
      )
        throw new InjectedCrashError('prepare: before the plan');
    });
    const entries = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
    ]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await expect(s.core.prepare({ ...ref, shard: 0 })).rejects.toThrow(InjectedCrashError);
    const attemptCopies = `${checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt)}staged/`;
    expect((await keysUnder(res, attemptCopies)).sort()).toEqual(
      entries.map((e) => stagedCopyKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, e.key)).sort(),
    );
    // The retry copies again (on S3: finds the copies, 412) and verifies what is there; then the vote.
    await s.core.prepare({ ...ref, shard: 0 });
    await finish(s.core, ref, begun.shards);
    await expectHonestRows(s.settings, range(0, 10));
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it('the copies of an attempt that crashed before its vote and was never retried go when its checkpoint commits on a later attempt', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    // Attempt 1 copies and votes, then its execution dies (no decide): its lease runs out.
    const first = await prepareAll(s.core, 'dead');
    expect(await keysUnder(res, checkpointAttemptPrefix(s.settings.pipelineId, 1, 1))).not.toEqual([]);
    s.clock.advance(601_000);
    const second = await prepareAll(s.core, 'e2'); // begin aborts attempt 1 (lease expired), allocates attempt 2
    expect(second.ref).toMatchObject({ checkpointId: first.ref.checkpointId, attempt: 2 });
    await finish(s.core, second.ref, second.shards);
    await expectHonestRows(s.settings, range(0, 5));
    expect(await keysUnder(res, checkpointWorkPrefix(s.settings.pipelineId))).toEqual([]);
  });

  it("abort deletes the attempt's copies; the next checkpoint copies and commits the same data afresh", async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const { ref } = await prepareAll(s.core, 'e1');
    expect(
      await keysUnder(res, checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt)),
    ).toHaveLength(3); // plan + copy + candidate
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
    // A zombie prepare of checkpoint 1 writes a copy after its cleanup; something of checkpoint 3 already exists.
    const late = `${checkpointAttemptPrefix(pl, 1, 1)}staged/late.ndjson.gz`;
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

describe('what the copies cost', () => {
  it('prepare makes one server-side copy per covered staged object and reads each copy once; it never reads a staged key', async () => {
    const calls: Array<{ command: string; key: string }> = [];
    const s = setup(async (command, input, phase) => {
      if (phase === 'before') calls.push({ command, key: String(input.Key ?? input.Prefix ?? '') });
    });
    const files = 40;
    await stageFiles(
      res.clients,
      s.settings,
      Array.from({ length: files }, (_, i) => ({
        partition: i % 4,
        firstOffset: i * 5,
        lastOffset: i * 5 + 4,
      })),
    );
    const { ref, shards } = await prepareAll(s.core, 'e1');
    const staged = inProgressPrefix(s.settings.pipelineId);
    const count = (command: string, where: (key: string) => boolean = () => true) =>
      calls.filter((c) => c.command === command && where(c.key)).length;
    expect(count('CopyObjectCommand')).toBe(files);
    expect(count('GetObjectCommand', (key) => key.includes('/staged/'))).toBe(files);
    expect(count('GetObjectCommand', (key) => key.startsWith(staged))).toBe(0);
    // Besides: one plan per shard and one candidate per final object (one per partition here). No other S3 request.
    const partitions = 4;
    expect(count('PutObjectCommand', (key) => key.includes('/candidate-'))).toBe(partitions);
    expect(count('PutObjectCommand')).toBe(shards.length + partitions);
    expect(calls).toHaveLength(2 * files + shards.length + partitions);
    calls.length = 0;
    await finish(s.core, ref, shards);
    // Promote, commit and cleanup read no staged object either (cleanup deletes them and its orphan sweep lists them).
    expect(count('GetObjectCommand', (key) => key.startsWith(staged))).toBe(0);
  });
});

describe('the copy is write-once (If-None-Match on CopyObject, refused with 412 by the S3 server)', () => {
  /** Records the coordinator's copies: the condition each carried and whether the server made it. */
  function recordCopies(seen: Array<{ ifNoneMatch: unknown; copied: boolean }>): S3Hook {
    return async (command, input, phase) => {
      if (command !== 'CopyObjectCommand') return;
      if (phase === 'before') seen.push({ ifNoneMatch: input.IfNoneMatch, copied: false });
      else seen[seen.length - 1]!.copied = true;
    };
  }

  it('a zombie prepare of the same attempt that copies after the processor rewrote its object does not replace the verified copy', async () => {
    const seen: Array<{ ifNoneMatch: unknown; copied: boolean }> = [];
    const s = setup();
    const core = s.coordinatorFor(recordCopies(seen));
    const [entry] = await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
    ]);
    const { ref, shards } = await prepareAll(core, 'e1');
    const copy = stagedCopyKey(s.settings.pipelineId, ref.checkpointId, ref.attempt, entry!.key);
    const verified = await getBytes(res.clients.s3, res.bucket, copy);
    await rewrite(s.settings, entry!);
    // The zombie: the same shard's prepare again, before the decision. S3 refuses its copy; it verifies the
    // existing copy, which is still the staged object as it was when first verified, and votes for the same plan.
    await core.prepare({ ...ref, shard: 0 });
    expect(seen).toEqual([
      { ifNoneMatch: '*', copied: true },
      { ifNoneMatch: '*', copied: false },
    ]);
    expect(await getBytes(res.clients.s3, res.bucket, copy)).toEqual(verified);
    await finish(core, ref, shards);
    await expectHonestRows(s.settings, range(0, 5));
  });
});
