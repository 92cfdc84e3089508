/**
 * Adversarial interleavings of attempt-scoped claims, the ring of batch starts and an ADD meeting a text field.
 * Against DynamoDB Local and the S3 server; the only injected faults are a paused call and a deterministic
 * (non-transient) refusal of a staging transaction (middleware on a client), as in test/processor/claims.test.ts.
 */
import { DynamoDBDocumentClient, GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { keys } from '../../shared/ledger/layout.ts';
import {
  createProcessor,
  type PartitionReport,
  type ProcessorStep,
} from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { gate } from '../support/hooks.ts';
import { stagedOutputCounts } from '../support/ledger.ts';
import { mskEvent, order, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('takeover-claims');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'takeover-claims', overrides);
}

const keyed = (partition: number, offset: number, key: string): RecordSpec => ({
  partition,
  offset,
  key,
  value: order(key),
  headers: { 'idempotency-key': key },
});

/** A write of a claim: an UpdateItem, or a batch of INSERTs creating claims ahead (`claim-batch.ts`). */
const isClaimWrite = (commandName: unknown): boolean =>
  commandName === 'UpdateItemCommand' || commandName === 'BatchExecuteStatementCommand';

function outputCounts(settings: Settings): Promise<Record<string, number>> {
  return stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
}

async function claimOf(settings: Settings, key: string) {
  const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
  const { Item } = await doc.send(
    new GetCommand({ TableName: res.table, Key: keys.claim(settings.pipelineId, key), ConsistentRead: true }),
  );
  return Item;
}

describe('a claim put by a staging transaction (takeover) is never released', () => {
  it("a zombie confirms a takeover claim its retry committed, then fails deterministically: its release must not free the committed record's key (a duplicate elsewhere is dropped)", async () => {
    const settings = settingsFor(); // claims ahead (default)
    // An expired claim on K by some other record (its TTL passed, DynamoDB has not deleted it yet).
    const doc = DynamoDBDocumentClient.from(res.clients.dynamodb);
    await doc.send(
      new PutCommand({
        TableName: res.table,
        Item: {
          ...keys.claim(settings.pipelineId, 'K'),
          idempotencyKey: 'K',
          claimant: 'orders#9#9',
          digest: 'another-record',
          expiresAt: 1,
        },
      }),
    );
    const batch = mskEvent([keyed(0, 0, 'K')]);

    // A (the original invocation, soon a zombie): its claim-ahead UpdateItem is held (a slow network) until its
    // retry B has committed; its staging transaction is then refused deterministically (any non-transient error:
    // AccessDenied during a policy rollout, a ValidationException of another code version, ...).
    const aClients = createAwsClients();
    const aAtClaim = gate();
    const bCommitted = gate();
    let updates = 0;
    aClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'UpdateItemCommand' && updates++ === 0) {
          aAtClaim.open();
          await bCommitted.opened;
        }
        if (context.commandName === 'TransactWriteItemsCommand') {
          throw Object.assign(new Error('refused for good'), { name: 'AccessDeniedException' });
        }
        return next(args);
      },
      { step: 'initialize', name: 'pauseClaimRefuseTransaction' },
    );
    const a = createProcessor({ settings, clients: aClients })
      .processEvent(batch)
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await aAtClaim.opened; // A has re-read the fence (-1) and is about to claim K ahead

    // B (the mapping's retry): finds the claim expired, takes it over inside its fenced transaction, commits.
    const b = await createProcessor({ settings, clients: res.clients }).processEvent(batch);
    expect(b.partitions[0]).toMatchObject({ stagedRows: 1, stagedOffset: 0 });
    expect(await claimOf(settings, 'K')).toMatchObject({ claimant: 'orders#0#0' });
    // A takeover lists the committing attempt (B) as its only holder, for good: B never releases what it committed.
    const committedHolders = (await claimOf(settings, 'K'))?.holders as Set<string> | undefined;
    expect(committedHolders?.size).toBe(1);

    bCommitted.open();
    // A's claim ahead now finds K "its own" (same claimant and digest) and adds itself as holder; its transaction
    // is refused; it releases: removes itself, but B stays a holder, so the claim is not marked released.
    expect(await a).toMatchObject({ name: 'AccessDeniedException' });
    const afterRelease = await claimOf(settings, 'K');

    // A producer duplicate of K (same bytes) on another partition.
    const elsewhere = await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([keyed(1, 0, 'K')]),
    );
    const counts = await outputCounts(settings);
    expect({ afterRelease, elsewhere: elsewhere.partitions[0], counts }).toMatchObject({
      afterRelease: { claimant: 'orders#0#0', expiresAt: expect.any(Number) },
      elsewhere: { stagedRows: 0, duplicatesByKey: 1 },
      counts: { K: 1 },
    });
    expect(afterRelease?.expiresAt).toBeGreaterThan(Date.now() / 1000);
  });
});

describe('one record whose own deltas fold into something no chunk can hold (L1: stall by a hostile record)', () => {
  /** Two deltas on ONE state key: each passes evaluation's per-delta checks, their fold does not fit any chunk. */
  const twoDeltas = (second: Record<string, number>, firstFields: Record<string, string>): Transform => ({
    name: 'two-deltas-one-key',
    apply(record) {
      return {
        kind: 'ok',
        rows: [{ offset: record.offset }],
        state: [
          { key: 'S', fields: firstFields, add: {} },
          { key: 'S', fields: {}, add: second },
        ],
      };
    },
  });

  const outcome = async (transform: Transform) => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = createProcessor({ settings, clients: res.clients, transform });
    return processor.processEvent(mskEvent([{ partition: 0, offset: 0, value: 'x' }])).then(
      (report) => report.partitions[0],
      (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
    );
  };

  it('a record setting field f in one delta and adding to f in another delta of the same key is dead-lettered or applied, never a stall', async () => {
    expect(await outcome(twoDeltas({ f: 1 }, { f: 'text' }))).toMatchObject({ stagedOffset: 0 });
  });

  it('a record adding 2^53-1 to field n in two deltas of the same key (sum past 2^53) is dead-lettered or applied, never a stall', async () => {
    const max = Number.MAX_SAFE_INTEGER;
    const transform: Transform = {
      name: 'two-big-adds',
      apply(record) {
        return {
          kind: 'ok',
          rows: [{ offset: record.offset }],
          state: [
            { key: 'S', fields: {}, add: { n: max } },
            { key: 'S', fields: {}, add: { n: max } },
          ],
        };
      },
    };
    expect(await outcome(transform)).toMatchObject({ stagedOffset: 0 });
  });
});

describe('a release racing a confirm leaves the claim live', () => {
  it('a release racing a confirm: the retry confirms between the release\'s "leave holders" and "mark released" updates; the claim stays live', async () => {
    const settings = settingsFor();
    const batch = mskEvent([keyed(0, 0, 'RC')]);
    const aBetween = gate();
    const bConfirmed = gate();
    const aDone = gate();
    const aClients = createAwsClients();
    let updates = 0;
    aClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') {
          throw Object.assign(new Error('refused for good'), { name: 'ValidationException' });
        }
        // Claim writes of A: 1 claim ahead (a batch of INSERTs), 2 leave holders, 3 mark released.
        if (isClaimWrite(context.commandName) && ++updates === 3) {
          aBetween.open();
          await bConfirmed.opened;
        }
        return next(args);
      },
      { step: 'initialize', name: 'pauseBeforeMarkReleased' },
    );
    const a = createProcessor({ settings, clients: aClients })
      .processEvent(batch)
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await aBetween.opened;
    expect((await claimOf(settings, 'RC'))?.holders).toBeUndefined(); // A left; nobody holds it
    const b = createProcessor({
      settings,
      clients: res.clients,
      hooks: {
        async onStep(step: ProcessorStep) {
          if (step !== 'after-claims') return;
          bConfirmed.open();
          await aDone.opened;
        },
      },
    }).processEvent(batch);
    expect(await a).toMatchObject({ name: 'ValidationException' });
    aDone.open();
    expect((await b).partitions[0]).toMatchObject({ stagedRows: 1, stagedOffset: 0 });
    const claim = await claimOf(settings, 'RC');
    expect(claim?.expiresAt).toBeGreaterThan(Date.now() / 1000);
    const elsewhere = await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([keyed(1, 0, 'RC')]),
    );
    expect(elsewhere.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    expect(await outputCounts(settings)).toEqual({ RC: 1 });
  });
});

describe('the claim of a record dead-lettered for an add to a text field (P4, P6)', () => {
  /** "set": state field `total` := text; "add…": adds 1 to it; anything else: an output row, no state. */
  const transform: Transform = {
    name: 'set-add-fixed',
    apply(record) {
      const value = String(record.value);
      const state =
        value === 'set'
          ? [{ key: 'customer', fields: { total: 'n/a' }, add: {} }]
          : value.startsWith('add')
            ? [{ key: 'customer', fields: {}, add: { total: 1 } }]
            : [];
      return { kind: 'ok', rows: [{ orderId: value }], state };
    },
  };

  it('claims ahead: a record dead-lettered because its add meets a text field does not keep its key claimed (a poison record never claims its key): the corrected record with that key elsewhere is output, as in in-transaction mode', async () => {
    const outcomes: Record<string, unknown> = {};
    for (const claimWrite of ['in-transaction', 'ahead'] as const) {
      const settings = settingsFor({ claimWrite });
      const processor = createProcessor({ settings, clients: res.clients, transform });
      await processor.processEvent(
        mskEvent([{ partition: 0, offset: 0, value: 'set', headers: { 'idempotency-key': 'S' } }]),
      );
      const refused = await processor.processEvent(
        mskEvent([{ partition: 0, offset: 1, value: 'add-v1', headers: { 'idempotency-key': 'K' } }]),
      );
      expect(refused.partitions[0]).toMatchObject({ deadLettered: 1, stagedOffset: 1 });
      const corrected = await processor.processEvent(
        mskEvent([{ partition: 1, offset: 0, value: 'fixed', headers: { 'idempotency-key': 'K' } }]),
      );
      const { stagedRows: rows, keyConflicts, deadLettered } = corrected.partitions[0]!;
      outcomes[claimWrite] = { rows, keyConflicts, deadLettered };
    }
    expect(outcomes).toEqual({
      'in-transaction': { rows: 1, keyConflicts: 0, deadLettered: 0 },
      ahead: { rows: 1, keyConflicts: 0, deadLettered: 0 },
    });
  });
});

describe('the state read after a type conflict', () => {
  it('a state item whose numeric total has grown past 2^53 (each add safe, DynamoDB sums in decimal) still lets an add to its text field be dead-lettered, not a stall', async () => {
    const max = Number.MAX_SAFE_INTEGER;
    const transform: Transform = {
      name: 'big-total-then-text',
      apply(record) {
        const value = String(record.value);
        const state =
          value === 'big'
            ? [{ key: 'S', fields: {}, add: { n: max } }]
            : value === 'set'
              ? [{ key: 'S', fields: { t: 'text' }, add: {} }]
              : [{ key: 'S', fields: {}, add: { t: 1 } }];
        return { kind: 'ok', rows: [{ orderId: value }], state };
      },
    };
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = createProcessor({ settings, clients: res.clients, transform });
    await processor.processEvent(mskEvent([{ partition: 0, offset: 0, value: 'big' }]));
    await processor.processEvent(mskEvent([{ partition: 0, offset: 1, value: 'big' }])); // n = 2^54 - 2
    await processor.processEvent(mskEvent([{ partition: 0, offset: 2, value: 'set' }]));
    const outcome = await processor.processEvent(mskEvent([{ partition: 0, offset: 3, value: 'add' }])).then(
      (report) => report.partitions[0],
      (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
    );
    expect(outcome).toMatchObject({ stagedOffset: 3, deadLettered: 1 });
  });
});

describe("a released claim taken over by another record while its own record's retry stages it", () => {
  function refusingFirstTransaction() {
    const clients = createAwsClients();
    let transactions = 0;
    clients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand' && transactions++ === 0) {
          throw Object.assign(new Error('refused for good'), { name: 'ValidationException' });
        }
        return next(args);
      },
      { step: 'initialize', name: 'refuseFirstTransaction' },
    );
    return clients;
  }

  for (const order_ of ['retry-first', 'takeover-first'] as const) {
    it(`${order_}: exactly one output for the key, never a conflict`, async () => {
      const settings = settingsFor();
      const original = mskEvent([keyed(0, 0, 'RT')]);
      await expect(
        createProcessor({ settings, clients: refusingFirstTransaction() }).processEvent(original),
      ).rejects.toThrow('refused for good');
      expect(await claimOf(settings, 'RT')).toMatchObject({ expiresAt: 0 });
      const cAtClaims = gate();
      const go = gate();
      const c = createProcessor({
        settings,
        clients: res.clients,
        hooks: {
          async onStep(step: ProcessorStep) {
            if (step !== 'after-claims') return;
            cAtClaims.open();
            await go.opened;
          },
        },
      }).processEvent(mskEvent([keyed(1, 0, 'RT')]));
      await cAtClaims.opened; // C found the claim released: it will take it over in its transaction
      const retry = createProcessor({ settings, clients: res.clients });
      let reports: { b: PartitionReport | undefined; c: PartitionReport | undefined };
      if (order_ === 'retry-first') {
        const b = await retry.processEvent(original);
        go.open();
        reports = { b: b.partitions[0], c: (await c).partitions[0] };
      } else {
        go.open();
        const cr = await c;
        reports = { b: (await retry.processEvent(original)).partitions[0], c: cr.partitions[0] };
      }
      expect(reports.b?.keyConflicts).toBe(0);
      expect(reports.c?.keyConflicts).toBe(0);
      expect(await outputCounts(settings)).toEqual({ RT: 1 });
    });
  }
});

describe('release racing an in-transaction put of the same record (claimWrite changed between attempts)', () => {
  it('an ahead-mode attempt leaves holders; the retry (in-transaction mode) puts the claim in its committed transaction; the release\'s "mark released" must not free it', async () => {
    const settings = settingsFor();
    const inTxn = settingsFor({ pipelineId: settings.pipelineId, claimWrite: 'in-transaction' });
    const batch = mskEvent([keyed(0, 0, 'MX')]);
    const aBetween = gate();
    const bCommitted = gate();
    const aClients = createAwsClients();
    let updates = 0;
    aClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') {
          throw Object.assign(new Error('refused for good'), { name: 'ValidationException' });
        }
        if (isClaimWrite(context.commandName) && ++updates === 3) {
          aBetween.open();
          await bCommitted.opened;
        }
        return next(args);
      },
      { step: 'initialize', name: 'pauseBeforeMarkReleased' },
    );
    const a = createProcessor({ settings, clients: aClients })
      .processEvent(batch)
      .then(
        () => 'ok',
        (error: unknown) => error,
      );
    await aBetween.opened;
    const b = await createProcessor({ settings: inTxn, clients: res.clients }).processEvent(batch);
    expect(b.partitions[0]).toMatchObject({ stagedRows: 1, stagedOffset: 0 });
    bCommitted.open();
    expect(await a).toMatchObject({ name: 'ValidationException' });
    const elsewhere = await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([keyed(1, 0, 'MX')]),
    );
    expect({ elsewhere: elsewhere.partitions[0], counts: await outputCounts(settings) }).toMatchObject({
      elsewhere: { stagedRows: 0, duplicatesByKey: 1 },
      counts: { MX: 1 },
    });
  });
});
