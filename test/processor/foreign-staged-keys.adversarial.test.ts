import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import type { MskEvent } from '../../shared/kafka/event.ts';
import { createProcessor, type ProcessorDeps } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { readClaim } from '../support/claims.ts';
import { gate } from '../support/hooks.ts';
import { stagedRows } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('foreign-keys');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'foreign-keys', overrides);
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
const spec = (offset: number, value: string, key: string): RecordSpec => ({
  partition: 0,
  offset,
  key: null,
  value,
  headers: { 'idempotency-key': key },
});

const claimOf = (settings: Settings, key: string) => readClaim(res, settings.pipelineId, key);

/** Staged rows of `stream` as offsets of partition 0, sorted (a duplicate shows twice). */
async function staged(settings: Settings, stream: 'output' | 'deadletter'): Promise<number[]> {
  return (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId))
    .filter((row) => row.stream === stream)
    .map(({ row }) => (row.source as { offset: number }).offset)
    .sort((a, b) => a - b);
}

/** Fills the `customer` item to just under 400 KB (offsets 0..3, keys k-0..k-3): the fence exists from here on. */
async function fill(settings: Settings, clock: ManualClock): Promise<void> {
  await container(settings, clock).processEvent(
    mskEvent([0, 1, 2, 3].map((offset) => spec(offset, 'grow:customer', `k-${offset}`))),
  );
}

const FILLED = [0, 1, 2, 3];
const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

/**
 * Attempt B of `batch` reads the fence and pauses at `pause`: after its first staged write (before its claims ahead,
 * or its first transaction), or after its claims ahead. Attempt A stages its first chunk and, before its next one,
 * lets B run to its end. B's re-read before its claims, or its fence condition, finds A's first chunk staged by
 * another attempt: paused before its claims, B claims its new holders' keys ahead; after them, in its transaction.
 */
type Pause = 'after-stage-write' | 'after-claims';

async function raceTwoAttempts(
  settings: Settings,
  clock: ManualClock,
  batch: () => MskEvent,
  pause: Pause,
  clients = res.clients,
) {
  const bPaused = gate();
  const bGo = gate();
  let paused = false;
  const b = container(settings, clock, {
    clients,
    hooks: {
      async onStep(step: string) {
        if (step !== pause || paused) return;
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
  return { a: a.partitions[0], b: (await b).partitions[0] };
}

const MODES: ReadonlyArray<[string, Partial<SettingsInput>]> = [
  ['claims ahead', {}],
  ['claims in the transaction', { claimWrite: 'in-transaction' }],
  ['partition scope (key window)', { idempotencyScope: 'partition' }],
];

/** The modes, and where attempt B pauses (only `ahead` has claims to pause after). */
const RACES: ReadonlyArray<[string, Partial<SettingsInput>, Pause]> = [
  ['claims ahead, B paused before its claims', {}, 'after-stage-write'],
  ['claims ahead, B paused after its claims (a takeover in its transaction)', {}, 'after-claims'],
  ['claims in the transaction', { claimWrite: 'in-transaction' }, 'after-stage-write'],
  ['partition scope (key window)', { idempotencyScope: 'partition' }, 'after-stage-write'],
];

describe('an in-batch producer duplicate whose first record another attempt output', () => {
  // 5 (K, `add:sk`) and 13 (K, the same bytes: a producer duplicate); 6..12 each add to a state key of their own, so
  // that with 8 items a chunk 5 and 13 never share one (ahead: 5..11 | 12, 13; in the transaction: three records a
  // chunk; key window: four). A stages the chunk holding 5 and lets B run: B takes no key from 5 (staged by
  // another attempt, outcome unknown here), so 13 holds K in B's batch decision and must learn from the ledger (5's
  // claim, or the window's entry) that 5 holds it with the same digest: dropped, not output a second time.
  const batch = () =>
    mskEvent([
      spec(5, 'add:sk', 'K'),
      ...range(6, 12).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
      spec(13, 'add:sk', 'K'),
    ]);
  for (const [mode, overrides, pause] of RACES) {
    it(`${mode}: the duplicate is dropped by the ledger's holder, output once`, async () => {
      const settings = settingsFor({ maxTransactionItems: 8, ...overrides });
      const clock = new ManualClock();
      await fill(settings, clock);
      clock.advance(1_000);
      const { a, b } = await raceTwoAttempts(settings, clock, batch, pause);
      expect(a?.stagedOffset).toBe(13);
      expect(b?.stagedOffset).toBe(13);
      expect(await staged(settings, 'output')).toEqual([...FILLED, ...range(5, 12)]);
      expect(await staged(settings, 'deadletter')).toEqual([]);
      // A staged one chunk; B decided and staged the rest, 13 included.
      expect(a?.chunks).toBe(1);
      expect(b?.duplicatesByKey).toBe(1);
      if (overrides.idempotencyScope === undefined) {
        expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#5');
      }
    });
  }
});

describe('a refused record’s heir when another attempt staged the refusal', () => {
  // 5 (K) grows `customer` past 400 KB: refused, dead-lettered by A's first committed chunk (its claim, if any,
  // released there). 13 (K, another payload) is its heir, in a chunk B stages. B cannot know 5 was refused; it must
  // not dead-letter 13 as a conflict with 5 (which holds nothing): in global scope 13 takes the key over in B's
  // transaction, in partition scope the window (without 5) says nobody holds K.
  const batch = () =>
    mskEvent([
      spec(5, 'grow:customer', 'K'),
      ...range(6, 12).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
      spec(13, 'add:customer', 'K'),
    ]);
  for (const [mode, overrides, pause] of RACES) {
    it(`${mode}: the heir is output holding the key`, async () => {
      const settings = settingsFor({ maxTransactionItems: 8, ...overrides });
      const clock = new ManualClock();
      await fill(settings, clock);
      clock.advance(1_000);
      const { a, b } = await raceTwoAttempts(settings, clock, batch, pause);
      expect(a?.stagedOffset).toBe(13);
      expect(b?.stagedOffset).toBe(13);
      expect(a?.chunks).toBe(1);
      expect(b?.keyConflicts).toBe(0);
      expect(await staged(settings, 'deadletter')).toEqual([5]);
      expect(await staged(settings, 'output')).toEqual([...FILLED, ...range(6, 13)]);
      if (overrides.idempotencyScope === undefined) {
        expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#13');
      }
    });
  }
});

describe('new holders claiming in one transaction stay within the item budget', () => {
  // 5..7 (K1..K3) and 8..12 (own keys) each add to a state key of their own; 13..15 repeat 5..7's bytes, 16 and 17
  // add to keys of their own. B claims ahead (K1..K3 name 5..7) and pauses; A stages 5..10 and lets B run: B's
  // transaction fails on the fence, and in B's decision 13..15 hold K1..K3 and claim them in the
  // transaction (takeovers). Every claim put is an item: a chunk of 11..14 is the fence, the output entry, s11,
  // s12, a1, a2 and two claims (8); without the claims counted it would run to 16 (11 items). Each transaction B sends
  // holds at most `maxTransactionItems` items, and the duplicates are dropped, not output.
  it('every staging transaction holds at most maxTransactionItems items', async () => {
    const settings = settingsFor({ maxTransactionItems: 8 });
    const clock = new ManualClock();
    await fill(settings, clock);
    clock.advance(1_000);
    const batch = () =>
      mskEvent([
        ...[1, 2, 3].map((i) => spec(4 + i, `add:a${i}`, `K${i}`)),
        ...range(8, 12).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
        ...[1, 2, 3].map((i) => spec(12 + i, `add:a${i}`, `K${i}`)),
        ...[16, 17].map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
      ]);
    const bClients = createAwsClients();
    const sizes: number[] = [];
    bClients.dynamodb.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'TransactWriteItemsCommand') {
          const input = args.input as { TransactItems?: unknown[] };
          sizes.push(input.TransactItems?.length ?? 0);
        }
        return next(args);
      },
      { step: 'initialize', name: 'countTransactionItems' },
    );
    const { b } = await raceTwoAttempts(settings, clock, batch, 'after-claims', bClients);
    expect(b?.stagedOffset).toBe(17);
    expect(b?.duplicatesByKey).toBe(3);
    expect(sizes.length).toBeGreaterThan(0);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(8);
    expect(await staged(settings, 'output')).toEqual([...FILLED, ...range(5, 12), 16, 17]);
    expect(await staged(settings, 'deadletter')).toEqual([]);
    for (const i of [1, 2, 3]) expect((await claimOf(settings, `K${i}`))?.claimant).toBe(`orders#0#${4 + i}`);
  });
});

/**
 * A middleware that sends the attempt's first staging transaction a second time once it committed: at `build` the
 * request is serialized (the SDK's retry sends it again with the same idempotency token), at `initialize` each send
 * is serialized anew (a new token: a resend the token does not cover, as after its ten-minute window).
 */
function resendFirstTransaction(step: 'build' | 'initialize') {
  const clients = createAwsClients();
  const seen = { resend: 'not yet' as 'not yet' | 'accepted' | 'refused' };
  const resend =
    <A, O>(next: (args: A) => Promise<O>, context: { commandName?: string }) =>
    async (args: A): Promise<O> => {
      if (context.commandName !== 'TransactWriteItemsCommand' || seen.resend !== 'not yet') return next(args);
      await next(args);
      try {
        const again = await next(args);
        seen.resend = 'accepted';
        return again;
      } catch (error) {
        seen.resend = 'refused';
        throw error;
      }
    };
  const name = 'resendCommittedTransaction';
  if (step === 'build') clients.dynamodb.middlewareStack.add(resend, { step, name });
  else clients.dynamodb.middlewareStack.add(resend, { step, name });
  return { clients, seen };
}

describe('this attempt’s own committed transaction sent again', () => {
  // 5 (K, `add:sk`) is output holding K by the first transaction (5..11 ahead, 5..7 in the transaction, 5..8 in the
  // key window); 13 (K, another payload) must be a conflict naming 5 and 14 (K, 5's bytes) dropped, whatever the
  // answer to the resend. With the same token DynamoDB answers the resend as committed. With a new one its fence
  // condition fails, so the attempt takes its own first chunk for another attempt's: 5 then holds no key in its
  // batch decision, and 13 and 14 must learn from the ledger (5's claim, the window's entry) that 5 holds K.
  const batch = () =>
    mskEvent([
      spec(5, 'add:sk', 'K'),
      ...range(6, 12).map((offset) => spec(offset, `add:s${offset}`, `k-${offset}`)),
      spec(13, 'add:other', 'K'),
      spec(14, 'add:sk', 'K'),
    ]);
  const cases = MODES.flatMap(([mode, overrides]) => [
    [`${mode}, the same token (an SDK retry)`, overrides, 'build', 'accepted'] as const,
    [`${mode}, a new token (seen as another attempt's move)`, overrides, 'initialize', 'refused'] as const,
  ]);
  it.each(cases)(
    '%s: the records after it are judged against the committed holder',
    async (_, overrides, step, answer) => {
      const settings = settingsFor({ maxTransactionItems: 8, ...overrides });
      const clock = new ManualClock();
      await fill(settings, clock);
      clock.advance(1_000);
      const { clients, seen } = resendFirstTransaction(step);
      const report = await createProcessor({ settings, clients, clock, transform: sizing }).processEvent(
        batch(),
      );
      expect(seen.resend).toBe(answer);
      expect(report.partitions[0]?.stagedOffset).toBe(14);
      expect(await staged(settings, 'output')).toEqual([...FILLED, ...range(5, 12)]);
      expect(await staged(settings, 'deadletter')).toEqual([13]);
      if (overrides.idempotencyScope === undefined) {
        expect((await claimOf(settings, 'K'))?.claimant).toBe('orders#0#5');
      }
    },
  );
});
