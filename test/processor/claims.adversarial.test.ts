/**
 * Adversarial interleavings of the processor's claims, per-record stalls and exact keys against DynamoDB Local and
 * the S3 server. Each test asserts a property of docs/architecture.md (P4–P6, L1–L3).
 */

import { beforeAll, describe, expect, it } from 'vitest';
import {
  PROCESSOR_CLAIM_INSERT_ACTIONS,
  PROCESSOR_DYNAMODB_ACTIONS,
} from '../../infra/exactly-once-pipeline.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { EpochChangedError } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, type ProcessorDeps, type ProcessorStep } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { gate } from '../support/hooks.ts';
import { type Call, recordCalls } from '../support/iam.ts';
import { ledgerView, stagedOutputCounts, stagedRows } from '../support/ledger.ts';
import { mskEvent, order, orderRecords, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('r1');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'r1', overrides);
}

function processorFor(settings: Settings, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, ...extra });
}

/** A promise and its resolver: pauses one invocation at a step until the test lets it go on. */
const keyed = (partition: number, offset: number, key: string): RecordSpec => ({
  partition,
  offset,
  key,
  value: order(key),
  headers: { 'idempotency-key': key },
});

/** Output rows per orderId over everything the ledger references (staged output). */
function outputCounts(settings: Settings): Promise<Record<string, number>> {
  return stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
}

describe('claim release vs a concurrent invocation of the same batch (P4)', () => {
  it('a zombie that fails deterministically after claims ahead must not delete the claims its concurrent retry confirmed and then commits without: a duplicate elsewhere is applied twice', async () => {
    const settings = settingsFor(); // claims ahead (default), idempotency key from the header
    const batch = mskEvent([keyed(0, 0, 'K1'), keyed(0, 1, 'K2')]);

    // Invocation A (the original, soon a zombie): its staging transaction fails with a DNS error, which
    // `isTransient` does not list (EAI_AGAIN / ENOTFOUND), so the processor takes it as deterministic and
    // releases its claims. Its release transaction (the second TransactWriteItems) goes through.
    const zombieClients = createAwsClients();
    let transactions = 0;
    zombieClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand' && transactions++ === 0) {
          throw Object.assign(new Error('getaddrinfo EAI_AGAIN dynamodb.us-east-1.amazonaws.com'), {
            code: 'EAI_AGAIN',
            errno: -3001,
            syscall: 'getaddrinfo',
          });
        }
        return next(args);
      },
      { step: 'initialize', name: 'injectDnsFailure' },
    );
    const aClaimed = gate();
    const bClaimed = gate();
    const aDone = gate();
    const zombie = createProcessor({
      settings,
      clients: zombieClients,
      hooks: {
        async onStep(step: ProcessorStep) {
          if (step !== 'after-claims') return;
          aClaimed.open();
          await bClaimed.opened;
        },
      },
    });
    // Invocation B (the mapping's retry of the same batch): confirms A's claims as its own, then waits until A
    // has failed and released before its transaction.
    const retry = processorFor(settings, {
      hooks: {
        async onStep(step: ProcessorStep) {
          if (step !== 'after-claims') return;
          bClaimed.open();
          await aDone.opened;
        },
      },
    });

    const a = zombie.processEvent(batch).then(
      () => 'ok',
      (error: unknown) => error,
    );
    await aClaimed.opened;
    const b = retry.processEvent(batch);
    const aOutcome = await a;
    expect(aOutcome).toBeInstanceOf(Error); // A failed (as a zombie its outcome goes nowhere)
    aDone.open();
    const bReport = await b;
    expect(bReport.partitions[0]).toMatchObject({ stagedRows: 2, stagedOffset: 1 });

    // K1 and K2 are staged: their claims must still be there (P4), or a producer duplicate elsewhere goes through.
    const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
    const claimsAfterRetry = { ...ledger.claims };

    // A producer duplicate of K1 (same bytes) on another partition.
    const elsewhere = await processorFor(settings).processEvent(mskEvent([keyed(1, 0, 'K1')]));
    const counts = await outputCounts(settings);
    expect({ claimsAfterRetry, elsewhere: elsewhere.partitions[0], counts }).toMatchObject({
      claimsAfterRetry: { K1: 'orders#0#0', K2: 'orders#0#1' },
      elsewhere: { stagedRows: 0, duplicatesByKey: 1 },
      counts: { K1: 1, K2: 1 },
    });
  });
});

describe('per-record problems that still stall a partition (L1: conflicting field names)', () => {
  /** Record value "set": the state field `total` is a string; value "add": the same field is added to. */
  const setThenAdd: Transform = {
    name: 'set-then-add',
    apply(record) {
      const state =
        record.value === 'set'
          ? [{ key: 'customer', fields: { total: 'n/a' }, add: {} }]
          : [{ key: 'customer', fields: {}, add: { total: 1 } }];
      return { kind: 'ok', rows: [{ offset: record.offset }], state };
    },
  };

  it('a field set as text by one record and added to by a later record (another chunk) is dead-lettered, not retried forever', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = processorFor(settings, { transform: setThenAdd });
    const event = mskEvent([
      { partition: 0, offset: 0, value: 'set' },
      { partition: 0, offset: 1, value: 'add' },
    ]);
    // The chunk planner puts them in two transactions (a field both set and added cannot fold); the second
    // transaction's ADD meets a string attribute. Expected (L1): the second record is a dead letter, the
    // partition moves on. Observed: the batch fails on every retry.
    const outcomes: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      outcomes.push(
        await processor.processEvent(event).then(
          (report) => report.partitions[0],
          (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
        ),
      );
    }
    const fences = (await ledgerView(res.clients, res.table, settings.pipelineId)).fences;
    expect({ outcomes, fences }).toMatchObject({
      outcomes: [{ stagedOffset: 1, deadLettered: 1 }, { stagedOffset: 1 }],
      fences: { 'orders#0': 1 },
    });
  });

  it('the same conflict across two batches (field set earlier, added to now) is dead-lettered, not retried forever', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = processorFor(settings, { transform: setThenAdd });
    await processor.processEvent(mskEvent([{ partition: 0, offset: 0, value: 'set' }]));
    const next = mskEvent([{ partition: 0, offset: 1, value: 'add' }]);
    const outcome = await processor.processEvent(next).then(
      (report) => report.partitions[0],
      (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
    );
    expect(outcome).toMatchObject({ stagedOffset: 1, deadLettered: 1 });
  });
});

describe('one output per record across crashes and key conflicts', () => {
  it('a crash after the claims followed by the retry and a same-key other-payload record elsewhere: one output, one conflict, never both for one record', async () => {
    const settings = settingsFor();
    const x = keyed(0, 0, 'X');
    const y: RecordSpec = { ...keyed(1, 0, 'X'), value: order('X', 'cust-9', '99.00') };
    let crashed = false;
    await expect(
      processorFor(settings, {
        hooks: {
          onStep(step: ProcessorStep) {
            if (step === 'after-claims' && !crashed) {
              crashed = true;
              throw new InjectedCrashError(step);
            }
          },
        },
      }).processEvent(mskEvent([x])),
    ).rejects.toThrow(InjectedCrashError);
    const yReport = await processorFor(settings).processEvent(mskEvent([y]));
    expect(yReport.partitions[0]).toMatchObject({ keyConflicts: 1, deadLettered: 1, stagedRows: 0 });
    const xRetry = await processorFor(settings).processEvent(mskEvent([x]));
    expect(xRetry.partitions[0]).toMatchObject({ stagedRows: 1, keyConflicts: 0 });
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => [r.stream, (r.row.source as { partition: number }).partition])).toEqual([
      ['deadletter', 1],
      ['output', 0],
    ]);
  });
});

describe('transaction aggregate size (4 MB) counts whole items, not deltas (L1/L3)', () => {
  /** "fill:<i>": state item c<i> gets 100 fields of 1 KB (~105 KB, inside the documented per-item bound). "touch": +1 on c0..c44. */
  const fillThenTouch: Transform = {
    name: 'fill-then-touch',
    apply(record) {
      const value = record.value ?? '';
      if (value.startsWith('fill:')) {
        const fields: Record<string, string> = {};
        for (let i = 0; i < 100; i++) fields[`f${i}`] = 'v'.repeat(1000);
        return { kind: 'ok', rows: [], state: [{ key: `c${value.slice(5)}`, fields, add: {} }] };
      }
      return {
        kind: 'ok',
        rows: [{ touched: 45 }],
        state: Array.from({ length: 45 }, (_, i) => ({ key: `c${i}`, fields: {}, add: { n: 1 } })),
      };
    },
  };

  it('a record adding 1 to 45 state items of ~105 KB each (each inside the bound) is applied, or dead-lettered, never a stall', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const processor = processorFor(settings, { transform: fillThenTouch });
    await processor.processEvent(
      mskEvent(Array.from({ length: 45 }, (_, i) => ({ partition: 0, offset: i, value: `fill:${i}` }))),
    );
    const outcome = await processor
      .processEvent(mskEvent([{ partition: 0, offset: 45, value: 'touch' }]))
      .then(
        (report) => report.partitions[0],
        (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
      );
    expect(outcome).toMatchObject({ stagedOffset: 45 });
  });
});

describe('recreated-topic detection, false positives in legitimate redelivery (L2)', () => {
  it('offset commits lost for two acknowledged batches (the group rewinds two batches): the redelivered batch holds the same records and is acknowledged without effects, not stopped', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    // Batches of 10 as the mapping delivers them; both staged and acknowledged, but neither offset commit landed
    // (e.g. commits failed during a rebalance), so the group restarts from offset 0 with the same batch size.
    await processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await processor.processEvent(mskEvent(orderRecords(0, 10, 10)));
    const outcome = await processorFor(settings)
      .processEvent(mskEvent(orderRecords(0, 0, 10)))
      .then(
        (report) => report.partitions[0],
        (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
      );
    // Same generation, same bytes: dropping them is exactly-once. Observed: OffsetsWentBackwardsError forever.
    expect(outcome).toMatchObject({ duplicatesByOffset: 10, chunks: 0, stagedOffset: 19 });
  });
});

describe('exact keys (keys are compared as the exact bytes received)', () => {
  /** Rows are the JSON body; the idempotency key is `json:id`. */
  const passthrough: Transform = {
    name: 'json-passthrough',
    apply(record) {
      const body = JSON.parse(record.value ?? 'null') as Record<string, unknown>;
      return { kind: 'ok', rows: [{ v: body.v }], state: [], body };
    },
  };

  it('two numeric json ids that differ beyond 2^53 are never taken for one key: neither is a conflict or a duplicate (each is dead-lettered as an inexact key)', async () => {
    const settings = settingsFor({ idempotencyKey: 'json:id' });
    const processor = processorFor(settings, { transform: passthrough });
    const report = await processor.processEvent(
      mskEvent([
        { partition: 0, offset: 0, value: '{"id":12345678901234567890,"v":1}' },
        { partition: 1, offset: 0, value: '{"id":12345678901234567891,"v":2}' },
      ]),
    );
    // A numeric key beyond 2^53 (which
    // JSON.parse has already rounded, so its exact digits are gone) is a key problem, dead-lettered — rather than
    // reading the raw JSON text. Either way neither record may be dropped or dead-lettered as the other's conflict.
    const totals = report.partitions.map((p) => [
      p.stagedRows,
      p.deadLettered,
      p.keyConflicts,
      p.duplicatesByKey,
    ]);
    expect(totals).toEqual([
      [0, 1, 0, 0],
      [0, 1, 0, 0],
    ]);
  });
});

describe('the claim release against the processor role the stack grants', () => {
  it('every DynamoDB action of a batch that fails deterministically after claims ahead (and releases them) is one the processor role has', async () => {
    const settings = settingsFor(); // claims ahead, header keys
    // A batch that fails for good after its claims were written ahead: an epoch switch lands between the claims
    // and the staging transaction, so the batch's claims must be released with the processor role's actions.
    const transform: Transform = {
      name: 'note-per-partition',
      apply(record) {
        const state = [{ key: `customer-${record.partition}`, fields: { note: 'n'.repeat(1000) }, add: {} }];
        return { kind: 'ok', rows: [{ offset: record.offset }], state };
      },
    };
    const clients = createAwsClients();
    const calls: Call[] = [];
    recordCalls(clients, (found) => calls.push(...found));
    const processor = createProcessor({ settings, clients, transform });
    await processor.processEvent(mskEvent([{ ...keyed(0, 0, 'A'), value: 'x' }]));
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, systemClock);
    const switching = createProcessor({
      settings,
      clients,
      transform,
      hooks: {
        async onStep(step) {
          if (step === 'after-claims') await epochs.startNew('orders', 0, { force: true });
        },
      },
    });
    // The next record's batch fails for good: its claim written ahead is released.
    await expect(switching.processEvent(mskEvent([{ ...keyed(0, 1, 'B'), value: 'x' }]))).rejects.toThrow(
      EpochChangedError,
    );
    const actions = [...new Set(calls.filter((c) => c.action.startsWith('dynamodb:')).map((c) => c.action))];
    expect(actions).toContain('dynamodb:UpdateItem'); // the claims ahead and the release
    // Released: a record with key B elsewhere is staged (not dropped as a duplicate); one with key A is dropped.
    const elsewhere = await processorFor(settings, { transform }).processEvent(
      mskEvent([
        { ...keyed(1, 0, 'B'), value: 'x' },
        { ...keyed(1, 1, 'A'), value: 'x' },
      ]),
    );
    expect(elsewhere.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 1, keyConflicts: 0 });
    // ... with only actions the processor role has (in AWS an AccessDenied release would be swallowed and the
    // claim would outlive the failed batch: the very thing the claim release exists to prevent).
    const granted = [...PROCESSOR_DYNAMODB_ACTIONS, ...PROCESSOR_CLAIM_INSERT_ACTIONS];
    expect(actions.filter((action) => !granted.includes(action))).toEqual([]);
  });
});

describe('numeric adds that pass evaluation but the ledger client refuses (L1: stall by a hostile record)', () => {
  it('orders: two valid orders of one customer whose amounts fold past 2^53 in one chunk are applied or dead-lettered, never a stall', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' }); // the shipped `orders` transform
    const processor = processorFor(settings);
    // Each amount is a safe integer in minor units (9e15 <= 2^53 - 1), so each record passes evaluation; the
    // chunk folds the two totals into 1.8e16, which the document client refuses to marshal (not a safe integer).
    const big = (offset: number) => ({
      partition: 0,
      offset,
      value: order(`o${offset}`, 'cust-hostile', '90000000000000.00', 'USD'),
    });
    const outcomes: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      outcomes.push(
        await processor.processEvent(mskEvent([big(0), big(1)])).then(
          (report) => report.partitions[0],
          (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
        ),
      );
    }
    expect(outcomes[0]).toMatchObject({ stagedOffset: 1 });
  });

  it('a transform adding 1e16 (inside MAX_ADD_MAGNITUDE = 1e30) is applied or dead-lettered, never a stall', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const adder: Transform = {
      name: 'adder',
      apply: (record) => ({
        kind: 'ok',
        rows: [{ offset: record.offset }],
        state: [{ key: 'acc', fields: {}, add: { x: Number(record.value) } }],
      }),
    };
    const outcome = await processorFor(settings, { transform: adder })
      .processEvent(mskEvent([{ partition: 0, offset: 0, value: '1e16' }]))
      .then(
        (report) => report.partitions[0],
        (error: unknown) => `${(error as Error).name}: ${(error as Error).message}`,
      );
    expect(outcome).toMatchObject({ stagedOffset: 0 });
  });
});

describe('keyed state does not depend on how a batch was chunked or redelivered (P5, end-to-end 2)', () => {
  it('adds 0.1 and 0.2: one batch (folded in JS doubles) and two batches (summed by DynamoDB in decimal) give the same total', async () => {
    const adder: Transform = {
      name: 'adder',
      apply: (record) => ({
        kind: 'ok',
        rows: [{ offset: record.offset }],
        state: [{ key: 'acc', fields: {}, add: { x: Number(record.value) } }],
      }),
    };
    const records = [
      { partition: 0, offset: 0, value: '0.1' },
      { partition: 0, offset: 1, value: '0.2' },
    ];
    const together = settingsFor({ idempotencyKey: 'none' });
    await processorFor(together, { transform: adder }).processEvent(mskEvent(records));
    const apart = settingsFor({ idempotencyKey: 'none' });
    const processor = processorFor(apart, { transform: adder });
    await processor.processEvent(mskEvent(records.slice(0, 1)));
    await processor.processEvent(mskEvent(records.slice(1)));
    const total = async (settings: Settings) =>
      (await ledgerView(res.clients, res.table, settings.pipelineId)).state.acc?.x;
    expect(await total(together)).toEqual(await total(apart));
  });
});
