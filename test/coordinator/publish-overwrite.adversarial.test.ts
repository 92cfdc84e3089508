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
import { decodeManifestList, encodeManifestList } from '../../shared/iceberg/manifest-list.ts';
import { s3ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { liveDataFiles, overwriteManifests } from '../../shared/iceberg/overwrite.ts';
import {
  appendSnapshot,
  currentSchema,
  defaultSpec,
  nextSnapshotBase,
} from '../../shared/iceberg/table-metadata.ts';
import { getBytes, putIfAbsent } from '../../shared/sink/objects.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { commitOver, compact, crashingLedger, stateOf } from '../support/publish.ts';
import {
  commitCheckpoint,
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
          await compactRewriting(s);
          return undefined;
        });
      } else await compactRewriting(s);
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

/**
 * Another writer's compaction of partition 0's live file: its bytes copied to a key of the table's own and the
 * original removed in one `replace` snapshot (written with this repository's manifest writers, summary of no
 * pipeline).
 */
async function compactRewriting(s: ReplaySetup): Promise<void> {
  const state = await stateOf(s.catalog);
  const { metadata } = state;
  const store = s3ManifestStore(res.clients.s3, metadata.location);
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  if (!head) throw new Error('the table has no head');
  const inherited = decodeManifestList(await store.read(head['manifest-list']));
  const manifest = await s.parts.manifests.read(1);
  const original = manifest?.files.find((file) => file.stream === 'output' && file.partition === 0);
  if (!original) throw new Error('checkpoint 1 has no output file of partition 0');
  const bytes = await getBytes(res.clients.s3, res.bucket, original.key);
  if (!bytes) throw new Error('the live file is missing');
  const key = `${s.settings.pipelineId}/iceberg/output/data/compacted-0.parquet`;
  await putIfAbsent(res.clients.s3, res.bucket, key, bytes);
  const folder = /dt=([^/]+)\/hour=([^/]+)\//.exec(original.key);
  const live = await liveDataFiles(store, inherited);
  const { sequenceNumber } = nextSnapshotBase(metadata);
  const snapshotId = 7_200_000_000_000_000n + BigInt(sequenceNumber);
  const written = await overwriteManifests({
    s3: res.clients.s3,
    store,
    metadata,
    schema: currentSchema(metadata),
    spec: defaultSpec(metadata),
    snapshotId,
    sequenceNumber: BigInt(sequenceNumber),
    inherited,
    live,
    changes: {
      dataFiles: [
        {
          path: `s3://${res.bucket}/${key}`,
          recordCount: original.recordCount,
          fileSizeInBytes: bytes.length,
          partition: [folder?.[1] ?? null, folder?.[2] ?? null],
        },
      ],
      removed: [`s3://${res.bucket}/${original.key}`],
      positionDeletes: [],
      operation: 'overwrite',
    },
  });
  const list = encodeManifestList({
    snapshotId,
    parentSnapshotId: head['snapshot-id'],
    sequenceNumber: BigInt(sequenceNumber),
    manifests: [...written.added, ...written.inherited],
  });
  const manifestList = await store.write(`snap-${snapshotId}`, list);
  const next = appendSnapshot(metadata, {
    snapshotId,
    manifestList,
    nowMs: Date.now(),
    previousLocation: state.location,
    added: { dataFiles: 1, records: original.recordCount, filesSize: bytes.length, partitions: 1 },
    pipelineId: 'maintenance',
    checkpointId: 0,
    lanes: [],
  });
  const snapshots = next.snapshots.map((snapshot) =>
    snapshot['snapshot-id'] === snapshotId ? { ...snapshot, summary: { operation: 'replace' } } : snapshot,
  );
  await commitOver(s.catalog, state, { ...next, snapshots });
}
