/**
 * The table audit (`eos verify --iceberg-table`) over a table that followed a replay switch, when another writer
 * commits position delete files of its own (a row-level DELETE, or maintenance's rewrite of the table's delete
 * files): the audit must reject a table that lost a row the readers show, and must not reject one whose hidden
 * rows stay hidden. icebird's read of the table is the evidence of what readers see. Against DynamoDB Local and
 * the local S3 server; the replay runs through the processor in replay mode and the local state machine.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { type DataFile, encodeManifest } from '../../shared/iceberg/manifest-file.ts';
import {
  addedManifestEntry,
  decodeManifestList,
  type ManifestListEntry,
} from '../../shared/iceberg/manifest-list.ts';
import { s3ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { encodePositionDeletes } from '../../shared/iceberg/position-deletes.ts';
import { snapshotFiles, TableFileReader } from '../../shared/iceberg/table-files.ts';
import { currentSchema, defaultSpec, type Snapshot } from '../../shared/iceberg/table-metadata.ts';
import { getBytes, putIfAbsent } from '../../shared/sink/objects.ts';
import { decodeParquetRows } from '../../shared/sink/parquet-read.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { plan, switchTo } from '../support/generations.ts';
import { commitOnHead, stateOf } from '../support/publish.ts';
import {
  auditReplayTable as audit,
  commitCheckpoint,
  committedRows,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
  tableRows,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubaudit');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/**
 * Live 0..19 (1) and generation 1 over `from`..`to` (default 3..14: each live file has 12 rows deleted) switched
 * (2), published.
 */
async function switched(from = 3, to = 14): Promise<ReplaySetup> {
  const s = replaySetup(res, 'pubaudit');
  await deliver(s, records(0, 20));
  await commitCheckpoint(s);
  await plan(res, s.settings, from, to);
  await deliver(s, records(0, 20), { generation: 1, size: 4 });
  await switchTo(res, s.settings, 1);
  await commitCheckpoint(s);
  await publishCheckpoint(s.parts, 2);
  await expectTableFollows(s, 'the switch');
  expect((await audit(s)).ok).toBe(true);
  return s;
}

/** The live data file of checkpoint 1's partition `partition`: its location and partition tuple. */
async function liveFile(s: ReplaySetup, partition: number): Promise<DataFile> {
  const file = (await s.parts.manifests.read(1))?.files.find(
    (candidate) => candidate.stream === 'output' && candidate.partition === partition,
  );
  if (!file) throw new Error(`checkpoint 1 has no output file of partition ${partition}`);
  const folder = /dt=([^/]+)\/hour=([^/]+)\//.exec(file.key);
  return {
    path: `s3://${res.bucket}/${file.key}`,
    recordCount: file.recordCount,
    fileSizeInBytes: file.bytes,
    partition: [folder?.[1] ?? null, folder?.[2] ?? null],
  };
}

/** A position delete file of `positions` of `dataFile`, under the table's `folder` (another writer's: `data`). */
async function foreignDeleteFile(
  s: ReplaySetup,
  name: string,
  dataFile: DataFile,
  positions: number[],
  folder = 'data',
): Promise<DataFile> {
  const bytes = Buffer.from(encodePositionDeletes(dataFile.path, positions));
  const key = `${s.settings.pipelineId}/iceberg/output/${folder}/${name}.parquet`;
  await putIfAbsent(res.clients.s3, res.bucket, key, bytes);
  return {
    path: `s3://${res.bucket}/${key}`,
    recordCount: positions.length,
    fileSizeInBytes: bytes.length,
    partition: dataFile.partition,
  };
}

/**
 * Another writer's `overwrite` snapshot on main's head: the head's manifests `keep` keeps, `extra` manifests, and
 * one delete manifest of `deleteFiles` (none without).
 */
async function commitDeletes(
  s: ReplaySetup,
  deleteFiles: readonly DataFile[],
  keep: (manifest: ManifestListEntry) => boolean,
  extra: readonly ManifestListEntry[] = [],
): Promise<void> {
  await commitOnHead(
    s.catalog,
    res.clients.s3,
    7_400_000_000_000_000n,
    'overwrite',
    async (manifests, { id, sequence, metadata, store }) => {
      const [schema, spec] = [currentSchema(metadata), defaultSpec(metadata)];
      const bytes = encodeManifest({ schema, spec, snapshotId: id, files: deleteFiles }, true);
      const path = await store.write(`foreign-${id}`, bytes);
      const entry = {
        ...addedManifestEntry({
          path,
          length: bytes.length,
          schema,
          spec,
          files: deleteFiles,
          snapshotId: id,
          sequenceNumber: BigInt(sequence),
        }),
        content: 1,
      };
      return [...(deleteFiles.length > 0 ? [entry] : []), ...extra, ...manifests.filter(keep)];
    },
  );
}

/** The manifests of the snapshot of checkpoint `checkpointId`. */
async function manifestsOf(s: ReplaySetup, checkpointId: number): Promise<ManifestListEntry[]> {
  const { metadata } = await stateOf(s.catalog);
  const snapshot = metadata.snapshots.find((c) => c.summary['eos.checkpoint-id'] === String(checkpointId));
  const store = s3ManifestStore(res.clients.s3, metadata.location);
  return decodeManifestList(await store.read(snapshot?.['manifest-list'] ?? ''));
}

const outputKeys = async (s: ReplaySetup, checkpointId: number) =>
  ((await s.parts.manifests.read(checkpointId))?.files ?? [])
    .filter((file) => file.stream === 'output')
    .map((file) => file.key)
    .sort();

describe('the table audit over a switch and rows shown or hidden wrongly', { timeout: 120_000 }, () => {
  it('rejects a table in which a file the switch hides whole is live again', async () => {
    const s = await switched(0, 19);
    await commitDeletes(s, [], () => true, await manifestsOf(s, 1));
    expect(await tableRows(s)).toHaveLength((await committedRows(s)).length + 40);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    for (const key of await outputKeys(s, 1)) expect(result.violations.join('\n')).toContain(key);
  });

  it('rejects a table missing the files a switch shows', async () => {
    const s = await switched();
    const two = (await s.parts.snapshots.read(2))?.snapshotId;
    await commitDeletes(s, [], (m) => !(m.content === 0 && m.added_snapshot_id === two));
    expect(await tableRows(s)).toHaveLength((await committedRows(s)).length - 24);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    for (const key of await outputKeys(s, 2)) expect(result.violations.join('\n')).toContain(key);
  });

  it('rejects a table whose own delete files remove a row the readers show', async () => {
    const s = await switched();
    const live = await liveFile(s, 0);
    await commitDeletes(s, [await foreignDeleteFile(s, 'extra', live, [0], 'metadata/deletes')], () => true);
    expect(await tableRows(s)).toHaveLength((await committedRows(s)).length - 1);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    expect(result.violations.join('\n')).toMatch(/1 row\(s\) the readers show are deleted in the table/);
  });
});

describe('the table audit over a switch and another writer’s position deletes', { timeout: 120_000 }, () => {
  // Readers apply every position delete file in the head, whoever wrote it: so does the audit.
  it('rejects a table in which another writer’s position delete removed a row the readers show', async () => {
    const s = await switched();
    const live = await liveFile(s, 0);
    // Position 0 of the live file is offset 0: shown by the readers (the switch covers 3..14).
    await commitDeletes(s, [await foreignDeleteFile(s, 'row-delete', live, [0])], () => true);
    const committed = await committedRows(s);
    const table = await tableRows(s);
    expect(table).toHaveLength(committed.length - 1);
    expect(committed.filter((row) => !table.includes(row))).toEqual(['0@0:v1']);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    expect(result.violations.join('\n')).toMatch(/row\(s\) the readers show are deleted/);
  });

  // Maintenance may rewrite the table's delete files into its own: readers still hide the same rows.
  it('passes a table whose delete files maintenance rewrote into equivalent ones of its own', async () => {
    const s = await switched();
    const state = await stateOf(s.catalog);
    const reader = new TableFileReader(res.clients.s3);
    const head = state.metadata.snapshots.find(
      (snapshot) => snapshot['snapshot-id'] === state.metadata['current-snapshot-id'],
    ) as Snapshot;
    const ours = (await snapshotFiles(reader, head)).positionDeleteFiles ?? [];
    expect(ours).toHaveLength(2);
    const rewritten: DataFile[] = [];
    for (const [index, partition] of [0, 1].entries()) {
      const live = await liveFile(s, partition);
      const rows: Record<string, unknown>[] = [];
      for (const location of ours) {
        const match = /^s3:\/\/([^/]+)\/(.+)$/.exec(location) as RegExpExecArray;
        const body = await getBytes(res.clients.s3, match[1] as string, match[2] as string);
        rows.push(...(await decodeParquetRows(body as Uint8Array)));
      }
      const positions = rows.filter((row) => row.file_path === live.path).map((row) => Number(row.pos));
      expect(positions).toHaveLength(12);
      rewritten.push(await foreignDeleteFile(s, `rewritten-${index}`, live, positions));
    }
    await commitDeletes(s, rewritten, (manifest) => manifest.content === 0);
    await expectTableFollows(s, 'the rewritten delete files hide the same rows');
    const result = await audit(s);
    expect(result.violations).toEqual([]);
    expect(result.ok).toBe(true);
  });
});
