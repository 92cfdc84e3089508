import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { runEpoch } from '../../cli/epoch.ts';
import { clockOrigin, ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { RELEASED } from '../../shared/ledger/staging-ledger.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { readClaim } from '../support/claims.ts';
import { container, fenceOf, heldTransform, outcomeOf } from '../support/cold-container.ts';
import { crashAt } from '../support/hooks.ts';
import { stagedOutputCounts, stagedRows } from '../support/ledger.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fconf');
});

afterEach(() => {
  // `eos epoch` sets the exit code of a refused switch; the test runner must not inherit it.
  process.exitCode = undefined;
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'fconf', overrides);
}

async function startNewEpoch(settings: Settings, partition = 0) {
  return runEpoch(
    {
      table: res.table,
      pipeline: settings.pipelineId,
      topic: 'orders',
      partition,
      startNew: true,
      force: false,
      json: true,
    },
    { dynamodb: res.clients.dynamodb, write: () => undefined },
  );
}

function expectedRows(prefix: string, from: number, count: number): Record<string, number> {
  return Object.fromEntries(Array.from({ length: count }, (_, i) => [`${prefix}-o${from + i}`, 1]));
}

describe('a stop only stale invocations saw', () => {
  // Offset-only dedupe. The first delivery Z1 of 0..9 stalls in prepare (a cold start) and times out; the mapping's
  // retry Z2 of the same batch stalls and times out too; both run on containers whose clocks are 60 s ahead of the
  // stagers'. The third attempt and later batches stage 0..89, and the invocation that staged 90..99 crashes before
  // returning (the mapping will deliver 90..99 again). Z1 and Z2 wake: the fence's updatedAt (the stagers' clock) is
  // before each one's startedAt, so each judges its batch as delivered and backwards. Z1 writes the stop; Z2 began
  // before that first sighting, so it is no retry of the refused batch and does not confirm it: `eos epoch
  // --start-new` without --force refuses, and the retry of 90..99 is staged once.
  it('two zombies of one batch (its first delivery and its retry) never confirm a stop between them', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const clock = new ManualClock();
    const zombies = [0, 1].map(() => {
      const held = heldTransform();
      const zClock = new ManualClock(clockOrigin() + 60_000);
      const run = container(res, settings, zClock, { transform: held.transform }).processEvent(
        mskEvent(orderRecords(0, 0, 10)),
      );
      return { held, zClock, run };
    });
    for (const zombie of zombies) await zombie.held.reached;
    for (let first = 0; first <= 80; first += 10) {
      clock.advance(1_000);
      await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, first, 10)));
    }
    clock.advance(1_000);
    await expect(
      container(res, settings, clock, { hooks: crashAt('before-return') }).processEvent(
        mskEvent(orderRecords(0, 90, 10)),
      ),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    for (const zombie of zombies) {
      zombie.zClock.advance(1_000);
      zombie.held.release();
      expect(await outcomeOf(zombie.run)).toBe('stopped');
    }
    const epoch = await startNewEpoch(settings);
    if (epoch.switched?.[0]?.outcome.kind === 'opened') {
      clock.advance(1_000);
      await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 90, 10)));
    }
    expect(await stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId)).toEqual(
      expectedRows('p0', 0, 100),
    );
    expect(epoch.switched?.[0]?.outcome).toMatchObject({ kind: 'unconfirmed' });
  });
});

describe('a real stop', () => {
  it('is confirmed by the mapping retries after an unproven attempt, and its record keeps one size however often it is seen', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const clock = new ManualClock();
    for (let first = 0; first <= 20; first += 10) {
      clock.advance(1_000);
      await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, first, 10)));
    }
    // A batch of a recreated topic whose first attempt started before the last staging committed: unproven, no stop.
    const early = new ManualClock(clock.now());
    clock.advance(1_000);
    const stalled = heldTransform();
    const first = container(res, settings, early, { transform: stalled.transform }).processEvent(
      mskEvent(orderRecords(0, 1, 5, 'gen2')),
    );
    await stalled.reached;
    await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 30, 10)));
    stalled.release();
    expect(await outcomeOf(first)).toBe('unproven');
    expect((await fenceOf(res, settings)).stop).toBeUndefined();

    const sizes: number[] = [];
    const outcomes: string[] = [];
    for (let retry = 0; retry < 4; retry++) {
      clock.advance(1_000);
      outcomes.push(
        await outcomeOf(
          container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 1, 5, 'gen2'))),
        ),
      );
      const stop = (await fenceOf(res, settings)).stop;
      sizes.push(JSON.stringify(stop).length);
      expect(stop?.seenBy?.count).toBe(retry + 1);
      expect(stop?.fence).toBe(39);
      if (retry === 0)
        expect((await startNewEpoch(settings)).switched?.[0]?.outcome.kind).toBe('unconfirmed');
      process.exitCode = undefined;
    }
    expect(outcomes).toEqual(['stopped', 'stopped', 'stopped', 'stopped']);
    // first and last attempt and a count: a sighting replaces, never appends.
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(2);
    expect((await startNewEpoch(settings)).switched?.[0]?.outcome).toEqual({
      kind: 'opened',
      epoch: 1,
      closedFence: 39,
    });
  });

  it('two attempts recording the first sighting at once: one is written, and the next retry confirms it', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const clock = new ManualClock();
    for (let first = 0; first <= 20; first += 10) {
      clock.advance(1_000);
      await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, first, 10)));
    }
    clock.advance(1_000);
    const both = await Promise.all(
      [0, 1].map(() =>
        outcomeOf(container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 0, 5, 'gen2')))),
      ),
    );
    expect(both).toEqual(['stopped', 'stopped']);
    const count = (await fenceOf(res, settings)).stop?.seenBy?.count;
    expect(count === 1 || count === 2).toBe(true);
    clock.advance(1_000);
    await outcomeOf(container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 0, 5, 'gen2'))));
    expect((await fenceOf(res, settings)).stop?.seenBy?.count).toBeGreaterThanOrEqual(2);
  });
});

/**
 * Values `<kind>:<state key>`. `grow`: 99 text fields of 1 KB named after the record, and one more to `n` (about
 * 100 KB more each time: four fill an item, a fifth is refused); `add`: one more to `n` only.
 */
const sizing: Transform = {
  name: 'sizing',
  apply(record) {
    const [kind = '', key = 'customer'] = Buffer.from(record.rawValue ?? '', 'base64')
      .toString()
      .split(':');
    const fields: Record<string, string> = {};
    if (kind === 'grow') for (let i = 0; i < 99; i++) fields[`r${record.offset}f${i}`] = 'v'.repeat(1000);
    return { kind: 'ok', rows: [{ offset: record.offset }], state: [{ key, fields, add: { n: 1 } }] };
  },
};

const spec = (offset: number, value: string, key = `k-${offset}`, kafkaKey?: string): RecordSpec => ({
  partition: 0,
  offset,
  value,
  headers: { 'idempotency-key': key },
  ...(kafkaKey === undefined ? {} : { key: kafkaKey }),
});

const claimOf = (settings: Settings, key: string) => readClaim(res, settings.pipelineId, key);

async function outputOffsets(settings: Settings): Promise<number[]> {
  return (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId))
    .filter(({ stream }) => stream === 'output')
    .map(({ row }) => (row.source as { offset: number }).offset);
}

/** Fills the `customer` item to just under 400 KB (offsets 0..3). */
async function fill(settings: Settings, clock: ManualClock): Promise<void> {
  await container(res, settings, clock, { transform: sizing }).processEvent(
    mskEvent([0, 1, 2, 3].map((offset) => spec(offset, 'grow:customer'))),
  );
}

describe('a key handed over from a record refused for its state', () => {
  // Claims ahead. Offset 4 (key order-7) is output and claims the key; the idempotency TTL passes. The batch 5, 6
  // comes: 5 (order-7) would grow `customer` past 400 KB, 6 (order-7, another payload) only adds. The claim ahead
  // for 5 finds order-7's claim expired, so 5 is a takeover (its claim goes into the transaction; no claim is held
  // ahead). DynamoDB refuses the chunk; 5 is dead-lettered and 6 becomes the key's holder. Unless the takeover passes
  // to 6 as well, 6 is staged while order-7's claim still names offset 4, expired, and the same payload as 6 again
  // later (a producer retry) takes the expired claim over and is output a second time.
  it('the heir of a refused record that took an expired claim over holds the key: the same payload later is a duplicate', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(4, 'add:other', 'order-7')]),
    );
    clock.advance((settings.idempotencyTtlSeconds + 3_600) * 1_000);
    const report = await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(5, 'grow:customer', 'order-7'), spec(6, 'add:customer', 'order-7')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    clock.advance(1_000);
    const again = await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(7, 'add:customer', 'order-7', 'k-6')]),
    );
    expect(await outputOffsets(settings)).toEqual([0, 1, 2, 3, 4, 6]);
    expect(again.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect((await claimOf(settings, 'order-7'))?.claimant).toBe('orders#0#6');
  });

  it('in-transaction claims: the heir of a refused record that took an expired claim over holds the key', async () => {
    const settings = settingsFor({ claimWrite: 'in-transaction' });
    const clock = new ManualClock();
    await fill(settings, clock);
    await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(4, 'add:other', 'order-7')]),
    );
    clock.advance((settings.idempotencyTtlSeconds + 3_600) * 1_000);
    await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(5, 'grow:customer', 'order-7'), spec(6, 'add:customer', 'order-7')]),
    );
    clock.advance(1_000);
    const again = await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(7, 'add:customer', 'order-7', 'k-6')]),
    );
    expect(again.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect(await outputOffsets(settings)).toEqual([0, 1, 2, 3, 4, 6]);
    expect((await claimOf(settings, 'order-7'))?.claimant).toBe('orders#0#6');
  });

  // Claims ahead, no earlier claim of order-8. Attempt A of batch 5, 6 claims order-8 ahead for 5 (6 is 5's
  // conflict until then); the first chunk is refused (5 would grow `customer` past 400 KB); the handover makes 6 a takeover of 5's claim, in the transaction that dead-letters 5; A crashes before that
  // transaction. 5's claim is still live and names offset 5 with its digest, so the retry's claim ahead for 5
  // confirms it as its own, and the handover runs again: 6 takes the key over in its transaction.
  it('a crash between the refusal and the heir’s transaction: the retry’s heir still holds the key', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'order-8'), spec(6, 'add:customer', 'order-8')]);
    // Crash at the staged write of the plan after the refusal (the second): nothing released yet.
    let plans = 0;
    const crashAfterRefusal = {
      async onStep(step: string) {
        if (step !== 'before-stage-write' || ++plans !== 2) return;
        expect(await claimOf(settings, 'order-8')).toMatchObject({ claimant: 'orders#0#5' });
        expect((await claimOf(settings, 'order-8'))?.expiresAt).not.toBe(RELEASED);
        throw new InjectedCrashError(step);
      },
    };
    await expect(
      container(res, settings, clock, { transform: sizing, hooks: crashAfterRefusal }).processEvent(batch),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    expect((await fenceOf(res, settings)).stagedOffset).toBe(3);
    clock.advance(1_000);
    const retry = await container(res, settings, clock, { transform: sizing }).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    clock.advance(1_000);
    const again = await container(res, settings, clock, { transform: sizing }).processEvent(
      mskEvent([spec(7, 'add:customer', 'order-8', 'k-6')]),
    );
    expect(await outputOffsets(settings)).toEqual([0, 1, 2, 3, 6]);
    expect(again.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
  });

  it('a retry of the batch after the handover committed drops the whole batch and outputs nothing twice', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'order-9'), spec(6, 'add:customer', 'order-9')]);
    await expect(
      container(res, settings, clock, { transform: sizing, hooks: crashAt('before-return') }).processEvent(
        batch,
      ),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    clock.advance(1_000);
    const retry = await container(res, settings, clock, { transform: sizing }).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ duplicatesByOffset: 2, stagedRows: 0, deadLettered: 0 });
    expect(await outputOffsets(settings)).toEqual([0, 1, 2, 3, 6]);
    expect((await claimOf(settings, 'order-9'))?.claimant).toBe('orders#0#6');
  });
});
