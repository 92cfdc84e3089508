/**
 * Adversarial interleavings of claims ahead created in batches (PartiQL INSERTs in BatchExecuteStatement, a key
 * that exists going through the per-key create-or-confirm update), against DynamoDB Local. Faults are injected by
 * middleware on a client: a statement's response replaced, a statement withheld from DynamoDB, a call's answer
 * lost after DynamoDB applied it (the SDK resends it), a call paused until another attempt has acted.
 */
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { TableRef } from '../../shared/aws/dynamo.ts';
import { claimAhead, RELEASED, releaseClaims } from '../../shared/ledger/claim-items.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { ClaimItem } from '../../shared/ledger/records.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { claimsLiveUntil, clientsWith, plain } from '../support/claims.ts';
import { gate } from '../support/hooks.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claim-batch-adv');
});

const NOW = Date.UTC(2030, 0, 1);
const LIVE = Math.floor(NOW / 1000) + 86_400;

const refOf = (clients: AwsClients): TableRef => ({
  doc: ledgerDocumentClient(clients.dynamodb),
  table: res.table,
});

/** Claims of `count` records of orders-0 from offset 0, key `k<offset>`, live. */
const claimsOf = (count: number): ClaimItem[] => claimsLiveUntil(count, LIVE);

/** The claim item as stored: claimant, expiresAt and holders (sorted), or undefined when absent. */
async function claimOf(pipeline: string, key: string) {
  const { Item } = await res.clients.dynamodb.send(
    new GetItemCommand({
      TableName: res.table,
      Key: { pk: { S: keys.claim(pipeline, key).pk }, sk: { S: 'CLAIM' } },
      ConsistentRead: true,
    }),
  );
  if (Item === undefined) return undefined;
  return {
    claimant: Item.claimant?.S,
    expiresAt: Number(Item.expiresAt?.N),
    holders: [...(Item.holders?.SS ?? [])].sort(),
  };
}

describe('a statement reported failed that DynamoDB applied', () => {
  it('a claim whose INSERT was applied but reported TransactionConflict or InternalServerError is confirmed by the per-key update and lists the attempt exactly once', async () => {
    const pipeline = uniqueName('cba');
    const claims = claimsOf(3);
    const clients = clientsWith('reportFailed', (next, context) => async (args) => {
      const result = await next(args);
      if (context.commandName === 'BatchExecuteStatementCommand') {
        const responses = (result.output as unknown as { Responses: Array<Record<string, unknown>> })
          .Responses;
        responses[0] = { Error: { Code: 'TransactionConflict', Message: 'conflict' } };
        responses[2] = { Error: { Code: 'InternalServerError', Message: 'internal' } };
      }
      return result;
    });
    const calls = new CallCounter().attach(clients);
    const found = await claimAhead(refOf(clients), pipeline, claims, NOW, 'attempt-1');
    expect({ taken: found.taken, expired: found.expired }).toEqual({ taken: [], expired: [] });
    expect(found.held).toHaveLength(3);
    expect(found.held).toEqual(expect.arrayContaining(claims));
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 1, 'dynamodb:UpdateItem': 2 });
    for (const key of ['k0', 'k1', 'k2']) {
      expect(await claimOf(pipeline, key)).toEqual({
        claimant: `orders#0#${key.slice(1)}`,
        expiresAt: LIVE,
        holders: ['attempt-1'],
      });
    }
    // The release of this attempt frees them all: nobody else was listed.
    expect(await releaseClaims(refOf(res.clients), pipeline, 'attempt-1', claims)).toBe(3);
  });

  it('a call DynamoDB applied whose answer was lost is resent by the SDK: every INSERT finds its own claim, the per-key update confirms it, one holder', async () => {
    const pipeline = uniqueName('cba');
    const claims = claimsOf(30);
    const clients = createAwsClients();
    let sent = 0;
    // Inside the SDK's retry loop: the call reached DynamoDB, its answer did not come back.
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        if (context.commandName === 'BatchExecuteStatementCommand' && sent++ === 0) {
          throw Object.assign(new Error('socket hang up'), {
            name: 'TimeoutError',
            $metadata: { httpStatusCode: 500 },
          });
        }
        return result;
      },
      { step: 'deserialize', name: 'loseFirstAnswer' },
    );
    const found = await claimAhead(refOf(clients), pipeline, claims, NOW, 'attempt-1');
    expect(sent).toBe(3); // two calls, the first of them resent
    expect({ taken: found.taken, expired: found.expired }).toEqual({ taken: [], expired: [] });
    expect(found.held).toHaveLength(30);
    for (const key of ['k0', 'k24', 'k25', 'k29']) {
      expect((await claimOf(pipeline, key))?.holders).toEqual(['attempt-1']);
    }
  });
});

describe('two attempts of one batch, one creating and one confirming', () => {
  it("the attempt whose INSERT found the claim confirms it: holders are both attempts, and the creator's release leaves it live for the other", async () => {
    const pipeline = uniqueName('cba');
    const claims = claimsOf(30);
    const a = await claimAhead(refOf(res.clients), pipeline, claims, NOW, 'attempt-a');
    expect(a.held).toHaveLength(30);
    const b = await claimAhead(refOf(res.clients), pipeline, claims, NOW, 'attempt-b');
    expect({ taken: b.taken, expired: b.expired, held: b.held.length }).toEqual({
      taken: [],
      expired: [],
      held: 30,
    });
    expect((await claimOf(pipeline, 'k27'))?.holders).toEqual(['attempt-a', 'attempt-b']);

    // A fails for good and releases: only its own hold goes, nothing is marked released.
    expect(await releaseClaims(refOf(res.clients), pipeline, 'attempt-a', claims)).toBe(0);
    for (const key of ['k0', 'k27']) {
      expect(await claimOf(pipeline, key)).toEqual({
        claimant: `orders#0#${key.slice(1)}`,
        expiresAt: LIVE,
        holders: ['attempt-b'],
      });
    }
  });

  it('an attempt whose INSERT found the claim, and whose confirm comes after the creator released it, does not bring it back: the key goes to the fenced transaction', async () => {
    const pipeline = uniqueName('cba');
    const claims = claimsOf(2);
    await claimAhead(refOf(res.clients), pipeline, claims, NOW, 'attempt-a');
    const bAtConfirm = gate();
    const aReleased = gate();
    const bClients = clientsWith('pauseConfirm', (next, context) => async (args) => {
      if (context.commandName === 'UpdateItemCommand') {
        bAtConfirm.open();
        await aReleased.opened;
      }
      return next(args);
    });
    const b = claimAhead(refOf(bClients), pipeline, claims, NOW, 'attempt-b');
    await bAtConfirm.opened; // B's INSERTs met DuplicateItem; its confirms wait
    expect(await releaseClaims(refOf(res.clients), pipeline, 'attempt-a', claims)).toBe(2);
    aReleased.open();
    const found = await b;
    expect(found).toEqual({ taken: [], expired: expect.arrayContaining(['k0', 'k1']), held: [] });
    expect(await claimOf(pipeline, 'k0')).toEqual({
      claimant: 'orders#0#0',
      expiresAt: RELEASED,
      holders: [],
    });
  });
});

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

describe('a key twice in one claim list', () => {
  // Interleaving: claims [k0 by orders#0#0, k1, k0 again by orders#0#9]. The repeat is left out of the batch and
  // goes to the per-key update; the first k0's INSERT fails on its own without reaching the table (throttled), so
  // it goes to the per-key update too. Were the repeat's update sent alongside the first's, it could create k0 for
  // orders#0#9 and the first record find its key taken by the record after it; repeats are sent once the first
  // of their key is decided. Through the processor a claim list never holds a key
  // twice (`decideKeys` drops or dead-letters every later record with a key), so this is the ledger function's
  // own contract ("repeats are decided against the first"), not a lost record.
  it('the first claim of a key in a list is the one that holds it, whatever became of its INSERT', async () => {
    const pipeline = uniqueName('cba');
    const [first, other] = claimsOf(2);
    const repeat = { ...first!, claimant: 'orders#0#9', digest: 'd9' };
    const repeatDone = gate();
    const clients = clientsWith('withholdFirst', (next, context) => async (args) => {
      const input = args.input as {
        Statements?: Array<{ Parameters: unknown[] }>;
        ExpressionAttributeValues?: Record<string, unknown>;
      };
      if (context.commandName === 'BatchExecuteStatementCommand') {
        // The first statement (k0) never reaches the table and is reported throttled.
        const withheld = input.Statements!.shift();
        expect(plain(withheld?.Parameters[2])).toBe('k0');
        const result = await next(args);
        const output = result.output as unknown as { Responses: Array<Record<string, unknown>> };
        output.Responses.unshift({ Error: { Code: 'ThrottlingError', Message: 'slow down' } });
        return result;
      }
      if (context.commandName === 'UpdateItemCommand') {
        const claimant = plain(input.ExpressionAttributeValues?.[':claimant']);
        // Let a repeat sent alongside go first (it must not be sent before the first is decided: then it is not).
        if (claimant === 'orders#0#0') await Promise.race([repeatDone.opened, sleep(300)]);
        try {
          return await next(args);
        } finally {
          if (claimant === 'orders#0#9') repeatDone.open();
        }
      }
      return next(args);
    });
    const found = await claimAhead(refOf(clients), pipeline, [first!, other!, repeat], NOW, 'attempt-1');
    expect(found.taken).toEqual([{ idempotencyKey: 'k0', claimant: 'orders#0#0', digest: 'd0' }]);
    expect(await claimOf(pipeline, 'k0')).toMatchObject({ claimant: 'orders#0#0' });
  });
});
