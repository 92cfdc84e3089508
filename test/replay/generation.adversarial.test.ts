/**
 * Adversarial interleavings of replay into a new generation (shared/replay/, the processor's replay mode, the
 * coordinator's switch, the readers' GenerationView). The property: for every record of a replayed range, readers
 * (readCommitted, eos query) show exactly one row-set — the old generation's before the manifest that switches,
 * the new one's from it on — nothing outside the ranges changes, the manifest log stays valid (eos verify), and
 * no crash or redelivery of any party breaks that.
 *
 * The `it.fails` cases assert the ideal where docs/operations.md states a replay limit (partition-scope keys
 * before the range; keyed state is the live output's). Real DynamoDB Local and S3 server; the coordinator runs its
 * real steps through the local state machine; the replay mapping is the processor in replay mode.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { type Clock, ManualClock, systemClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import type { Stream } from '../../shared/ledger/layout.ts';
import { createProcessor, type ProcessorHooks } from '../../shared/processor/processor.ts';
import { queryCommitted } from '../../shared/query/query.ts';
import { bucketSource } from '../../shared/query/sources.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { replayStatus, requestSwitch } from '../../shared/replay/replay.ts';
import { ReplayStore } from '../../shared/replay/store.ts';
import {
  MAX_REPLAY_PLAN_BYTES,
  MAX_REPLAY_RANGES,
  ReplayPlanError,
  type ReplayRange,
} from '../../shared/sink/generation-switch.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import {
  deadTag,
  expected,
  expectVerified,
  inRange,
  manifests,
  plan,
  readerView,
  replayTarget,
  switchTo,
  tagged,
  tagOf,
} from '../support/generations.ts';
import { crashAt } from '../support/hooks.ts';
import { ledgerView } from '../support/ledger.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvrp');
});

const orders = builtinTransform('orders');

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rvrp', { maxTransactionItems: 12, ...overrides });
}

async function checkpoint(settings: Settings, clients: AwsClients = res.clients, clock?: Clock) {
  const outcome = await createLocalCoordinator({
    settings,
    clients,
    ...(clock ? { clock } : {}),
  }).runCheckpoint();
  return outcome;
}

async function committed(settings: Settings, clock?: Clock): Promise<string> {
  const outcome = await checkpoint(settings, res.clients, clock);
  expect(['committed', 'empty']).toContain(outcome.status);
  return outcome.status;
}

function liveProcessor(settings: Settings, transform: Transform = orders) {
  return createProcessor({ settings, clients: res.clients, transform });
}

function replayer(settings: Settings, generation: number, transform?: Transform, hooks?: ProcessorHooks) {
  return createProcessor({
    settings: { ...settings, replayGeneration: generation },
    clients: res.clients,
    transform: transform ?? tagged(`g${generation}`),
    ...(hooks ? { hooks } : {}),
  });
}

/** What `eos query` shows, in the same form as {@link readerView}. */
async function queryView(settings: Settings, stream: Stream = 'output'): Promise<Record<string, string>> {
  const out: string[] = [];
  const column = stream === 'output' ? '"customerId"' : '"error"';
  await queryCommitted({
    source: bucketSource(res.clients.s3, settings.bucket, settings.pipelineId),
    pipeline: settings.pipelineId,
    stream,
    sql: `SELECT source."partition" AS p, source."offset" AS o, ${column} AS t FROM ${stream} ORDER BY 1, 2`,
    format: 'json',
    write: (text) => out.push(text),
  });
  const view: Record<string, string> = {};
  for (const line of out.join('').split('\n').filter(Boolean)) {
    const { p, o, t } = JSON.parse(line) as { p: number; o: number; t: string };
    const tag = stream === 'output' ? tagOf({ customerId: t }) : deadTag({ error: t });
    const id = `${p}@${o}`;
    view[id] = view[id] === undefined ? tag : `${view[id]}+${tag}`;
  }
  return view;
}

/**
 * Clients whose DynamoDB calls crash (InjectedCrashError, before the call) when `crash` says so, for as long as
 * `armed`: a crash between two writes of one coordinator step. The document clients share the client's middleware.
 */
function crashingClients(crash: (command: string, input: Record<string, unknown>) => boolean) {
  const clients = createAwsClients();
  const control = { armed: true, hits: 0 };
  clients.dynamodb.middlewareStack.add(
    (next, context) => async (args) => {
      if (control.armed && crash(context.commandName ?? '', args.input as Record<string, unknown>)) {
        control.hits++;
        throw new InjectedCrashError(`dynamodb ${context.commandName}`);
      }
      return next(args);
    },
    { step: 'build', name: 'replayCrash' },
  );
  return { clients, control };
}

const isMarkSwitched = (command: string, input: Record<string, unknown>) =>
  command === 'UpdateItemCommand' && input.UpdateExpression === 'SET switchedIn = :id';

/** Live: partition 0 (and more) offsets [0, count) with `orders`, committed. */
async function liveCommitted(
  settings: Settings,
  partitions: number[],
  count: number,
  extra: RecordSpec[] = [],
) {
  const input = [...partitions.flatMap((p) => orderRecords(p, 0, count)), ...extra].sort(
    (a, b) => a.partition - b.partition || a.offset - b.offset,
  );
  await liveProcessor(settings).processEvent(mskEvent(input));
  await committed(settings);
  return input;
}

/** The replay mapping: the partition from its start, in batches of `size`. */
async function replayAll(
  settings: Settings,
  generation: number,
  input: readonly RecordSpec[],
  size = 8,
  transform?: Transform,
) {
  const processor = replayer(settings, generation, transform);
  const max = Math.max(...input.map((r) => r.offset));
  for (let from = 0; from <= max; from += size) {
    const batch = input.filter((r) => r.offset >= from && r.offset < from + size);
    if (batch.length > 0) await processor.processEvent(mskEvent(batch));
  }
}

// Concurrent tests share the local parts: a generous timeout keeps a loaded machine from failing the slow ones.
describe.concurrent('replay into a new generation', { timeout: 150_000 }, () => {
  it('a commit that dies after the manifest, before the plan notes the switch or before COMMITTED, rolls forward to one switch', async () => {
    for (const crashPoint of ['before-mark-switched', 'before-committed'] as const) {
      const settings = settingsFor({ checkpointLeaseSeconds: 60 });
      const input = await liveCommitted(settings, [0], 20);
      await plan(res, settings, 5, 14);
      await replayAll(settings, 1, input);
      await switchTo(res, settings, 1);
      let switched = false;
      const { clients, control } = crashingClients((command, commandInput) => {
        if (crashPoint === 'before-mark-switched') return isMarkSwitched(command, commandInput);
        if (isMarkSwitched(command, commandInput)) switched = true;
        return switched && command === 'TransactWriteItemsCommand';
      });
      const clock = new ManualClock(Date.now());
      const crashed = await checkpoint(settings, clients, clock);
      expect(crashed.status, crashPoint).not.toBe('committed');
      expect(control.hits).toBeGreaterThan(0);
      control.armed = false;
      // The manifest is the switch: readers see it already, whole.
      const want = expected([0], 20, (_, o) => (inRange(5, 14)(o) ? 'g1' : 'v1'));
      expect(await readerView(res, settings), crashPoint).toEqual(want);
      // Another execution, once the lease ran out, rolls the checkpoint forward.
      clock.advance(61_000);
      expect(await committed(settings, clock), crashPoint).toBe('committed');
      expect(await committed(settings, clock), crashPoint).toBe('empty');
      const log = await manifests(res, settings);
      // Manifest 2 commits the replay's lane and switches; the roll-forward rewrote it, nothing else.
      expect(log.map((m) => (m.generations ?? []).map((g) => g.generation))).toEqual([[], [1]]);
      const [status] = await replayStatus(replayTarget(res, settings));
      expect(status!.plan.switchedIn).toBe(2);
      expect(await readerView(res, settings), crashPoint).toEqual(want);
      expect(await queryView(settings), crashPoint).toEqual(want);
      await expectVerified(res, settings);
    }
  });

  it('a crash after each coordinator step of the switching checkpoint (its result lost, the step retried) switches once', async () => {
    for (const step of ['begin', 'prepare', 'decide', 'promote', 'commit'] as const) {
      const settings = settingsFor();
      const input = await liveCommitted(settings, [0], 16);
      await plan(res, settings, 4, 11);
      await replayAll(settings, 1, input);
      await switchTo(res, settings, 1);
      let crashed = false;
      const outcome = await createLocalCoordinator({
        settings,
        clients: res.clients,
        hooks: {
          afterStep(reached) {
            if (reached !== step || crashed) return;
            crashed = true;
            throw new InjectedCrashError(`after ${step}`);
          },
        },
      }).runCheckpoint();
      expect(crashed, step).toBe(true);
      expect(outcome.status, step).toBe('committed');
      expect(await committed(settings), step).toBe('empty');
      const log = await manifests(res, settings);
      expect(log.map((m) => (m.generations ?? []).map((g) => g.generation))).toEqual([[], [1]]);
      expect(await readerView(res, settings), step).toEqual(
        expected([0], 16, (_, o) => (inRange(4, 11)(o) ? 'g1' : 'v1')),
      );
      await expectVerified(res, settings);
    }
  });

  it('an attempt that took the switch and aborted, or began before the switch was requested and aborted, is followed by one that switches once', async () => {
    for (const variant of ['switch-in-aborted-attempt', 'switch-requested-during-aborted-attempt'] as const) {
      const settings = settingsFor();
      const input = await liveCommitted(settings, [0], 20);
      await plan(res, settings, 0, 9);
      await replayAll(settings, 1, input);
      if (variant === 'switch-in-aborted-attempt') await switchTo(res, settings, 1);
      let failed = false;
      const aborted = await createLocalCoordinator({
        settings,
        clients: res.clients,
        hooks: {
          async beforeStep(step) {
            if (step !== 'prepare' || failed) return;
            failed = true;
            if (variant === 'switch-requested-during-aborted-attempt') await switchTo(res, settings, 1);
            throw new Error('prepare fails deterministically');
          },
        },
      }).runCheckpoint();
      expect(aborted.status, variant).toBe('aborted');
      expect(await readerView(res, settings), variant).toEqual(expected([0], 20, () => 'v1'));
      expect(await committed(settings), variant).toBe('committed');
      expect(await committed(settings), variant).toBe('empty');
      const log = await manifests(res, settings);
      expect(log.map((m) => (m.generations ?? []).map((g) => g.generation))).toEqual([[], [1]]);
      expect(await readerView(res, settings), variant).toEqual(
        expected([0], 20, (_, o) => (o <= 9 ? 'g1' : 'v1')),
      );
      await expectVerified(res, settings);
    }
  });

  it('two overlapping generations switched in either order or together: the later switch wins on the overlap, every record shown once, readCommitted and eos query agree', async () => {
    for (const order of ['g1-then-g2', 'g2-then-g1', 'together'] as const) {
      const settings = settingsFor();
      const input = await liveCommitted(settings, [0], 24);
      await plan(res, settings, 4, 13); // g1
      await plan(res, settings, 9, 18); // g2
      await replayAll(settings, 1, input);
      await replayAll(settings, 2, input);
      await committed(settings);
      if (order === 'together') {
        await switchTo(res, settings, 1);
        await switchTo(res, settings, 2);
        await committed(settings);
      } else {
        const [first, second] = order === 'g1-then-g2' ? [1, 2] : [2, 1];
        await switchTo(res, settings, first!);
        await committed(settings);
        await switchTo(res, settings, second!);
        await committed(settings);
      }
      // Together, the manifest lists them by generation, so g2 is applied last and wins the overlap.
      const overlapWinner = order === 'g2-then-g1' ? 'g1' : 'g2';
      const want = expected([0], 24, (_, o) => {
        if (o >= 9 && o <= 13) return overlapWinner;
        if (o >= 4 && o <= 13) return 'g1';
        if (o >= 9 && o <= 18) return 'g2';
        return 'v1';
      });
      expect(await readerView(res, settings), order).toEqual(want);
      expect(await queryView(settings), order).toEqual(want);
      await expectVerified(res, settings);
    }
  });

  it('a range ending at a missing offset is closed by the first record after it; a range ending at the last record needs none', async () => {
    const settings = settingsFor();
    // Partition 0 lacks offset 12 (compacted); partition 1 ends at 19.
    const input = [...orderRecords(0, 0, 20).filter((r) => r.offset !== 12), ...orderRecords(1, 0, 20)];
    await liveProcessor(settings).processEvent(mskEvent(input));
    await committed(settings);
    const g1 = await plan(res, settings, 6, 12, [0]);
    expect(g1.ranges).toEqual([{ lane: 'orders', partition: 0, from: 6, to: 12 }]);
    const g2 = await plan(res, settings, 10, undefined, [1]);
    expect(g2.ranges).toEqual([{ lane: 'orders', partition: 1, from: 10, to: 19 }]);
    await switchTo(res, settings, 1);
    await switchTo(res, settings, 2);
    // The replay mappings deliver everything up to the range's end first: no switch yet for g1 (12 is not
    // reached until 13 is delivered), g2's switch as soon as 19 is staged.
    await replayer(settings, 1).processEvent(mskEvent(input.filter((r) => r.offset <= 11)));
    await replayer(settings, 2).processEvent(mskEvent(input.filter((r) => r.offset <= 19)));
    await committed(settings);
    expect(await readerView(res, settings)).toEqual({
      ...expected([0], 20, (_, o) => (o === 12 ? undefined : 'v1')),
      ...expected([1], 20, (_, o) => (o >= 10 ? 'g2' : 'v1')),
    });
    await replayer(settings, 1).processEvent(mskEvent(input.filter((r) => r.partition === 0)));
    await committed(settings);
    const [s1] = await replayStatus(replayTarget(res, settings));
    expect(s1!.ranges[0]!.stagedOffset).toBe(13);
    const want = {
      ...expected([0], 20, (_, o) => (o === 12 ? undefined : inRange(6, 12)(o) ? 'g1' : 'v1')),
      ...expected([1], 20, (_, o) => (o >= 10 ? 'g2' : 'v1')),
    };
    expect(await readerView(res, settings)).toEqual(want);
    expect(await queryView(settings)).toEqual(want);
    await expectVerified(res, settings);
  });

  it('a replay batch delivered twice concurrently, and a stale container after a crash, stage each record once', async () => {
    const settings = settingsFor({ claimWrite: 'in-transaction' });
    const input = await liveCommitted(settings, [0, 1], 24);
    await plan(res, settings, 3, 17);
    await switchTo(res, settings, 1);
    const batch = (from: number, to: number) => input.filter((r) => r.offset >= from && r.offset <= to);
    // Container A crashes after its first transaction on batch 1 (its cache keeps the fence it wrote).
    const a = replayer(settings, 1, undefined, crashAt('after-transaction'));
    await expect(a.processEvent(mskEvent(batch(0, 9)))).rejects.toBeInstanceOf(InjectedCrashError);
    // The redelivery goes to B and C at once (a zombie and its retry).
    const b = replayer(settings, 1);
    const c = replayer(settings, 1);
    await Promise.all([b.processEvent(mskEvent(batch(0, 9))), c.processEvent(mskEvent(batch(0, 9)))]);
    await Promise.all([b.processEvent(mskEvent(batch(10, 15))), c.processEvent(mskEvent(batch(10, 15)))]);
    // Stale A gets an old batch again, then the batch past the range, concurrently with B.
    await a.processEvent(mskEvent(batch(0, 9)));
    await Promise.all([a.processEvent(mskEvent(batch(16, 23))), b.processEvent(mskEvent(batch(16, 23)))]);
    // And a later batch, after the range's closing record: nothing more is staged.
    await c.processEvent(mskEvent(batch(20, 23)));
    await committed(settings);
    // Observation: the lanes' fences end at 20, not 18 — stale C (its cached fence 15 < to) staged offset 20 as a
    // second inert record, contrary to slice.ts's "everything after that first record stages nothing". No rows.
    const statuses = await replayStatus(replayTarget(res, settings));
    for (const r of statuses[0]!.ranges) expect(r.stagedOffset).toBeGreaterThanOrEqual(18);
    const want = expected([0, 1], 24, (_, o) => (inRange(3, 17)(o) ? 'g1' : 'v1'));
    expect(await readerView(res, settings)).toEqual(want);
    await expectVerified(res, settings);
  });

  it('an epoch opened mid-replay fails the replay loudly; the requested switch never happens and readers keep the old generation', async () => {
    const settings = settingsFor();
    const input = await liveCommitted(settings, [0], 20);
    await plan(res, settings, 2, 15);
    await switchTo(res, settings, 1);
    await replayer(settings, 1).processEvent(mskEvent(input.filter((r) => r.offset < 10)));
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, settings.pipelineId, systemClock);
    expect((await epochs.startNew('orders', 0, { force: true })).kind).toBe('opened');
    await expect(replayer(settings, 1).processEvent(mskEvent(input))).rejects.toThrow(
      /in orders~1 now \(a new epoch opened\)/,
    );
    await committed(settings);
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 20, () => 'v1'));
    expect((await manifests(res, settings)).every((m) => m.generations === undefined)).toBe(true);
    await expectVerified(res, settings);
  });

  for (const claimWrite of ['ahead', 'in-transaction'] as const) {
    it(`a record of the range whose key the live output claimed before the range is a duplicate (same payload) or a conflict (another) in the new generation too`, async () => {
      const settings = settingsFor({ claimWrite });
      // Offset 15 re-sends offset 3 (same key, value and idempotency key): the live pipeline drops it (P4).
      const resend: RecordSpec = { ...orderRecords(0, 3, 1)[0]!, offset: 15, key: 'k-3' };
      const input = [...orderRecords(0, 0, 15), resend, ...orderRecords(0, 16, 4)];
      await liveProcessor(settings).processEvent(mskEvent(input));
      await committed(settings);
      const liveIds = (await readerRows(settings)).map((r) => r.orderId);
      expect(liveIds.filter((id) => id === 'p0-o3')).toHaveLength(1);
      await plan(res, settings, 10, 19);
      // Generation 1 changes offset 16's payload but keeps offset 4's key: a conflict with the live claim.
      const changed = input.map((r) =>
        r.offset === 16 ? { ...r, headers: { 'idempotency-key': 'p0-o4' } } : r,
      );
      await replayAll(settings, 1, changed);
      await switchTo(res, settings, 1);
      await committed(settings);
      const ids = (await readerRows(settings)).map((r) => r.orderId);
      // Without the guard: p0-o3 twice (offset 3 from the live generation, offset 15 from generation 1).
      expect(ids.filter((id) => id === 'p0-o3')).toHaveLength(1);
      expect(ids.filter((id) => id === 'p0-o16')).toHaveLength(0);
      const dead = await readerView(res, settings, 'deadletter');
      expect(Object.keys(dead)).toEqual(['0@16']);
    });
  }

  it.fails('with idempotencyScope partition, a duplicate of a key the live key window held before the range is output by the new generation: the key twice after the switch (a limit docs/operations.md states)', async () => {
    const settings = settingsFor({ idempotencyScope: 'partition' });
    const resend: RecordSpec = { ...orderRecords(0, 3, 1)[0]!, offset: 15, key: 'k-3' };
    const input = [...orderRecords(0, 0, 15), resend, ...orderRecords(0, 16, 4)];
    await liveProcessor(settings).processEvent(mskEvent(input));
    await committed(settings);
    expect((await readerRows(settings)).filter((r) => r.orderId === 'p0-o3')).toHaveLength(1);
    await plan(res, settings, 10, 19);
    await replayAll(settings, 1, input);
    await switchTo(res, settings, 1);
    await committed(settings);
    expect((await readerRows(settings)).filter((r) => r.orderId === 'p0-o3')).toHaveLength(1);
  });

  it('duplicates inside the range stay dropped in the new generation (global and partition scope, claims ahead and in the transaction)', async () => {
    const variants: Array<Partial<SettingsInput>> = [
      {},
      { claimWrite: 'in-transaction' },
      { idempotencyScope: 'partition' },
    ];
    for (const overrides of variants) {
      const settings = settingsFor(overrides);
      // Offset 14 re-sends offset 12 of its partition, offset 16 of partition 1 re-sends its offset 11.
      const input = [
        ...orderRecords(0, 0, 14),
        { ...orderRecords(0, 12, 1)[0]!, offset: 14, key: 'k-12' },
        ...orderRecords(0, 15, 5),
        ...orderRecords(1, 0, 16),
        { ...orderRecords(1, 11, 1)[0]!, offset: 16, key: 'k-11' },
        ...orderRecords(1, 17, 3),
      ];
      await liveProcessor(settings).processEvent(mskEvent(input));
      await committed(settings);
      const before = await readerView(res, settings);
      await plan(res, settings, 10, 17);
      await replayAll(settings, 1, input);
      await switchTo(res, settings, 1);
      await committed(settings);
      const after = await readerView(res, settings);
      // Exactly the live generation's offsets, with the range's from generation 1.
      const relabelled = Object.fromEntries(
        Object.entries(before).map(([id, tag]) => [
          id,
          inRange(10, 17)(Number(id.split('@')[1])) ? 'g1' : tag,
        ]),
      );
      expect(after, JSON.stringify(overrides)).toEqual(relabelled);
      expect([before['0@14'], before['1@16']], JSON.stringify(overrides)).toEqual([undefined, undefined]);
      await expectVerified(res, settings);
    }
  });

  it('live files straddling the range edges are filtered row by row: readCommitted, eos query and eos verify agree (NDJSON; Parquet in day folders)', async () => {
    const variants: Array<Partial<SettingsInput>> = [
      {},
      { outputFormat: 'parquet', timePartitioning: 'day', outputColumns: [...orderDefinition.columns] },
    ];
    for (const overrides of variants) {
      const settings = settingsFor(overrides);
      // One live batch: its final object spans offsets 0..29 of each partition.
      const input = await liveCommitted(settings, [0, 1], 30);
      await plan(res, settings, 7, 22, [0]);
      await replayAll(settings, 1, input, 10);
      await switchTo(res, settings, 1);
      await committed(settings);
      const want = expected([0, 1], 30, (p, o) => (p === 0 && inRange(7, 22)(o) ? 'g1' : 'v1'));
      expect(await readerView(res, settings), JSON.stringify(overrides)).toEqual(want);
      expect(await queryView(settings), JSON.stringify(overrides)).toEqual(want);
      await expectVerified(res, settings);
    }
  });

  it('dead letters of the range follow the switch: the live generation’s until it, the new generation’s from it on (readCommitted and eos query)', async () => {
    const settings = settingsFor();
    const input = orderRecords(0, 0, 20);
    // Live rejects offsets ending in 7; generation 1 accepts those and rejects offsets ending in 3.
    await liveProcessor(
      settings,
      tagged('v1', (o) => o % 10 === 7),
    ).processEvent(mskEvent(input));
    await committed(settings);
    await plan(res, settings, 5, 14);
    await replayAll(
      settings,
      1,
      input,
      8,
      tagged('g1', (o) => o % 10 === 3),
    );
    await committed(settings);
    const deadBefore = { '0@7': 'v1-dl', '0@17': 'v1-dl' };
    expect(await readerView(res, settings, 'deadletter')).toEqual(deadBefore);
    expect(await queryView(settings, 'deadletter')).toEqual(deadBefore);
    await switchTo(res, settings, 1);
    await committed(settings);
    const deadAfter = { '0@13': 'g1-dl', '0@17': 'v1-dl' };
    expect(await readerView(res, settings, 'deadletter')).toEqual(deadAfter);
    expect(await queryView(settings, 'deadletter')).toEqual(deadAfter);
    const want = expected([0], 20, (_, o) => {
      if (inRange(5, 14)(o)) return o === 13 ? undefined : 'g1';
      return o % 10 === 7 ? undefined : 'v1';
    });
    expect(await readerView(res, settings)).toEqual(want);
    expect(await queryView(settings)).toEqual(want);
    await expectVerified(res, settings);
  });

  it('eos redrive leaves the dead letters of a generation no manifest switched to, and applies no keyed state for them', async () => {
    const settings = settingsFor();
    const input = orderRecords(0, 0, 20);
    // The live generation accepts every record: each one's state delta is applied once (count 20 in total).
    await liveProcessor(settings).processEvent(mskEvent(input));
    await committed(settings);
    expect(await stateCount(settings)).toBe(20);
    // Generation 1 (never switched to) dead-letters offsets 3 and 13.
    await plan(res, settings, 0, 19);
    await replayAll(
      settings,
      1,
      input,
      8,
      tagged('g1', (o) => o % 10 === 3),
    );
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 20, () => 'v1'));
    // The operator redrives the dead letters readers show: there are none.
    expect(await readerView(res, settings, 'deadletter')).toEqual({});
    await redrive({ settings, clients: res.clients, transform: orders });
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 20, () => 'v1'));
    // Without the guard: 22 (generation 1's dead letters were redriven in orders~g1~r1 with their state deltas).
    expect(await stateCount(settings)).toBe(20);
  });

  it('eos redrive after the switch: each record of the range is output once, from the generation shown (a live dead letter redriven inside the range stays hidden)', async () => {
    const settings = settingsFor();
    const input = orderRecords(0, 0, 20);
    // Live rejects 7 and 17; generation 1 (range 0..14) accepts 7 and rejects 3 and 13.
    await liveProcessor(
      settings,
      tagged('v1', (o) => o % 10 === 7),
    ).processEvent(mskEvent(input));
    await committed(settings);
    await plan(res, settings, 0, 14);
    await replayAll(
      settings,
      1,
      input,
      8,
      tagged('g1', (o) => o % 10 === 3),
    );
    await switchTo(res, settings, 1);
    await committed(settings);
    for (let i = 0; i < 3; i++) {
      await redrive({ settings, clients: res.clients, transform: tagged('fix') });
      await committed(settings);
    }
    const want = expected([0], 20, (_, o) => {
      if (o === 3 || o === 13 || o === 17) return 'fix';
      return inRange(0, 14)(o) ? 'g1' : 'v1';
    });
    expect(await readerView(res, settings)).toEqual(want);
    expect(await queryView(settings)).toEqual(want);
    await expectVerified(res, settings);
  });

  it.fails("records the live generation dead-lettered and the new generation outputs never get their keyed state (a replay limit docs/operations.md states: keyed state is the live output's)", async () => {
    const settings = settingsFor();
    const input = orderRecords(0, 0, 20);
    await liveProcessor(
      settings,
      tagged('v1', (o) => o % 10 === 7),
    ).processEvent(mskEvent(input));
    await committed(settings);
    expect(await stateCount(settings)).toBe(18);
    await plan(res, settings, 0, 19);
    await replayAll(settings, 1, input);
    await switchTo(res, settings, 1);
    await committed(settings);
    expect(Object.keys(await readerView(res, settings))).toHaveLength(20);
    // What happens: 18 — the 20 rows shown include offsets 7 and 17, whose deltas nothing applied.
    expect(await stateCount(settings)).toBe(20);
  });

  it('a replay mapping whose first record comes after the range start fails loudly; nothing is staged, no switch, readers keep the old generation', async () => {
    const settings = settingsFor();
    const input = await liveCommitted(settings, [0], 20);
    await plan(res, settings, 0, 14);
    // The replay mapping starts at offset 6 (its AT_TIMESTAMP position, or the log start after retention).
    // Without the guard: staged from 6, switched with the lane's fence at 15, offsets 0..5 shown by no generation.
    await expect(
      replayAll(
        settings,
        1,
        input.filter((r) => r.offset >= 6),
      ),
    ).rejects.toThrow(
      /first record delivered of orders-0 is at offset 6, after the range's start 0: .*plan the replay again from offset 6/,
    );
    await requestSwitch(replayTarget(res, settings), 1, systemClock);
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 20, () => 'v1'));
    const [status] = await replayStatus(replayTarget(res, settings));
    expect(status).toMatchObject({ phase: 'switch-requested', staged: false });
    // A mapping that starts at or before the range start is fine.
    await replayAll(settings, 1, input);
    await committed(settings);
    expect((await replayStatus(replayTarget(res, settings)))[0]).toMatchObject({ phase: 'switched' });
  });

  it('a plan too large for one item is refused by its bytes with a ReplayPlanError; the largest accepted one is written', async () => {
    const settings = settingsFor();
    const lane = 't'.repeat(200);
    const ranges = (count: number): ReplayRange[] =>
      Array.from({ length: count }, (_, partition) => ({ lane, partition, from: 1_000_000, to: 2_000_000 }));
    const store = new ReplayStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    // Without the guard: a raw ValidationException (item size has exceeded the maximum allowed size) from DynamoDB.
    await expect(store.create(1, ranges(MAX_REPLAY_RANGES), Date.now())).rejects.toThrow(
      /ranges take \d+ bytes, at most 204800: replay fewer partitions/,
    );
    await expect(store.create(1, ranges(MAX_REPLAY_RANGES), Date.now())).rejects.toBeInstanceOf(
      ReplayPlanError,
    );
    // The most ranges whose JSON fits (binary search: the size grows with the count).
    let [fits, over] = [1, MAX_REPLAY_RANGES];
    while (over - fits > 1) {
      const mid = Math.floor((fits + over) / 2);
      if (Buffer.byteLength(JSON.stringify(ranges(mid))) <= MAX_REPLAY_PLAN_BYTES) fits = mid;
      else over = mid;
    }
    expect(await store.create(1, ranges(fits), Date.now())).toBe(true);
    expect((await store.read(1))?.ranges).toHaveLength(fits);
  });

  it('a processor’s own writes to a generation lane (fence, staged objects) without an operator’s plan and switch are committed but never shown, and cannot name a switch', async () => {
    const settings = settingsFor();
    await liveCommitted(settings, [0], 10);
    // What a compromised processor can write: a generation lane's staged objects, entries and fence.
    await stageFiles(res.clients, settings, [
      {
        topic: 'orders~g1',
        partition: 0,
        firstOffset: 0,
        lastOffset: 9,
        rows: Array.from({ length: 10 }, (_, o) => ({
          orderId: `forged-${o}`,
          customerId: 'forged',
          source: { topic: 'orders', partition: 0, offset: o },
        })),
      },
    ]);
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 10, () => 'v1'));
    // A plan for generation 1 whose switch no operator requested: still nothing switches.
    await new ReplayStore(res.clients.dynamodb, settings.ledgerTable, settings.pipelineId).create(
      1,
      [{ lane: 'orders', partition: 0, from: 0, to: 9 }],
      Date.now(),
    );
    await committed(settings);
    expect(await readerView(res, settings)).toEqual(expected([0], 10, () => 'v1'));
    expect(await queryView(settings)).toEqual(expected([0], 10, () => 'v1'));
    expect((await manifests(res, settings)).every((m) => m.generations === undefined)).toBe(true);
    await expectVerified(res, settings);
  });
});

/** Committed output rows (readCommitted). */
async function readerRows(settings: Settings): Promise<Array<Record<string, unknown>>> {
  const rows: Array<Record<string, unknown>> = [];
  for await (const { row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  }))
    rows.push(row);
  return rows;
}

/** The keyed state's total `count` over every (customer, currency). */
async function stateCount(settings: Settings): Promise<number> {
  const view = await ledgerView(res.clients, res.table, settings.pipelineId);
  return Object.values(view.state).reduce((sum, item) => sum + Number(item.count ?? 0), 0);
}
