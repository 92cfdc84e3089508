/**
 * A replay switch published to the Iceberg table (C8): after each checkpoint the table, read back by icebird (a
 * reader nobody here wrote), holds exactly the rows the committed reader shows, as a multiset, through a real
 * replay (plan, the generation delivered by the processor in replay mode and committed, the switch checkpoint),
 * appends after it, and a second switch overlapping the first. The live files straddle the ranges' edges (rows
 * deleted by position) and the second range covers the first (the first generation's files removed whole). Real DynamoDB Local and S3 server; the
 * coordinator runs its real steps through the local state machine.
 */
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { type PublishParts, publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { plan, switchTo, tagged, tagOf } from '../support/generations.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubrp');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

interface Setup {
  readonly settings: Settings;
  readonly catalog: FileCatalog;
  readonly parts: PublishParts;
  readonly errors: string[];
}

function setup(): Setup {
  const settings = settingsIn(res, 'pubrp', {
    maxTransactionItems: 12,
    outputFormat: 'parquet',
    outputColumns: [...orderDefinition.columns],
    timePartitioning: 'hour',
  });
  const { s3, dynamodb } = res.clients;
  const catalog = new FileCatalog(s3, res.bucket, `${settings.pipelineId}/iceberg/output`);
  const errors: string[] = [];
  const parts: PublishParts = {
    pipelineId: settings.pipelineId,
    bucket: settings.bucket,
    s3,
    clock: systemClock,
    log: { info: () => {}, error: (message) => errors.push(message) },
    store: new CheckpointStore(dynamodb, settings.ledgerTable, settings.pipelineId),
    manifests: new ManifestStore(s3, settings.bucket, settings.pipelineId),
    snapshots: new TableSnapshots(dynamodb, settings.ledgerTable, settings.pipelineId),
    target: {
      catalog,
      table: publishedTable({
        location: catalog.location,
        columns: [...orderDefinition.columns],
        timePartitioning: 'hour',
      }),
    },
  };
  return { settings, catalog, parts, errors };
}

/** Commits the next checkpoint and publishes it; its id. */
async function commitAndPublish(s: Setup): Promise<number> {
  const outcome = await createLocalCoordinator({
    settings: s.settings,
    clients: res.clients,
  }).runCheckpoint();
  expect(outcome.status).toBe('committed');
  const id = (await s.parts.snapshots.readMark()).upTo + 1;
  const published = await publishCheckpoint(s.parts, id);
  expect(published.publishedUpTo).toBe(id);
  return id;
}

/** `records` of partitions 0 and 1 through `processor`, `size` offsets an event (so each event stages a file). */
async function deliver(
  processor: ReturnType<typeof createProcessor>,
  records: readonly RecordSpec[],
  size: number,
): Promise<void> {
  const offsets = records.map((r) => r.offset);
  for (let from = Math.min(...offsets); from <= Math.max(...offsets); from += size) {
    const batch = records.filter((r) => r.offset >= from && r.offset < from + size);
    if (batch.length > 0) await processor.processEvent(mskEvent(batch));
  }
}

const rowId = (row: Record<string, unknown>) => {
  const source = row.source as { partition: number | bigint; offset: number | bigint };
  return `${Number(source.partition)}@${Number(source.offset)}:${tagOf(row)}`;
};

/** The rows readCommitted shows, as sorted `p@offset:tag` (a multiset). */
async function committedRows(s: Setup): Promise<string[]> {
  const rows: string[] = [];
  for await (const { row } of readCommitted({
    s3: res.clients.s3,
    bucket: s.settings.bucket,
    pipeline: s.settings.pipelineId,
    stream: 'output',
  })) {
    rows.push(rowId(row));
  }
  return rows.sort();
}

/** The rows icebird reads from the table, in the same form. */
async function tableRows(s: Setup): Promise<string[]> {
  const rows = await icebergRead({ tableUrl: s.catalog.location });
  return rows.map((row) => rowId(row as Record<string, unknown>)).sort();
}

async function expectTableFollows(s: Setup, what: string): Promise<string[]> {
  const committed = await committedRows(s);
  expect(await tableRows(s), what).toEqual(committed);
  return committed;
}

async function summaryOf(s: Setup, checkpointId: number): Promise<Record<string, string> | undefined> {
  const state = await s.catalog.load();
  return state?.metadata.snapshots.find(
    (snapshot) => snapshot.summary['eos.checkpoint-id'] === `${checkpointId}`,
  )?.summary;
}

const live = (from: number, count: number) => [0, 1].flatMap((p) => orderRecords(p, from, count));
const sorted = (records: RecordSpec[]) =>
  records.sort((a, b) => a.partition - b.partition || a.offset - b.offset);

describe('a replay switch published to the Iceberg table', { timeout: 120_000 }, () => {
  it("shows, after every checkpoint, exactly the committed reader's rows: through a switch, appends and an overlapping second switch", async () => {
    const s = setup();
    const orders = builtinTransform('orders');
    const input = sorted(live(0, 20));
    // One live file per partition: offsets 0..19.
    await deliver(
      createProcessor({ settings: s.settings, clients: res.clients, transform: orders }),
      input,
      5,
    );
    expect(await commitAndPublish(s)).toBe(1);
    const before = await expectTableFollows(s, 'the live output');
    expect(before.filter((row) => row.endsWith(':v1'))).toHaveLength(40);

    // Generation 1 over offsets 3..14, delivered in files of 4 offsets and committed before its switch.
    await plan(res, s.settings, 3, 14);
    const replay1 = createProcessor({
      settings: { ...s.settings, replayGeneration: 1 },
      clients: res.clients,
      transform: tagged('g1'),
    });
    await deliver(replay1, input, 4);
    expect(await commitAndPublish(s)).toBe(2);
    expect(await expectTableFollows(s, 'a generation staged, not switched')).toEqual(before);
    expect((await summaryOf(s, 2))?.operation).toBe('append');

    await switchTo(res, s.settings, 1);
    expect(await commitAndPublish(s)).toBe(3);
    const switched = await expectTableFollows(s, 'after the switch to generation 1');
    expect(switched.filter((row) => row.endsWith(':g1'))).toHaveLength(24);
    const summary = await summaryOf(s, 3);
    expect(summary).toMatchObject({
      operation: 'overwrite',
      'eos.pipeline-id': s.settings.pipelineId,
      'eos.checkpoint-id': '3',
      // Generation 1's file of each partition added; 12 rows of each live file deleted by position.
      'added-data-files': '2',
      'deleted-data-files': '0',
      'added-position-delete-files': '2',
      'added-position-deletes': '24',
    });
    expect(summary?.['eos.lanes']).toBe('orders~g1');

    // Appends after the switch: offsets 20..24 of the live output.
    await deliver(
      createProcessor({ settings: s.settings, clients: res.clients, transform: orders }),
      live(20, 5),
      5,
    );
    expect(await commitAndPublish(s)).toBe(4);
    await expectTableFollows(s, 'an append after the switch');
    expect((await summaryOf(s, 4))?.operation).toBe('append');

    // Generation 2 over 3..17: it hides generation 1's files whole and rows 15..17 of the live files.
    await plan(res, s.settings, 3, 17);
    const replay2 = createProcessor({
      settings: { ...s.settings, replayGeneration: 2 },
      clients: res.clients,
      transform: tagged('g2'),
    });
    await deliver(replay2, sorted(live(0, 25)), 3);
    await switchTo(res, s.settings, 2);
    expect(await commitAndPublish(s)).toBe(5);
    const second = await expectTableFollows(s, 'after the overlapping switch to generation 2');
    expect(second.filter((row) => row.endsWith(':g2'))).toHaveLength(30);
    expect(second.filter((row) => row.endsWith(':g1'))).toHaveLength(0);
    expect(await summaryOf(s, 5)).toMatchObject({
      operation: 'overwrite',
      'added-data-files': '2',
      'deleted-data-files': '2',
      'deleted-records': '24',
      'added-position-deletes': '6',
    });
    expect(s.errors.filter((e) => !e.includes('left out'))).toEqual([]);

    // Published again: nothing is committed twice.
    const snapshots = (await s.catalog.load())?.metadata.snapshots.length;
    await publishCheckpoint(s.parts, 5);
    expect((await s.catalog.load())?.metadata.snapshots.length).toBe(snapshots);
    await expectTableFollows(s, 'a publish of a published switch');
  });
});
