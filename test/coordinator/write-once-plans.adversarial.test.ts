/**
 * Adversarial interleavings of the content-addressed plans and candidates: plan keys `plan-<shard>-<sha256>.json`
 * and candidate keys `candidate-<sha256>` written once, last-writer-wins votes, promote/commit read the plan the
 * voted digest names and fail loudly without it (no plan is derived again). Against DynamoDB Local and s3rver.
 * Attacks write only what a processor may write (staged objects under its prefix, ledger items of its pipeline);
 * S3 answers are injected with middleware on the coordinator's own clients. The write-once guards
 * (`If-None-Match: *` on plans, candidates and final objects) run on the local S3 server's own answer (412), as
 * on S3.
 */
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  PutObjectCommand,
} from '@aws-sdk/client-s3';
import { DynamoDBDocumentClient, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { StagedObjectInvalidError } from '../../shared/coordinator/prepare/staged-check.ts';
import { WorkObjectMissingError } from '../../shared/coordinator/promote/plan-store.ts';
import { checkpointAttemptPrefix } from '../../shared/coordinator/work-objects.ts';
import { TransientAwsError } from '../../shared/errors.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { encodeNdjson } from '../../shared/sink/ndjson.ts';
import { getBytes, putIfAbsent } from '../../shared/sink/objects.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { finish, keysUnder, swapEntry } from '../support/checkpoint-steps.ts';
import { type ServiceHook as Hook, hookedClients } from '../support/hooked-clients.ts';
import { committedOffsets, defaultRows, expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

let res: TestResources;
let doc: DynamoDBDocumentClient;
beforeAll(async () => {
  res = await freshResources('write-once');
  doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
});

interface ClientOptions {
  /** Called before and after each call is sent; a throw in 'before' replaces the call's answer. */
  readonly hook?: Hook;
}

function s3Error(status: number, name: string): Error {
  return Object.assign(new Error(name), { name, $metadata: { httpStatusCode: status } });
}

/** Clients with the hook of `options`, if any, on their S3 and DynamoDB calls. */
function clientsWith(options: ClientOptions): AwsClients {
  return hookedClients(async (...call) => options.hook?.(...call));
}

function setup() {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('write-once'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
  const clock = new ManualClock(Date.now());
  const coordinatorFor = (options: ClientOptions = {}): Coordinator =>
    createCoordinator({
      settings,
      clients: options.hook ? clientsWith(options) : res.clients,
      clock,
    });
  return {
    settings,
    clock,
    core: coordinatorFor(),
    coordinatorFor,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
  };
}

const planPrefix = (s: ReturnType<typeof setup>, id: number, attempt: number) =>
  `${checkpointAttemptPrefix(s.settings.pipelineId, id, attempt)}plan-`;

describe('a plan write S3 answers 409 ConditionalRequestConflict', () => {
  // S3: "If a concurrent operation occurs during the upload S3 returns a 409 ConditionalRequestConflict response.
  // On a 409 failure you should retry the upload." (PutObject/CopyObject If-None-Match). A 409 says the write did
  // not happen; putIfAbsent reports it as 'exists', and writePlan returns the digest without looking, so the
  // shard votes for a plan that is not there. Promote then depends on the ledger fallback alone.
  const conflictOnPlanPut = (): ClientOptions => {
    let fired = false;
    return {
      hook: async (service, command, input, phase) => {
        if (
          !fired &&
          phase === 'before' &&
          service === 's3' &&
          command === 'PutObjectCommand' &&
          String(input.Key).includes('/plan-')
        ) {
          fired = true;
          throw s3Error(409, 'ConditionalRequestConflict');
        }
      },
    };
  };

  it('a 409 on the plan write fails prepare transiently (no vote for an unwritten plan); the retry writes and votes it, and a processor that swaps the entry after the vote changes nothing', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    expect(begun.shards).toEqual([0]);
    await expect(s.coordinatorFor(conflictOnPlanPut()).prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(
      TransientAwsError,
    );
    expect((await s.store.readRecord(ref.checkpointId))?.planDigests?.['0']).toBeUndefined();
    // Step Functions retries the step: the plan is written, then voted.
    await s.core.prepare({ ...ref, shard: 0 });
    const record = await s.store.readRecord(ref.checkpointId);
    expect(record?.planDigests?.['0']).toMatch(/^[0-9a-f]{64}$/);
    const plans = await keysUnder(res, planPrefix(s, ref.checkpointId, ref.attempt));
    expect(plans, 'the vote names a plan that was written').toEqual([
      expect.stringContaining(`plan-0-${record?.planDigests?.['0']}.json`),
    ]);
    // The processor swaps the covered entry after the vote: promote reads the voted plan, not the ledger.
    await swapEntry(res, s.settings, e1!, 'a2');
    await s.core.decide(ref);
    await s.core.promote({ ...ref, shard: 0 });
    await s.core.commit(ref);
    await s.core.cleanup({ ...ref, shard: 0 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });

  it('the same 409 without a ledger change: the retried prepare votes, the checkpoint rolls forward from the verified copies', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await expect(s.coordinatorFor(conflictOnPlanPut()).prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(
      TransientAwsError,
    );
    await s.core.prepare({ ...ref, shard: 0 }); // the step's retry
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});

describe('a lost plan (operator or coordinator defect) stops the roll-forward loudly, trusting nothing processor-writable', () => {
  it('a lost plan fails promote and commit loudly, writes nothing and keeps failing, whatever the processor rewrites meanwhile; the plan restored, the checkpoint rolls forward with the verified rows', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await s.core.prepare({ ...ref, shard: 0 });
    await s.core.decide(ref);
    const lost = new Map<string, Buffer>();
    for (const key of await keysUnder(res, planPrefix(s, ref.checkpointId, ref.attempt))) {
      lost.set(key, (await getBytes(res.clients.s3, res.bucket, key))!);
      await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: key }));
    }
    expect(lost.size).toBe(1);
    // The processor overwrites its staged object (same key, entry untouched): the fence says nothing here.
    const forged = encodeNdjson(
      defaultRows(e1!).map((row) => ({ ...row, forged: true })),
      s.settings.gzip,
    );
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: e1!.key, Body: forged.body }));
    for (let retry = 0; retry < 2; retry++) {
      await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(WorkObjectMissingError);
      await expect(s.core.commit(ref)).rejects.toBeInstanceOf(WorkObjectMissingError);
    }
    expect(await keysUnder(res, `${s.settings.pipelineId}/final/`)).toEqual([]);
    expect(await keysUnder(res, `${s.settings.pipelineId}/_manifests/`)).toEqual([]);
    // Decided: never aborted (C4).
    expect((await s.core.abort({ ...ref, error: { Error: 'WorkObjectMissingError' } })).outcome).toBe(
      'decided',
    );
    // An operator restores the plan (its previous version on the versioned bucket): the checkpoint rolls forward.
    for (const [key, body] of lost)
      await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: body }));
    await s.core.promote({ ...ref, shard: 0 });
    await s.core.commit(ref);
    await s.core.cleanup({ ...ref, shard: 0 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
    const rows = await committedOffsets(res.clients, s.settings);
    expect(rows.some((r) => 'forged' in r.row)).toBe(false);
  });

  it('a lost plan and a swapped entry: promote fails with the plan error (WorkObjectMissingError), writes nothing, and keeps failing the same way', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await s.core.prepare({ ...ref, shard: 0 });
    await s.core.decide(ref);
    for (const key of await keysUnder(res, planPrefix(s, ref.checkpointId, ref.attempt)))
      await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: key }));
    await swapEntry(res, s.settings, e1!, 'a2');
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(WorkObjectMissingError);
    // A garbage item in the covered range: still the plan's own error (the ledger is not read again).
    await doc.send(
      new PutCommand({
        TableName: s.settings.ledgerTable,
        Item: { ...keys.staged(e1!.pipeline, e1!.topic, e1!.partition, 2, 'output'), key: 42 },
      }),
    );
    await expect(s.core.promote({ ...ref, shard: 0 })).rejects.toBeInstanceOf(WorkObjectMissingError);
    await expect(s.core.commit(ref)).rejects.toBeInstanceOf(WorkObjectMissingError);
    expect(await keysUnder(res, `${s.settings.pipelineId}/final/`)).toEqual([]);
    expect(await keysUnder(res, `${s.settings.pipelineId}/_manifests/`)).toEqual([]);
  });
});

describe('write-once plans and candidates', () => {
  it('the local S3 server refuses a second write of a key with If-None-Match, put or copy (412): the object keeps its first bytes', async () => {
    const base = `write-once-harness-${Date.now()}`;
    const put = await putIfAbsent(res.clients.s3, res.bucket, `${base}/a`, Buffer.from('first'));
    expect(put).toBe('created');
    const again = await putIfAbsent(res.clients.s3, res.bucket, `${base}/a`, Buffer.from('second'));
    expect(again).toBe('exists');
    expect((await getBytes(res.clients.s3, res.bucket, `${base}/a`))?.toString()).toBe('first');
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: res.bucket, Key: `${base}/src`, Body: Buffer.from('source') }),
    );
    const copy = res.clients.s3.send(
      new CopyObjectCommand({
        Bucket: res.bucket,
        Key: `${base}/a`,
        CopySource: `${res.bucket}/${base}/src`,
        IfNoneMatch: '*',
      }),
    );
    await expect(copy).rejects.toMatchObject({
      name: 'PreconditionFailed',
      $metadata: { httpStatusCode: 412 },
    });
    expect((await getBytes(res.clients.s3, res.bucket, `${base}/a`))?.toString()).toBe('first');
    const got = await res.clients.s3.send(new GetObjectCommand({ Bucket: res.bucket, Key: `${base}/src` }));
    expect(got.ContentLength).toBe(6);
  });

  it('two prepare runs planning the same bytes write one plan key; the vote names it; the checkpoint commits', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
    ]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    const runs = [s.coordinatorFor(), s.coordinatorFor()];
    // Concurrent runs on one item: a vote may lose a DynamoDB transaction conflict (transient, retried by Step
    // Functions); the retry below is that retry.
    const settled = await Promise.allSettled(runs.map((run) => run.prepare({ ...ref, shard: 0 })));
    for (const outcome of settled)
      if (outcome.status === 'rejected')
        console.log('overlapping prepare runs: a concurrent run failed:', String(outcome.reason));
    await runs[0]!.prepare({ ...ref, shard: 0 });
    const plans = await keysUnder(res, planPrefix(s, ref.checkpointId, ref.attempt));
    expect(plans).toHaveLength(1);
    const record = await s.store.readRecord(ref.checkpointId);
    expect(plans[0]).toContain(record!.planDigests!['0']!);
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 10) });
  });

  it('overlapping runs; the processor rewrites the SAME staged key and its entry between them: each run merges only bytes it verified, under keys naming them, and the voted plan is committed, never mixed bytes', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const first = (await getBytes(res.clients.s3, res.bucket, e1!.key))!;
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    let fired = false;
    let swapped: Buffer | undefined;
    const runA = s.coordinatorFor({
      hook: async (service, command, input, phase) => {
        if (
          !fired &&
          service === 's3' &&
          command === 'PutObjectCommand' &&
          phase === 'after' &&
          String(input.Key).includes('/plan-')
        ) {
          fired = true;
          await swapEntry(res, s.settings, e1!, e1!.attemptId); // same key, other bytes, entry to match
          swapped = await getBytes(res.clients.s3, res.bucket, e1!.key);
          await s.coordinatorFor().prepare({ ...ref, shard: 0 }); // run B: the new bytes, its own candidate
        }
      },
    });
    await runA.prepare({ ...ref, shard: 0 }); // votes last, for the candidate of the first bytes
    expect(fired).toBe(true);
    // One member each: a candidate is the bytes its run verified, under the key their SHA-256 names.
    const candidates = await keysUnder(
      res,
      `${checkpointAttemptPrefix(s.settings.pipelineId, ref.checkpointId, ref.attempt)}candidate-`,
    );
    expect(candidates).toHaveLength(2);
    const bodies = await Promise.all(candidates.map((key) => getBytes(res.clients.s3, res.bucket, key)));
    expect(bodies.map((b) => b!.toString('base64')).sort()).toEqual(
      [first, swapped!].map((b) => b.toString('base64')).sort(),
    );
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
    // The last vote was run A's: the first bytes are committed.
    const rows = await committedOffsets(res.clients, s.settings);
    expect(rows.some((r) => 'swapped' in r.row)).toBe(false);
  });

  it('a retried prepare finds the staged object gone (rewritten with its entry since an earlier run wrote its candidates): it fails as missing, no vote for the earlier candidates', async () => {
    const s = setup();
    const [e1] = await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    // Run A verifies the first bytes and writes their candidate, then dies before its plan and vote.
    let died = false;
    const runA = s.coordinatorFor({
      hook: async (service, command, input, phase) => {
        if (
          service === 's3' &&
          command === 'PutObjectCommand' &&
          phase === 'before' &&
          String(input.Key).includes('/plan-')
        ) {
          died = true;
          throw new Error('Lambda timed out');
        }
      },
    });
    await expect(runA.prepare({ ...ref, shard: 0 })).rejects.toThrow('Lambda timed out');
    expect(died).toBe(true);
    // The processor rewrites the entry and its object (same key), then the object is gone (sweep, lifecycle).
    await swapEntry(res, s.settings, e1!, e1!.attemptId);
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: res.bucket, Key: e1!.key }));
    await expect(s.coordinatorFor().prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(
      StagedObjectInvalidError,
    );
    const record = await s.store.readRecord(ref.checkpointId);
    expect(record?.votes?.size ?? 0).toBe(0);
  });
});

describe('a candidate write S3 answers 409 ConditionalRequestConflict', () => {
  it('a 409 on the candidate write of a sound staged object fails prepare transiently (no abort); the retried prepare writes it, votes, and the checkpoint commits', async () => {
    // S3 documents 409 on a PutObject with If-None-Match as "retry the upload".
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    let fired = false;
    const run = s.coordinatorFor({
      hook: async (service, command, input, phase) => {
        if (
          !fired &&
          phase === 'before' &&
          service === 's3' &&
          command === 'PutObjectCommand' &&
          String(input.Key).includes('/candidate-')
        ) {
          fired = true;
          throw s3Error(409, 'ConditionalRequestConflict');
        }
      },
    });
    await expect(run.prepare({ ...ref, shard: 0 })).rejects.toBeInstanceOf(TransientAwsError);
    expect(fired).toBe(true);
    expect(await s.store.readRecord(ref.checkpointId)).toMatchObject({ status: 'BEGUN' });
    await s.core.prepare({ ...ref, shard: 0 }); // the step's retry
    await finish(s.core, ref, begun.shards);
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});

describe('the same 409 on the manifest write', () => {
  it('a 409 on the manifest write fails commit transiently instead of marking COMMITTED without a manifest; the retry commits', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [{ partition: 0, firstOffset: 0, lastOffset: 4 }]);
    const begun = await s.core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    await s.core.prepare({ ...ref, shard: 0 });
    await s.core.decide(ref);
    await s.core.promote({ ...ref, shard: 0 });
    const committer = s.coordinatorFor({
      hook: async (service, command, input, phase) => {
        if (
          phase === 'before' &&
          service === 's3' &&
          command === 'PutObjectCommand' &&
          String(input.Key).includes('/_manifests/')
        )
          throw s3Error(409, 'ConditionalRequestConflict');
      },
    });
    await expect(committer.commit(ref)).rejects.toBeInstanceOf(TransientAwsError);
    expect(await s.store.readRecord(ref.checkpointId)).toMatchObject({ status: 'COMMITTING' });
    await s.core.commit(ref);
    await s.core.cleanup({ ...ref, shard: 0 });
    await expectExactlyOnce(res.clients, s.settings, { 'orders#0': range(0, 5) });
  });
});
