/**
 * appendCheckpoint against the local S3 server, read back by icebird (a reader nobody here wrote) over the same
 * server: every appended row comes back once, a retried checkpoint is one snapshot, concurrent appends of other
 * checkpoints are rebased into one chain and none is lost, every state loaded is judged by the caller first, the
 * schema evolves with its ids.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { icebergManifests, icebergMetadata, icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import {
  appendCheckpoint,
  type CheckpointAppend,
  IcebergCommitConflictError,
  type IcebergTable,
  newestCheckpointInMain,
  tableLayout,
} from '../../shared/iceberg/append.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import type { DataFile } from '../../shared/iceberg/manifest-file.ts';
import { dataFilePartition } from '../../shared/iceberg/partition-spec.ts';
import { fieldsByPath } from '../../shared/iceberg/schema.ts';
import {
  currentSchema,
  mainHistory,
  snapshotIdOf,
  type TableMetadata,
} from '../../shared/iceberg/table-metadata.ts';
import { listObjects, putIfAbsent } from '../../shared/sink/objects.ts';
import { encodeParquet } from '../../shared/sink/parquet.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import type { OutputRow } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { localS3Fetch } from './icebird-s3.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('iceapp');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'amount', type: 'double', nullable: true },
  { name: 'placedAt', type: 'timestamp', nullable: false },
];
const HOUR_7 = Date.UTC(2026, 2, 14, 7);
const clock = new ManualClock(HOUR_7);

function newTable(overrides: Partial<IcebergTable> = {}): { table: IcebergTable; catalog: FileCatalog } {
  const catalog = new FileCatalog(s3, res.bucket, uniqueName('tables/orders'));
  const table = {
    location: catalog.location,
    columns: COLUMNS,
    partitioning: { timePartitioning: 'hour' as const },
    ...overrides,
  };
  return { table, catalog };
}

/** Rows `first`…`first + count - 1` of partition 0, placed in the hour of `at`. */
function rows(
  first: number,
  count: number,
  at = HOUR_7,
  columns: readonly ColumnDefinition[] = COLUMNS,
): OutputRow[] {
  return Array.from({ length: count }, (_, n) => {
    const offset = first + n;
    const row: Record<string, unknown> = {
      orderId: `o-${offset}`,
      amount: offset / 4,
      placedAt: at + offset,
    };
    if (columns.some((column) => column.name === 'channel')) row.channel = offset % 2 ? 'web' : null;
    return { ...row, source: { topic: 'orders', partition: 0, offset } } as OutputRow;
  });
}

/** Writes the rows as one Parquet object of the table and describes it as a data file. */
async function dataFile(table: IcebergTable, fileRows: OutputRow[], folder?: string): Promise<DataFile> {
  const layout = tableLayout(table);
  const bytes = Buffer.from(encodeParquet(table.columns, fileRows));
  const key = `${table.location.replace(`s3://${res.bucket}/`, '')}/data/${uniqueName('part')}.parquet`;
  await putIfAbsent(s3, res.bucket, key, bytes);
  return {
    path: `s3://${res.bucket}/${key}`,
    recordCount: fileRows.length,
    fileSizeInBytes: bytes.length,
    partition: dataFilePartition(layout.schema, layout.spec, layout.partitionColumns, {
      rows: fileRows,
      folder,
    }),
  };
}

function request(table: IcebergTable, checkpointId: number, dataFiles: DataFile[]): CheckpointAppend {
  return { table, dataFiles, pipelineId: 'orders', checkpointId, lanes: ['orders'], clock };
}

/**
 * The table as icebird reads it: one line per row, sorted. (The time folder columns are left out: icebird takes an
 * identity partition's value from the manifest only for files carrying an `iceberg.schema`, which the sink's files
 * do not; {@link partitionsBack} reads them where they are.)
 */
async function readBack(catalog: FileCatalog): Promise<string[]> {
  const read = await icebergRead({ tableUrl: catalog.location });
  return read
    .map((row) => {
      const { orderId, amount, placedAt, source, channel } = row as Record<string, unknown>;
      const { topic, partition, offset } = source as { topic: string; partition: number; offset: bigint };
      const time = placedAt instanceof Date ? placedAt.getTime() : Number(placedAt);
      const extra = channel === undefined ? '' : ` ${String(channel)}`;
      return `${orderId} ${amount} ${time} ${topic}/${partition}/${offset}${extra}`;
    })
    .sort();
}

function expected(fileRows: OutputRow[]): string[] {
  return fileRows
    .map((row) => {
      const { orderId, amount, placedAt, source } = row as unknown as Record<string, number> & {
        source: { topic: string; partition: number; offset: number };
      };
      return `${orderId} ${amount} ${placedAt} ${source.topic}/${source.partition}/${source.offset}`;
    })
    .sort();
}

/** Each live data file's partition as icebird reads the table's manifests: `<path> <values>`, sorted. */
async function partitionsBack(catalog: FileCatalog): Promise<string[]> {
  const manifests = await icebergManifests(await icebergMetadata({ tableUrl: catalog.location }));
  return manifests
    .flatMap(({ entries }) => entries.filter((entry) => entry.status !== 2))
    .map((entry) => `${entry.data_file.file_path} ${Object.values(entry.data_file.partition).join('/')}`)
    .sort();
}

function partitionsOf(files: DataFile[]): string[] {
  return files.map((file) => `${file.path} ${file.partition.join('/')}`).sort();
}

async function metadataKeys(catalog: FileCatalog): Promise<string[]> {
  const keys: string[] = [];
  for await (const object of listObjects(s3, res.bucket, `${catalog.root}/metadata/`)) keys.push(object.key);
  return keys.sort();
}

describe('appendCheckpoint', () => {
  it('creates the table and appends each checkpoint as one snapshot that icebird reads back whole', async () => {
    const { table, catalog } = newTable();
    const first = [...rows(0, 3)];
    const second = rows(3, 4, HOUR_7 + 3_600_000);
    const firstFiles = [await dataFile(table, first, 'dt=2026-03-14/hour=07')];
    const one = await appendCheckpoint(catalog, s3, request(table, 1, firstFiles));
    expect(one).toMatchObject({
      outcome: 'appended',
      snapshotId: snapshotIdOf('orders', 1),
      inMainHistory: true,
      attempts: 1,
    });
    expect(await readBack(catalog)).toEqual(expected(first));
    expect(await partitionsBack(catalog)).toEqual(partitionsOf(firstFiles));
    const secondFiles = [
      await dataFile(table, second.slice(0, 2), 'dt=2026-03-14/hour=08'),
      await dataFile(table, second.slice(2), 'dt=2026-03-14/hour=08'),
    ];
    const two = await appendCheckpoint(catalog, s3, request(table, 2, secondFiles));
    expect(two.outcome).toBe('appended');
    expect(await partitionsBack(catalog)).toEqual(partitionsOf([...firstFiles, ...secondFiles]));
    expect(partitionsOf(secondFiles)[0]).toMatch(/ 2026-03-14\/08$/);
    expect(await readBack(catalog)).toEqual([...expected(first), ...expected(second)].sort());
    const { metadata } = two.state;
    expect(mainHistory(metadata)).toEqual([snapshotIdOf('orders', 2), snapshotIdOf('orders', 1)]);
    expect(metadata.snapshots[1]?.summary).toMatchObject({
      operation: 'append',
      'added-data-files': '2',
      'added-records': '4',
      'total-records': '7',
      'total-data-files': '3',
      'changed-partition-count': '1',
      'eos.pipeline-id': 'orders',
      'eos.checkpoint-id': '2',
      'eos.lanes': 'orders',
    });
    // The table is created with its first snapshot: one metadata version per checkpoint.
    expect([one.state.version, two.state.version]).toEqual(['1', '2']);
  });

  it('appends a retried checkpoint once, writing no new object', async () => {
    const { table, catalog } = newTable();
    const file = await dataFile(table, rows(0, 5), 'dt=2026-03-14/hour=07');
    await appendCheckpoint(catalog, s3, request(table, 1, [file]));
    const keys = await metadataKeys(catalog);
    const retry = await appendCheckpoint(catalog, s3, request(table, 1, [file]));
    expect(retry).toMatchObject({
      outcome: 'already-committed',
      snapshotId: snapshotIdOf('orders', 1),
      attempts: 0,
    });
    expect(retry.state.metadata.snapshots).toHaveLength(1);
    expect(await metadataKeys(catalog)).toEqual(keys);
    expect(await readBack(catalog)).toEqual(expected(rows(0, 5)));
  });

  it('appends a checkpoint once when two invocations of it race (a zombie commit step)', async () => {
    const { table, catalog } = newTable();
    const file = await dataFile(table, rows(0, 3), 'dt=2026-03-14/hour=07');
    const outcomes = await Promise.all(
      [1, 2, 3].map(() => appendCheckpoint(catalog, s3, request(table, 1, [file]))),
    );
    expect(outcomes.filter((outcome) => outcome.outcome === 'appended')).toHaveLength(1);
    expect(new Set(outcomes.map((outcome) => outcome.snapshotId))).toEqual(
      new Set([snapshotIdOf('orders', 1)]),
    );
    const state = await catalog.load();
    expect(state?.metadata.snapshots).toHaveLength(1);
    expect(await readBack(catalog)).toEqual(expected(rows(0, 3)));
  });

  it('rebases onto a commit that lands between its load and its commit, losing neither', async () => {
    const { table, catalog } = newTable();
    await appendCheckpoint(
      catalog,
      s3,
      request(table, 1, [await dataFile(table, rows(0, 2), 'dt=2026-03-14/hour=07')]),
    );
    const other = await dataFile(table, rows(10, 3), 'dt=2026-03-14/hour=07');
    let interfered = false;
    // A catalog through which, just before checkpoint 3's first commit, checkpoint 2 commits (another writer).
    const racing: Catalog = {
      load: () => catalog.load(),
      commit: async (expectedState: TableState | undefined, next: TableMetadata) => {
        if (!interfered) {
          interfered = true;
          const landed = await appendCheckpoint(catalog, s3, request(table, 2, [other]));
          expect(landed.outcome).toBe('appended');
        }
        return catalog.commit(expectedState, next);
      },
    };
    const mine = await appendCheckpoint(
      racing,
      s3,
      request(table, 3, [await dataFile(table, rows(20, 4), 'dt=2026-03-14/hour=07')]),
    );
    expect(mine).toMatchObject({ outcome: 'appended', attempts: 2 });
    const { metadata } = mine.state;
    expect(mainHistory(metadata)).toEqual([3, 2, 1].map((id) => snapshotIdOf('orders', id)));
    expect(metadata.snapshots.map((snapshot) => snapshot['sequence-number'])).toEqual([1, 2, 3]);
    expect(metadata.snapshots[2]?.summary['total-records']).toBe('9');
    expect(await readBack(catalog)).toEqual(
      [...expected(rows(0, 2)), ...expected(rows(10, 3)), ...expected(rows(20, 4))].sort(),
    );
  });

  it('lands concurrent appends of different checkpoints in one chain', async () => {
    const { table, catalog } = newTable();
    const files = await Promise.all(
      [0, 1, 2, 3].map((n) => dataFile(table, rows(n * 10, 2), 'dt=2026-03-14/hour=07')),
    );
    const outcomes = await Promise.all(
      files.map((file, n) => appendCheckpoint(catalog, s3, request(table, n + 1, [file]))),
    );
    expect(outcomes.every((outcome) => outcome.outcome === 'appended')).toBe(true);
    const state = await catalog.load();
    const history = mainHistory(state!.metadata);
    expect(history).toHaveLength(4);
    expect(new Set(history)).toEqual(new Set([1, 2, 3, 4].map((id) => snapshotIdOf('orders', id))));
    expect(await readBack(catalog)).toEqual(files.flatMap((_, n) => expected(rows(n * 10, 2))).sort());
  });

  it('has every state it loads judged before it looks at it or commits, the reload after a conflict included', async () => {
    const { table, catalog } = newTable();
    await appendCheckpoint(catalog, s3, request(table, 1, []));
    const judged: (bigint | undefined)[] = [];
    let interfered = false;
    // Checkpoint 2 commits just before checkpoint 3's first commit; the judge refuses the table it leaves.
    const racing: Catalog = {
      load: () => catalog.load(),
      commit: async (expectedState: TableState | undefined, next: TableMetadata) => {
        if (!interfered) {
          interfered = true;
          await appendCheckpoint(catalog, s3, request(table, 2, []));
        }
        return catalog.commit(expectedState, next);
      },
    };
    const refusal = new Error('the judge refuses this state');
    const judge = (state: TableState | undefined) => {
      const head = state?.metadata['current-snapshot-id'];
      judged.push(head);
      if (head === snapshotIdOf('orders', 2)) throw refusal;
    };
    await expect(appendCheckpoint(racing, s3, { ...request(table, 3, []), judge })).rejects.toBe(refusal);
    expect(judged).toEqual([snapshotIdOf('orders', 1), snapshotIdOf('orders', 2)]);
    const state = await catalog.load();
    expect(mainHistory(state!.metadata)).toEqual([2, 1].map((id) => snapshotIdOf('orders', id)));
    // A checkpoint the table already holds is not answered from a state the judge refuses either.
    await expect(appendCheckpoint(catalog, s3, { ...request(table, 2, []), judge })).rejects.toBe(refusal);
  });

  it('gives up after its attempts when every commit meets a conflict', async () => {
    const { table, catalog } = newTable();
    const stuck: Catalog = { load: () => catalog.load(), commit: async () => 'conflict' };
    await expect(appendCheckpoint(stuck, s3, { ...request(table, 1, []), maxAttempts: 3 })).rejects.toThrow(
      IcebergCommitConflictError,
    );
  });

  it('evolves the schema with its field ids, old files reading the new column as absent', async () => {
    const { table, catalog } = newTable({ partitioning: { timePartitioning: 'none' } });
    await appendCheckpoint(catalog, s3, request(table, 1, [await dataFile(table, rows(0, 2))]));
    const wider: IcebergTable = {
      ...table,
      columns: [...COLUMNS, { name: 'channel', type: 'string', nullable: true }],
    };
    const evolved = await appendCheckpoint(
      catalog,
      s3,
      request(wider, 2, [await dataFile(wider, rows(5, 2, HOUR_7, wider.columns))]),
    );
    const schema = currentSchema(evolved.state.metadata);
    const ids = Object.fromEntries([...fieldsByPath(schema.fields)].map(([path, field]) => [path, field.id]));
    expect(ids).toMatchObject({
      orderId: 1,
      amount: 2,
      placedAt: 3,
      source: 4,
      'source.offset': 7,
      channel: 8,
    });
    expect(evolved.state.metadata['current-schema-id']).toBe(1);
    const read = await icebergRead({ tableUrl: catalog.location });
    expect(read.map((row) => [row.orderId, row.channel ?? null]).sort()).toEqual([
      ['o-0', null],
      ['o-1', null],
      ['o-5', 'web'],
      ['o-6', null],
    ]);
  });

  it("partitions by the day of a timestamp time field and reads every day's file back", async () => {
    const { table, catalog } = newTable({ partitioning: { timePartitioning: 'day', timeField: 'placedAt' } });
    const days = [0, 1].map((day) => rows(day * 100, 3, HOUR_7 + day * 86_400_000));
    const files = await Promise.all(days.map((dayRows) => dataFile(table, dayRows)));
    expect(files.map((file) => file.partition)).toEqual([[20526], [20527]]);
    const appended = await appendCheckpoint(catalog, s3, request(table, 1, files));
    expect(appended.state.metadata['partition-specs'][0]?.fields).toEqual([
      { 'source-id': 3, 'field-id': 1000, name: 'placedAt_day', transform: 'day' },
    ]);
    const read = await icebergRead({ tableUrl: catalog.location });
    expect(read.map((row) => row.orderId).sort()).toEqual(
      days
        .flat()
        .map((row) => row.orderId)
        .sort(),
    );
  });

  it('sets the checkpoint property in the same swap and takes it as the answer once the snapshot is expired', async () => {
    const { table, catalog } = newTable();
    const property = 'eos.orders.published-checkpoint';
    const file = await dataFile(table, rows(0, 3), 'dt=2026-03-14/hour=07');
    const one = await appendCheckpoint(catalog, s3, {
      ...request(table, 1, [file]),
      checkpointProperty: property,
    });
    expect(one).toMatchObject({ outcome: 'appended', sequenceNumber: 1 });
    expect(one.state.metadata.properties[property]).toBe('1');
    // Maintenance expires the snapshot (a replace snapshot over the same files at main's head).
    const state = one.state;
    const head = state.metadata.snapshots[0]!;
    const replaced = { ...head, 'snapshot-id': 42n, 'sequence-number': 2, summary: { operation: 'replace' } };
    const { 'parent-snapshot-id': _parent, ...orphan } = replaced;
    const expired: TableMetadata = {
      ...state.metadata,
      'last-sequence-number': 2,
      'current-snapshot-id': 42n,
      refs: { main: { 'snapshot-id': 42n, type: 'branch' } },
      snapshots: [orphan],
      'snapshot-log': [],
    };
    expect(await catalog.commit(state, expired)).not.toBe('conflict');
    const keys = await metadataKeys(catalog);
    const retry = await appendCheckpoint(catalog, s3, {
      ...request(table, 1, [file]),
      checkpointProperty: property,
    });
    expect(retry).toMatchObject({
      outcome: 'already-committed',
      foundBy: 'property',
      snapshotId: snapshotIdOf('orders', 1),
      sequenceNumber: 2,
      attempts: 0,
    });
    expect(await metadataKeys(catalog)).toEqual(keys);
    expect(await readBack(catalog)).toEqual(expected(rows(0, 3)));
    // Without the property the expired checkpoint is not recognised: the property is what holds it.
    const blind = await appendCheckpoint(catalog, s3, request(table, 1, [file]));
    expect(blind.outcome).toBe('appended');
    // The next checkpoint moves it.
    const two = await appendCheckpoint(catalog, s3, {
      ...request(table, 2, [await dataFile(table, rows(3, 2), 'dt=2026-03-14/hour=07')]),
      checkpointProperty: property,
    });
    expect(two.state.metadata.properties[property]).toBe('2');
  });

  it('takes main ending at the checkpoint snapshot, expired under a compaction, as the answer when the property is gone too', async () => {
    const { table, catalog } = newTable();
    const file = await dataFile(table, rows(0, 3), 'dt=2026-03-14/hour=07');
    const one = await appendCheckpoint(catalog, s3, request(table, 1, [file]));
    const { state } = one;
    const head = state.metadata.snapshots[0]!;
    // A compaction over it (its parent the checkpoint's snapshot), that snapshot then expired; no property.
    const compaction = {
      ...head,
      'snapshot-id': 43n,
      'parent-snapshot-id': head['snapshot-id'],
      'sequence-number': 2,
      summary: { operation: 'replace' },
    };
    const expired: TableMetadata = {
      ...state.metadata,
      'last-sequence-number': 2,
      'current-snapshot-id': 43n,
      refs: { main: { 'snapshot-id': 43n, type: 'branch' } },
      snapshots: [compaction],
      'snapshot-log': [],
    };
    expect(await catalog.commit(state, expired)).not.toBe('conflict');
    const retry = await appendCheckpoint(catalog, s3, request(table, 1, [file]));
    expect(retry).toMatchObject({
      outcome: 'already-committed',
      foundBy: 'history',
      snapshotId: snapshotIdOf('orders', 1),
      inMainHistory: true,
      attempts: 0,
    });
    expect(await readBack(catalog)).toEqual(expected(rows(0, 3)));
    // Another checkpoint's snapshot there is no answer for this one.
    const other = await appendCheckpoint(catalog, s3, request(table, 2, [file]));
    expect(other.outcome).toBe('appended');
  });

  it('found by the property alone, says main does not hold it when main reaches an earlier checkpoint first', async () => {
    const { table, catalog } = newTable();
    const property = 'eos.orders.published-checkpoint';
    const append = async (checkpointId: number, first: number) =>
      appendCheckpoint(catalog, s3, {
        ...request(table, checkpointId, [await dataFile(table, rows(first, 2), 'dt=2026-03-14/hour=07')]),
        checkpointProperty: property,
      });
    await append(1, 0);
    const two = await append(2, 2);
    expect(newestCheckpointInMain(two.state.metadata, 'orders')).toBe(2);
    expect(newestCheckpointInMain(two.state.metadata, 'other')).toBeUndefined();
    // Main set back to checkpoint 1's snapshot and 2's expired: the property still names 2.
    const first = snapshotIdOf('orders', 1);
    const back: TableMetadata = {
      ...two.state.metadata,
      'current-snapshot-id': first,
      refs: { main: { 'snapshot-id': first, type: 'branch' } },
      snapshots: two.state.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] === first),
    };
    expect(await catalog.commit(two.state, back)).not.toBe('conflict');
    expect(newestCheckpointInMain(back, 'orders')).toBe(1);
    expect(await append(2, 2)).toMatchObject({
      outcome: 'already-committed',
      foundBy: 'property',
      inMainHistory: false,
      attempts: 0,
    });
    // A checkpoint the property passed and main's head names is still held.
    expect(await append(1, 0)).toMatchObject({ foundBy: 'summary', inMainHistory: true });
  });
});
