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
  res = await freshResources('claim-handover');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'claim-handover', overrides);
}

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

/** Staged rows of `stream` as `partition@offset`, by partition and offset (each staged once: no duplicates). */
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
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/**
 * 5 (key K) is refused (it grows `customer` past 400 KB); 6..9 each add to a state key of their own (own keys); 10
 * (K, another payload) is 5's heir. With 8 items a chunk, the chunk that dead-letters 5 (fence, dead-letter entry,
 * release of 5's claim, output entry, four state keys) is full: the heir's claim put and `customer` go to the next.
 */
const SPLIT_BATCH = () =>
  mskEvent([
    spec(5, 'grow:customer', 'K'),
    ...range(6, 9).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
    spec(10, 'add:customer', 'K'),
  ]);
const SPLIT_OUTPUT = [...FILLED, '0@6', '0@7', '0@8', '0@9', '0@10'];

describe('the heir in a later chunk than the refused record', () => {
  it('the refused record’s claim is released by its chunk and the heir takes the key over in the next', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    let between: { claimant?: string; expiresAt?: number } | undefined;
    let chunks = 0;
    const observe = {
      async onStep(step: string) {
        if (step === 'after-transaction' && ++chunks === 1) between = await claimOf(settings, 'K');
      },
    };
    const report = await container(settings, clock, { hooks: observe }).processEvent(SPLIT_BATCH());
    expect(between).toMatchObject({ claimant: 'orders#0#5', expiresAt: RELEASED });
    expect(report.partitions[0]).toMatchObject({
      stagedOffset: 10,
      deadLettered: 1,
      stagedRows: 5,
      chunks: 2,
    });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#10');
    expect(await staged(settings, 'output')).toEqual(SPLIT_OUTPUT);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5']);
  });

  it('a crash between the release chunk and the heir’s chunk: the retry’s heir holds the key', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    await expect(
      container(settings, clock, { hooks: crashAt('after-transaction') }).processEvent(SPLIT_BATCH()),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    expect(await claimOf(settings, 'K')).toMatchObject({ claimant: 'orders#0#5', expiresAt: RELEASED });
    clock.advance(1_000);
    const retry = await container(settings, clock).processEvent(SPLIT_BATCH());
    expect(retry.partitions[0]).toMatchObject({ stagedOffset: 10, deadLettered: 0, stagedRows: 1 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#10');
    expect(await staged(settings, 'output')).toEqual(SPLIT_OUTPUT);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5']);
  });
});

describe('a second attempt of the same batch racing the handover', () => {
  // Attempt B of the batch reads the fence (4) and pauses after its first staged write, before its claims ahead.
  // Attempt A claims ahead, is refused 5's state, and commits the chunk that dead-letters 5 and releases its claim
  // (fence 9); the heir 10 is in A's next chunk. B resumes: its re-read finds 5..9 staged by another invocation,
  // and B cannot know whether 5 became output or a dead letter, so 5 holds no key in B's decision: 10 holds K if
  // the ledger says nobody else does, claimed inside B's fenced transaction (the released claim is taken over).
  // Judging 10 against 5 from the batch alone would dead-letter it as a conflict with a record that holds nothing.
  it('the heir is output holding the key, whichever attempt stages it', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const bPaused = gate();
    const bGo = gate();
    let paused = false;
    const b = container(settings, clock, {
      hooks: {
        async onStep(step: string) {
          if (step !== 'after-stage-write' || paused) return;
          paused = true;
          bPaused.open();
          await bGo.opened;
        },
      },
    }).processEvent(SPLIT_BATCH());
    await bPaused.opened;
    let raced = false;
    const a = await container(settings, clock, {
      hooks: {
        async onStep(step: string) {
          if (step !== 'after-transaction' || raced) return;
          raced = true;
          expect(await claimOf(settings, 'K')).toMatchObject({ claimant: 'orders#0#5', expiresAt: RELEASED });
          bGo.open();
          await b;
        },
      },
    }).processEvent(SPLIT_BATCH());
    expect(raced).toBe(true);
    expect(a.partitions[0]?.stagedOffset).toBe(10);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5']);
    expect(await staged(settings, 'output')).toEqual(SPLIT_OUTPUT);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#10');
  });
});

describe('the release item in the chunk budget', () => {
  // 5 (K) refused, then 98 records each with a key and a state key of its own. Before the refusal the first chunk is
  // exactly 100 items (fence, output entry, `customer`, 97 state keys); the chunk that dead-letters 5 adds a
  // dead-letter entry and the release of 5's claim, so it must hold two records fewer, or DynamoDB's limit is passed.
  it('a chunk that releases a refused record’s claim stays within 100 items', async () => {
    const settings = settingsFor();
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const counting = createAwsClients();
    const sizes: number[] = [];
    counting.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') {
          sizes.push((args.input as { TransactItems?: unknown[] }).TransactItems?.length ?? 0);
        }
        return next(args);
      },
      { step: 'initialize', name: 'countTransactItems' },
    );
    const report = await container(settings, clock, { clients: counting }).processEvent(
      mskEvent([
        spec(5, 'grow:customer', 'K'),
        ...range(6, 103).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
      ]),
    );
    // Refused at 100 items, then 100 again with the dead-letter entry and the release in place of two records.
    expect(sizes).toEqual([100, 100, 4]);
    expect(report.partitions[0]).toMatchObject({
      stagedOffset: 103,
      deadLettered: 1,
      stagedRows: 98,
      chunks: 2,
    });
    expect(await claimOf(settings, 'K')).toMatchObject({ claimant: 'orders#0#5', expiresAt: RELEASED });
    expect(await staged(settings, 'deadletter')).toEqual(['0@5']);
  });
});

describe('the refused record’s claim taken over by another partition before the handover commits', () => {
  // 5's claim ahead expires while the batch runs (the clock passes the idempotency TTL after the refusal), and
  // partition 1's record (K, a third payload) takes it over in its own transaction and is output. The handover that
  // follows finds K held by another record: the heir's put with 5 as predecessor (heir in the same chunk) or the
  // release of 5's claim (heir in a later chunk) fails, and the heir is judged against partition 1's record, a
  // conflict. K is held by exactly one record, the one output; no record twice, none lost.
  it.each([
    ['in the same chunk', 100],
    ['in a later chunk', 8],
  ])('the heir %s is judged against the new holder', async (_, maxTransactionItems) => {
    const settings = settingsFor({ maxTransactionItems });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    let plans = 0;
    let raced = false;
    const takeOverBeforeHandover = {
      async onStep(step: string) {
        if (step !== 'before-stage-write' || ++plans !== 2) return;
        expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#5');
        clock.advance((settings.idempotencyTtlSeconds + 60) * 1_000);
        const other = await container(settings, clock).processEvent(mskEvent([spec(0, 'add:p1', 'K', 1)]));
        expect(other.partitions[0]).toMatchObject({ stagedRows: 1, deadLettered: 0 });
        raced = true;
      },
    };
    const report = await container(settings, clock, { hooks: takeOverBeforeHandover }).processEvent(
      SPLIT_BATCH(),
    );
    expect(raced).toBe(true);
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 10, deadLettered: 2, keyConflicts: 1 });
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#1#0');
    expect(await staged(settings, 'output')).toEqual([...FILLED, '0@6', '0@7', '0@8', '0@9', '1@0']);
    expect(await staged(settings, 'deadletter')).toEqual(['0@5', '0@10']);
  });
});

describe('a record staged by another attempt of the same batch', () => {
  // The counterpart of the race above: 5 (K) is output, not refused. Attempt B writes its claims ahead (5's claim
  // names 5) and pauses; attempt A confirms 5's claim, commits 5..10 and pauses before its next chunk. B's staging
  // transaction fails on the fence; its re-read finds 5..10 staged by another invocation and takes no key from them,
  // so 11 claims K inside B's fenced transaction: the claim names 5, live, so the transaction is refused with 5 as
  // holder, and 11 (another payload) is dead-lettered as 5's conflict. Not knowing 5's outcome never lets 11 out.
  it('the next record with the key is judged against the holder the ledger names', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = () =>
      mskEvent([
        spec(5, 'add:customer', 'K'),
        ...range(6, 10).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
        spec(11, 'add:other', 'K'),
      ]);
    const bPaused = gate();
    const bGo = gate();
    let paused = false;
    const b = container(settings, clock, {
      hooks: {
        async onStep(step: string) {
          if (step !== 'after-claims' || paused) return;
          paused = true;
          bPaused.open();
          await bGo.opened;
        },
      },
    }).processEvent(batch());
    await bPaused.opened;
    let raced = false;
    const a = await container(settings, clock, {
      hooks: {
        async onStep(step: string) {
          if (step !== 'after-transaction' || raced) return;
          raced = true;
          bGo.open();
          await b;
        },
      },
    }).processEvent(batch());
    expect(raced).toBe(true);
    expect(a.partitions[0]?.stagedOffset).toBe(11);
    expect(await staged(settings, 'output')).toEqual([
      ...FILLED,
      ...range(5, 10).map((offset) => `0@${offset}`),
    ]);
    expect(await staged(settings, 'deadletter')).toEqual(['0@11']);
    expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#5');
  });
});
