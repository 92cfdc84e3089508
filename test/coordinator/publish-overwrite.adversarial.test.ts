/**
 * A replay switch's overwrite snapshot keeps every rule an append keeps (C8): one snapshot per checkpoint under a
 * retry after the swap, a crash after the catalog accepted it, a zombie held at its swap and a concurrent
 * compaction commit between load and swap (the deletes recomputed against the new parent), each attempt writing
 * the same write-once keys; and a compaction that rewrote a file whose rows the switch hides stops the publish in
 * one line instead of a table showing hidden rows. The table, read by icebird, equals the committed reader's
 * rows after each. Against DynamoDB Local and the local S3 server; the replay runs through the processor in replay
 * mode and the local state machine.
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TableSwitchUnattributedError } from '../../shared/coordinator/publish/generation-changes.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { checkpointSnapshotId } from '../../shared/iceberg/checkpoint-identity.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { compact, crashingLedger, stateOf } from '../support/publish.ts';
import {
  commitCheckpoint,
  compactLiveFile,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
  summaryOf,
  tableRows,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubow');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/**
 * Checkpoint 1 (offsets 0..19, one live file a partition) published; generation 1 over 3..14 delivered and the
 * switch requested, committed as checkpoint 2 but not published.
 */
async function switchCommitted(): Promise<ReplaySetup> {
  const s = replaySetup(res, 'pubow');
  await deliver(s, records(0, 20));
  await commitCheckpoint(s);
  await publishCheckpoint(s.parts, 1);
  await plan(res, s.settings, 3, 14);
  await deliver(s, records(0, 20), { generation: 1, size: 4 });
  await switchTo(res, s.settings, 1);
  await commitCheckpoint(s);
  return s;
}

/** The snapshot id of checkpoint `checkpointId` of `s`'s ledger. */
async function ownSnapshotId(s: ReplaySetup, checkpointId: number): Promise<bigint> {
  const { ledger } = await s.parts.snapshots.readMark();
  const { pipelineId } = s.settings;
  return checkpointSnapshotId(ledger ? { pipelineId, ledger } : { pipelineId }, checkpointId);
}

async function snapshotCount(s: ReplaySetup): Promise<number> {
  return (await stateOf(s.catalog)).metadata.snapshots.length;
}

/** The keys under the table's metadata prefix. */
async function metadataKeys(s: ReplaySetup): Promise<string[]> {
  const prefix = `${s.settings.pipelineId}/iceberg/output/metadata/`;
  const out = await res.clients.s3.send(new ListObjectsV2Command({ Bucket: res.bucket, Prefix: prefix }));
  return (out.Contents ?? []).map((object) => object.Key as string).sort();
}

/** `s`'s catalog, calling `before` once, ahead of the first commit, and then committing as the real one. */
function catalogWith(s: ReplaySetup, before: () => Promise<'conflict' | undefined>): Catalog {
  let done = false;
  return {
    load: () => s.catalog.load(),
    commit: async (expected, next) => {
      if (!done) {
        done = true;
        if ((await before()) === 'conflict') return 'conflict';
      }
      return s.catalog.commit(expected, next);
    },
  };
}

describe('a switch checkpoint is one overwrite snapshot, exactly once', { timeout: 120_000 }, () => {
  it('a publish that crashed after the swap, before the ledger recorded it, finds the overwrite and commits nothing again', async () => {
    const s = await switchCommitted();
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toThrow(/before record/);
    const count = await snapshotCount(s);
    expect((await summaryOf(s, 2))?.operation).toBe('overwrite');
    const again = await publishCheckpoint(s.parts, 2);
    expect(again.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'found']]);
    expect(await snapshotCount(s)).toBe(count);
    expect((await s.parts.snapshots.read(2))?.snapshotId).toBe(await ownSnapshotId(s, 2));
    await expectTableFollows(s, 'after the found overwrite');
  });

  it('a publish that crashed after the record, before the mark moved, moves the mark and commits nothing again', async () => {
    const s = await switchCommitted();
    await expect(publishCheckpoint(crashingLedger(s.parts, 'advanceMark'), 2)).rejects.toThrow(
      /before advanceMark/,
    );
    const count = await snapshotCount(s);
    const again = await publishCheckpoint(s.parts, 2);
    expect(again.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'recorded']]);
    expect(await snapshotCount(s)).toBe(count);
    await expectTableFollows(s, 'after the recorded overwrite');
  });

  it('a zombie held at its swap while the live publisher committed the overwrite commits nothing', async () => {
    const s = await switchCommitted();
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
    const zombie = publishCheckpoint({ ...s.parts, target: { ...s.parts.target, catalog: gated } }, 2);
    await arrived;
    const live = await publishCheckpoint(s.parts, 2);
    expect(live.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    const count = await snapshotCount(s);
    release();
    const late = await zombie;
    expect(late.published.map((p) => p.how)).toEqual([expect.stringMatching(/^(found|recorded)$/)]);
    expect(await snapshotCount(s)).toBe(count);
    await expectTableFollows(s, 'after the zombie');
  });

  it('rebases onto a compaction committed between its load and its swap, and every attempt writes the same keys', async () => {
    const s = await switchCommitted();
    let compaction: bigint | undefined;
    const catalog = catalogWith(s, async () => {
      compaction = await compact(s.catalog);
      return undefined;
    });
    const out = await publishCheckpoint({ ...s.parts, target: { ...s.parts.target, catalog } }, 2);
    expect(out.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    const head = (await stateOf(s.catalog)).metadata;
    const own = head.snapshots.find((snapshot) => snapshot.summary['eos.checkpoint-id'] === '2');
    expect(own?.['parent-snapshot-id']).toBe(compaction);
    expect(own?.summary.operation).toBe('overwrite');
    await expectTableFollows(s, 'after the rebased overwrite');

    // A retry on an unchanged parent (a conflict answered without a change) rewrites the keys it wrote.
    const t = await switchCommitted();
    const conflicting = catalogWith(t, async () => 'conflict');
    await publishCheckpoint({ ...t.parts, target: { ...t.parts.target, catalog: conflicting } }, 2);
    const id = String(await ownSnapshotId(t, 2));
    const names = (await metadataKeys(t))
      .map((key) => key.split('/').pop() as string)
      .filter((name) => name.includes(id))
      .map((name) => name.replace(/-[0-9a-f]{32}\.(avro|parquet)$/, ''));
    // Its list, its data manifest, its delete manifest, one delete file a partition: each once.
    expect(names.sort()).toEqual(
      [`snap-${id}`, `${id}-m0`, `${id}-pd`, `deletes/${id}`, `deletes/${id}`]
        .map((name) => name.split('/').pop() as string)
        .sort(),
    );
    await expectTableFollows(t, 'after a retried overwrite');
  });

  it.each([
    ['before its load', false],
    ['between its load and its swap', true],
  ])(
    'refuses in one line, committing nothing, when a compaction rewrote a file whose rows the switch hides %s',
    async (_when, between) => {
      const s = await switchCommitted();
      let catalog = s.catalog as Catalog;
      if (between) {
        catalog = catalogWith(s, async () => {
          await compactLiveFile(s, 0);
          return undefined;
        });
      } else await compactLiveFile(s, 0);
      const rows = await tableRows(s);
      const parts = { ...s.parts, target: { ...s.parts.target, catalog } };
      const error = await publishCheckpoint(parts, 2).catch((thrown: unknown) => thrown);
      expect(error).toBeInstanceOf(TableSwitchUnattributedError);
      expect((error as Error).message).toMatch(
        /^checkpoint 2 hides rows of \S+ \(checkpoint 1\), which the table no longer holds as published/,
      );
      expect((error as Error).message.split('\n')).toHaveLength(1);
      // Only the compaction is committed over checkpoint 1: the table still shows the live output.
      expect(
        (await stateOf(s.catalog)).metadata.snapshots.map((snapshot) => snapshot.summary.operation),
      ).toEqual(['append', 'replace']);
      expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
      expect(await tableRows(s)).toEqual(rows);
      expect(rows).toHaveLength(40);
    },
  );
});
