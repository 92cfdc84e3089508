/**
 * A second review of the Express workflow's hand-off rules, after the fixes that let one execution run twice
 * (`resume()`, decide's `decidedByTwin`, prepare and decide accepting COMMITTED, an Express
 * begin failing to `BeginFailed`, the hand-off after a long checkpoint in `begin/allocate.ts`). Each test plays an
 * interleaving those rules must bear: a copy of an execution racing its twin's decision through prepare's vote and
 * through decide, a copy resuming an attempt that a recovery aborts or takes over at that moment, zombie steps of an
 * aborted attempt beside the committed one, a begin that failed after allocating, and checkpoints whose duration
 * from begin to commit is long, missing or skewed. The definitions are the synthesized ones, run by the local
 * runner against DynamoDB Local and the S3 server; a copy is a second runner with the same execution name, a zombie
 * step a direct call of the coordinator. Each test ends with the end-to-end property (every staged record committed
 * once, in offset order) on a pipeline run until it finds nothing to commit.
 */

import { UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import type { CheckpointOutcome } from '../../local/coordinator-runner.ts';
import { LONG_CHECKPOINT_MS } from '../../shared/coordinator/begin/allocate.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { type SynthesizedCoordinator, synthesizeCoordinator } from '../support/asl.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import {
  attempt,
  type ExpressPipeline,
  expressId,
  expressPipeline,
  failBefore,
  LEASE_SECONDS,
  PAST_LEASE_MS,
  readsHead,
  steps,
  workflows,
} from '../support/express-pipeline.ts';
import { gate } from '../support/hooks.ts';
import { expectExactlyOnce, range } from '../support/staging.ts';

let res: TestResources;
let deployed: SynthesizedCoordinator;

beforeAll(async () => {
  res = await freshResources('exrec');
  deployed = synthesizeCoordinator();
});

type Pipeline = ExpressPipeline;
/** `partitionsPerShard`: 1 deals each changed partition a shard of its own (several Map items, several votes). */
const pipeline = ({ partitionsPerShard }: { readonly partitionsPerShard?: number } = {}): Pipeline =>
  expressPipeline(res, deployed, { prefix: 'xr', ...(partitionsPerShard ? { partitionsPerShard } : {}) });

async function waitFor(condition: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await condition()) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const text = (value: unknown) => JSON.stringify(value);
/** A DynamoDB call that reads a checkpoint record (`CheckpointStore.readRecord`). */
const readsRecord = (command: string, input: Record<string, unknown>) =>
  command === 'GetItemCommand' && /"sk":(\{"S":)?"\d{12}"/.test(text(input.Key));
/** Prepare's vote (`CheckpointStore.vote`): the ballot and the lease renewal in one transaction. */
const writesVote = (command: string, input: Record<string, unknown>) =>
  command === 'TransactWriteItemsCommand' && text(input).includes('ADD votes');
/** Decide's BEGUN → PREPARED (the one transition conditioned on every vote being in). */
const writesPrepared = (command: string, input: Record<string, unknown>) =>
  command === 'TransactWriteItemsCommand' && text(input).includes('size(votes)');

/** Sets (or removes, with undefined) the numeric attribute `field` of checkpoint `id`'s record. */
async function setRecordField(p: Pipeline, id: number, field: string, value: number | undefined) {
  const key = keys.checkpoint(p.settings.pipelineId, id);
  await res.clients.dynamodb.send(
    new UpdateItemCommand({
      TableName: p.settings.ledgerTable,
      Key: { pk: { S: key.pk }, sk: { S: key.sk } },
      ExpressionAttributeNames: { '#f': field },
      ...(value === undefined
        ? { UpdateExpression: 'REMOVE #f' }
        : { UpdateExpression: 'SET #f = :v', ExpressionAttributeValues: { ':v': { N: String(value) } } }),
    }),
  );
}

describe("a copy racing its twin's decision", () => {
  // The model's `express-twins-vote-conflict` (docs/model-checking.md), in the code: copy B reads the attempt
  // BEGUN with no vote and plans; copy A votes and its decide writes PREPARED; B's vote, conditioned on BEGUN, is
  // refused. Before 131ffa7 prepare caught into Abort, which found the attempt PREPARED and aborted it under A; now
  // the refused vote stands down when the shard's vote is in (`votedByTwin`). Played with one shard and with two
  // (the copy's other vote lands while BEGUN, before A's prepare of that shard).
  for (const shards of [1, 2]) {
    it(`a copy whose vote is refused because its twin decided first does not abort the checkpoint its twin prepared (${shards} shard(s))`, async () => {
      const p = pipeline(shards === 2 ? { partitionsPerShard: 1 } : {});
      const name = uniqueName('vote');
      await p.stage(0, 0, 4);
      await p.stage(1, 0, 2);
      const copyAtVote = gate();
      const twinPrepared = gate();
      const copyDone = gate();
      let twinArmed = true;
      const first = p.run({
        name,
        // A prepares only once the copy has planned and is about to vote.
        hooks: { beforeStep: async (step) => (step === 'prepare' ? copyAtVote.opened : undefined) },
        hook: async (_service, command, input, phase) => {
          // A's decide between its two transactions: PREPARED written, COMMITTING not yet.
          if (twinArmed && phase === 'after' && writesPrepared(command, input)) {
            twinArmed = false;
            twinPrepared.open();
            await copyDone.opened;
          }
        },
      });
      await waitFor(async () => (await p.store.readHead())?.checkpointId === 1, 'the first copy to allocate');
      expect((await p.store.readRecord(1))?.shardCount).toBe(shards);
      let copyArmed = true;
      const copy = p.run({
        name,
        hook: async (_service, command, input, phase) => {
          if (copyArmed && phase === 'before' && writesVote(command, input)) {
            copyArmed = false;
            copyAtVote.open();
            await twinPrepared.opened;
          }
        },
      });
      const copyOutcome = await copy;
      copyDone.open();
      const firstOutcome = await first;
      const seen = {
        first: firstOutcome.status,
        copy: copyOutcome.status,
        copyAborted: steps(copyOutcome).includes('abort'),
        attempt1: (await p.store.readRecord(1))?.status,
        aborts: (await p.store.readHead())?.consecutiveAborts,
      };
      // Exactly-once holds either way (an abort before the decision loses nothing).
      await p.settle();
      await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#1': range(0, 2) });
      // A healthy checkpoint, every vote in and PREPARED, is not aborted by its own execution's second delivery.
      expect(seen).toEqual({
        first: 'committed',
        copy: 'committed',
        copyAborted: false,
        attempt1: 'COMMITTED',
        aborts: 0,
      });
    });
  }

  it('a copy whose decide read the attempt BEGUN while its twin ran it to COMMITTED finds it decided and ends committed without an abort', async () => {
    const p = pipeline();
    const name = uniqueName('trail');
    await p.stage(0, 0, 3);
    await p.stage(2, 0, 3);
    const copyRead = gate();
    const twinCommitted = gate();
    const first = p.run({
      name,
      hooks: {
        beforeStep: async (step) => (step === 'decide' ? copyRead.opened : undefined),
        afterStep: (step) => {
          if (step === 'commit') twinCommitted.open();
        },
      },
    });
    await waitFor(
      async () => ((await p.store.readRecord(1))?.votes?.size ?? 0) > 0,
      'the first copy to vote',
    );
    let deciding = false;
    let armed = true;
    const copy = await p.run({
      name,
      hooks: {
        beforeStep: (step) => {
          deciding = step === 'decide';
        },
      },
      hook: async (_service, command, input, phase) => {
        // The copy's decide has read the record BEGUN with every vote; the twin decides, promotes and commits.
        if (deciding && armed && phase === 'after' && readsRecord(command, input)) {
          armed = false;
          copyRead.open();
          await twinCommitted.opened;
        }
      },
    });
    const firstOutcome = await first;
    expect(firstOutcome.status).toBe('committed');
    expect(copy.status).toBe('committed');
    expect(steps(copy)).not.toContain('abort');
    expect((await p.store.readRecord(1))?.attempt).toBe(1);
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
    await p.stage(0, 3, 2);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 5), 'orders#2': range(0, 3) });
  });
  it('a copy still reading staged objects in prepare while its twin commits and cleans them up ends committed; nothing aborted', async () => {
    const p = pipeline();
    const name = uniqueName('lateprep');
    await p.stage(0, 0, 4);
    await p.stage(2, 0, 2);
    const copyReading = gate();
    const firstDone = gate();
    const first = p.run({
      name,
      hooks: { beforeStep: async (step) => (step === 'prepare' ? copyReading.opened : undefined) },
    });
    void first.then(() => firstDone.open());
    await waitFor(async () => (await p.store.readHead())?.checkpointId === 1, 'the first copy to allocate');
    let armed = true;
    const copy = await p.run({
      name,
      hook: async (service, command, input, phase) => {
        // The copy read the attempt BEGUN and its cut, and is about to read its first staged object; the twin runs
        // the checkpoint to the end, its cleanup deleting the staged objects the copy is reading.
        if (
          armed &&
          phase === 'before' &&
          service === 's3' &&
          command === 'GetObjectCommand' &&
          String(input.Key).includes('_inprogress')
        ) {
          armed = false;
          copyReading.open();
          await firstDone.opened;
        }
      },
    });
    const firstOutcome = await first;
    expect(firstOutcome.status).toBe('committed');
    expect(copy.status).toBe('committed');
    // Its prepare found the twin's vote in and the attempt decided on: done, without a detour through Abort.
    expect(copy.invocations.map((i) => i.step)).not.toContain('abort');
    expect(await p.store.readRecord(1)).toMatchObject({ attempt: 1, status: 'COMMITTED' });
    expect((await p.store.readHead())?.consecutiveAborts).toBe(0);
    await p.stage(2, 2, 1);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#2': range(0, 3) });
  });
});

describe('a copy resuming while a recovery acts on its attempt', () => {
  /** Checkpoint 1 attempt 1 allocated and voted by execution `name`, which is cut off before its decision. */
  async function cutOffBeforeDecision(p: Pipeline, name: string) {
    const cut = await p.run({
      name,
      hooks: {
        beforeStep: (step) => {
          if (step === 'decide' || step === 'abort') throw new Error('cut off');
        },
      },
    });
    expect(cut.status).toBe('failed');
    expect(await p.store.readHead()).toMatchObject({ status: 'BEGUN', attempt: 1, owner: expressId(name) });
  }

  it('a copy that read its expired head before the recovery aborted and re-allocated the attempt exits busy and touches nothing', async () => {
    const p = pipeline();
    const name = uniqueName('busy');
    await p.stage(0, 0, 4);
    await p.stage(1, 0, 3);
    await cutOffBeforeDecision(p, name);
    p.clock.advance(PAST_LEASE_MS);
    const atPrepare = gate();
    const release = gate();
    let recovery: Promise<CheckpointOutcome> | undefined;
    let armed = true;
    const copy = await p.run({
      name,
      hook: async (_service, command, input, phase) => {
        // The copy read the head (attempt 1, its own, expired); the recovery aborts it and allocates attempt 2.
        if (armed && phase === 'after' && readsHead(command, input)) {
          armed = false;
          recovery = p.run({
            hooks: {
              beforeStep: async (step, payload) => {
                if (step !== 'prepare' || (payload as { attempt?: number }).attempt !== 2) return;
                atPrepare.open();
                await release.opened;
              },
            },
          });
          await atPrepare.opened;
        }
      },
    });
    expect(copy.status).toBe('busy');
    expect(steps(copy)).toEqual(['begin']);
    expect(await p.store.readHead()).toMatchObject({ checkpointId: 1, attempt: 2, status: 'BEGUN' });
    release.open();
    const recovered = await recovery!;
    expect(workflows(recovered)).toEqual(['express', 'standard']);
    expect(recovered.status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#1': range(0, 3) });
  });

  it('a copy that resumed attempt 1 while the recovery aborted it and prepares attempt 2 never touches attempt 2; zombies of attempt 1 change nothing', async () => {
    const p = pipeline();
    const name = uniqueName('resumed');
    const dead = { execution: expressId(name), checkpointId: 1, attempt: 1 };
    await p.stage(0, 0, 5);
    await p.stage(3, 0, 2);
    await cutOffBeforeDecision(p, name);
    p.clock.advance(PAST_LEASE_MS);
    const copyResumed = gate();
    const recoveryAtPrepare = gate();
    const releaseRecovery = gate();
    const copy = p.run({
      name,
      hooks: {
        afterStep: (step) => {
          if (step === 'begin') copyResumed.open();
        },
        // The copy's prepare runs only once the recovery has aborted attempt 1 and allocated attempt 2.
        beforeStep: async (step) => (step === 'prepare' ? recoveryAtPrepare.opened : undefined),
      },
    });
    await copyResumed.opened;
    const recovery = p.run({
      hooks: {
        beforeStep: async (step, payload) => {
          if (step !== 'prepare' || (payload as { attempt?: number }).attempt !== 2) return;
          recoveryAtPrepare.open();
          await releaseRecovery.opened;
        },
      },
    });
    const copyOutcome = await copy;
    expect(copyOutcome.status).not.toBe('committed');
    const during = await p.store.readHead();
    expect(during).toMatchObject({ checkpointId: 1, attempt: 2, status: 'BEGUN' });
    // Every step of the dead attempt, as zombies: none may act on attempt 2.
    const zombies = [
      await attempt(() => p.core.prepare({ ...dead, shard: 0 })),
      await attempt(() => p.core.decide(dead)),
      await attempt(() => p.core.promote({ ...dead, shard: 0 })),
      await attempt(() => p.core.commit(dead)),
      await attempt(() => p.core.abort({ ...dead, error: { Error: 'States.Timeout' } })),
    ];
    expect(zombies.slice(0, 4)).toEqual([
      'CheckpointStateError',
      'CheckpointStateError',
      'CheckpointStateError',
      'CheckpointStateError',
    ]);
    expect(await p.store.readHead()).toEqual(during);
    releaseRecovery.open();
    const recovered = await recovery;
    expect(recovered.status).toBe('committed');
    expect((await p.store.readRecord(1))?.attempt).toBe(2);
    // And after the commit: attempt 1's prepare and decide (which now accept COMMITTED) still refuse it.
    const committed = await p.store.readRecord(1);
    expect(await attempt(() => p.core.prepare({ ...dead, shard: 0 }))).toBe('CheckpointStateError');
    expect(await attempt(() => p.core.decide(dead))).toBe('CheckpointStateError');
    expect(await p.store.readRecord(1)).toEqual(committed);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 5), 'orders#3': range(0, 2) });
  });

  it('a copy that resumed a decided checkpoint just before a recovery took it over rolls it forward beside the new owner; committed once', async () => {
    const p = pipeline();
    const name = uniqueName('takeover');
    await p.stage(0, 0, 6);
    await p.stage(1, 0, 2);
    const cut = await p.run({
      name,
      hooks: failBefore('promote', 'cut off'),
    });
    expect(cut.status).toBe('incomplete');
    p.clock.advance(PAST_LEASE_MS);
    const tookOver = gate();
    const copyDone = gate();
    let recovery: Promise<CheckpointOutcome> | undefined;
    let armed = true;
    const copy = await p.run({
      name,
      hook: async (_service, command, input, phase) => {
        // The copy read the head (COMMITTING, its own, expired); the recovery takes it over before the copy reads
        // the record, and waits at its promote.
        if (armed && phase === 'after' && readsHead(command, input)) {
          armed = false;
          recovery = p.run({
            hooks: {
              beforeStep: async (step) => {
                if (step !== 'promote') return;
                tookOver.open();
                await copyDone.opened;
              },
            },
          });
          await tookOver.opened;
        }
      },
    });
    const head = await p.store.readHead();
    expect(head?.owner).not.toBe(expressId(name));
    copyDone.open();
    const recovered = await recovery!;
    expect(workflows(recovered)).toEqual(['express', 'standard']);
    expect([copy.status, recovered.status]).toEqual(['committed', 'committed']);
    expect((await p.store.readRecord(1))?.status).toBe('COMMITTED');
    await p.stage(1, 2, 3);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 6), 'orders#1': range(0, 5) });
  });
});

describe('an Express begin that failed after allocating', () => {
  it('aborts nothing, nothing renews its lease, and once it lapses the Standard workflow recovers it', async () => {
    const p = pipeline();
    const name = uniqueName('lostbegin');
    await p.stage(0, 0, 3);
    await p.stage(4, 0, 3);
    const failed = await p.run({
      name,
      hooks: {
        afterStep: (step) => {
          // Allocated, then its answer lost for good (not a transient error: no retry).
          if (step === 'begin') throw new Error('begin lost its answer');
        },
      },
    });
    expect(failed.status).toBe('failed');
    expect(steps(failed)).toEqual(['begin']);
    const head = await p.store.readHead();
    expect(head).toMatchObject({ status: 'BEGUN', attempt: 1, owner: expressId(name), consecutiveAborts: 0 });
    // Every interval inside the lease: busy, and the head (its lease) is left exactly as it was.
    for (let i = 0; i < 3; i++) {
      p.clock.advance(LEASE_SECONDS * 250);
      const busy = await p.run();
      expect(busy.status).toBe('busy');
      expect(workflows(busy)).toEqual(['express']);
      expect(await p.store.readHead()).toEqual(head);
    }
    p.clock.advance(LEASE_SECONDS * 250 + 1);
    const recovered = await p.run();
    expect(workflows(recovered)).toEqual(['express', 'standard']);
    expect(recovered.status).toBe('committed');
    expect((await p.store.readRecord(1))?.attempt).toBe(2);
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 3), 'orders#4': range(0, 3) });
  });
});

describe('the hand-off after a long checkpoint', () => {
  it('a checkpoint rolled forward after a lease lapse (its duration includes the wait) hands off the next one once, then Express again', async () => {
    const p = pipeline();
    await p.stage(0, 0, 4);
    const cut = await p.run({
      hooks: failBefore('promote', 'cut off'),
    });
    expect(cut.status).toBe('incomplete');
    p.clock.advance(PAST_LEASE_MS);
    const rolled = await p.run();
    expect(workflows(rolled)).toEqual(['express', 'standard']);
    expect(rolled.status).toBe('committed');
    const record = await p.store.readRecord(1);
    expect((record?.committedAt ?? 0) - (record?.begunAt ?? 0)).toBeGreaterThan(LONG_CHECKPOINT_MS);
    await p.stage(0, 4, 2);
    const after = await p.run();
    expect(workflows(after)).toEqual(['express', 'standard']);
    expect(after.status).toBe('committed');
    await p.stage(0, 6, 2);
    const next = await p.run();
    expect(workflows(next)).toEqual(['express']);
    expect(next.status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 8) });
  });

  it('a committed record without committedAt (an older release), or one whose clocks put commit before begin, neither fails begin nor hands off', async () => {
    const p = pipeline();
    await p.stage(0, 0, 2);
    expect((await p.run()).status).toBe('committed');
    await setRecordField(p, 1, 'committedAt', undefined);
    await p.stage(0, 2, 2);
    const older = await p.run();
    expect(workflows(older)).toEqual(['express']);
    expect(older.status).toBe('committed');
    const two = await p.store.readRecord(2);
    await setRecordField(p, 2, 'committedAt', (two?.begunAt ?? 0) - 10 * LONG_CHECKPOINT_MS);
    await p.stage(1, 0, 2);
    const skewed = await p.run();
    expect(workflows(skewed)).toEqual(['express']);
    expect(skewed.status).toBe('committed');
    await p.settle();
    await expectExactlyOnce(res.clients, p.settings, { 'orders#0': range(0, 4), 'orders#1': range(0, 2) });
  });
});
