import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { RELEASED } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { readClaim } from '../support/claims.ts';
import { crashAt, gate } from '../support/hooks.ts';
import { stagedRows } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('handover');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'handover', overrides);
}

/**
 * Values `<kind>:<state key>`. `grow`: 99 text fields of 1 KB named after the record, and one more to `n` (about
 * 100 KB more each time: four fill an item, a fifth is refused); `add`: one more to `n` only; `set`: the text field
 * `n` (a later add to `n` is refused for its type).
 */
const sizing: Transform = {
  name: 'sizing',
  apply(record) {
    const [kind = '', key = 'customer'] = Buffer.from(record.rawValue ?? '', 'base64')
      .toString()
      .split(':');
    const fields: Record<string, string> = {};
    if (kind === 'grow') for (let i = 0; i < 99; i++) fields[`r${record.offset}f${i}`] = 'v'.repeat(1000);
    if (kind === 'set') fields.n = 'text';
    const add: Record<string, number> = kind === 'set' ? {} : { n: 1 };
    return { kind: 'ok', rows: [{ offset: record.offset }], state: [{ key, fields, add }] };
  },
};

/** A fresh container (no cached fence) on `clock`, with the sizing transform. */
function container(settings: Settings, clock: ManualClock, extra: Partial<ProcessorDeps> = {}) {
  return createProcessor({ settings, clients: res.clients, clock, transform: sizing, ...extra });
}

/** A record without a Kafka key: two records with the same value carry the same payload (digest). */
const spec = (offset: number, value: string, key: string, partition = 0): RecordSpec => ({
  partition,
  offset,
  key: null,
  value,
  headers: { 'idempotency-key': key },
});

const claimOf = (settings: Settings, key: string) => readClaim(res, settings.pipelineId, key);

/** Staged rows of `stream` as `partition@offset`, by partition and offset. */
async function staged(settings: Settings, stream: 'output' | 'deadletter'): Promise<string[]> {
  return (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId))
    .filter((row) => row.stream === stream)
    .map(({ row }) => row.source as { partition: number; offset: number })
    .sort((a, b) => a.partition - b.partition || a.offset - b.offset)
    .map((source) => `${source.partition}@${source.offset}`);
}

/** Fills the `customer` item to just under 400 KB (offsets 0..3 of partition 0, keys k-0..k-3). */
async function fill(settings: Settings, clock: ManualClock): Promise<void> {
  await container(settings, clock).processEvent(
    mskEvent([0, 1, 2, 3].map((offset) => spec(offset, 'grow:customer', `k-${offset}`))),
  );
}

const FILLED = ['0@0', '0@1', '0@2', '0@3'];

describe('a crash after the claims ahead, then a retry that refuses the record for its state', () => {
  // Confirmed. Claims ahead. Attempt A of batch 5, 6 (both key K, other payloads) claims K ahead for 5 (holders
  // {A}) and crashes before its staging transaction (a timeout: no code runs after). The mapping's retry B confirms
  // 5's claim as its own (holders {A, B}); DynamoDB refuses the chunk (5 would grow `customer` past 400 KB), 5 is
  // dead-lettered and 6 becomes K's holder. The handover releases 5's claim for B only: A, which will never run
  // again, still holds it, so the claim stays live naming offset 5. 6's takeover in the transaction meets it, and 6
  // is dead-lettered as a conflict with 5 — a record that was itself dead-lettered and holds nothing. A run without
  // the crash outputs 6 and leaves K claimed by 6 (the passing test below).
  it('the heir is output holding the key, as without the crash', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'add:customer', 'K')]);
    await expect(
      container(settings, clock, { hooks: crashAt('after-claims') }).processEvent(batch),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    clock.advance(1_000);
    const retry = await container(settings, clock).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6']);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#6');
  });

  it('without the crash the heir is output holding the key', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'add:customer', 'K')]);
    const report = await container(settings, clock).processEvent(batch);
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6']);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#6');
  });

  // Confirmed. The same crash with the refused record alone in its batch: after the retry dead-letters 5, its claim
  // stays live for the crashed attempt A (releaseStateRefused removes only B). A later record with K and another
  // payload (offset 6, next batch) is dead-lettered as a conflict with 5, which never became output; without the
  // crash 5's claim is released and 6 is output.
  it('a later record with the key is output, not judged against the refused record', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'K')]);
    await expect(
      container(settings, clock, { hooks: crashAt('after-claims') }).processEvent(batch),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    clock.advance(1_000);
    await container(settings, clock).processEvent(batch);
    clock.advance(1_000);
    const later = await container(settings, clock).processEvent(mskEvent([spec(6, 'add:customer', 'K')]));
    expect(later.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 0, stagedRows: 1 });
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6']);
  });
});

describe('a slow attempt of the same batch after the refused record’s claim was released', () => {
  // Attempt A of batch 5 (K) re-reads the fence (5 still pending) and stalls before writing its claim ahead. The
  // mapping's retry B claims K, is refused 5's state and dead-letters 5, releasing its claim in that transaction.
  // A resumes: its claim ahead names the same record and digest, so "already ours" would confirm it and make it
  // live again, naming a record that is a dead letter; A's transaction then fails on the fence and A ends, leaving
  // the claim to its TTL. Released claims are taken over only inside a fenced transaction, so A brings nothing back.
  it('the released claim stays released, and a later record with the key is output', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = mskEvent([spec(5, 'grow:customer', 'K')]);
    const aAtClaim = gate();
    const bDone = gate();
    const aClients = createAwsClients();
    let updates = 0;
    aClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        // The claim ahead of a fresh key is a batch of INSERTs; of a key held already, an UpdateItem.
        const claimWrite =
          context.commandName === 'UpdateItemCommand' ||
          context.commandName === 'BatchExecuteStatementCommand';
        if (claimWrite && updates++ === 0) {
          aAtClaim.open();
          await bDone.opened;
        }
        return next(args);
      },
      { step: 'initialize', name: 'pauseClaimAhead' },
    );
    const a = container(settings, clock, { clients: aClients }).processEvent(batch);
    await aAtClaim.opened;
    const b = await container(settings, clock).processEvent(batch);
    expect(b.partitions[0]).toMatchObject({ stagedOffset: 5, deadLettered: 1, stagedRows: 0 });
    expect((await claimOf(settings, 'K'))?.expiresAt).toBe(RELEASED);
    bDone.open();
    await a;
    expect((await claimOf(settings, 'K'))?.expiresAt).toBe(RELEASED);
    clock.advance(1_000);
    const later = await container(settings, clock).processEvent(mskEvent([spec(6, 'add:customer', 'K')]));
    expect(later.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 0, stagedRows: 1 });
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6']);
  });
});

describe('a refused record that took an expired claim over', () => {
  /** K output at offset 4 and its claim expired since. */
  async function expiredClaim(settings: Settings, clock: ManualClock): Promise<void> {
    await fill(settings, clock);
    await container(settings, clock).processEvent(mskEvent([spec(4, 'add:other', 'K')]));
    clock.advance((settings.idempotencyTtlSeconds + 3_600) * 1_000);
  }

  // Disproved. 5 (K) takes the expired claim over and is refused; 6 (K) is its heir and is refused too (it grows
  // `customer` as well), so the takeover passes on again, to 7; 7 is output holding K, and 7's payload again later is
  // a duplicate.
  it('an heir refused in turn passes the takeover on: the next record holds the key', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await expiredClaim(settings, clock);
    const report = await container(settings, clock).processEvent(
      mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'grow:customer', 'K'), spec(7, 'add:third', 'K')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 7, deadLettered: 2, stagedRows: 1 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#7');
    clock.advance(1_000);
    const again = await container(settings, clock).processEvent(mskEvent([spec(8, 'add:third', 'K')]));
    expect(again.partitions[0]).toMatchObject({ duplicatesByKey: 1, stagedRows: 0 });
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@4', '0@7']);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5', '0@6']);
  });

  // Disproved. Two keys in one batch, both expired takeovers refused (one for size, one for an add to a text field),
  // each with its own heir: both heirs are output holding their keys.
  it('two keys handed over in one batch: each heir holds its own key', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    await container(settings, clock).processEvent(
      mskEvent([spec(4, 'add:other', 'K'), spec(5, 'add:other', 'L'), spec(6, 'set:label', 'k-6')]),
    );
    clock.advance((settings.idempotencyTtlSeconds + 3_600) * 1_000);
    const report = await container(settings, clock).processEvent(
      mskEvent([
        spec(7, 'grow:customer', 'K'),
        spec(8, 'add:label', 'L'),
        spec(9, 'add:customer', 'K'),
        spec(10, 'add:other', 'L'),
      ]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 10, deadLettered: 2, stagedRows: 2 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#9');
    expect((await claimOf(settings, 'L'))?.claimant).toBe('orders#0#10');
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@4', '0@5', '0@6', '0@9', '0@10']);
  });

  // Disproved. Attempt A: 5 takes the expired claim over and is refused; the takeover passes to 6; A crashes at
  // its next staged write, before 6's transaction. The retry meets the same expired claim, makes the same decision,
  // and 6 holds K.
  it('a crash between the refusal and the heir’s transaction: the retry’s heir holds the key', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await expiredClaim(settings, clock);
    const batch = mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'add:customer', 'K')]);
    // The first staged write is before the refused transaction, the second is the heir's chunk.
    await expect(
      container(settings, clock, { hooks: crashAt('before-stage-write', 2) }).processEvent(batch),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#4');
    clock.advance(1_000);
    const retry = await container(settings, clock).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#6');
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@4', '0@6']);
  });
});

describe('a record of another partition claiming the key during the handover', () => {
  // Attempt on partition 0: 5 (K) claims K ahead (6 is 5's conflict until then) and is refused; 6 (K) is to take
  // K over in the transaction that dead-letters 5. Before that transaction (the second plan's staged write), partition 1's record 0 (K, a third payload) claims K and meets 5's claim, still live: 5's
  // fate is decided only by that transaction. Partition 1's record is dead-lettered as a conflict, and 6 takes 5's
  // claim over atomically. Exactly one record holds K and is output; none twice.
  it('one of the two is output holding the key, the other is its conflict', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    let raced = false;
    let plans = 0;
    const raceBeforeHandover = {
      async onStep(step: string) {
        if (step !== 'before-stage-write' || ++plans !== 2) return;
        expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#5');
        raced = true;
        await container(settings, clock).processEvent(mskEvent([spec(0, 'add:p1', 'K', 1)]));
      },
    };
    const report = await container(settings, clock, { hooks: raceBeforeHandover }).processEvent(
      mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'add:customer', 'K')]),
    );
    expect(raced).toBe(true);
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#6');
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6']);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5', '1@0']);
  });

  // After the handover committed, partition 1's record meets 6's claim: a conflict with the record that holds K.
  it('a record of another partition after the handover is judged against the heir', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const report = await container(settings, clock).processEvent(
      mskEvent([spec(5, 'grow:customer', 'K'), spec(6, 'add:customer', 'K')]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 1 });
    clock.advance(1_000);
    const other = await container(settings, clock).processEvent(mskEvent([spec(0, 'add:p1', 'K', 1)]));
    expect(other.partitions[0]).toMatchObject({ deadLettered: 1, stagedRows: 0 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#6');
    expect(await staged(settings, 'deadletter')).toEqual(['0@5', '1@0']);
  });
});
