/**
 * The Express workflow the schedule starts (`definition.ts`, `workflow: 'express'`) under what Express allows: an
 * asynchronous Express execution runs at least once (the same execution id, twice, at the same time), and stops at
 * five minutes wherever it is, its Lambda steps running on as zombies. Both definitions come from the synthesized
 * construct and run in aws-local-stepfunctions against DynamoDB Local and the S3 server; a copy of an execution is
 * a second local coordinator with the same execution name, a cut-off execution one whose steps fail (its abort
 * too), a zombie step a direct call of the coordinator with the dead execution's checkpoint and attempt. Each test
 * ends with the end-to-end property (every staged record committed once, in offset order) on a settled pipeline.
 */

import { GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { HAND_OFF_STATE_NAME } from '../../shared/coordinator/definition.ts';
import { inProgressPrefix } from '../../shared/sink/layout.ts';
import { type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { keysUnder } from '../support/checkpoint-steps.ts';
import {
  attempt,
  type ExpressPipeline,
  expressId,
  expressPipeline,
  failBefore,
  PAST_LEASE_MS,
  readsHead,
  workflows,
} from '../support/express-pipeline.ts';
import { gate } from '../support/hooks.ts';
import { expectExactlyOnce, range } from '../support/staging.ts';

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('exadv');
  deployed = synthesizeCoordinator();
});

type Pipeline = ExpressPipeline;
const pipeline = (): Pipeline => expressPipeline(res, deployed, { prefix: 'xa' });

const text = (value: unknown) => JSON.stringify(value);
/** The decide transaction BEGUN → PREPARED (the first of its two). */
const writesPrepared = (command: string, input: Record<string, unknown>) =>
  command === 'TransactWriteItemsCommand' &&
  text(input).includes('PREPARED') &&
  !text(input).includes('COMMITTING');

describe('one Express execution delivered twice (at-least-once)', () => {
  it('both copies rolling one decided checkpoint forward commit every record once', async () => {
    const p = pipeline();
    const name = uniqueName('twice');
    await p.stage(0, 0, 5);
    await p.stage(1, 0, 3);
    const held = gate();
    const atPromote = gate();
    const first = p.run({
      name,
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'promote') return;
          atPromote.open();
          await held.opened;
        },
      },
    });
    await atPromote.opened;
    // The copy begins while its twin is at promote: it resumes the COMMITTING checkpoint and rolls it forward.
    const second = await p.run({ name });
    expect(second.status).toBe('committed');
    held.open();
    const firstOutcome = await first;
    expect(firstOutcome.status).toBe('committed');
    expect((await p.store.readRecord(1))?.attempt).toBe(1);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 3) });
  });

  it("a copy that starts after its checkpoint committed never touches the next execution's checkpoint", async () => {
    const p = pipeline();
    const name = uniqueName('late');
    const id = expressId(name);
    await p.stage(0, 0, 4);
    const committed = await p.run({ name });
    expect(committed.status).toBe('committed');
    const ref = { execution: id, checkpointId: 1, attempt: 1 };

    await p.stage(0, 4, 3);
    await p.stage(2, 0, 2);
    const held = gate();
    const atPrepare = gate();
    const next = p.run({
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'prepare') return;
          atPrepare.open();
          await held.opened;
        },
      },
    });
    await atPrepare.opened;
    const before = await p.store.readHead();
    expect(before).toMatchObject({ checkpointId: 2, status: 'BEGUN' });
    expect(before?.owner).not.toBe(id);

    // The late copy of the first execution: a fresh run of it, and every step of its old checkpoint.
    const late = await p.run({ name });
    expect(late.status).toBe('busy');
    for (const call of [
      () => p.core.prepare({ ...ref, shard: 0 }),
      () => p.core.decide(ref),
      () => p.core.promote({ ...ref, shard: 0 }),
      () => p.core.commit(ref),
      () => p.core.cleanup({ ...ref, shard: 0 }),
      () => p.core.abort({ ...ref, error: { Error: 'States.Timeout' } }),
      () => p.core.abort({ ...ref, checkpointId: 0, attempt: 0, error: { Error: 'States.Timeout' } }),
      () => p.core.begin({ execution: id, handOff: true }),
    ]) {
      await attempt(call);
    }
    expect(await p.store.readHead()).toEqual(before);

    held.open();
    expect((await next).status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 7), 'orders#2': range(0, 2) });
  });

  it('a copy whose begin fails leaves the checkpoint its twin allocated to commit', async () => {
    const p = pipeline();
    const name = uniqueName('failbegin');
    await p.stage(0, 0, 4);
    const held = gate();
    const atPrepare = gate();
    const first = p.run({
      name,
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'prepare') return;
          atPrepare.open();
          await held.opened;
        },
      },
    });
    await atPrepare.opened;
    // The copy's begin fails (a Lambda error, a throttle past the retries): its Begin catches into Abort with
    // checkpoint 0, which aborts "the checkpoint this execution allocated": the twin's, live.
    const copy = await p.run({
      name,
      hooks: failBefore('begin', 'the copy never began'),
    });
    expect(copy.status).not.toBe('committed');
    held.open();
    const outcome = await first;
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
    expect(outcome.status).toBe('committed');
  });

  it('a copy that begins while its twin decides resumes the checkpoint instead of aborting it', async () => {
    const p = pipeline();
    const name = uniqueName('resume');
    await p.stage(0, 0, 4);
    await p.stage(1, 0, 2);
    const toDecide = gate();
    const prepared = gate();
    const release = gate();
    let armed = true;
    const first = p.run({
      name,
      hooks: { beforeStep: async (step) => (step === 'decide' ? toDecide.opened : undefined) },
      hook: async (_service, command, input, phase) => {
        // The twin's decide is between its two transactions: PREPARED written, COMMITTING not yet.
        if (phase === 'after' && writesPrepared(command, input)) {
          prepared.open();
          await release.opened;
        }
      },
    });
    // Wait for the first copy to have voted (its decide is held).
    for (let i = 0; i < 200 && (await p.store.readHead())?.checkpointId !== 1; i++)
      await new Promise((r) => setTimeout(r, 20));
    const copy = p.run({
      name,
      hook: async (_service, command, input, phase) => {
        // The copy read the head (BEGUN, its own execution's); the twin decides before it reads the record.
        if (armed && phase === 'after' && readsHead(command, input)) {
          armed = false;
          toDecide.open();
          await prepared.opened;
        }
      },
    });
    const copyOutcome = await copy;
    release.open();
    const firstOutcome = await first;
    const head = await p.store.readHead();
    // Exactly-once still holds (the aborted data commits later), but a healthy checkpoint must not be aborted by
    // its own execution's second delivery.
    expect({ first: firstOutcome.status, copy: copyOutcome.status, aborts: head?.consecutiveAborts }).toEqual(
      {
        first: expect.stringMatching(/committed|incomplete/),
        copy: expect.stringMatching(/committed|busy/),
        aborts: 0,
      },
    );
  });

  it('two copies deciding at once commit the checkpoint both prepared', async () => {
    const p = pipeline();
    const name = uniqueName('decide');
    await p.stage(0, 0, 3);
    const toDecide = gate();
    const prepared = gate();
    const release = gate();
    let copyDeciding = false;
    let copyArmed = true;
    const first = p.run({
      name,
      hooks: { beforeStep: async (step) => (step === 'decide' ? toDecide.opened : undefined) },
      hook: async (_service, command, input, phase) => {
        if (phase === 'after' && writesPrepared(command, input)) {
          prepared.open();
          await release.opened;
        }
      },
    });
    for (let i = 0; i < 200 && !(await p.store.readRecord(1))?.votes?.size; i++)
      await new Promise((r) => setTimeout(r, 20));
    // The copy runs in lockstep: both read the record BEGUN with every vote; the twin writes PREPARED first.
    const copy = p.run({
      name,
      hooks: {
        beforeStep: (step) => {
          if (step === 'decide') copyDeciding = true;
        },
      },
      hook: async (_service, command, input, phase) => {
        if (
          copyDeciding &&
          copyArmed &&
          phase === 'after' &&
          command === 'GetItemCommand' &&
          !readsHead(command, input)
        ) {
          copyArmed = false;
          toDecide.open();
          await prepared.opened;
        }
      },
    });
    const copyOutcome = await copy;
    release.open();
    const firstOutcome = await first;
    expect([firstOutcome.status, copyOutcome.status]).toContain('committed');
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
  });

  it('a copy whose begin fails aborts nothing: its twin commits, and the next execution finds nothing left', async () => {
    const p = pipeline();
    const name = uniqueName('spurious');
    await p.stage(0, 0, 4);
    await p.stage(3, 0, 2);
    const held = gate();
    const atPrepare = gate();
    const first = p.run({
      name,
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'prepare') return;
          atPrepare.open();
          await held.opened;
        },
      },
    });
    await atPrepare.opened;
    await p.run({
      name,
      hooks: failBefore('begin', 'the copy never began'),
    });
    held.open();
    expect((await first).status).toBe('committed');
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
    const next = await p.run();
    expect(next.status).toBe('empty');
    expect(next.executions.map((e) => e.workflow)).toEqual(['express']);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#3': range(0, 2) });
  });
});

describe('an Express execution cut off', () => {
  it("cut off before the decision: the Standard recovery commits once while the dead execution's zombie steps run", async () => {
    const p = pipeline();
    const name = uniqueName('cutbefore');
    const dead = { execution: expressId(name), checkpointId: 1, attempt: 1 };
    await p.stage(0, 0, 4);
    await p.stage(1, 0, 4);
    // Stops after every shard voted, before the decision, and never aborts.
    const cut = await p.run({
      name,
      hooks: {
        beforeStep: (step) => {
          if (step === 'decide' || step === 'abort') throw new Error('cut off');
        },
      },
    });
    expect(cut.status).toBe('failed');
    expect(await p.store.readHead()).toMatchObject({ status: 'BEGUN', attempt: 1 });

    // Inside the lease: the next Express execution leaves it alone, zombies may still run.
    expect((await p.run()).status).toBe('busy');
    p.clock.advance(PAST_LEASE_MS);
    const zombies: Array<unknown> = [];
    const recovered = await p.run({
      hooks: {
        beforeStep: async (step, payload) => {
          const at = payload as { attempt?: number };
          if (step !== 'prepare' || at.attempt !== 2) return;
          // The dead execution's steps land while the Standard execution prepares attempt 2.
          zombies.push(await attempt(() => p.core.decide(dead)));
          zombies.push(await attempt(() => p.core.prepare({ ...dead, shard: 0 })));
          zombies.push(await attempt(() => p.core.promote({ ...dead, shard: 0 })));
          zombies.push(await attempt(() => p.core.abort({ ...dead, error: { Error: 'States.Timeout' } })));
          zombies.push(
            await attempt(() =>
              p.core.abort({ ...dead, checkpointId: 0, attempt: 0, error: { Error: 'States.Timeout' } }),
            ),
          );
        },
      },
    });
    expect(workflows(recovered)).toEqual(['express', 'standard']);
    expect(recovered.status).toBe('committed');
    expect((await p.store.readRecord(1))?.attempt).toBe(2);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#1': range(0, 4) });
  });

  it("cut off after the decision: the dead execution's zombie promote, commit and cleanup beside the roll-forward commit once", async () => {
    const p = pipeline();
    const name = uniqueName('cutafter');
    await p.stage(0, 0, 6);
    await p.stage(2, 0, 3);
    const cut = await p.run({
      name,
      hooks: failBefore('promote', 'cut off'),
    });
    expect(cut.status).toBe('incomplete');
    const head = await p.store.readHead();
    expect(head?.status).toBe('COMMITTING');
    const dead = { execution: expressId(name), checkpointId: 1, attempt: head!.attempt };
    // A zombie commit before anything was promoted must not publish a manifest of missing objects.
    const early = await attempt(() => p.core.commit(dead));
    expect(typeof early).toBe('string');
    p.clock.advance(PAST_LEASE_MS);
    const rolled = await p.run({
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'commit') return;
          await Promise.all([
            attempt(() => p.core.promote({ ...dead, shard: 0 })),
            attempt(() => p.core.commit(dead)),
            attempt(() => p.core.abort({ ...dead, error: { Error: 'States.Timeout' } })),
          ]);
        },
        afterStep: async (step) => {
          if (step === 'commit') await attempt(() => p.core.cleanup({ ...dead, shard: 0 }));
        },
      },
    });
    expect(workflows(rolled)).toEqual(['express', 'standard']);
    expect(rolled.status).toBe('committed');
    await p.stage(0, 6, 2);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 8), 'orders#2': range(0, 3) });
  });
  it('a copy delivered after its twin was cut off and its lease ran out races the Standard recovery; every record once', async () => {
    const p = pipeline();
    const name = uniqueName('lateresume');
    await p.stage(0, 0, 5);
    await p.stage(1, 0, 1);
    await p.run({
      name,
      hooks: {
        beforeStep: (step) => {
          if (step === 'decide' || step === 'abort') throw new Error('cut off');
        },
      },
    });
    p.clock.advance(PAST_LEASE_MS);
    // The copy resumes its own expired checkpoint (owner = its execution), the next execution hands it off.
    const [copy, next] = await Promise.all([p.run({ name }), p.run()]);
    expect(workflows(copy)).toEqual(['express']);
    expect([copy.status, next.status]).toContain('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 1) });
  });
});

describe('hand-off races', () => {
  it('two Express executions handing off at once start two Standard executions; one recovers, every record once', async () => {
    const p = pipeline();
    await p.stage(0, 0, 5);
    await p.stage(1, 0, 2);
    await p.run({
      hooks: {
        beforeStep: (step) => {
          if (step === 'prepare' || step === 'abort') throw new Error('cut off');
        },
      },
    });
    p.clock.advance(PAST_LEASE_MS);
    const [a, b] = await Promise.all([p.run(), p.run()]);
    expect(workflows(a)).toEqual(['express', 'standard']);
    expect(workflows(b)).toEqual(['express', 'standard']);
    expect([a.status, b.status]).toContain('committed');
    for (const o of [a, b]) expect(['committed', 'busy']).toContain(o.status);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 5), 'orders#1': range(0, 2) });
  });

  it('a Standard execution rolling forward keeps the next Express ones out, and one taking it over after its lease commits once', async () => {
    const p = pipeline();
    await p.stage(0, 0, 4);
    await p.stage(1, 0, 4);
    // An abort first, so the next checkpoint is the Standard workflow's.
    const aborted = await p.run({
      hooks: failBefore('prepare', 'prepare fails once'),
    });
    expect(aborted.status).toBe('aborted');
    const held = gate();
    const atPromote = gate();
    const standard = p.run({
      hooks: {
        beforeStep: async (step) => {
          if (step !== 'promote') return;
          atPromote.open();
          await held.opened;
        },
      },
    });
    await atPromote.opened;
    await p.stage(0, 4, 2);
    const busy = await p.run();
    expect(busy.status).toBe('busy');
    expect(workflows(busy)).toEqual(['express']);
    p.clock.advance(PAST_LEASE_MS);
    const takeover = await p.run();
    expect(workflows(takeover)).toEqual(['express', 'standard']);
    expect(takeover.status).toBe('committed');
    held.open();
    const first = await standard;
    expect(workflows(first)).toEqual(['express', 'standard']);
    expect(first.status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 6), 'orders#1': range(0, 4) });
  });

  it('a refused hand-off (StartExecution failing) changes nothing, and the next execution hands off again', async () => {
    const p = pipeline();
    await p.stage(0, 0, 3);
    await p.run({
      hooks: failBefore('prepare', 'prepare fails once'),
    });
    const before = await p.store.readHead();
    expect(before?.consecutiveAborts).toBe(1);
    // The HandOff task as one that fails every call (the local runner's task for another name has no handler).
    const definition = structuredClone(deployed.runOptions.definition) as {
      States: Record<string, Record<string, unknown>>;
    };
    definition.States.Refused = definition.States[HAND_OFF_STATE_NAME]!;
    delete definition.States[HAND_OFF_STATE_NAME];
    for (const choice of definition.States.Route!.Choices as Array<{ Next: string }>)
      if (choice.Next === HAND_OFF_STATE_NAME) choice.Next = 'Refused';
    const refused = await p.run({ definition });
    expect(refused.status).toBe('failed');
    expect(await p.store.readHead()).toEqual(before);
    const next = await p.run();
    expect(workflows(next)).toEqual(['express', 'standard']);
    expect(next.status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 3) });
  });
});

describe('after aborts', () => {
  it('a deterministic abort repeats on the Standard workflow, commits nothing past it, and commits once the cause is gone', async () => {
    const p = pipeline();
    await p.stage(0, 0, 4);
    const [key] = (await keysUnder(res, inProgressPrefix(p.settings.pipelineId))).filter((k) =>
      k.includes('output'),
    );
    expect(key).toBeDefined();
    const original = await (
      await res.clients.s3.send(new GetObjectCommand({ Bucket: res.bucket, Key: key }))
    ).Body!.transformToByteArray();
    // The staged object no longer matches its entry: prepare refuses it every time (C3).
    await res.clients.s3.send(
      new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: 'not the staged bytes' }),
    );
    const first = await p.run();
    expect(first.status).toBe('aborted');
    expect(workflows(first)).toEqual(['express']);
    for (let i = 2; i <= 3; i++) {
      const again = await p.run();
      expect(again.status).toBe('aborted');
      expect(workflows(again)).toEqual(['express', 'standard']);
      expect((await p.store.readHead())?.consecutiveAborts).toBe(i);
    }
    await expectExactlyOnce(res.clients, p.settings, {});
    await res.clients.s3.send(new PutObjectCommand({ Bucket: res.bucket, Key: key, Body: original }));
    const fixed = await p.run();
    expect(workflows(fixed)).toEqual(['express', 'standard']);
    expect(fixed.status).toBe('committed');
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
    const settled = await p.settle();
    expect(settled.map(workflows)).toEqual([['express']]);
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4) });
  });

  it('an idle pipeline after an abort commits the aborted data on the Standard workflow, then ends empty on Express', async () => {
    const p = pipeline();
    await p.stage(0, 0, 3);
    await p.stage(1, 0, 3);
    const aborted = await p.run({
      hooks: failBefore('decide', 'decide fails once'),
    });
    expect(aborted.status).toBe('aborted');
    const next = await p.run();
    expect(workflows(next)).toEqual(['express', 'standard']);
    expect(next.status).toBe('committed');
    const idle = await p.run();
    expect(idle.status).toBe('empty');
    expect(workflows(idle)).toEqual(['express']);
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 3), 'orders#1': range(0, 3) });
  });
});
