/**
 * Replay switches of every shape published to the Iceberg table (C8): after each published checkpoint icebird's
 * read of the table equals the committed reader's rows as a multiset, and the table audit (`eos verify
 * --iceberg-table`) passes it. Shapes: two overlapping switches in one checkpoint, overlapping switches in either
 * order, a switch nested in an earlier one (rows of the first generation's files deleted by position), ranges
 * whose edges are files' first and last offsets, a one-row range and a one-row file, records of several output
 * rows and dead letters inside a range, and a switch checkpoint whose own live file straddles its range's end.
 * Against DynamoDB Local and the local S3 server; the replay runs through the processor in replay mode and the
 * local state machine.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo, tagged } from '../support/generations.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import {
  auditReplayTable as audit,
  commitCheckpoint,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
  summaryOf,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubshape');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** Commits the next checkpoint, publishes it, and checks the oracle and the audit; the rows shown. */
async function commitPublishCheck(s: ReplaySetup, what: string): Promise<string[]> {
  await commitCheckpoint(s);
  const id = (await s.parts.snapshots.readMark()).upTo + 1;
  const out = await publishCheckpoint(s.parts, id);
  expect(out.publishedUpTo, what).toBe(id);
  const rows = await expectTableFollows(s, what);
  const result = await audit(s);
  expect(result.violations, what).toEqual([]);
  expect(result.ok, what).toBe(true);
  return rows;
}

/** `input` through the processor with `transform` (replay mode for `generation`), `size` offsets an event. */
async function deliverWith(
  s: ReplaySetup,
  input: readonly RecordSpec[],
  transform: Transform,
  generation?: number,
  size = 5,
): Promise<void> {
  const processor = createProcessor({
    settings: generation === undefined ? s.settings : { ...s.settings, replayGeneration: generation },
    clients: s.res.clients,
    transform,
  });
  const offsets = input.map((r) => r.offset);
  for (let from = Math.min(...offsets); from <= Math.max(...offsets); from += size) {
    const batch = input.filter((r) => r.offset >= from && r.offset < from + size);
    if (batch.length > 0) await processor.processEvent(mskEvent(batch));
  }
}

/** `inner`, each ok record giving `copies` rows (several output rows share one `source.offset`). */
function repeated(inner: Transform, copies: number): Transform {
  return {
    name: `${inner.name}-x${copies}`,
    apply(record: DecodedRecord) {
      const result = inner.apply(record);
      if (result.kind !== 'ok') return result;
      return { ...result, rows: result.rows.flatMap((row) => Array.from({ length: copies }, () => row)) };
    },
  };
}

const count = (rows: readonly string[], suffix: string) => rows.filter((row) => row.endsWith(suffix)).length;

describe('replay switches of every shape published to the Iceberg table', { timeout: 180_000 }, () => {
  it('two overlapping switches committed by one checkpoint: the later wins, the earlier generation keeps only the rows it shows', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await commitPublishCheck(s, 'the live output');
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 4 });
    await plan(res, s.settings, 8, 17);
    await deliver(s, records(0, 20), { generation: 2, size: 3 });
    await switchTo(res, s.settings, 1);
    await switchTo(res, s.settings, 2);
    const rows = await commitPublishCheck(s, 'both switches in one checkpoint');
    expect((await s.parts.manifests.read(2))?.generations).toHaveLength(2);
    // Offsets 3..7 of generation 1, 8..17 of generation 2, the rest live; two partitions.
    expect([count(rows, ':g1'), count(rows, ':g2'), count(rows, ':v1')]).toEqual([10, 20, 10]);
    expect((await summaryOf(s, 2))?.operation).toBe('overwrite');
  });

  it('overlapping switches in the reverse order: the later switch of the earlier generation wins on its range', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await commitPublishCheck(s, 'the live output');
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 4 });
    await plan(res, s.settings, 8, 17);
    await deliver(s, records(0, 20), { generation: 2, size: 3 });
    await switchTo(res, s.settings, 2);
    const first = await commitPublishCheck(s, 'generation 2 switched first');
    expect([count(first, ':g1'), count(first, ':g2'), count(first, ':v1')]).toEqual([0, 20, 20]);
    await switchTo(res, s.settings, 1);
    const second = await commitPublishCheck(s, 'generation 1 switched after it');
    // 3..14 of generation 1, 15..17 of generation 2.
    expect([count(second, ':g1'), count(second, ':g2'), count(second, ':v1')]).toEqual([24, 6, 10]);
  });

  it('a switch nested in an earlier one deletes rows of the files the earlier switch added', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await commitPublishCheck(s, 'the live output');
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 20 });
    await switchTo(res, s.settings, 1);
    await commitPublishCheck(s, 'generation 1');
    await plan(res, s.settings, 6, 9);
    await deliver(s, records(0, 20), { generation: 2, size: 20 });
    await switchTo(res, s.settings, 2);
    const rows = await commitPublishCheck(s, 'generation 2 inside generation 1');
    expect([count(rows, ':g1'), count(rows, ':g2'), count(rows, ':v1')]).toEqual([16, 8, 16]);
    expect(await summaryOf(s, 3)).toMatchObject({ 'deleted-data-files': '0', 'added-position-deletes': '8' });
  });

  it('ranges on files’ edges remove whole files; a one-offset range deletes one row; a one-row file is removed whole', async () => {
    const s = replaySetup(res, 'pubshape');
    for (const from of [0, 5, 10, 15]) {
      await deliver(s, records(from, 5));
      await commitPublishCheck(s, `live ${from}..${from + 4}`);
    }
    await deliver(s, records(20, 1));
    await commitPublishCheck(s, 'a one-row file a partition');
    await plan(res, s.settings, 5, 9);
    await deliver(s, records(0, 21), { generation: 1, size: 5 });
    await switchTo(res, s.settings, 1);
    await commitPublishCheck(s, 'a range exactly one file');
    expect(await summaryOf(s, 6)).toMatchObject({
      'deleted-data-files': '2',
      'added-position-deletes': '0',
    });
    await plan(res, s.settings, 12, 12);
    await deliver(s, records(0, 21), { generation: 2, size: 5 });
    await switchTo(res, s.settings, 2);
    await commitPublishCheck(s, 'a one-offset range');
    expect(await summaryOf(s, 7)).toMatchObject({
      'deleted-data-files': '0',
      'added-position-deletes': '2',
    });
    await plan(res, s.settings, 20, 20);
    await deliver(s, records(0, 21), { generation: 3, size: 5 });
    await switchTo(res, s.settings, 3);
    const rows = await commitPublishCheck(s, 'a one-row file replaced');
    expect(await summaryOf(s, 8)).toMatchObject({
      'deleted-data-files': '2',
      'added-position-deletes': '0',
    });
    expect([count(rows, ':g1'), count(rows, ':g2'), count(rows, ':g3'), count(rows, ':v1')]).toEqual([
      10, 2, 2, 28,
    ]);
  });

  it('records of several rows and dead letters inside a range: every row of a hidden record deleted, none of a shown one', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliverWith(s, records(0, 20), repeated(builtinTransform('orders'), 2));
    await commitPublishCheck(s, 'live, two rows a record');
    await plan(res, s.settings, 3, 14);
    const rejects = (offset: number) => offset === 5 || offset === 14;
    await deliverWith(s, records(0, 20), repeated(tagged('g1', rejects), 3), 1, 4);
    await switchTo(res, s.settings, 1);
    const rows = await commitPublishCheck(s, 'generation 1, three rows a record, two dead letters');
    // 12 offsets less 2 dead letters, 3 rows each; 8 live offsets, 2 rows each; two partitions.
    expect([count(rows, ':g1'), count(rows, ':v1')]).toEqual([60, 32]);
    expect((await summaryOf(s, 2))?.['added-position-deletes']).toBe('48');
  });

  it('a switch checkpoint whose own live file straddles the end of its range adds that file with the hidden rows deleted', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await commitPublishCheck(s, 'the live output');
    await deliver(s, records(20, 10), { size: 10 });
    await plan(res, s.settings, 3, 24);
    await deliver(s, records(0, 30), { generation: 1, size: 4 });
    await switchTo(res, s.settings, 1);
    const rows = await commitPublishCheck(s, 'the switch with its own straddling live file');
    expect([count(rows, ':g1'), count(rows, ':v1')]).toEqual([44, 16]);
  });

  it('redrive lanes of the live output and of a generation, straddling and inside a range, follow the switch', async () => {
    const s = replaySetup(res, 'pubshape');
    const live = (offset: number) => offset === 5 || offset === 12;
    await deliverWith(s, records(0, 20), tagged('L', live));
    await commitPublishCheck(s, 'live with dead letters at 5 and 12');
    const first = await redrive({ settings: s.settings, clients: s.res.clients, transform: tagged('r0') });
    expect(first.partitions.map((p) => [p.lane, p.outcome, p.sent])).toEqual([
      ['orders', 'redriven', 2],
      ['orders', 'redriven', 2],
    ]);
    const redriven = await commitPublishCheck(s, 'the live lane redriven (orders~r1)');
    expect(count(redriven, ':r0')).toBe(4);
    await plan(res, s.settings, 3, 9);
    await deliverWith(
      s,
      records(0, 20),
      tagged('g1', (offset) => offset === 7),
      1,
      4,
    );
    await switchTo(res, s.settings, 1);
    const switched = await commitPublishCheck(s, 'generation 1 over 3..9 hides offset 5 of the redrive file');
    expect([count(switched, ':r0'), count(switched, ':g1')]).toEqual([2, 12]);
    const second = await redrive({ settings: s.settings, clients: s.res.clients, transform: tagged('r1') });
    expect(second.partitions.filter((p) => p.outcome === 'redriven').map((p) => p.lane)).toEqual([
      'orders~g1',
      'orders~g1',
    ]);
    const rows = await commitPublishCheck(s, "generation 1's dead letter redriven (orders~g1~r1)");
    expect([count(rows, ':r0'), count(rows, ':g1'), count(rows, ':r1')]).toEqual([2, 12, 2]);
  });

  it('a generation that dead-letters every record of its range hides the live rows and adds no file', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await commitPublishCheck(s, 'the live output');
    await plan(res, s.settings, 3, 14);
    await deliverWith(
      s,
      records(0, 20),
      tagged('g1', () => true),
      1,
      4,
    );
    await switchTo(res, s.settings, 1);
    const rows = await commitPublishCheck(s, 'a generation of dead letters only');
    expect(rows).toHaveLength(16);
    expect(await summaryOf(s, 2)).toMatchObject({ 'added-data-files': '0', 'added-position-deletes': '24' });
  });

  it('a first checkpoint that stages the live output, a generation and its switch publishes one overwrite creating the table', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, records(0, 20));
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 4 });
    await switchTo(res, s.settings, 1);
    const rows = await commitPublishCheck(s, 'the switch in the first checkpoint');
    expect((await s.parts.manifests.read(1))?.generations).toHaveLength(1);
    expect([count(rows, ':g1'), count(rows, ':v1')]).toEqual([24, 16]);
    expect(await summaryOf(s, 1)).toMatchObject({ operation: 'overwrite', 'added-position-deletes': '24' });
  });

  it('a switch of an epoch lane hides rows of that epoch only, the same offsets of the earlier epoch still shown', async () => {
    const s = replaySetup(res, 'pubshape');
    await deliver(s, orderRecords(0, 0, 10));
    await commitPublishCheck(s, 'epoch 0 of partition 0');
    const again = orderRecords(0, 0, 10, 'e1-p0');
    const processor = createProcessor({
      settings: s.settings,
      clients: s.res.clients,
      transform: builtinTransform('orders'),
    });
    // The topic's offsets start over: the processor stops twice, then the operator opens epoch 1.
    for (let attempt = 0; attempt < 2; attempt++) {
      await expect(processor.processEvent(mskEvent(again))).rejects.toThrow();
    }
    const epochs = new EpochLedger(res.clients.dynamodb, res.table, s.settings.pipelineId, systemClock);
    expect((await epochs.startNew('orders', 0)).kind).toBe('opened');
    await processor.processEvent(mskEvent(again));
    await commitPublishCheck(s, 'epoch 1 of partition 0');
    const planned = await plan(res, s.settings, 3, 7);
    expect(planned.ranges.map((range) => range.lane)).toEqual(['orders~1']);
    await deliver(s, again, { generation: 1, size: 4 });
    await switchTo(res, s.settings, 1);
    const rows = await commitPublishCheck(s, 'generation 1 of epoch 1');
    // Offsets 3..7 twice: epoch 0's live rows and epoch 1's generation 1 rows.
    expect([count(rows, ':g1'), count(rows, ':v1')]).toEqual([5, 15]);
    expect((await summaryOf(s, 3))?.['eos.lanes']).toBe('orders~1~g1');
  });
});
