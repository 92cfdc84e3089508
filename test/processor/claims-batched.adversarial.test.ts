/**
 * Adversarial interleavings of claims ahead written in batches (global scope, `claimWrite: ahead`: PartiQL INSERTs
 * in BatchExecuteStatement, a key that exists confirmed by its own conditional update), through the real processor
 * against DynamoDB Local and the S3 server. Faults are injected by middleware on a client (a statement withheld and
 * reported refused, a call refused, a call paused) and by the processor's step hooks (a pause, a crash). Each test
 * is titled by the property of docs/architecture.md (P4, "Record-level and structural problems") it protects.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { forgetClaimInsertRefusal } from '../../shared/ledger/claim-batch.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { ClaimItem } from '../../shared/ledger/records.ts';
import { StagingLedger } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, Processor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { clientsWith, digestOfSpec, keyedSpec, plain } from '../support/claims.ts';
import { crashAt, gate } from '../support/hooks.ts';
import { stagedOutputCounts } from '../support/ledger.ts';
import { mskEvent, order } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claims-batched-adv');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'cbadv', overrides);
}

/** 30 keyed records of orders-0 (keys a0…a29): two BatchExecuteStatement calls, of 25 and 5. */
const thirty = () => mskEvent(Array.from({ length: 30 }, (_, offset) => keyedSpec(0, offset, `a${offset}`)));

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/** A failure as a value (an invocation whose outcome goes nowhere, or one expected to fail). */
const outcome = (run: Promise<unknown>) =>
  run.then(
    () => 'ok' as const,
    (error: unknown) => error as Error,
  );

async function claimOf(settings: Settings, key: string) {
  const { Item } = await ledgerDocumentClient(res.clients.dynamodb).send(
    new GetCommand({ TableName: res.table, Key: keys.claim(settings.pipelineId, key), ConsistentRead: true }),
  );
  return Item === undefined
    ? undefined
    : {
        claimant: Item.claimant as string,
        expiresAt: Item.expiresAt as number,
        holders: [...((Item.holders as Set<string> | undefined) ?? [])].sort(),
      };
}

/** A producer duplicate (same key, same bytes) of `key` on partition 1, staged now; and every key's outputs. */
async function duplicateElsewhere(settings: Settings, key: string) {
  const report = await processorFor(settings).processEvent(mskEvent([keyedSpec(1, 0, key)]));
  const counts = await stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
  return { elsewhere: report.partitions[0], counts };
}

type Statements = Array<{ Parameters: unknown[] }>;

const refusedForGood = (name: string) =>
  Object.assign(new Error(`refused for good (${name})`), { name, $metadata: { httpStatusCode: 400 } });

/** Clients whose staging transactions are refused for good (a non-transient error: the batch's claims released). */
const transactionsRefused = () =>
  clientsWith('refuseTransactions', (next, context) => async (args) => {
    if (context.commandName === 'TransactWriteItemsCommand') throw refusedForGood('AccessDeniedException');
    return next(args);
  });

describe('a batch that fails for good while writing its claims ahead', () => {
  // The property (docs/architecture.md, P4 claims paragraph): an attempt that fails for good releases its hold on
  // the claims it wrote ahead, so "a failed batch does not block a duplicate elsewhere". The release after a
  // failure (`Claims.releaseAfter`) releases the attempt's `held` claims, so each claim must join `held` as it is
  // written, not only when `claimAhead` returns: a call that fails partway returns nothing. Were it otherwise, every
  // claim created before the failure would list the attempt as holder until its TTL and name a record that is not
  // output (the partition is stopped), and a producer duplicate of such a key on another partition would be
  // acknowledged as a duplicate with no effect (lost, if the stopped batch is never staged).

  it('control: a staging transaction refused for good releases every claim the batches of INSERTs created; the duplicate elsewhere is staged', async () => {
    const settings = settingsFor();
    const failed = await outcome(
      processorFor(settings, { clients: transactionsRefused() }).processEvent(thirty()),
    );
    expect(failed).toMatchObject({ name: 'AccessDeniedException' });
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a0');
    expect(elsewhere).toMatchObject({ stagedRows: 1, duplicatesByKey: 0 });
    expect(counts).toEqual({ a0: 1 });
  });

  // Interleaving: the first call's statement for a3 is refused AccessDenied (withheld from DynamoDB, reported
  // refused: a grant that does not cover every key, IAM not giving PartiQL requests their key, or a policy change
  // propagating); its 24 other statements create their claims. a3 goes through the per-key update like any key a
  // batch did not create, and the container sends no more INSERTs: the batch commits, each record once, and a
  // duplicate elsewhere is a duplicate.
  it('a statement refused AccessDenied: its key is claimed per key, the batch commits, each record once', async () => {
    const settings = settingsFor();
    const clients = clientsWith('denyOneStatement', (next, context) => async (args) => {
      if (context.commandName !== 'BatchExecuteStatementCommand') return next(args);
      const statements = (args.input as { Statements: Statements }).Statements;
      const denied = statements.findIndex((s) => plain(s.Parameters[2]) === 'a3');
      if (denied === -1) return next(args);
      statements.splice(denied, 1);
      const result = await next(args);
      const output = result.output as unknown as { Responses: Array<Record<string, unknown>> };
      output.Responses.splice(denied, 0, { Error: { Code: 'AccessDenied', Message: 'not authorized' } });
      return result;
    });
    const write = process.stderr.write;
    process.stderr.write = (() => true) as typeof process.stderr.write;
    try {
      const report = await processorFor(settings, { clients }).processEvent(thirty());
      expect(report.partitions[0]).toMatchObject({ stagedRows: 30, duplicatesByKey: 0 });
    } finally {
      process.stderr.write = write;
      forgetClaimInsertRefusal();
    }
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a3');
    expect(elsewhere).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    expect(counts).toMatchObject({ a0: 1, a3: 1, a29: 1 });
  });

  // Interleaving: a29's claim exists already, naming this record (left by a crashed attempt), so its INSERT meets
  // DuplicateItem and it goes to the per-key update, which is refused for good (ValidationException). The INSERTs
  // have all run by then (the per-key updates start after every batch): the 29 claims they created stay, live,
  // this attempt their holder. The per-key-only code before the batches had the same hole, narrower: a failed
  // update stopped further updates from starting, so only those already done (at most the 32 in flight, plus the
  // ones before) outlived it; now every claim the INSERTs created does.
  it('the per-key update refused for good: the claims the INSERTs created are released, and a duplicate elsewhere is staged', async () => {
    const settings = settingsFor();
    const own = keyedSpec(0, 29, 'a29');
    await ledgerDocumentClient(res.clients.dynamodb).send(
      new PutCommand({
        TableName: res.table,
        Item: {
          ...keys.claim(settings.pipelineId, 'a29'),
          idempotencyKey: 'a29',
          claimant: 'orders#0#29',
          digest: digestOfSpec(own),
          expiresAt: Math.floor(Date.now() / 1000) + 86_400,
          holders: new Set(['attempt-crashed']),
        },
      }),
    );
    const clients = clientsWith('refuseConfirm', (next, context) => async (args) => {
      const expression = (args.input as { UpdateExpression?: string }).UpdateExpression ?? '';
      if (context.commandName === 'UpdateItemCommand' && expression.includes('ADD holders')) {
        throw refusedForGood('ValidationException');
      }
      return next(args);
    });
    const failed = await outcome(processorFor(settings, { clients }).processEvent(thirty()));
    expect(failed).toMatchObject({ name: 'ValidationException' });
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a0');
    expect({ elsewhere, counts }).toMatchObject({
      elsewhere: { stagedRows: 1, duplicatesByKey: 0 },
      counts: { a0: 1 },
    });
  });

  // Interleaving: the two calls run at once; the one carrying a25…a29 is refused as a whole for good, the other
  // creates a0…a24. `insertClaims` throws once both have ended, with the 25 created claims unreported.
  it('a call refused as a whole after another call created its claims: those claims are released, and a duplicate elsewhere is staged', async () => {
    const settings = settingsFor();
    const clients = clientsWith('refuseSecondCall', (next, context) => async (args) => {
      if (context.commandName === 'BatchExecuteStatementCommand') {
        const statements = (args.input as { Statements: Statements }).Statements;
        if (statements.some((s) => plain(s.Parameters[2]) === 'a25')) {
          throw refusedForGood('AccessDeniedException');
        }
      }
      return next(args);
    });
    const failed = await outcome(processorFor(settings, { clients }).processEvent(thirty()));
    expect(failed).toMatchObject({ name: 'AccessDeniedException' });
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a0');
    expect({ elsewhere, counts }).toMatchObject({
      elsewhere: { stagedRows: 1, duplicatesByKey: 0 },
      counts: { a0: 1 },
    });
  });
});

describe('attempts of one batch: a slow one, its retry, a zombie, a crash, a redelivery', () => {
  it("a slow attempt whose INSERTs created the claims and its retry that confirmed them: the slow one's release after failing for good keeps the retry's hold, the retry's commit holds every key", async () => {
    const settings = settingsFor();
    const aClaimed = gate();
    const bClaimed = gate();
    const a = processorFor(settings, {
      clients: transactionsRefused(),
      newAttemptId: () => 'attempt-a',
      hooks: {
        async onStep(step) {
          if (step !== 'after-claims') return;
          aClaimed.open();
          await bClaimed.opened;
        },
      },
    });
    const aDone = gate();
    const b = processorFor(settings, {
      newAttemptId: () => 'attempt-b',
      hooks: {
        async onStep(step) {
          if (step !== 'after-claims') return;
          bClaimed.open();
          await aDone.opened;
        },
      },
    });
    const aRun = outcome(a.processEvent(thirty()));
    await aClaimed.opened;
    const bRun = b.processEvent(thirty());
    expect(await aRun).toMatchObject({ name: 'AccessDeniedException' });
    aDone.open();
    expect((await bRun).partitions[0]).toMatchObject({ stagedRows: 30, stagedOffset: 29 });

    for (const key of ['a0', 'a24', 'a29']) {
      expect(await claimOf(settings, key)).toEqual({
        claimant: `orders#0#${key.slice(1)}`,
        expiresAt: expect.any(Number),
        holders: ['attempt-b'],
      });
    }
    expect((await claimOf(settings, 'a0'))!.expiresAt).toBeGreaterThan(Date.now() / 1000);
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a0');
    expect(elsewhere).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
    expect(Object.keys(counts)).toHaveLength(30);
  });

  it('a zombie whose INSERTs reach DynamoDB after the retry committed the batch: each finds its claim, confirms it, the fence drops the records, nothing is output twice and no claim is released', async () => {
    const settings = settingsFor();
    const zombieAtClaims = gate();
    const retryCommitted = gate();
    const zombieClients = createAwsClients();
    zombieClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'BatchExecuteStatementCommand') {
          zombieAtClaims.open();
          await retryCommitted.opened;
        }
        // Then its transaction is refused for good: its release must leave claims of staged records alone.
        if (context.commandName === 'TransactWriteItemsCommand')
          throw refusedForGood('AccessDeniedException');
        return next(args);
      },
      { step: 'initialize', name: 'holdClaimsRefuseTransaction' },
    );
    const zombie = outcome(
      processorFor(settings, { clients: zombieClients, newAttemptId: () => 'attempt-zombie' }).processEvent(
        thirty(),
      ),
    );
    await zombieAtClaims.opened; // the zombie read the fence (nothing staged) and sent its INSERTs
    const retry = await processorFor(settings, { newAttemptId: () => 'attempt-retry' }).processEvent(
      thirty(),
    );
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 30, stagedOffset: 29 });
    retryCommitted.open();
    expect(await zombie).toMatchObject({ name: 'AccessDeniedException' });

    expect(await claimOf(settings, 'a7')).toEqual({
      claimant: 'orders#0#7',
      expiresAt: expect.any(Number),
      holders: ['attempt-retry', 'attempt-zombie'],
    });
    expect((await claimOf(settings, 'a7'))!.expiresAt).toBeGreaterThan(Date.now() / 1000);
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a7');
    expect(elsewhere).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    expect(Object.keys(counts)).toHaveLength(30);
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
  });

  it('a crash between the claim calls and the staging transaction: the retry confirms the claims as its own and commits them, both attempts listed, each record output once', async () => {
    const settings = settingsFor();
    const crashed = await outcome(
      processorFor(settings, {
        newAttemptId: () => 'attempt-1',
        hooks: crashAt('after-claims'),
      }).processEvent(thirty()),
    );
    expect(crashed).toBeInstanceOf(InjectedCrashError);
    const retry = await processorFor(settings, { newAttemptId: () => 'attempt-2' }).processEvent(thirty());
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 30, duplicatesByKey: 0, stagedOffset: 29 });
    expect((await claimOf(settings, 'a26'))?.holders).toEqual(['attempt-1', 'attempt-2']);
    const { elsewhere, counts } = await duplicateElsewhere(settings, 'a26');
    expect(elsewhere).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
  });

  it('a redelivery after a crash between two chunks claims only the records above the fence, and confirms their claims', async () => {
    const settings = settingsFor({ maxTransactionItems: 10 });
    const crashed = await outcome(
      processorFor(settings, { hooks: crashAt('after-transaction') }).processEvent(thirty()),
    );
    expect(crashed).toBeInstanceOf(InjectedCrashError);
    let inserts = 0;
    const clients = clientsWith('countInserts', (next, context) => async (args) => {
      if (context.commandName === 'BatchExecuteStatementCommand') {
        inserts += (args.input as { Statements: Statements }).Statements.length;
      }
      return next(args);
    });
    const retry = await processorFor(settings, { clients }).processEvent(thirty());
    const report = retry.partitions[0]!;
    expect(report.stagedOffset).toBe(29);
    expect(report.duplicatesByOffset).toBeGreaterThan(0);
    expect(inserts).toBe(30 - report.duplicatesByOffset);
    const counts = await stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(Object.keys(counts)).toHaveLength(30);
    expect(Object.values(counts).every((n) => n === 1)).toBe(true);
  });
});

describe('what reaches the batches', () => {
  it('a claim list never names a key twice: a later record with the key is dropped (same bytes) or dead-lettered (other bytes) before the claims', async () => {
    const settings = settingsFor();
    const lists: string[][] = [];
    class RecordingLedger extends StagingLedger {
      override claimAhead(
        pipeline: string,
        claims: readonly ClaimItem[],
        now: number,
        attemptId: string,
        onHeld: (claim: ClaimItem) => void,
      ) {
        lists.push(claims.map((claim) => claim.idempotencyKey));
        return super.claimAhead(pipeline, claims, now, attemptId, onHeld);
      }
    }
    const processor = new Processor(
      { settings, clients: res.clients },
      new RecordingLedger(res.clients.dynamodb, settings.ledgerTable),
    );
    const report = await processor.processEvent(
      mskEvent([
        keyedSpec(0, 0, 'K'),
        keyedSpec(0, 1, 'K'),
        keyedSpec(0, 2, 'K', order('K', 'another-customer')),
        keyedSpec(0, 3, 'J'),
      ]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, duplicatesByKey: 1, keyConflicts: 1 });
    expect(lists).toEqual([['K', 'J']]);
  });

  it('partition scope writes no claim and makes no claim call', async () => {
    const settings = settingsFor({ idempotencyScope: 'partition' });
    let claimCalls = 0;
    const clients = clientsWith('countClaimCalls', (next, context) => async (args) => {
      if (context.commandName === 'BatchExecuteStatementCommand') claimCalls += 1;
      return next(args);
    });
    const report = await processorFor(settings, { clients }).processEvent(thirty());
    expect(report.partitions[0]).toMatchObject({ stagedRows: 30, stagedOffset: 29 });
    expect(claimCalls).toBe(0);
    expect(await claimOf(settings, 'a0')).toBeUndefined();
  });
});
