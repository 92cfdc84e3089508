/**
 * The checkpoint coordinator's state machine as deployed: the definition is taken from the template synthesized
 * from the CDK construct, its intrinsics resolved, and run in aws-local-stepfunctions with every Lambda task
 * bound (by the function's logical id) to the local step handlers, against DynamoDB Local and the S3 server.
 */
import { createRequire } from 'node:module';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { type CoordinatorHooks, createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import {
  COORDINATOR_STEPS,
  type CoordinatorStep,
  MAX_SHARDS,
  STATE_NAMES,
} from '../../shared/coordinator/definition.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { finalPrefix } from '../../shared/sink/layout.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { readManifests } from '../../shared/sink/reader.ts';
import { type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, range, stageFiles } from '../support/staging.ts';

// asl-validator ships no types: load it through require with the shape it documents.
const aslValidator = createRequire(import.meta.url)('asl-validator') as (definition: unknown) => {
  isValid: boolean;
  errorsText: (separator?: string) => string;
};

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('sm');
  deployed = synthesizeCoordinator();
});

function settingsFor(): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('sm'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
}

interface Harness {
  readonly settings: Settings;
  readonly clock: ManualClock;
  /** The current fault: consulted by every step invocation. */
  fault?: (step: CoordinatorStep, phase: 'before' | 'after') => void;
  readonly run: () => ReturnType<ReturnType<typeof createLocalCoordinator>['runCheckpoint']>;
  readonly stage: (partition: number, from: number, count: number) => Promise<void>;
  readonly store: CheckpointStore;
}

function harness(extraHooks: CoordinatorHooks = {}): Harness {
  const settings = settingsFor();
  const clock = new ManualClock(Date.now());
  const processor = createProcessor({ settings, clients: res.clients });
  const h: Harness = {
    settings,
    clock,
    store: new CheckpointStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    run: () => local.runCheckpoint(),
    stage: async (partition, from, count) => {
      await processor.processEvent(mskEvent(orderRecords(partition, from, count)));
    },
  };
  const local = createLocalCoordinator({
    settings,
    clients: res.clients,
    clock,
    ...deployed.runOptions,
    hooks: {
      beforeStep: async (step, payload) => {
        h.fault?.(step, 'before');
        await extraHooks.beforeStep?.(step, payload);
      },
      afterStep: async (step, payload, result) => {
        h.fault?.(step, 'after');
        await extraHooks.afterStep?.(step, payload, result);
      },
    },
  });
  return h;
}

/** Runs executions until one commits and the next finds nothing to do (advancing past any lease). */
async function drain(h: Harness): Promise<void> {
  h.fault = undefined;
  for (let i = 0; i < 5; i++) {
    h.clock.advance(h.settings.checkpointLeaseSeconds * 1000 + 1);
    const outcome = await h.run();
    if (outcome.status === 'empty') return;
    expect(['committed', 'busy']).toContain(outcome.status);
  }
  throw new Error('the pipeline did not settle');
}

describe('the synthesized definition', () => {
  it('is valid ASL and binds every Task state to the function of its step', () => {
    const result = aslValidator(deployed.definition as never) as {
      isValid: boolean;
      errorsText: (s?: string) => string;
    };
    expect(result.errorsText('\n')).toBe('');
    expect(result.isValid).toBe(true);
    const functions = Object.values(deployed.template.Resources).filter(
      (r) => r.Type === 'AWS::Lambda::Function',
    );
    expect(functions.map((f) => f.Properties?.Handler).sort()).toEqual(
      COORDINATOR_STEPS.map((step) => `index.${step}`).sort(),
    );
    const text = JSON.stringify(deployed.definition);
    for (const step of COORDINATOR_STEPS) {
      const arn = Object.entries(deployed.functionSteps).find(([, s]) => s === step)![0];
      // Each step's function is referenced from exactly the state named for it.
      expect(text.split(arn).length - 1).toBe(1);
      const states = JSON.stringify(findState(deployed.definition, STATE_NAMES[step]));
      expect(states).toContain(arn);
    }
  });

  it('retries with backoff, catches failures before the decision into Abort, bounds the Map fan-out', () => {
    const states = (deployed.definition as { States: Record<string, Record<string, unknown>> }).States;
    const standard = (deployed.standardDefinition as typeof deployed.definition & { States: typeof states })
      .States;
    for (const name of ['Prepare', 'Decide']) {
      expect(states[name]!.Catch).toEqual([
        expect.objectContaining({ ErrorEquals: ['States.ALL'], Next: 'Abort' }),
      ]);
    }
    // A failed begin aborts on the Standard workflow; on the Express one a second run of the execution may own
    // the checkpoint, so it ends without an abort and the lease decides.
    expect(standard.Begin!.Catch).toEqual([
      expect.objectContaining({ ErrorEquals: ['States.ALL'], Next: 'Abort' }),
    ]);
    expect(states.Begin!.Catch).toEqual([
      expect.objectContaining({ ErrorEquals: ['States.ALL'], Next: 'BeginFailed' }),
    ]);
    for (const name of ['Promote', 'Commit']) {
      expect(JSON.stringify(states[name]!.Catch)).not.toContain('"Abort"');
    }
    for (const name of ['Begin', 'Decide', 'Commit', 'Abort']) {
      const retry = states[name]!.Retry as Array<{ BackoffRate: number; MaxAttempts: number }>;
      expect(retry[0]!.BackoffRate).toBeGreaterThan(1);
      expect(retry[0]!.MaxAttempts).toBeGreaterThan(1);
    }
    for (const name of ['Prepare', 'Promote', 'Cleanup']) {
      expect(states[name]!.MaxConcurrency).toBeGreaterThan(0);
      expect(states[name]!.MaxConcurrency).toBeLessThanOrEqual(MAX_SHARDS);
    }
    const schedule = Object.values(deployed.template.Resources).find((r) => r.Type === 'AWS::Events::Rule');
    expect(schedule?.Properties?.ScheduleExpression).toBe('rate(1 minute)');
    const machines = Object.values(deployed.template.Resources).filter(
      (r) => r.Type === 'AWS::StepFunctions::StateMachine',
    );
    expect(machines.map((m) => m.Properties?.StateMachineType).sort()).toEqual(['EXPRESS', 'STANDARD']);
  });

  it('grants least privilege: no wildcard resources on DynamoDB or S3 actions, objects only under the pipeline prefixes', () => {
    const policies = Object.values(deployed.template.Resources).filter((r) => r.Type === 'AWS::IAM::Policy');
    const statements = policies.flatMap(
      (p) => (p.Properties!.PolicyDocument as { Statement: Array<Record<string, unknown>> }).Statement,
    );
    const dataStatements = statements.filter((s) =>
      [s.Action].flat().some((a) => /^(dynamodb|s3):/.test(String(a))),
    );
    expect(dataStatements.length).toBeGreaterThan(0);
    for (const statement of dataStatements) {
      const actions = [statement.Action].flat().map(String);
      expect(actions.some((a) => a.includes('*'))).toBe(false);
      for (const resource of [statement.Resource].flat()) {
        const text = JSON.stringify(resource);
        expect(text).not.toBe('"*"');
        if (actions.some((a) => a.startsWith('s3:') && a !== 's3:ListBucket')) {
          expect(text).toMatch(/\/orders\/(_inprogress|_coordinator|_manifests|final)\//);
        }
      }
      if (actions.includes('s3:ListBucket')) expect(statement.Condition).toBeDefined();
      if (actions.some((a) => a.startsWith('dynamodb:'))) {
        // Scoped to this pipeline's leading keys (which ones per role is the IAM test's business).
        const leading = (statement.Condition as Record<string, Record<string, unknown>> | undefined)?.[
          'ForAllValues:StringLike'
        ]?.['dynamodb:LeadingKeys'];
        expect([leading].flat().length).toBeGreaterThan(0);
        for (const key of [leading].flat()) expect(String(key)).toMatch(/^orders#/);
      }
    }
  });
});

function findState(definition: unknown, name: string): unknown {
  const states = (definition as { States?: Record<string, unknown> }).States ?? {};
  if (name in states) return states[name];
  for (const state of Object.values(states)) {
    const inner = (state as { ItemProcessor?: unknown }).ItemProcessor;
    if (inner) {
      const found = findState(inner, name);
      if (found) return found;
    }
  }
  return undefined;
}

describe('the deployed state machine in the interpreter', () => {
  it('interleaves several checkpoints with processor staging: every staged record exactly once, per partition in offset order (C2, C7)', async () => {
    const h = harness();
    const expected: Record<string, number[]> = { 'orders#0': [], 'orders#1': [], 'orders#2': [] };
    let next = [0, 0, 0];
    for (let round = 0; round < 4; round++) {
      for (let partition = 0; partition < 3; partition++) {
        const count = 3 + ((round + partition) % 4);
        await h.stage(partition, next[partition]!, count);
        expected[`orders#${partition}`]!.push(...range(next[partition]!, count));
        next = next.map((n, i) => (i === partition ? n + count : n));
      }
      const outcome = await h.run();
      expect(outcome.status).toBe('committed');
      expect(outcome.checkpointId).toBe(round + 1);
      await expectExactlyOnce(res.clients, h.settings, expected);
    }
    expect((await h.run()).status).toBe('empty');
    const ids: number[] = [];
    for await (const m of readManifests({
      s3: res.clients.s3,
      bucket: h.settings.bucket,
      pipeline: h.settings.pipelineId,
    })) {
      ids.push(m.checkpointId);
    }
    expect(ids).toEqual([1, 2, 3, 4]);
  });

  describe('a crash at every step, followed by retries or the next execution', () => {
    const phases = ['before', 'after'] as const;
    const steps = ['begin', 'prepare', 'decide', 'promote', 'commit', 'cleanup'] as const;

    for (const step of steps) {
      for (const phase of phases) {
        it(`transient crash ${phase} ${step}: retried in place, the same execution commits`, async () => {
          const h = harness();
          await h.stage(0, 0, 5);
          await h.stage(1, 0, 4);
          let crashed = 0;
          h.fault = (at, when) => {
            if (at === step && when === phase && crashed === 0) {
              crashed++;
              throw new InjectedCrashError(`${step}:${phase}`);
            }
          };
          const outcome = await h.run();
          expect(crashed).toBe(1);
          expect(outcome.status).toBe('committed');
          await drain(h);
          await expectExactlyOnce(res.clients, h.settings, {
            'orders#0': range(0, 5),
            'orders#1': range(0, 4),
          });
        });

        it(`persistent crash ${phase} ${step}: ${step === 'begin' ? 'ends without an abort (the Express workflow), the next checkpoint carries the data' : step === 'prepare' || (step === 'decide' && phase === 'before') ? 'aborts (C4, C6), the next checkpoint carries the data' : 'rolls forward (C4)'}`, async () => {
          const h = harness();
          await h.stage(0, 0, 5);
          await h.stage(1, 0, 4);
          h.fault = (at, when) => {
            if (at === step && when === phase) throw new Error(`persistent failure at ${step}:${phase}`);
          };
          const outcome = await h.run();
          const beforeDecision =
            step === 'begin' || step === 'prepare' || (step === 'decide' && phase === 'before');
          if (step === 'begin') {
            // A second run of the same Express execution may own what this begin allocated: no abort, the lease
            // lapses and the Standard workflow recovers it.
            expect(outcome.status).toBe('failed');
            expect(outcome.error).toBe('CheckpointBeginFailed');
            expect((await h.store.readHead())?.status).toBe(phase === 'after' ? 'BEGUN' : undefined);
          } else if (beforeDecision) {
            expect(outcome.status).toBe('aborted');
            expect(outcome.cause).toContain(`persistent failure at ${step}:${phase}`);
          }
          if (beforeDecision) {
            const manifests = [];
            for await (const m of readManifests({
              s3: res.clients.s3,
              bucket: h.settings.bucket,
              pipeline: h.settings.pipelineId,
            }))
              manifests.push(m);
            expect(manifests).toEqual([]);
          } else if (step === 'decide') {
            // COMMITTING was written, then decide "failed": abort refuses and the execution rolls forward.
            expect(outcome.status).toBe('committed');
          } else if (step === 'cleanup') {
            expect(outcome.status).toBe('committed');
          } else if (step === 'commit' && phase === 'after') {
            // COMMITTED was written; only the execution's report of it was lost: cleanup waits for the next one.
            expect(outcome.status).toBe('incomplete');
            expect((await h.store.readHead())?.status).toBe('COMMITTED');
          } else {
            expect(outcome.status).toBe('incomplete');
            expect((await h.store.readHead())?.status).toBe('COMMITTING');
            // A live lease: the next execution leaves it alone.
            h.fault = undefined;
            expect((await h.run()).status).toBe('busy');
          }
          await h.stage(0, 5, 2);
          await drain(h);
          await expectExactlyOnce(res.clients, h.settings, {
            'orders#0': range(0, 7),
            'orders#1': range(0, 4),
          });
        });
      }
    }

    it('a crash in abort itself: the next execution recovers the expired checkpoint (C4) and commits the data (C6)', async () => {
      const h = harness();
      await h.stage(0, 0, 3);
      h.fault = (at) => {
        if (at === 'prepare' || at === 'abort') throw new Error(`failure at ${at}`);
      };
      const outcome = await h.run();
      expect(outcome.status).toBe('failed');
      expect(outcome.error).toBe('CheckpointAbortFailed');
      expect((await h.store.readHead())?.status).toBe('BEGUN');
      await drain(h);
      const head = await h.store.readHead();
      expect(head?.committedId).toBe(1);
      await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 3) });
    });
  });

  it('two executions started together: one proceeds, the other exits cleanly (C1)', async () => {
    const h = harness();
    await h.stage(0, 0, 4);
    await h.stage(1, 0, 4);
    const outcomes = await Promise.all([h.run(), h.run()]);
    expect(outcomes.map((o) => o.status).sort()).toEqual(['busy', 'committed']);
    await drain(h);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 4), 'orders#1': range(0, 4) });
  });

  it('processor invocations staging while begin, prepare and commit run: nothing lost, nothing twice', async () => {
    const next: Record<number, number> = { 0: 10, 1: 10 };
    const expected: Record<string, number[]> = { 'orders#0': range(0, 10), 'orders#1': range(0, 10) };
    let staging = true;
    let queue = Promise.resolve();
    // Map iterations run concurrently: stage one batch at a time, in offset order.
    const during = (step: CoordinatorStep): Promise<void> => {
      queue = queue.then(async () => {
        if (!staging || !['begin', 'prepare', 'promote', 'commit'].includes(step)) return;
        for (const partition of [0, 1]) {
          const from = next[partition]!;
          next[partition] = from + 3;
          await h.stage(partition, from, 3);
          expected[`orders#${partition}`]!.push(...range(from, 3));
        }
      });
      return queue;
    };
    const h = harness({ beforeStep: during, afterStep: during });
    await h.stage(0, 0, 10);
    await h.stage(1, 0, 10);
    for (let i = 0; i < 3; i++) expect((await h.run()).status).toBe('committed');
    expect(next[0]).toBeGreaterThan(40);
    staging = false;
    await drain(h);
    await expectExactlyOnce(res.clients, h.settings, expected);
  });

  it('a missing or corrupted staged object: abort, nothing promoted, the error names the object; later checkpoints refuse too (C3)', async () => {
    const h = harness();
    const [good, bad] = await stageFiles(res.clients, h.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 4 },
      { partition: 0, firstOffset: 5, lastOffset: 9 },
    ]);
    expect(good && bad).toBeTruthy();
    // Same size, other bytes: only the checksum can tell.
    const original = (await getBytes(res.clients.s3, h.settings.bucket, bad!.key))!;
    const corrupted = Buffer.from(original);
    corrupted[corrupted.length - 5] = (corrupted[corrupted.length - 5]! + 1) % 256;
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: h.settings.bucket, Key: bad!.key, Body: corrupted }),
    );
    for (let attempt = 1; attempt <= 3; attempt++) {
      const outcome = await h.run();
      expect(outcome.status).toBe('aborted');
      expect(outcome.cause).toContain(bad!.key);
      expect(outcome.cause).toContain('checksum');
      const head = await h.store.readHead();
      expect(head).toMatchObject({
        status: 'ABORTED',
        checkpointId: 1,
        attempt,
        consecutiveAborts: attempt,
        committedId: 0,
      });
      expect(head?.lastAbortReason).toContain(bad!.key);
      const finals = [];
      for await (const o of listObjects(
        res.clients.s3,
        h.settings.bucket,
        finalPrefix(h.settings.pipelineId),
      ))
        finals.push(o.key);
      expect(finals).toEqual([]);
    }
    // Repaired: the next checkpoint commits everything, as checkpoint 1 (no gap for the aborted attempts).
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: h.settings.bucket, Key: bad!.key, Body: original }),
    );
    expect((await h.run()).status).toBe('committed');
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 10) });
    const record = await h.store.readRecord(1);
    expect(record?.attempt).toBe(4);
    expect(record?.recentAborts).toHaveLength(3);
    expect(record?.abortCount).toBe(3);
  });

  it('a missing staged object aborts naming it (C3)', async () => {
    const h = harness();
    const [entry] = await stageFiles(res.clients, h.settings, [
      { partition: 3, firstOffset: 0, lastOffset: 2 },
    ]);
    await res.clients.s3.send(new DeleteObjectCommand({ Bucket: h.settings.bucket, Key: entry!.key }));
    const outcome = await h.run();
    expect(outcome.status).toBe('aborted');
    expect(outcome.cause).toContain(entry!.key);
    expect(outcome.cause).toContain('missing');
  });
});
