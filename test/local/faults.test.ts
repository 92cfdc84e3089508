import { PutItemCommand, TransactWriteItemsCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { OptionError } from '../../local/errors.ts';
import {
  AttemptSlot,
  attemptContext,
  CLEAN_PLAN,
  DEFAULT_FAULT_RATES,
  FaultLog,
  FaultPlanner,
  NO_FAULTS,
  parseFaultSpec,
} from '../../local/faults.ts';
import { seededRandom } from '../../local/prng.ts';
import { isTransient, rethrowClassified } from '../../shared/aws/classify.ts';
import { InjectedCrashError, TransientAwsError } from '../../shared/errors.ts';
import { freshResources } from '../support/aws.ts';

describe('fault specs', () => {
  it('parses all, none, KIND=RATE lists and all with overrides', () => {
    expect(parseFaultSpec('all')).toEqual(DEFAULT_FAULT_RATES);
    expect(parseFaultSpec('none')).toEqual(NO_FAULTS);
    expect(parseFaultSpec('crash=0.5, zombie=1')).toEqual({ ...NO_FAULTS, crash: 0.5, zombie: 1 });
    expect(parseFaultSpec('all,crash=0')).toEqual({ ...DEFAULT_FAULT_RATES, crash: 0 });
  });

  it('rejects unknown kinds and bad rates with a message naming the option', () => {
    expect(() => parseFaultSpec('crash=0.1,meteor=0.2')).toThrow(OptionError);
    expect(() => parseFaultSpec('crash=0.1,meteor=0.2')).toThrow(
      /--faults: unknown fault kind "meteor" \(known: crash/,
    );
    expect(() => parseFaultSpec('crash=2')).toThrow(/rate of crash must be a number in \[0, 1\], got "2"/);
    expect(() => parseFaultSpec('crash')).toThrow(/"crash" is not KIND=RATE/);
    expect(() => parseFaultSpec('')).toThrow(/expected all, none/);
  });
});

describe('fault planner', () => {
  const plans = (seed: number) => {
    const planner = new FaultPlanner(DEFAULT_FAULT_RATES, seededRandom(seed));
    return Array.from({ length: 300 }, (_, i) => ({
      invocation: planner.planInvocation(`0:${i}-${i + 9}`, 1 + (i % 3)),
      checkpoint: planner.planCheckpoint(['begin', 'prepare', 'commit'] as const),
    }));
  };

  it('gives the same schedule for the same seed and another for another seed', () => {
    expect(plans(7)).toEqual(plans(7));
    expect(plans(7)).not.toEqual(plans(8));
    const kinds = plans(7).map((p) => Object.keys(p.invocation).join('+'));
    for (const kind of ['crash', 'zombie', 'transient'])
      expect(kinds.some((k) => k.includes(kind))).toBe(true);
    expect(plans(7).some((p) => p.checkpoint !== undefined)).toBe(true);
  });

  it('gives a batch the same plan whatever order the batches are planned in', () => {
    const batches = Array.from({ length: 50 }, (_, i) => `${i % 3}:${i * 10}-${i * 10 + 9}`);
    const planAll = (order: string[]) => {
      const planner = new FaultPlanner(DEFAULT_FAULT_RATES, seededRandom(3));
      return new Map(order.map((batch) => [batch, planner.planInvocation(batch, 1)]));
    };
    const forward = planAll(batches);
    const backward = planAll([...batches].reverse());
    for (const batch of batches) expect(backward.get(batch)).toEqual(forward.get(batch));
  });

  it('lets a batch through without faults after maxFaultedAttempts attempts, even at rate 1', () => {
    const planner = new FaultPlanner({ ...NO_FAULTS, crash: 1 }, seededRandom(1), 3);
    expect(planner.planInvocation('0:0-9', 3).crash).toBeDefined();
    expect(planner.planInvocation('0:0-9', 4)).toEqual(CLEAN_PLAN);
    const none = new FaultPlanner(NO_FAULTS, seededRandom(1));
    for (let i = 0; i < 50; i++) expect(none.planInvocation(`1:${i}-${i}`, 1)).toEqual(CLEAN_PLAN);
  });
});

describe('fault injection slot', () => {
  it('crashes the processor at the planned occurrence of the planned step, only inside an attempt', async () => {
    const log = new FaultLog();
    const injector = new AttemptSlot(log);
    const hooks = injector.hooks;
    const context = attemptContext({
      crash: { step: 'after-transaction', occurrence: 2 },
      loseCommit: false,
    });
    await expect(
      injector.run(context, async () => {
        await hooks.onStep('before-stage-write');
        await hooks.onStep('after-transaction');
        await hooks.onStep('after-transaction');
      }),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    await hooks.onStep('after-transaction');
    expect(log.count('crash')).toBe(1);
  });

  it('stalls a zombie at its pause step until released', async () => {
    const log = new FaultLog();
    const injector = new AttemptSlot(log);
    let release!: () => void;
    const stalled = new Promise<void>((resolve) => {
      release = resolve;
    });
    const reached: string[] = [];
    const context = attemptContext(
      { zombie: { pauseAt: 'after-stage-write', resumeAt: 'end' }, loseCommit: false },
      { stall: () => stalled, onStep: (step) => reached.push(step) },
    );
    let done = false;
    const run = injector
      .run(context, async () => {
        await injector.hooks.onStep('before-stage-write');
        await injector.hooks.onStep('after-stage-write');
        await injector.hooks.onStep('after-transaction');
      })
      .then(() => {
        done = true;
      });
    await new Promise((r) => setImmediate(r));
    expect(reached).toEqual(['before-stage-write', 'after-stage-write']);
    expect(done).toBe(false);
    release();
    await run;
    expect(reached).toEqual(['before-stage-write', 'after-stage-write', 'after-transaction']);
    expect(log.count('zombie')).toBe(1);
  });

  it('injects SDK-shaped transient errors into real DynamoDB and S3 calls, classified as transient', async () => {
    const { clients, table, bucket } = await freshResources('faults');
    const log = new FaultLog();
    const injector = new AttemptSlot(log);
    injector.instrument(clients);
    const put = () =>
      clients.dynamodb.send(
        new PutItemCommand({ TableName: table, Item: { pk: { S: 'x' }, sk: { S: 'y' } } }),
      );
    const transact = () =>
      clients.dynamodb.send(
        new TransactWriteItemsCommand({
          TransactItems: [
            { Put: { TableName: table, Item: { pk: { S: 'a' }, sk: { S: '1' } } } },
            { Put: { TableName: table, Item: { pk: { S: 'b' }, sk: { S: '1' } } } },
          ],
        }),
      );

    const throttled = await injector
      .run(attemptContext({ transient: { kind: 'throttle', call: 2 }, loseCommit: false }), async () => {
        await put(); // call 1 passes
        return put().catch((e: unknown) => e);
      })
      .catch((e: unknown) => e);
    expect(throttled).toMatchObject({ name: 'ThrottlingException' });
    expect(isTransient(throttled)).toBe(true);

    const conflict = await injector.run(
      attemptContext({ transient: { kind: 'conflict', call: 1 }, loseCommit: false }),
      async () => {
        await put(); // not a transaction: not counted for conflicts
        return transact().catch((e: unknown) => e);
      },
    );
    expect(conflict).toMatchObject({
      name: 'TransactionCanceledException',
      CancellationReasons: [{ Code: 'TransactionConflict' }, { Code: 'None' }],
    });
    expect(() => rethrowClassified('stage', conflict)).toThrow(TransientAwsError);

    const s3Error = await injector.run(
      attemptContext({ transient: { kind: 'server-error', call: 1 }, loseCommit: false }),
      () =>
        clients.s3
          .send(new PutObjectCommand({ Bucket: bucket, Key: 'k', Body: 'x' }))
          .catch((e: unknown) => e),
    );
    expect(s3Error).toMatchObject({ name: 'InternalError', $metadata: { httpStatusCode: 500 } });
    expect(isTransient(s3Error)).toBe(true);

    // Outside an attempt nothing is injected.
    await put();
    await transact();
    expect(log.snapshot()).toMatchObject({ throttle: 1, conflict: 1, 'server-error': 1, crash: 0 });
  });
});
