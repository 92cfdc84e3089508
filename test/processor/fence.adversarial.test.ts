/**
 * Adversarial interleavings of the processor's starting fence (L2, P2, P4): a cold container whose first fence
 * read is judged by whether the fence moved while it ran (`updatedAt >= startedAt`). Same-generation zombies must
 * be acknowledged without effect; batches of another generation must never be; a false stop must never let
 * `eos epoch --start-new` stage an in-flight batch twice. Real DynamoDB Local and S3 server, the real processor
 * and `eos epoch`. Suspicions a test confirms are `it.fails`, with the interleaving and what goes wrong.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { clockOrigin, ManualClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { InjectedCrashError, OffsetsWentBackwardsError } from '../../shared/errors.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import {
  container,
  fenceOf,
  heldTransform,
  outcomeOf,
  stageBatches,
  startNewEpoch,
} from '../support/cold-container.ts';
import { crashAt } from '../support/hooks.ts';
import { stagedOutputCounts } from '../support/ledger.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('fadv');
});

afterEach(() => {
  // `eos epoch` sets the exit code of a refused switch; the test runner must not inherit it.
  process.exitCode = undefined;
});

/** Output rows per order id of generation `prefix` at offsets [from, from + count). */
function expectedRows(prefix: string, from: number, count: number): Record<string, number> {
  return Object.fromEntries(Array.from({ length: count }, (_, i) => [`${prefix}-o${from + i}`, 1]));
}

async function outputCounts(settings: Settings): Promise<Record<string, number>> {
  return stagedOutputCounts(res.clients, res.table, res.bucket, settings.pipelineId);
}

/**
 * The event source mapping's answer to a failed invocation: the same batch again, in a fresh container, a second
 * later on `clock` (real time passing), while the failure is an unproven redelivery (at most ten times).
 */
async function retriedByTheMapping(
  settings: Settings,
  clock: ManualClock,
  records: Parameters<typeof mskEvent>[0],
): Promise<string[]> {
  const outcomes: string[] = [];
  do {
    clock.advance(1_000);
    outcomes.push(await outcomeOf(container(res, settings, clock).processEvent(mskEvent(records))));
  } while (outcomes.at(-1) === 'unproven' && outcomes.length < 10);
  return outcomes;
}

describe('the starting fence of a cold container against a fence that moved while it ran', () => {
  it('a consumer group reset (the same records again) delivered while a zombie stages the partition loses nothing and stages nothing twice', async () => {
    const settings = settingsIn(res, 'fadv');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 80);
    // Z: a cold container given 0..9 again (the group was reset), stalled before its first read.
    const held = heldTransform();
    clock.advance(1_000);
    const zRun = container(res, settings, clock, { transform: held.transform }).processEvent(
      mskEvent(orderRecords(0, 0, 10)),
    );
    await held.reached;
    // Meanwhile a zombie of the same generation stages 90..99: the fence moves while Z runs.
    await stageBatches(res, settings, clock, 90, 90);
    clock.advance(1_000);
    held.release();
    // Z's batch lies below every remembered batch start: nothing proves it a redelivery while the fence moved, so
    // Z acknowledges nothing; the mapping's retry judges it as delivered, a reset deeper than the remembered starts
    // (rule 4: loud, never silent).
    expect(await outcomeOf(zRun)).toBe('unproven');
    expect(await retriedByTheMapping(settings, clock, orderRecords(0, 0, 10))).toEqual(['stopped']);
    expect(await outputCounts(settings)).toEqual(expectedRows('p0', 0, 100));
  });

  it('a zombie whose batch reaches past the fence stages exactly the records above it, once', async () => {
    const settings = settingsIn(res, 'fadv');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 80);
    // Z holds 90..109, stalled; the mapping's retry (a split half) stages 90..99 meanwhile.
    const held = heldTransform();
    clock.advance(1_000);
    const zRun = container(res, settings, clock, { transform: held.transform }).processEvent(
      mskEvent(orderRecords(0, 90, 20)),
    );
    await held.reached;
    await stageBatches(res, settings, clock, 90, 90);
    clock.advance(1_000);
    held.release();
    const report = await zRun;
    expect(report.partitions[0]).toMatchObject({ duplicatesByOffset: 10, stagedRows: 10, stagedOffset: 109 });
    // The mapping then delivers the other half: a redelivery.
    clock.advance(1_000);
    const next = await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 100, 10)));
    expect(next.partitions[0]).toMatchObject({ duplicatesByOffset: 10, chunks: 0 });
    expect(await outputCounts(settings)).toEqual(expectedRows('p0', 0, 110));
  });

  // CONFIRMED. Interleaving: old-generation batches 0..89 are staged; the topic is deleted and recreated, and the
  // mapping delivers the NEW generation's 0..9 to a cold container Z, which stalls (a slow prepare); meanwhile a
  // zombie of the old generation, which held 90..99 across the recreation, stages them (fence 99, updatedAt after
  // Z began). Z's first read finds the fence moved while it ran, so it is judged as a zombie ('moved': rules 4 and
  // 5 skipped); its batch holds no fingerprinted offset (90, 99 and the remembered starts 20..90 are all above 9),
  // so it is acknowledged as a redelivery: the new generation's 0..9 are dropped without a stop, and the mapping
  // moves on (the next batch 10..19 stops the partition, and the epoch an operator opens then starts at 10). A first
  // read judged as delivered (rule 4) stops Z instead: this test passes with that rule (checked at 3b70d3f).
  it('records of a recreated topic delivered while a zombie of the old generation stages are never dropped as a redelivery', async () => {
    const settings = settingsIn(res, 'fadv');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 80);
    const held = heldTransform();
    clock.advance(1_000);
    const zRun = container(res, settings, clock, { transform: held.transform }).processEvent(
      mskEvent(orderRecords(0, 0, 10, 'gen2')),
    );
    await held.reached;
    await stageBatches(res, settings, clock, 90, 90);
    clock.advance(1_000);
    held.release();
    // Z acknowledges nothing (no fingerprint proves a redelivery); the mapping retries the batch, and the retry,
    // judging it as delivered, stops the partition. Either way the new records are kept: a stop (retried, then
    // staged in a new epoch) or staging them.
    const outcomes = [await outcomeOf(zRun)];
    if (outcomes[0] === 'unproven')
      outcomes.push(...(await retriedByTheMapping(settings, clock, orderRecords(0, 0, 10, 'gen2'))));
    const outcome = outcomes.at(-1);
    const counts = await outputCounts(settings);
    const kept =
      outcome === 'stopped' || Object.keys(expectedRows('gen2', 0, 10)).every((id) => counts[id] === 1);
    expect({ outcomes, kept }).toEqual({ outcomes: ['unproven', 'stopped'], kept: true });
    expect((await fenceOf(res, settings)).stop).toMatchObject({ fence: 99, firstOffset: 0, lastOffset: 9 });
  });

  // CONFIRMED (the processor's doc names it as a residual of clock skew; it is a silent loss). Interleaving: the
  // containers that staged 0..99 run a clock 5 s ahead of the cold container Z that receives the recreated topic's
  // 0..9 two seconds (real time) after the last staging. Nothing runs concurrently, yet the fence's updatedAt (the
  // stagers' clock) is at or after Z's startedAt (Z's clock): Z judges its batch as a zombie's, finds no
  // fingerprinted offset in it and acknowledges it as a redelivery. The new generation's 0..9 are lost; with the
  // clocks agreeing the same batch stops the partition (the next test), and so does a first read judged as
  // delivered whatever the clocks say (this test passes at 3b70d3f).
  it('a batch of a recreated topic is never acknowledged as a redelivery when the staging container ran a clock ahead', async () => {
    const settings = settingsIn(res, 'fadv');
    const stagers = new ManualClock(clockOrigin() + 5_000);
    await stageBatches(res, settings, stagers, 0, 90);
    // Z's clock: 2 s after the last staging in real time, 5 s behind the stagers' clock.
    const z = new ManualClock(clockOrigin() + 10 * 1_000 + 2_000);
    const first = await outcomeOf(
      container(res, settings, z).processEvent(mskEvent(orderRecords(0, 0, 10, 'gen2'))),
    );
    expect(first).toBe('unproven');
    // The mapping retries until real time passes the skew (the last staging, 15 s on the stagers' clock), then the
    // batch is judged as delivered and stops the partition: bounded, nothing lost.
    const retries = await retriedByTheMapping(settings, z, orderRecords(0, 0, 10, 'gen2'));
    expect(retries).toEqual(['unproven', 'unproven', 'unproven', 'stopped']);
  });

  it('with agreeing clocks, a batch of a recreated topic delivered two seconds after the last staging stops the partition', async () => {
    const settings = settingsIn(res, 'fadv');
    const clock = new ManualClock();
    await stageBatches(res, settings, clock, 0, 90);
    clock.advance(2_000);
    await expect(
      container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 0, 10, 'gen2'))),
    ).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    expect((await fenceOf(res, settings)).stop).toMatchObject({ fence: 99, firstOffset: 0, lastOffset: 9 });
  });

  // CONFIRMED (the other side of the same clock-skew residual, and here it costs exactly-once). Interleaving,
  // offset-only dedupe (idempotencyKey none): a cold zombie Z holding 0..9 runs a clock 60 s ahead of the others and
  // stalls in prepare. The mapping's retry and later batches stage 0..99; the invocation that staged 90..99 has not
  // returned yet. Z wakes: the fence's updatedAt (the stagers' clock) is before Z's startedAt, so Z judges its batch
  // as delivered, rule 4 says backwards, and Z writes a stop record for fence 99. `eos epoch --start-new` sees a
  // stop for the current fence and opens epoch 1. The invocation of 90..99 then fails before returning (its
  // acknowledgement is lost), the mapping retries 90..99, and the retry stages them again as new records of epoch 1.
  it('a zombie on a container whose clock runs ahead never lets eos epoch --start-new stage an in-flight batch twice', async () => {
    const settings = settingsIn(res, 'fadv', { idempotencyKey: 'none' });
    const clock = new ManualClock();
    const held = heldTransform();
    const zClock = new ManualClock(clockOrigin() + 60_000);
    const zRun = container(res, settings, zClock, { transform: held.transform }).processEvent(
      mskEvent(orderRecords(0, 0, 10)),
    );
    await held.reached;
    await stageBatches(res, settings, clock, 0, 80);
    clock.advance(1_000);
    // 90..99 staged; its invocation crashes before returning, so the mapping will deliver it again.
    await expect(
      container(res, settings, clock, { hooks: crashAt('before-return') }).processEvent(
        mskEvent(orderRecords(0, 90, 10)),
      ),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    zClock.advance(1_000);
    held.release();
    expect(await outcomeOf(zRun)).toBe('stopped');
    // Z's stop was seen by Z alone: the switch is refused until a retry of the same batch confirms it.
    const epoch = await startNewEpoch(res, settings);
    expect(epoch.switched?.[0]?.outcome).toMatchObject({ kind: 'unconfirmed' });
    if (epoch.switched?.[0]?.outcome.kind === 'opened') {
      clock.advance(1_000);
      await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 90, 10)));
    }
    expect(await outputCounts(settings)).toEqual(expectedRows('p0', 0, 100));
  });

  it('a zombie on a container whose clock runs ahead, with idempotency keys (global scope), leaves each record staged once', async () => {
    const settings = settingsIn(res, 'fadv');
    const clock = new ManualClock();
    const held = heldTransform();
    const zClock = new ManualClock(clockOrigin() + 60_000);
    const zRun = container(res, settings, zClock, { transform: held.transform }).processEvent(
      mskEvent(orderRecords(0, 0, 10)),
    );
    await held.reached;
    await stageBatches(res, settings, clock, 0, 80);
    clock.advance(1_000);
    await expect(
      container(res, settings, clock, { hooks: crashAt('before-return') }).processEvent(
        mskEvent(orderRecords(0, 90, 10)),
      ),
    ).rejects.toBeInstanceOf(InjectedCrashError);
    zClock.advance(1_000);
    held.release();
    await expect(zRun).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    // The zombie's stop is seen once: an operator's switch without --force is refused (and with it, the keys the
    // old epoch claimed would drop the retry's records as duplicates).
    const epoch = await startNewEpoch(res, settings);
    expect(epoch.switched?.[0]?.outcome).toMatchObject({ kind: 'unconfirmed' });
    clock.advance(1_000);
    const retry = await container(res, settings, clock).processEvent(mskEvent(orderRecords(0, 90, 10)));
    expect(retry.partitions[0]).toMatchObject({ duplicatesByOffset: 10, stagedRows: 0 });
    expect(await outputCounts(settings)).toEqual(expectedRows('p0', 0, 100));
  });
});
