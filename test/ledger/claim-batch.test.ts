/**
 * Claims ahead created in batches (PartiQL INSERT in BatchExecuteStatement), against DynamoDB Local: each key is
 * decided by its own condition (created if absent; an existing claim goes through the per-key create-or-confirm
 * update), the item created is exactly the per-key update's, and a statement that fails on its own is decided per
 * key as before. Faults are injected by middleware on the client (a statement's response replaced).
 */
import { GetItemCommand } from '@aws-sdk/client-dynamodb';
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { type AwsClients, createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { TableRef } from '../../shared/aws/dynamo.ts';
import { TransientAwsError } from '../../shared/errors.ts';
import {
  claimInsertsRefused,
  forgetClaimInsertRefusal,
  MAX_BATCH_STATEMENTS,
} from '../../shared/ledger/claim-batch.ts';
import { claimAhead } from '../../shared/ledger/claim-items.ts';
import { keys } from '../../shared/ledger/layout.ts';
import type { ClaimItem } from '../../shared/ledger/records.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { claimsLiveUntil } from '../support/claims.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claim-batch');
});

const NOW = Date.UTC(2030, 0, 1);
const NOW_S = Math.floor(NOW / 1000);
const LIVE = NOW_S + 86_400;

const refOf = (clients: AwsClients): TableRef => ({
  doc: ledgerDocumentClient(clients.dynamodb),
  table: res.table,
});

/** Claims of `count` records of orders-0 from offset 0, key `k<offset>`, live. */
const claimsOf = (count: number): ClaimItem[] => claimsLiveUntil(count, LIVE);

async function putClaim(pipeline: string, item: Omit<ClaimItem, 'expiresAt'> & { expiresAt: number }) {
  await ledgerDocumentClient(res.clients.dynamodb).send(
    new PutCommand({
      TableName: res.table,
      Item: { ...keys.claim(pipeline, item.idempotencyKey), ...item, holders: new Set(['attempt-before']) },
    }),
  );
}

/** The claim item as DynamoDB stores it (typed attribute values: the exact types written). */
async function rawClaim(pipeline: string, key: string) {
  const { Item } = await res.clients.dynamodb.send(
    new GetItemCommand({
      TableName: res.table,
      Key: { pk: { S: keys.claim(pipeline, key).pk }, sk: { S: 'CLAIM' } },
      ConsistentRead: true,
    }),
  );
  return Item;
}

const byKey = (a: { idempotencyKey: string }, b: { idempotencyKey: string }) =>
  a.idempotencyKey.localeCompare(b.idempotencyKey);

/** Clients whose BatchExecuteStatement responses `rewrite` may change (after DynamoDB applied the call). */
function rewritingBatches(rewrite: (responses: Array<Record<string, unknown>>, batch: number) => void) {
  const clients = createAwsClients();
  let batches = 0;
  clients.dynamodb.middlewareStack.add(
    (next, context) => async (args) => {
      const result = await next(args);
      if (context.commandName === 'BatchExecuteStatementCommand') {
        rewrite(
          (result.output as unknown as { Responses: Array<Record<string, unknown>> }).Responses,
          batches++,
        );
      }
      return result;
    },
    { step: 'initialize', name: 'rewriteBatches' },
  );
  return clients;
}

describe('claims ahead in batches', () => {
  it('decides each of 60 keys by its own condition: 57 created in 3 calls, one confirmed, one taken, one expired', async () => {
    const pipeline = uniqueName('cb');
    const claims = claimsOf(60);
    // k10: another record's (another digest: a conflict for the processor); k20: this record's own, left by an
    // earlier attempt; k30: another record's, expired.
    await putClaim(pipeline, {
      idempotencyKey: 'k10',
      claimant: 'orders#1#7',
      digest: 'other',
      expiresAt: LIVE,
    });
    await putClaim(pipeline, {
      idempotencyKey: 'k20',
      claimant: 'orders#0#20',
      digest: 'd20',
      expiresAt: LIVE,
    });
    await putClaim(pipeline, {
      idempotencyKey: 'k30',
      claimant: 'orders#1#3',
      digest: 'd30',
      expiresAt: NOW_S - 1,
    });
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);

    const found = await claimAhead(refOf(clients), pipeline, claims, NOW, 'attempt-1');

    expect(found.taken).toEqual([{ idempotencyKey: 'k10', claimant: 'orders#1#7', digest: 'other' }]);
    expect(found.expired).toEqual(['k30']);
    expect([...found.held].sort(byKey)).toEqual(
      claims.filter((c) => c.idempotencyKey !== 'k10' && c.idempotencyKey !== 'k30').sort(byKey),
    );
    // 60 INSERTs in 3 calls; the 3 that found an item go through the per-key update.
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 3, 'dynamodb:UpdateItem': 3 });

    // Created: exactly the attributes (and types) of the per-key update's claim, this attempt its only holder.
    for (const offset of [0, 24, 25, 59]) {
      expect(await rawClaim(pipeline, `k${offset}`)).toEqual({
        pk: { S: keys.claim(pipeline, `k${offset}`).pk },
        sk: { S: 'CLAIM' },
        idempotencyKey: { S: `k${offset}` },
        claimant: { S: `orders#0#${offset}` },
        digest: { S: `d${offset}` },
        expiresAt: { N: String(LIVE) },
        holders: { SS: ['attempt-1'] },
      });
    }
    // Confirmed: this attempt joins the earlier one.
    const own = await rawClaim(pipeline, 'k20');
    expect(own?.claimant).toEqual({ S: 'orders#0#20' });
    expect([...(own?.holders?.SS ?? [])].sort()).toEqual(['attempt-1', 'attempt-before']);
    // Another record's, live or expired: untouched.
    for (const [key, claimant, expiresAt] of [
      ['k10', 'orders#1#7', LIVE],
      ['k30', 'orders#1#3', NOW_S - 1],
    ] as const) {
      const item = await rawClaim(pipeline, key);
      expect(item?.claimant).toEqual({ S: claimant });
      expect(item?.expiresAt).toEqual({ N: String(expiresAt) });
      expect(item?.holders).toEqual({ SS: ['attempt-before'] });
    }
  });

  it('creates the same item as the per-key update: an item the batch created is confirmed by a retry as its own', async () => {
    const pipeline = uniqueName('cb');
    const claims = claimsOf(3);
    await claimAhead(refOf(res.clients), pipeline, claims, NOW, 'attempt-1');
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const retry = await claimAhead(refOf(clients), pipeline, claims, NOW, 'attempt-2');
    expect(retry).toEqual({ taken: [], expired: [], held: expect.arrayContaining(claims) });
    expect(retry.held).toHaveLength(3);
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 1, 'dynamodb:UpdateItem': 3 });
    expect((await rawClaim(pipeline, 'k1'))?.holders?.SS?.sort()).toEqual(['attempt-1', 'attempt-2']);
  });

  it('sends one item once per call: a key repeated by another record is decided per key against the first', async () => {
    const pipeline = uniqueName('cb');
    const [first] = claimsOf(1);
    const repeat = { ...first!, claimant: 'orders#0#9', digest: 'd9' };
    const found = await claimAhead(refOf(res.clients), pipeline, [first!, repeat], NOW, 'attempt-1');
    expect(found).toEqual({
      taken: [{ idempotencyKey: 'k0', claimant: 'orders#0#0', digest: 'd0' }],
      expired: [],
      held: [first],
    });
  });

  it(`cuts the statements into calls of at most ${MAX_BATCH_STATEMENTS}`, async () => {
    const clients = createAwsClients();
    const sizes: number[] = [];
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'BatchExecuteStatementCommand') {
          sizes.push((args.input as { Statements: unknown[] }).Statements.length);
        }
        return next(args);
      },
      { step: 'initialize', name: 'batchSizes' },
    );
    const found = await claimAhead(refOf(clients), uniqueName('cb'), claimsOf(51), NOW, 'attempt-1');
    expect(found.held).toHaveLength(51);
    expect(sizes.sort((a, b) => b - a)).toEqual([25, 25, 1]);
  });

  it('decides per key a statement that failed on its own (throttled, whether or not it was applied)', async () => {
    const pipeline = uniqueName('cb');
    const claims = claimsOf(4);
    // Statement 1 was applied but reported throttled; statement 2 is reported throttled and never reached the
    // table (its item is created here by another record first).
    await putClaim(pipeline, { idempotencyKey: 'k2', claimant: 'orders#3#1', digest: 'x', expiresAt: LIVE });
    const clients = rewritingBatches((responses) => {
      responses[1] = { Error: { Code: 'ThrottlingError', Message: 'slow down' } };
      responses[3] = { Error: { Code: 'ProvisionedThroughputExceeded', Message: 'slow down' } };
    });
    const calls = new CallCounter().attach(clients);
    const found = await claimAhead(refOf(clients), pipeline, claims, NOW, 'attempt-1');
    expect(found.taken).toEqual([{ idempotencyKey: 'k2', claimant: 'orders#3#1', digest: 'x' }]);
    expect(found.expired).toEqual([]);
    expect([...found.held].sort(byKey)).toEqual([claims[0], claims[1], claims[3]]);
    // k1 and k3 (reported throttled) and k2 (DuplicateItem) went through the per-key update.
    expect(calls.snapshot()).toEqual({ 'dynamodb:BatchExecuteStatement': 1, 'dynamodb:UpdateItem': 3 });
    expect((await rawClaim(pipeline, 'k1'))?.holders).toEqual({ SS: ['attempt-1'] });
  });

  it('claims per key, and sends no more INSERTs, once a statement is refused for a missing permission; fails as a transient failure on a throttled call', async () => {
    const denied = rewritingBatches((responses) => {
      responses[0] = { Error: { Code: 'AccessDenied', Message: 'no dynamodb:PartiQLInsert' } };
    });
    const deniedCalls = new CallCounter().attach(denied);
    const warnings: string[] = [];
    const write = process.stderr.write;
    process.stderr.write = ((text: string) => warnings.push(String(text)) > 0) as typeof process.stderr.write;
    try {
      const pipeline = uniqueName('cb');
      const first = claimsOf(2);
      const found = await claimAhead(refOf(denied), pipeline, first, NOW, 'attempt-1');
      expect([...found.held].sort(byKey)).toEqual(first);
      // The refused key went through the per-key update; the next claims are written per key from the start.
      expect(deniedCalls.snapshot()).toEqual({
        'dynamodb:BatchExecuteStatement': 1,
        'dynamodb:UpdateItem': 1,
      });
      const later = claimsOf(4).slice(2);
      expect((await claimAhead(refOf(denied), pipeline, later, NOW, 'attempt-2')).held).toHaveLength(2);
      expect(deniedCalls.snapshot()).toEqual({
        'dynamodb:BatchExecuteStatement': 1,
        'dynamodb:UpdateItem': 3,
      });
      expect(claimInsertsRefused()).toBe(true);
    } finally {
      process.stderr.write = write;
      forgetClaimInsertRefusal();
    }
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/claims ahead fall back to one UpdateItem per key/);

    const throttled = createAwsClients();
    throttled.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'BatchExecuteStatementCommand') {
          throw Object.assign(new Error('throttled'), { name: 'ThrottlingException' });
        }
        return next(args);
      },
      { step: 'initialize', name: 'throttleBatches' },
    );
    const calls = new CallCounter().attach(throttled);
    await expect(
      claimAhead(refOf(throttled), uniqueName('cb'), claimsOf(60), NOW, 'attempt-1'),
    ).rejects.toBeInstanceOf(TransientAwsError);
    // No call starts after the first failed one (all in flight at once here: three calls), and no key is
    // claimed per key meanwhile.
    expect(calls.snapshot()['dynamodb:UpdateItem']).toBeUndefined();
  });
});
