/**
 * Merging the parent's data manifests as an append writes its list: when it merges (the minimum count, the target
 * size, the table's properties), what the merged manifest holds (every live entry EXISTING with its original
 * snapshot id and sequence numbers, DELETED entries dropped), what it never touches (delete manifests, manifests it
 * cannot carry whole), its names; and a table whose list was merged read back by icebird on the local S3 server.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { appendCheckpoint } from '../../shared/iceberg/append.ts';
import { decodeContainer } from '../../shared/iceberg/avro-container.ts';
import type { TableState } from '../../shared/iceberg/catalog.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { decodeManifestEntries } from '../../shared/iceberg/manifest-entries.ts';
import { type DataFile, encodeManifest } from '../../shared/iceberg/manifest-file.ts';
import {
  addedManifestEntry,
  decodeManifestList,
  encodeManifestList,
  type ManifestListEntry,
  partitionSummaries,
} from '../../shared/iceberg/manifest-list.ts';
import {
  binsToMerge,
  DEFAULT_MIN_COUNT_TO_MERGE,
  DEFAULT_TARGET_SIZE_BYTES,
  MANIFEST_MERGE_ENABLED,
  MANIFEST_MIN_COUNT_TO_MERGE,
  MANIFEST_TARGET_SIZE_BYTES,
  manifestMergeSettings,
  mergedManifestList,
  s3ManifestStore,
} from '../../shared/iceberg/manifest-merge.ts';
import { snapshotFiles, TableFileReader } from '../../shared/iceberg/table-files.ts';
import {
  appendSnapshot,
  currentSchema,
  defaultSpec,
  mainSnapshotId,
  nextSnapshotBase,
  snapshotIdOf,
} from '../../shared/iceberg/table-metadata.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { checkpoint, dataFile, orderIds, orderIdsRead, outputTable, rows } from './catalog-drive.ts';
import { localS3Fetch } from './icebird-s3.ts';
import {
  addedManifest,
  entriesOf,
  file,
  foreignManifest,
  listEntryOf,
  MemoryStore,
  metadataWith,
  NEW,
  ourManifests,
  schema,
  snap,
  spec,
  writerSchema,
} from './manifest-merge-fixtures.ts';

describe('manifestMergeSettings', () => {
  it("takes Iceberg's defaults, and the table's properties when they are positive whole numbers", () => {
    expect(manifestMergeSettings({})).toEqual({
      enabled: true,
      minCountToMerge: 100,
      targetSizeBytes: 8_388_608n,
    });
    expect([DEFAULT_MIN_COUNT_TO_MERGE, DEFAULT_TARGET_SIZE_BYTES]).toEqual([100, 8_388_608n]);
    const set = {
      [MANIFEST_MERGE_ENABLED]: 'FALSE',
      [MANIFEST_MIN_COUNT_TO_MERGE]: '7',
      [MANIFEST_TARGET_SIZE_BYTES]: '4096',
    };
    expect(manifestMergeSettings(set)).toEqual({
      enabled: false,
      minCountToMerge: 7,
      targetSizeBytes: 4096n,
    });
    const bad = {
      [MANIFEST_MERGE_ENABLED]: 'yes',
      [MANIFEST_MIN_COUNT_TO_MERGE]: '0',
      [MANIFEST_TARGET_SIZE_BYTES]: '-1',
    };
    expect(manifestMergeSettings(bad)).toEqual({
      enabled: true,
      minCountToMerge: 100,
      targetSizeBytes: 8_388_608n,
    });
  });
});

describe('mergedManifestList', () => {
  const merge = (
    store: MemoryStore,
    inherited: ManifestListEntry[],
    properties: Record<string, string> = {},
    added = [addedManifest(store)],
  ) =>
    mergedManifestList(
      { metadata: metadataWith(properties), snapshotId: NEW, sequenceNumber: 1_000n, added, inherited },
      store,
    );

  it('leaves a list of fewer than the minimum count as it is, the added manifests first, and reads nothing', async () => {
    const store = new MemoryStore();
    const inherited = ourManifests(store, 98);
    const added = [addedManifest(store)];
    store.reads = [];
    expect(await merge(store, inherited, {}, added)).toEqual([...added, ...inherited]);
    expect(store.reads).toEqual([]);
  });

  it("merges the parent's 99 manifests into one once the list reaches 100, each entry EXISTING with its own snapshot id and sequence numbers", async () => {
    const store = new MemoryStore();
    const inherited = ourManifests(store, 99);
    const added = [addedManifest(store)];
    const list = await merge(store, inherited, {}, added);
    expect(list).toHaveLength(2);
    expect(list[0]).toBe(added[0]);
    const merged = list[1] as ManifestListEntry;
    expect(merged.manifest_path).toMatch(new RegExp(`^mem://${NEW}-m1-`));
    const files = Array.from({ length: 99 }, (_, n) => file(99 - n));
    expect(
      entriesOf(store, merged).map((e) => [
        e.status,
        e.snapshot_id,
        e.sequence_number,
        e.file_sequence_number,
        e.data_file.file_path,
        e.data_file.record_count,
      ]),
    ).toEqual(
      files.map((f, n) => [0, snap(99 - n), BigInt(99 - n), BigInt(99 - n), f.path, BigInt(f.recordCount)]),
    );
    expect(entriesOf(store, merged).map((e) => e.data_file.partition)).toEqual(
      files.map((f) => ({ dt: f.partition[0], hour: f.partition[1], region: f.partition[2] })),
    );
    expect(merged).toEqual({
      manifest_path: merged.manifest_path,
      manifest_length: BigInt(store.objects.get(merged.manifest_path)?.length ?? -1),
      partition_spec_id: spec['spec-id'],
      content: 0,
      sequence_number: 1_000n,
      min_sequence_number: 1n,
      added_snapshot_id: NEW,
      added_files_count: 0,
      existing_files_count: 99,
      deleted_files_count: 0,
      added_rows_count: 0n,
      existing_rows_count: 4_950n,
      deleted_rows_count: 0n,
      partitions: partitionSummaries(schema, spec, files),
      key_metadata: null,
    });
    const header = decodeContainer(store.objects.get(merged.manifest_path) as Buffer).metadata;
    expect([header.get('partition-spec-id'), header.get('format-version'), header.get('content')]).toEqual([
      '0',
      '2',
      'data',
    ]);
    expect(decodeManifestEntries(store.objects.get(merged.manifest_path) as Buffer)[98]).toEqual({
      status: 0,
      snapshotId: snap(1),
      content: 0,
      path: file(1).path,
    });
  });

  it("drops DELETED entries and writes inherited values explicitly: a compaction's ADDED entry keeps the snapshot and sequence number it inherited", async () => {
    const store = new MemoryStore();
    const COMPACTION = snap(500);
    const compaction = foreignManifest([
      { status: 2, snapshot_id: COMPACTION, seq: 3n, path: 's3://b/t/data/small-3.parquet' },
      { status: 1, snapshot_id: null, seq: null, path: 's3://b/t/data/compacted.parquet' },
      { status: 0, snapshot_id: snap(7), seq: 7n, fileSeq: 8n, path: 's3://b/t/data/kept-7.parquet' },
    ]);
    const inherited = [
      listEntryOf(store, 'mem://compaction', compaction, COMPACTION, 60),
      ...ourManifests(store, 3),
    ];
    const list = await merge(store, inherited, { [MANIFEST_MIN_COUNT_TO_MERGE]: '5' });
    expect(list).toHaveLength(2);
    const entries = entriesOf(store, list[1] as ManifestListEntry);
    expect(
      entries.map((e) => [
        e.data_file.file_path,
        e.status,
        e.snapshot_id,
        e.sequence_number,
        e.file_sequence_number,
      ]),
    ).toEqual([
      ['s3://b/t/data/compacted.parquet', 0, COMPACTION, 60n, 60n],
      ['s3://b/t/data/kept-7.parquet', 0, snap(7), 7n, 8n],
      ...[3, 2, 1].map((i) => [file(i).path, 0, snap(i), BigInt(i), BigInt(i)]),
    ]);
    expect((list[1] as ManifestListEntry).min_sequence_number).toBe(1n);
  });

  it('keeps delete manifests and encrypted manifests where they are without reading them', async () => {
    const store = new MemoryStore();
    const ours = ourManifests(store, 4);
    const deletes = { ...(ours[0] as ManifestListEntry), manifest_path: 'mem://deletes', content: 1 };
    const encrypted = {
      ...(ours[1] as ManifestListEntry),
      manifest_path: 'mem://encrypted',
      key_metadata: Buffer.from('k'),
    };
    const inherited = [ours[0], deletes, ours[1], encrypted, ours[2], ours[3]] as ManifestListEntry[];
    const list = await merge(store, inherited, { [MANIFEST_MIN_COUNT_TO_MERGE]: '3' });
    expect(list).toHaveLength(4);
    expect(list[2]).toBe(deletes);
    expect(list[3]).toBe(encrypted);
    expect(entriesOf(store, list[1] as ManifestListEntry).map((e) => e.snapshot_id)).toEqual([
      snap(4),
      snap(3),
      snap(2),
      snap(1),
    ]);
    expect(store.reads.filter((read) => !read.startsWith('mem://m-'))).toEqual([]);
  });

  it('keeps a manifest it cannot carry whole as it is: an EXISTING entry without sequence numbers, a partition field typed or named otherwise, a file field it does not write', async () => {
    const store = new MemoryStore();
    const unsequenced = foreignManifest([
      { status: 0, snapshot_id: snap(9), seq: null, path: 's3://b/t/data/x.parquet' },
    ]);
    const intRegion = foreignManifest(
      [
        {
          status: 1,
          snapshot_id: snap(9),
          seq: 9n,
          path: 's3://b/t/data/y.parquet',
          extra: { partition: { dt: '2026-03-14', hour: '01', region: 4 } },
        },
      ],
      writerSchema([], { type: ['null', 'int'] }),
    );
    const renamed = foreignManifest(
      [
        {
          status: 1,
          snapshot_id: snap(9),
          seq: 9n,
          path: 's3://b/t/data/w.parquet',
          extra: { partition: { dt: '2026-03-14', hour: '01', area: 'eu' } },
        },
      ],
      writerSchema([], { name: 'area' }),
    );
    const rowIds = writerSchema([
      { name: 'first_row_id', type: ['null', 'long'], default: null, 'field-id': 142 },
    ]);
    const v3 = foreignManifest(
      [
        {
          status: 1,
          snapshot_id: snap(9),
          seq: 9n,
          path: 's3://b/t/data/z.parquet',
          extra: { first_row_id: 10n },
        },
      ],
      rowIds,
    );
    const kept = [
      listEntryOf(store, 'mem://unsequenced', unsequenced, snap(9), 9),
      listEntryOf(store, 'mem://int-region', intRegion, snap(9), 9),
      listEntryOf(store, 'mem://renamed', renamed, snap(9), 9),
      listEntryOf(store, 'mem://v3', v3, snap(9), 9),
    ];
    const ours = ourManifests(store, 3);
    const list = await merge(store, [...kept, ...ours], { [MANIFEST_MIN_COUNT_TO_MERGE]: '3' });
    expect(list.slice(2)).toEqual(kept);
    expect(entriesOf(store, list[1] as ManifestListEntry).map((e) => e.data_file.file_path)).toEqual(
      [3, 2, 1].map((i) => file(i).path),
    );
  });

  it("carries another writer's metrics and drops the file fields the spec has v2 writers leave out", async () => {
    const store = new MemoryStore();
    const legacy = writerSchema([{ name: 'block_size_in_bytes', type: 'long', 'field-id': 105 }]);
    const metrics = {
      block_size_in_bytes: 67_108_864n,
      column_sizes: [{ key: 1, value: 40n }],
      lower_bounds: [{ key: 1, value: Buffer.from('a') }],
      upper_bounds: [{ key: 1, value: Buffer.from('z') }],
      split_offsets: [4n],
      sort_order_id: 0,
    };
    const bytes = foreignManifest(
      [{ status: 0, snapshot_id: snap(20), seq: 20n, path: 's3://b/t/data/spark.parquet', extra: metrics }],
      legacy,
    );
    const inherited = [listEntryOf(store, 'mem://spark', bytes, snap(20), 21), ...ourManifests(store, 2)];
    const list = await merge(store, inherited, { [MANIFEST_MIN_COUNT_TO_MERGE]: '3' });
    expect(list).toHaveLength(2);
    const [carried] = entriesOf(store, list[1] as ManifestListEntry);
    const { block_size_in_bytes: _dropped, ...kept } = metrics;
    expect(carried?.data_file).toMatchObject(kept);
    expect(carried?.data_file).not.toHaveProperty('block_size_in_bytes');
  });

  it('packs by the target size: the oldest bins full, the newest under-filled, none over the target, a manifest over it never rewritten', async () => {
    const store = new MemoryStore();
    const ours = ourManifests(store, 12);
    const big = {
      ...(ours[11] as ManifestListEntry),
      manifest_path: 'mem://big',
      manifest_length: 1_000_000n,
    };
    const inherited = [...ours.slice(0, 11), big];
    const lengths = ours.map((m) => m.manifest_length);
    const target = BigInt(Math.max(...lengths.map(Number))) * 4n + 10n; // four of ours a bin
    expect(lengths.every((length) => length * 5n > target)).toBe(true);
    const properties = { [MANIFEST_MIN_COUNT_TO_MERGE]: '4', [MANIFEST_TARGET_SIZE_BYTES]: String(target) };
    const bins = binsToMerge(
      {
        metadata: metadataWith(properties),
        snapshotId: NEW,
        sequenceNumber: 1_000n,
        added: [addedManifest(store)],
        inherited,
      },
      manifestMergeSettings(properties),
    );
    expect(bins.map((bin) => bin.map((m) => m.manifest_path))).toEqual([
      ['mem://m-12', 'mem://m-11', 'mem://m-10'],
      ['mem://m-9', 'mem://m-8', 'mem://m-7', 'mem://m-6'],
      ['mem://m-5', 'mem://m-4', 'mem://m-3', 'mem://m-2'],
    ]);
    const list = await merge(store, inherited, properties);
    expect(list.map((m) => m.existing_files_count)).toEqual([0, 3, 4, 4, 0]);
    expect(list[4]).toBe(big);
    for (const m of list.slice(1, 4)) expect(m.manifest_length).toBeLessThanOrEqual(target);
    // Below the count (three in the newest bin and the added one), that bin waits; the full older bins do not.
    const fewer = await merge(store, inherited, { ...properties, [MANIFEST_MIN_COUNT_TO_MERGE]: '5' });
    expect(fewer.map((m) => m.existing_files_count)).toEqual([0, 0, 0, 0, 4, 4, 0]);
  });

  it('merges nothing when the table says commit.manifest-merge.enabled=false', async () => {
    const store = new MemoryStore();
    const inherited = ourManifests(store, 120);
    const added = [addedManifest(store)];
    store.reads = [];
    expect(await merge(store, inherited, { [MANIFEST_MERGE_ENABLED]: 'false' }, added)).toEqual([
      ...added,
      ...inherited,
    ]);
    expect(store.reads).toEqual([]);
  });

  it('names a merged manifest by the snapshot and its bytes: a retry on the same parent writes the same key, one on another parent another', async () => {
    const store = new MemoryStore();
    const inherited = ourManifests(store, 99);
    const first = await merge(store, inherited);
    const retry = await merge(store, inherited);
    expect(retry).toEqual(first);
    const hundredth = encodeManifest({ schema, spec, snapshotId: snap(100), files: [file(100)] });
    const rebased = await merge(store, [
      store.list('mem://m-100', hundredth, snap(100), 100, [file(100)]),
      ...inherited,
    ]);
    expect(rebased[1]?.manifest_path).toMatch(new RegExp(`^mem://${NEW}-m1-`));
    expect(rebased[1]?.manifest_path).not.toBe(first[1]?.manifest_path);
  });
});

describe('a table whose manifest list was merged (local S3, icebird)', () => {
  let res: TestResources;
  beforeAll(async () => {
    res = await freshResources('merge');
    vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
  });
  afterAll(() => {
    vi.unstubAllGlobals();
  });

  /**
   * Appends checkpoint `id` as appendCheckpoint does, its list written by mergedManifestList with the table's
   * minimum count at `minCount`: the hook an append takes, in miniature.
   */
  async function mergingAppend(
    catalog: FileCatalog,
    id: number,
    files: DataFile[],
    minCount: number,
  ): Promise<{ state: TableState; manifests: ManifestListEntry[] }> {
    const state = await catalog.load();
    if (!state) throw new Error('the table has no metadata');
    const base = state.metadata;
    const snapshotId = snapshotIdOf('orders', id);
    const { parentSnapshotId, sequenceNumber } = nextSnapshotBase(base);
    const parent = base.snapshots.find((s) => s['snapshot-id'] === parentSnapshotId);
    if (!parent) throw new Error('the table has no head');
    const store = s3ManifestStore(res.clients.s3, base.location);
    const [tableSchema, tableSpec] = [currentSchema(base), defaultSpec(base)];
    const bytes = encodeManifest({ schema: tableSchema, spec: tableSpec, snapshotId, files });
    const path = await store.write(`${snapshotId}-m0`, bytes);
    const added = [
      addedManifestEntry({
        path,
        length: bytes.length,
        schema: tableSchema,
        spec: tableSpec,
        files,
        snapshotId,
        sequenceNumber: BigInt(sequenceNumber),
      }),
    ];
    const inherited = decodeManifestList(await store.read(parent['manifest-list']));
    const metadata = {
      ...base,
      properties: { ...base.properties, [MANIFEST_MIN_COUNT_TO_MERGE]: String(minCount) },
    };
    const manifests = await mergedManifestList(
      { metadata, snapshotId, sequenceNumber: BigInt(sequenceNumber), added, inherited },
      store,
    );
    const list = encodeManifestList({
      snapshotId,
      parentSnapshotId,
      sequenceNumber: BigInt(sequenceNumber),
      manifests,
    });
    const next = appendSnapshot(base, {
      snapshotId,
      manifestList: await store.write(`snap-${snapshotId}`, list),
      nowMs: Date.now(),
      previousLocation: state.location,
      added: {
        dataFiles: files.length,
        records: files.reduce((sum, f) => sum + f.recordCount, 0),
        filesSize: 1,
        partitions: 1,
      },
      pipelineId: 'orders',
      checkpointId: id,
      lanes: ['orders'],
    });
    const committed = await catalog.commit(state, next);
    if (committed === 'conflict') throw new Error('conflict');
    return { state: committed, manifests };
  }

  it('reads the same rows, each file still added by its own snapshot; a retried merge writes the same keys; a later append carries the merged manifest', async () => {
    const catalog = new FileCatalog(res.clients.s3, res.bucket, `${uniqueName('merged')}/iceberg/output`);
    const table = outputTable(catalog.location);
    const fileOf = new Map<string, number>();
    const filesOf = async (id: number) => {
      const made = await dataFile(res.clients.s3, table, rows(id * 10, 2));
      fileOf.set(made.path, id);
      return [made];
    };
    for (let id = 1; id <= 4; id++)
      await appendCheckpoint(catalog, res.clients.s3, checkpoint(table, id, await filesOf(id)));
    const before = await catalog.load();
    if (!before) throw new Error('no table');
    const five = await filesOf(5);
    const { state, manifests } = await mergingAppend(catalog, 5, five, 5);
    expect(manifests.map((m) => [m.added_files_count, m.existing_files_count])).toEqual([
      [1, 0],
      [0, 4],
    ]);
    const expected = orderIds([10, 2], [20, 2], [30, 2], [40, 2], [50, 2]);
    expect(await orderIdsRead(state)).toEqual(expected);
    const head = state.metadata.snapshots.find((s) => s['snapshot-id'] === mainSnapshotId(state.metadata));
    if (!head) throw new Error('no head');
    const { live } = await snapshotFiles(new TableFileReader(res.clients.s3), head);
    expect(new Map([...live].map(([path, entries]) => [path, entries.map((e) => e.addedBy)]))).toEqual(
      new Map([...fileOf].map(([path, id]) => [path, [snapshotIdOf('orders', id)]])),
    );
    // The same merge on the same parent (a retried publish) writes the objects it wrote, under the same keys.
    const store = s3ManifestStore(res.clients.s3, before.metadata.location);
    const inherited = decodeManifestList(
      await store.read((before.metadata.snapshots.at(-1) as { 'manifest-list': string })['manifest-list']),
    );
    const metadata = {
      ...before.metadata,
      properties: { ...before.metadata.properties, [MANIFEST_MIN_COUNT_TO_MERGE]: '5' },
    };
    const retried = await mergedManifestList(
      {
        metadata,
        snapshotId: snapshotIdOf('orders', 5),
        sequenceNumber: 5n,
        added: manifests.slice(0, 1),
        inherited,
      },
      store,
    );
    expect(retried).toEqual(manifests);
    await appendCheckpoint(catalog, res.clients.s3, checkpoint(table, 6, await filesOf(6)));
    const after = await catalog.load();
    if (!after) throw new Error('no table');
    expect(await orderIdsRead(after)).toEqual(orderIds([10, 2], [20, 2], [30, 2], [40, 2], [50, 2], [60, 2]));
  });
});
