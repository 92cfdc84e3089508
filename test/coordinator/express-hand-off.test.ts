/**
 * The Express workflow the schedule starts, and its hand-off to the Standard one (`definition.ts`): both
 * definitions taken from the synthesized construct, run in aws-local-stepfunctions against DynamoDB Local and the
 * S3 server. An Express execution stops at five minutes and may run twice; what may take longer than that (an
 * expired checkpoint, the attempt after an abort) begins on the Standard workflow, and every record is committed
 * once whichever workflow ran it.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { type CheckpointOutcome, createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { LONG_CHECKPOINT_MS } from '../../shared/coordinator/begin/allocate.ts';
import type { CoordinatorStep } from '../../shared/coordinator/definition.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { steps, workflows } from '../support/express-pipeline.ts';
import { hookedClients } from '../support/hooked-clients.ts';
import { gate } from '../support/hooks.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';
import { expectExactlyOnce, range } from '../support/staging.ts';

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('express');
  deployed = synthesizeCoordinator();
});

interface Harness {
  readonly settings: Settings;
  readonly clock: ManualClock;
  readonly store: CheckpointStore;
  /** Consulted before every step: throwing fails it (persistently, as the test decides). */
  fault?: (step: CoordinatorStep) => void;
  readonly run: () => Promise<CheckpointOutcome>;
  readonly stage: (partition: number, from: number, count: number) => Promise<void>;
}

function harness(executionName?: () => string): Harness {
  const settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('ex'),
    checkpointLeaseSeconds: 600,
    orphanGraceSeconds: 3600,
  });
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
    ...(executionName ? { executionName } : {}),
    hooks: { beforeStep: (step) => h.fault?.(step) },
  });
  return h;
}

describe('the Express workflow', () => {
  it('runs a checkpoint in one execution when nothing needs recovering', async () => {
    const h = harness();
    await h.stage(0, 0, 5);
    const outcome = await h.run();
    expect(outcome.status).toBe('committed');
    expect(workflows(outcome)).toEqual(['express']);
    expect(deployed.runOptions.handOffDefinition).toBeDefined();
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 5) });
  });

  it('hands the attempt after an abort to the Standard workflow, which commits it; then runs Express again', async () => {
    const h = harness();
    await h.stage(0, 0, 5);
    await h.stage(1, 0, 3);
    h.fault = (step) => {
      if (step === 'prepare') throw new Error('prepare keeps failing');
    };
    const aborted = await h.run();
    expect(aborted.status).toBe('aborted');
    expect(workflows(aborted)).toEqual(['express']);
    expect((await h.store.readHead())?.consecutiveAborts).toBe(1);

    h.fault = undefined;
    const second = await h.run();
    expect(second.status).toBe('committed');
    expect(workflows(second)).toEqual(['express', 'standard']);
    // The Express execution only began, and changed nothing: the Standard one allocated attempt 2.
    expect(steps(second)[0]).toBe('begin');
    expect(steps(second).filter((s) => s === 'begin')).toHaveLength(2);
    expect(second.checkpointId).toBe(1);
    expect((await h.store.readRecord(1))?.attempt).toBe(2);
    expect((await h.store.readHead())?.consecutiveAborts).toBe(0);

    await h.stage(0, 5, 2);
    const third = await h.run();
    expect(third.status).toBe('committed');
    expect(workflows(third)).toEqual(['express']);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 7), 'orders#1': range(0, 3) });
  });

  it('leaves a checkpoint cut off before its decision alone while its lease lasts, then the Standard workflow recovers it', async () => {
    const h = harness();
    await h.stage(0, 0, 4);
    // An execution that stops mid-way and never aborts: what an Express execution cut off at five minutes leaves.
    h.fault = (step) => {
      if (step === 'prepare' || step === 'abort') throw new Error('cut off');
    };
    const cut = await h.run();
    expect(cut.status).toBe('failed');
    const head = await h.store.readHead();
    expect(head?.status).toBe('BEGUN');

    h.fault = undefined;
    const live = await h.run();
    expect(live.status).toBe('busy');
    expect(workflows(live)).toEqual(['express']);
    expect(await h.store.readHead()).toEqual(head);

    h.clock.advance(h.settings.checkpointLeaseSeconds * 1000 + 1);
    const recovered = await h.run();
    expect(workflows(recovered)).toEqual(['express', 'standard']);
    expect(recovered.status).toBe('committed');
    expect((await h.store.readRecord(1))?.attempt).toBe(2);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 4) });
  });

  it('hands a checkpoint cut off after its decision to the Standard workflow, which rolls it forward', async () => {
    const h = harness();
    await h.stage(0, 0, 4);
    await h.stage(2, 0, 6);
    h.fault = (step) => {
      if (step === 'promote') throw new Error('cut off');
    };
    const cut = await h.run();
    expect(cut.status).toBe('incomplete');
    expect((await h.store.readHead())?.status).toBe('COMMITTING');

    h.fault = undefined;
    h.clock.advance(h.settings.checkpointLeaseSeconds * 1000 + 1);
    const before = await h.store.readHead();
    const rolled = await h.run();
    expect(workflows(rolled)).toEqual(['express', 'standard']);
    expect(rolled.status).toBe('committed');
    // The same attempt, taken over by the Standard execution: the Express one did not touch the head.
    expect(rolled.checkpointId).toBe(before?.checkpointId);
    expect((await h.store.readRecord(1))?.attempt).toBe(before?.attempt);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 4), 'orders#2': range(0, 6) });
  });

  it('hands the checkpoint after a long one to the Standard workflow, before an Express one is cut off', async () => {
    const h = harness();
    await h.stage(0, 0, 4);
    h.fault = (step) => {
      // The checkpoint takes longer than LONG_CHECKPOINT_MS from begin to commit.
      if (step === 'commit') h.clock.advance(LONG_CHECKPOINT_MS + 1);
    };
    const long = await h.run();
    expect(long.status).toBe('committed');
    expect(workflows(long)).toEqual(['express']);
    h.fault = undefined;
    await h.stage(0, 4, 2);
    const after = await h.run();
    expect(after.status).toBe('committed');
    expect(workflows(after)).toEqual(['express', 'standard']);
    await h.stage(0, 6, 1);
    // That one was quick: the next runs on Express again.
    expect(workflows(await h.run())).toEqual(['express']);
    // Nothing staged: no hand-off either, whatever the last checkpoint took.
    expect(workflows(await h.run())).toEqual(['express']);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 7) });
  });

  it('commits every record once when one execution runs twice at the same time (at-least-once starts)', async () => {
    const name = `twice-${uniqueName('x')}`;
    const h = harness(() => name);
    // The same execution, started again: the same pipeline, the same execution name, another interpreter run.
    const again = createLocalCoordinator({
      settings: h.settings,
      clients: res.clients,
      clock: h.clock,
      ...deployed.runOptions,
      executionName: () => name,
    });
    await h.stage(0, 0, 6);
    await h.stage(1, 0, 2);
    const [a, b] = await Promise.all([h.run(), again.runCheckpoint()]);
    expect([a.status, b.status].sort()).toContain('committed');
    for (const outcome of [a, b]) expect(['committed', 'busy', 'empty']).toContain(outcome.status);
    await h.stage(0, 6, 1);
    for (let i = 0; i < 3; i++) {
      h.clock.advance(h.settings.checkpointLeaseSeconds * 1000 + 1);
      if ((await h.run()).status === 'empty') break;
    }
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 7), 'orders#1': range(0, 2) });
  });
});

describe('a second run of one Express execution', () => {
  it('trailing its twin past the commit, ends committed without an abort', async () => {
    const name = `trail-${uniqueName('x')}`;
    const h = harness(() => name);
    await h.stage(0, 0, 5);
    const twinBegan = gate();
    const firstDone = gate();
    const firstBegan = gate();
    const first = createLocalCoordinator({
      settings: h.settings,
      clients: res.clients,
      clock: h.clock,
      ...deployed.runOptions,
      executionName: () => name,
      hooks: {
        afterStep: (step) => {
          if (step === 'begin') firstBegan.open();
        },
        beforeStep: async (step) => {
          if (step === 'prepare') await twinBegan.opened;
        },
      },
    });
    const twin = createLocalCoordinator({
      settings: h.settings,
      clients: res.clients,
      clock: h.clock,
      ...deployed.runOptions,
      executionName: () => name,
      hooks: {
        afterStep: (step) => {
          if (step === 'begin') twinBegan.open();
        },
        beforeStep: async (step) => {
          if (step === 'prepare') await firstDone.opened;
        },
      },
    });
    const running = first.runCheckpoint().then((outcome) => {
      firstDone.open();
      return outcome;
    });
    // The second run begins once the first has allocated: it resumes the same checkpoint.
    await firstBegan.opened;
    const trailing = await twin.runCheckpoint();
    expect((await running).status).toBe('committed');
    expect(trailing.status).toBe('committed');
    expect(steps(trailing)).not.toContain('abort');
    expect((await h.store.readHead())?.consecutiveAborts).toBe(0);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 5) });
  });
});

describe('a refused vote of a second run', () => {
  it('stands down when the other run voted and the attempt was decided on from there: no abort', async () => {
    const h = harness();
    await h.stage(0, 0, 4);
    const plain = createLocalCoordinator({ settings: h.settings, clients: res.clients, clock: h.clock });
    const a = plain.coordinator;
    const begun = await a.begin({ execution: 'arn:express:once', handOff: true });
    expect(begun.action).toBe('checkpoint');
    const ref = { execution: 'arn:express:once', checkpointId: begun.checkpointId, attempt: begun.attempt };
    // Run B has read the record BEGUN and planned; just before its vote is sent, run A votes and decide moves
    // the attempt BEGUN → PREPARED.
    let raced = false;
    const b = createLocalCoordinator({
      settings: h.settings,
      clients: hookedClients(async (_service, command, input, phase) => {
        const vote = command === 'TransactWriteItemsCommand' && JSON.stringify(input).includes(':begun');
        if (!vote || phase !== 'before' || raced) return;
        raced = true;
        await a.prepare({ ...ref, shard: 0 });
        await h.store.transition({
          checkpointId: ref.checkpointId,
          attempt: ref.attempt,
          now: h.clock.now(),
          from: ['BEGUN'],
          to: 'PREPARED',
        });
      }),
      clock: h.clock,
    }).coordinator;
    expect(await b.prepare({ ...ref, shard: 0 })).toEqual({ shard: 0, count: 0 });
    expect(raced).toBe(true);
    // A goes on from PREPARED and commits: the attempt was not lost.
    expect((await a.decide(ref)).checkpointId).toBe(ref.checkpointId);
    await a.promote({ ...ref, shard: 0 });
    await a.commit(ref);
    await a.cleanup({ ...ref, shard: 0 });
    expect((await h.store.readHead())?.consecutiveAborts).toBe(0);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 4) });
  });
});

describe('the Standard workflow alone', () => {
  it('aborts what a begin that failed after allocating had begun (no second run of its execution exists)', async () => {
    const h = harness();
    await h.stage(0, 0, 3);
    let crashes = 0;
    const standard = createLocalCoordinator({
      settings: h.settings,
      clients: res.clients,
      clock: h.clock,
      definition: deployed.standardDefinition,
      functionSteps: deployed.functionSteps,
      hooks: {
        afterStep: (step) => {
          if (step === 'begin' && crashes++ < 10) throw new Error('begin lost its answer');
        },
      },
    });
    const outcome = await standard.runCheckpoint();
    expect(outcome.status).toBe('aborted');
    expect(workflows(outcome)).toEqual(['standard']);
    expect((await h.store.readHead())?.status).toBe('ABORTED');
    const next = await h.run();
    expect(next.status).toBe('committed');
    expect(workflows(next)).toEqual(['express', 'standard']);
    await expectExactlyOnce(res.clients, h.settings, { 'orders#0': range(0, 3) });
  });
});

describe('begin in an Express workflow', () => {
  it('changes nothing when it hands off: an expired checkpoint stays as it was for the Standard execution', async () => {
    const h = harness();
    await h.stage(0, 0, 3);
    h.fault = (step) => {
      if (step === 'prepare' || step === 'abort') throw new Error('cut off');
    };
    await h.run();
    h.clock.advance(h.settings.checkpointLeaseSeconds * 1000 + 1);
    const coordinator = createLocalCoordinator({
      settings: h.settings,
      clients: res.clients,
      clock: h.clock,
    }).coordinator;
    const before = await h.store.readHead();
    const answer = await coordinator.begin({ execution: 'arn:express:later', handOff: true });
    expect(answer).toEqual({ action: 'handoff', checkpointId: 0, attempt: 0, shards: [] });
    expect(await h.store.readHead()).toEqual(before);
    // Without the flag (the Standard workflow) the same begin recovers it.
    const standard = await coordinator.begin({ execution: 'arn:standard:later' });
    expect(standard.action).toBe('checkpoint');
    expect(standard.attempt).toBe(2);
  });
});
