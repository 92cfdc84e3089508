/**
 * A replay switch's overwrite snapshot under races and failures (C8): a zombie of the switch checkpoint released
 * after the live publisher published it and the next one, a crash after the catalog accepted the overwrite with
 * maintenance on top before the retry, a crash between the overwrite's writes and its swap with a compaction
 * before the retry (the same delete-file keys), a switch caught up behind several checkpoints and across the
 * catch-up limit, a switch whose publish failed caught up by the next checkpoint, an idle pipeline whose switch
 * is the only thing to publish, and a rollback of main to before the switch with the operator's remedy. After
 * each, icebird's read of the table equals the committed reader's rows, the audit passes, and every checkpoint the
 * ledger records is the table's snapshot of it, main's history naming them in order. Against DynamoDB Local and
 * the local S3 server, through the processor and the local state machine.
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { PUBLISH_CATCH_UP_LIMIT, publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { IcebergTableRolledBackError } from '../../shared/coordinator/publish/rollback.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { commitOver, compact, crashingLedger, mainCheckpoints, stateOf } from '../support/publish.ts';
import {
  auditReplayTable,
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
  res = await freshResources('pubrace');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** The table follows the reader, passes the audit, and holds each recorded checkpoint as its own snapshot. */
async function expectConsistent(s: ReplaySetup, what: string): Promise<string[]> {
  const rows = await expectTableFollows(s, what);
  const result = await auditReplayTable(s);
  expect(result.violations, what).toEqual([]);
  const mark = await s.parts.snapshots.readMark();
  const { metadata } = await stateOf(s.catalog);
  const ids = Array.from({ length: mark.upTo }, (_, i) => i + 1);
  for (const id of ids) {
    const record = await s.parts.snapshots.read(id);
    const snapshot = metadata.snapshots.find((candidate) => candidate['snapshot-id'] === record?.snapshotId);
    expect(snapshot?.summary['eos.checkpoint-id'], `${what}: checkpoint ${id}`).toBe(String(id));
  }
  expect(mainCheckpoints(metadata, s.settings.pipelineId), what).toEqual(ids.map(String));
  return rows;
}

/** Live 0..19 committed (1); generation 1 over 3..14 delivered and switched, committed (2); neither published. */
async function switchUnpublished(): Promise<ReplaySetup> {
  const s = replaySetup(res, 'pubrace');
  await deliver(s, records(0, 20));
  await commitCheckpoint(s);
  await plan(res, s.settings, 3, 14);
  await deliver(s, records(0, 20), { generation: 1, size: 4 });
  await switchTo(res, s.settings, 1);
  await commitCheckpoint(s);
  return s;
}

const withCatalog = (s: ReplaySetup, catalog: Catalog) => ({
  ...s.parts,
  target: { ...s.parts.target, catalog },
});

async function tableKeys(s: ReplaySetup): Promise<string[]> {
  const prefix = `${s.settings.pipelineId}/iceberg/output/metadata/`;
  const out = await res.clients.s3.send(new ListObjectsV2Command({ Bucket: res.bucket, Prefix: prefix }));
  return (out.Contents ?? []).map((object) => object.Key as string).sort();
}

describe('a switch published as an overwrite under races and failures', { timeout: 180_000 }, () => {
  it('a zombie of the switch checkpoint released after the live publisher published it and the next commits nothing', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    let arrive!: () => void;
    const arrived = new Promise<void>((resolve) => {
      arrive = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const gated: Catalog = {
      load: () => s.catalog.load(),
      commit: async (expected, next) => {
        arrive();
        await gate;
        return s.catalog.commit(expected, next);
      },
    };
    const zombie = publishCheckpoint(withCatalog(s, gated), 2);
    await arrived;
    expect((await publishCheckpoint(s.parts, 2)).published.map((p) => p.how)).toEqual(['appended']);
    await deliver(s, records(20, 5));
    await commitCheckpoint(s);
    expect((await publishCheckpoint(s.parts, 3)).published.map((p) => p.how)).toEqual(['appended']);
    await compact(s.catalog);
    const snapshots = (await stateOf(s.catalog)).metadata.snapshots.length;
    release();
    const late = await zombie;
    expect(late.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [2, expect.stringMatching(/found|recorded/)],
    ]);
    expect((await stateOf(s.catalog)).metadata.snapshots.length).toBe(snapshots);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(3);
    await expectConsistent(s, 'after the zombie');
  });

  it.each([
    ['a compaction', false],
    ['a compaction that expired every other snapshot', true],
  ])(
    'a publish that crashed after the catalog accepted the overwrite finds it after %s on top',
    async (_what, expire) => {
      const s = await switchUnpublished();
      await publishCheckpoint(s.parts, 1);
      await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toThrow(/before record/);
      await compact(s.catalog, { expire });
      const snapshots = (await stateOf(s.catalog)).metadata.snapshots.length;
      const again = await publishCheckpoint(s.parts, 2);
      expect(again.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'found']]);
      expect((await stateOf(s.catalog)).metadata.snapshots.length).toBe(snapshots);
      await expectTableFollows(s, 'after the found overwrite');
      await deliver(s, records(20, 5));
      await commitCheckpoint(s);
      await publishCheckpoint(s.parts, 3);
      await expectTableFollows(s, 'the append after it');
      if (!expire) await expectConsistent(s, 'the append after it');
    },
  );

  it('a retry after a crash between the overwrite’s writes and its swap, with a compaction between, writes the same delete-file keys', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    const before = await tableKeys(s);
    const crashing: Catalog = {
      load: () => s.catalog.load(),
      commit: () => Promise.reject(new Error('the publish function timed out at its swap')),
    };
    await expect(publishCheckpoint(withCatalog(s, crashing), 2)).rejects.toThrow(/timed out/);
    const crashed = (await tableKeys(s)).filter((key) => !before.includes(key));
    const deletes = crashed.filter((key) => key.includes('/metadata/deletes/'));
    expect(deletes).toHaveLength(2);
    await compact(s.catalog);
    const middle = await tableKeys(s);
    expect((await publishCheckpoint(s.parts, 2)).published.map((p) => p.how)).toEqual(['appended']);
    const retried = (await tableKeys(s)).filter((key) => !middle.includes(key));
    // The same delete files and delete manifest; only the list and metadata of the new parent are new.
    expect(retried.filter((key) => key.includes('/metadata/deletes/') || /-pd-/.test(key))).toEqual([]);
    expect(retried.filter((key) => !/snap-|\.metadata\.json$|version-hint/.test(key))).toEqual([]);
    await expectConsistent(s, 'after the retried overwrite');
  });

  it('a switch caught up behind several checkpoints, and a second one across the catch-up limit, each one snapshot', async () => {
    const s = replaySetup(res, 'pubrace');
    await deliver(s, records(0, 20));
    await commitCheckpoint(s);
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 4 });
    await commitCheckpoint(s);
    await switchTo(res, s.settings, 1);
    await commitCheckpoint(s);
    for (let from = 20; from < 20 + 5 * 7; from += 5) {
      await deliver(s, records(from, 5));
      await commitCheckpoint(s);
    }
    // Checkpoints 4..10 are appends; generation 2 over 10..30 is committed by 11 and switched by 12.
    await plan(res, s.settings, 10, 30);
    await deliver(s, records(0, 55), { generation: 2, size: 7 });
    await commitCheckpoint(s);
    await switchTo(res, s.settings, 2);
    await commitCheckpoint(s);
    const first = await publishCheckpoint(s.parts, 12);
    expect(first.publishedUpTo).toBe(PUBLISH_CATCH_UP_LIMIT);
    expect((await summaryOf(s, 3))?.operation).toBe('overwrite');
    const second = await publishCheckpoint(s.parts, 12);
    expect(second.published.map((p) => p.checkpointId)).toEqual([11, 12]);
    expect((await summaryOf(s, 12))?.operation).toBe('overwrite');
    expect((await s.parts.snapshots.read(12))?.switches).toEqual([3, 12]);
    const rows = await expectConsistent(s, 'caught up');
    expect(rows.filter((row) => row.endsWith(':g2'))).toHaveLength(42);
  });

  it('a switch whose publish failed is caught up by the next checkpoint’s publish', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    const down: Catalog = {
      load: () => s.catalog.load(),
      commit: () => Promise.reject(new Error('the catalog is unavailable')),
    };
    await expect(publishCheckpoint(withCatalog(s, down), 2)).rejects.toThrow(/unavailable/);
    await deliver(s, records(20, 5));
    await commitCheckpoint(s);
    const out = await publishCheckpoint(s.parts, 3);
    expect(out.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [2, 'appended'],
      [3, 'appended'],
    ]);
    await expectConsistent(s, 'the failed switch caught up');
  });

  it('an idle pipeline whose switch is the only thing to publish publishes it', async () => {
    const s = replaySetup(res, 'pubrace');
    await deliver(s, records(0, 20));
    await commitCheckpoint(s);
    await plan(res, s.settings, 3, 14);
    await deliver(s, records(0, 20), { generation: 1, size: 4 });
    await commitCheckpoint(s);
    await publishCheckpoint(s.parts, 2);
    await switchTo(res, s.settings, 1);
    const outcome = await createLocalCoordinator({
      settings: s.settings,
      clients: s.res.clients,
    }).runCheckpoint();
    expect(outcome.status).toBe('committed');
    const manifest = await s.parts.manifests.read(3);
    expect(manifest?.files).toEqual([]);
    expect((await publishCheckpoint(s.parts, 3)).published.map((p) => p.how)).toEqual(['appended']);
    expect((await summaryOf(s, 3))?.operation).toBe('overwrite');
    const rows = await expectConsistent(s, 'the idle switch');
    expect(rows.filter((row) => row.endsWith(':g1'))).toHaveLength(24);
  });

  it('main rolled back to before an overwrite the ledger never recorded is refused, and appended again after the operator’s remedy', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toThrow(/before record/);
    const one = (await s.parts.snapshots.read(1))?.snapshotId as bigint;
    let state = await stateOf(s.catalog);
    state = await commitOver(s.catalog, state, {
      ...state.metadata,
      'current-snapshot-id': one,
      refs: { main: { 'snapshot-id': one, type: 'branch' } },
    });
    await expect(publishCheckpoint(s.parts, 2)).rejects.toThrow(IcebergTableRolledBackError);
    // The remedy for an expired overwrite: its snapshot gone, the property set back to the checkpoint before.
    const property = publishedCheckpointProperty(s.settings.pipelineId);
    await commitOver(s.catalog, state, {
      ...state.metadata,
      snapshots: state.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] === one),
      properties: { ...state.metadata.properties, [property]: '1' },
    });
    expect((await publishCheckpoint(s.parts, 2)).published.map((p) => p.how)).toEqual(['appended']);
    expect((await summaryOf(s, 2))?.operation).toBe('overwrite');
    await expectConsistent(s, 'the overwrite appended again');
  });

  it('rebases onto a compaction that expired the checkpoint before it, committed between its load and its swap', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    let done = false;
    const catalog: Catalog = {
      load: () => s.catalog.load(),
      commit: async (expected, next) => {
        if (!done) {
          done = true;
          await compact(s.catalog, { expire: true });
        }
        return s.catalog.commit(expected, next);
      },
    };
    expect((await publishCheckpoint(withCatalog(s, catalog), 2)).published.map((p) => p.how)).toEqual([
      'appended',
    ]);
    const { metadata } = await stateOf(s.catalog);
    expect(metadata.snapshots.map((snapshot) => snapshot.summary.operation)).toEqual([
      'replace',
      'overwrite',
    ]);
    await expectTableFollows(s, 'the overwrite on the expiring compaction');
    await deliver(s, records(20, 5));
    await commitCheckpoint(s);
    expect((await publishCheckpoint(s.parts, 3)).published.map((p) => p.how)).toEqual(['appended']);
    await expectTableFollows(s, 'the append after it');
  });

  it('two publishers of the switch checkpoint at once commit one overwrite', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    const both = await Promise.all([publishCheckpoint(s.parts, 2), publishCheckpoint(s.parts, 2)]);
    const hows = both.flatMap((out) => out.published.map((p) => p.how)).sort();
    expect(hows[0]).toBe('appended');
    expect(hows.filter((how) => how === 'appended')).toHaveLength(1);
    const { metadata } = await stateOf(s.catalog);
    expect(metadata.snapshots.map((snapshot) => snapshot.summary.operation)).toEqual(['append', 'overwrite']);
    await expectConsistent(s, 'two publishers at once');
  });

  it('a crashed switch found by the next checkpoint’s publish keeps the ledger’s switch list for the checkpoints after it', async () => {
    const s = await switchUnpublished();
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toThrow(/before record/);
    await deliver(s, records(20, 5));
    await commitCheckpoint(s);
    const out = await publishCheckpoint(s.parts, 3);
    expect(out.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [2, 'found'],
      [3, 'appended'],
    ]);
    expect((await s.parts.snapshots.read(2))?.switches).toEqual([2]);
    expect((await s.parts.snapshots.read(3))?.switches).toEqual([2]);
    await plan(res, s.settings, 10, 22);
    await deliver(s, records(0, 25), { generation: 2, size: 5 });
    await switchTo(res, s.settings, 2);
    await commitCheckpoint(s);
    await publishCheckpoint(s.parts, 4);
    expect((await s.parts.snapshots.read(4))?.switches).toEqual([2, 4]);
    await expectConsistent(s, 'a second switch after the found one');
  });

  it('records from before the switch list: the next publishes read the log and the table still follows', async () => {
    const s = await switchUnpublished();
    const real = s.parts.snapshots;
    const strip = <T extends { switches?: readonly number[] }>({ switches: _gone, ...rest }: T) => rest;
    const old = {
      ...s.parts,
      snapshots: {
        read: (id: number) => real.read(id),
        readMark: () => real.readMark(),
        createIncarnation: (now: number) => real.createIncarnation(now),
        record: (snapshot: Parameters<typeof real.record>[0], now: number) =>
          real.record(strip(snapshot), now),
        advanceMark: (...args: Parameters<typeof real.advanceMark>) =>
          real.advanceMark(strip(args[0]), args[1], args[2]),
      },
    };
    await publishCheckpoint(old, 2);
    expect((await s.parts.snapshots.read(2))?.switches).toBeUndefined();
    await deliver(s, records(20, 5));
    await commitCheckpoint(s);
    await publishCheckpoint(s.parts, 3);
    expect((await s.parts.snapshots.read(3))?.switches).toEqual([2]);
    await expectConsistent(s, 'after records without the list');
  });
});
