import { describe, expect, it } from 'vitest';
import { parseTableMetadata, tableMetadataJson } from '../../shared/iceberg/metadata-json.ts';
import { partitionSpec } from '../../shared/iceberg/partition-spec.ts';
import { icebergSchema } from '../../shared/iceberg/schema.ts';
import {
  type AppendedSnapshot,
  appendSnapshot,
  createTableMetadata,
  currentSchema,
  defaultSpec,
  IcebergMetadataError,
  mainHistory,
  nextSnapshotBase,
  snapshotIdOf,
  snapshotOfCheckpoint,
  type TableMetadata,
  tableUuidOf,
  withSchema,
  withSpec,
} from '../../shared/iceberg/table-metadata.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'region', type: 'string', nullable: true },
];
const LOCATION = 's3://bucket/pl/iceberg/output';
const T0 = Date.UTC(2026, 2, 14);

function newTable(): TableMetadata {
  const { schema, lastColumnId } = icebergSchema(COLUMNS);
  const { spec, lastPartitionId } = partitionSpec(schema, COLUMNS, { timePartitioning: 'none' });
  return createTableMetadata({ location: LOCATION, schema, lastColumnId, spec, lastPartitionId, nowMs: T0 });
}

function append(checkpointId: number, overrides: Partial<AppendedSnapshot> = {}): AppendedSnapshot {
  return {
    snapshotId: snapshotIdOf('orders', checkpointId),
    manifestList: `${LOCATION}/metadata/snap-${checkpointId}.avro`,
    nowMs: T0 + checkpointId * 1000,
    added: { dataFiles: 2, records: 10, filesSize: 3000, partitions: 1 },
    pipelineId: 'orders',
    checkpointId,
    lanes: ['orders', 'orders~1'],
    ...overrides,
  };
}

describe('snapshot ids and table uuids', () => {
  it('are functions of their inputs: positive 63-bit snapshot ids, v4-shaped uuids', () => {
    const id = snapshotIdOf('orders', 7);
    expect(snapshotIdOf('orders', 7)).toBe(id);
    expect(id > 0n && id < 2n ** 63n).toBe(true);
    const ids = new Set(Array.from({ length: 1000 }, (_, n) => snapshotIdOf('orders', n)));
    ids.add(snapshotIdOf('other', 7));
    expect(ids.size).toBe(1001);
    expect([...ids].every((value) => value > 0n && value < 2n ** 63n)).toBe(true);
    expect(tableUuidOf(LOCATION)).toBe(tableUuidOf(LOCATION));
    expect(tableUuidOf(LOCATION)).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(tableUuidOf(`${LOCATION}2`)).not.toBe(tableUuidOf(LOCATION));
  });
});

describe('createTableMetadata', () => {
  it('gives v2 metadata without a snapshot, with the name mapping among the properties', () => {
    const metadata = newTable();
    expect(metadata).toMatchObject({
      'format-version': 2,
      'table-uuid': tableUuidOf(LOCATION),
      location: LOCATION,
      'last-sequence-number': 0,
      'last-updated-ms': T0,
      'last-column-id': 6,
      'current-schema-id': 0,
      'default-spec-id': 0,
      'partition-specs': [{ 'spec-id': 0, fields: [] }],
      'last-partition-id': 999,
      'default-sort-order-id': 0,
      'sort-orders': [{ 'order-id': 0, fields: [] }],
      refs: {},
      snapshots: [],
      'snapshot-log': [],
      'metadata-log': [],
    });
    expect(metadata['current-snapshot-id']).toBeUndefined();
    expect(JSON.parse(metadata.properties['schema.name-mapping.default'] ?? '')[0]).toEqual({
      'field-id': 1,
      names: ['orderId'],
    });
    expect(nextSnapshotBase(metadata)).toEqual({ sequenceNumber: 1 });
  });
});

describe('appendSnapshot', () => {
  it('chains snapshots on main with sequence numbers, parents, logs and the checkpoint in the summary', () => {
    const v1 = newTable();
    const v2 = appendSnapshot(v1, append(1));
    const v3 = appendSnapshot(v2, append(2, { previousLocation: `${LOCATION}/metadata/v2.metadata.json` }));
    const [first, second] = v3.snapshots;
    expect(first).toEqual({
      'snapshot-id': snapshotIdOf('orders', 1),
      'sequence-number': 1,
      'timestamp-ms': T0 + 1000,
      'manifest-list': `${LOCATION}/metadata/snap-1.avro`,
      summary: {
        operation: 'append',
        'added-data-files': '2',
        'added-records': '10',
        'added-files-size': '3000',
        'changed-partition-count': '1',
        'total-data-files': '2',
        'total-records': '10',
        'total-files-size': '3000',
        'total-delete-files': '0',
        'total-position-deletes': '0',
        'total-equality-deletes': '0',
        'eos.pipeline-id': 'orders',
        'eos.checkpoint-id': '1',
        'eos.lanes': 'orders,orders~1',
      },
      'schema-id': 0,
    });
    expect(second).toMatchObject({
      'snapshot-id': snapshotIdOf('orders', 2),
      'parent-snapshot-id': snapshotIdOf('orders', 1),
      'sequence-number': 2,
      summary: { 'total-data-files': '4', 'total-records': '20', 'total-files-size': '6000' },
    });
    expect(v3['last-sequence-number']).toBe(2);
    expect(v3['current-snapshot-id']).toBe(snapshotIdOf('orders', 2));
    expect(v3.refs).toEqual({ main: { 'snapshot-id': snapshotIdOf('orders', 2), type: 'branch' } });
    expect(v3['snapshot-log']).toEqual([
      { 'timestamp-ms': T0 + 1000, 'snapshot-id': snapshotIdOf('orders', 1) },
      { 'timestamp-ms': T0 + 2000, 'snapshot-id': snapshotIdOf('orders', 2) },
    ]);
    expect(v3['metadata-log']).toEqual([
      { 'timestamp-ms': T0 + 1000, 'metadata-file': `${LOCATION}/metadata/v2.metadata.json` },
    ]);
    expect(mainHistory(v3)).toEqual([snapshotIdOf('orders', 2), snapshotIdOf('orders', 1)]);
    expect(nextSnapshotBase(v3)).toEqual({ parentSnapshotId: snapshotIdOf('orders', 2), sequenceNumber: 3 });
    // The input is not changed: pure.
    expect(v1.snapshots).toEqual([]);
  });

  it('never goes back in time and refuses a snapshot id already in the table', () => {
    const v2 = appendSnapshot(newTable(), append(5));
    const late = appendSnapshot(v2, append(6, { nowMs: T0 }));
    expect(late.snapshots[1]?.['timestamp-ms']).toBe(T0 + 5000);
    expect(() => appendSnapshot(v2, append(5))).toThrow(IcebergMetadataError);
  });

  it('leaves out a total the parent summary lacks (a snapshot of another writer)', () => {
    const v2 = appendSnapshot(newTable(), append(1));
    const foreign = {
      ...v2,
      snapshots: v2.snapshots.map((snapshot) => ({ ...snapshot, summary: { operation: 'replace' } })),
    };
    const summary = appendSnapshot(foreign, append(2)).snapshots[1]?.summary ?? {};
    expect(Object.keys(summary).filter((key) => key.startsWith('total-'))).toEqual([]);
  });

  it('keeps the metadata log to write.metadata.previous-versions-max', () => {
    let metadata: TableMetadata = {
      ...newTable(),
      properties: { 'write.metadata.previous-versions-max': '2' },
    };
    for (let n = 1; n <= 4; n++) {
      metadata = appendSnapshot(metadata, append(n, { previousLocation: `m${n}` }));
    }
    expect(metadata['metadata-log'].map((entry) => entry['metadata-file'])).toEqual(['m3', 'm4']);
  });
});

describe('snapshotOfCheckpoint', () => {
  it("finds a pipeline's checkpoint by its summary and says whether main's history holds it", () => {
    const v3 = appendSnapshot(appendSnapshot(newTable(), append(1)), append(2));
    expect(snapshotOfCheckpoint(v3, 'orders', 1)).toEqual({ snapshot: v3.snapshots[0], inMainHistory: true });
    expect(snapshotOfCheckpoint(v3, 'orders', 3)).toBeUndefined();
    expect(snapshotOfCheckpoint(v3, 'other', 1)).toBeUndefined();
    // Rolled back to checkpoint 1: checkpoint 2's snapshot is listed but not in main's history.
    const rolledBack = {
      ...v3,
      refs: { main: { 'snapshot-id': snapshotIdOf('orders', 1), type: 'branch' as const } },
    };
    expect(snapshotOfCheckpoint(rolledBack, 'orders', 2)?.inMainHistory).toBe(false);
  });
});

describe('schemas and specs', () => {
  it('adds a changed schema as the current one, reuses a listed one, keeps an equal one', () => {
    const v1 = newTable();
    expect(withSchema(v1, icebergSchema(COLUMNS).schema, 6)).toBe(v1);
    const wider = icebergSchema([...COLUMNS, { name: 'channel', type: 'string', nullable: true }], {
      previous: currentSchema(v1),
      lastColumnId: v1['last-column-id'],
    });
    const v2 = withSchema(v1, wider.schema, wider.lastColumnId);
    expect(v2['current-schema-id']).toBe(1);
    expect(v2['last-column-id']).toBe(7);
    expect(v2.schemas).toHaveLength(2);
    expect(JSON.parse(v2.properties['schema.name-mapping.default'] ?? '')).toContainEqual({
      'field-id': 7,
      names: ['channel'],
    });
    const back = withSchema(v2, icebergSchema(COLUMNS).schema, 6);
    expect(back['current-schema-id']).toBe(0);
    expect(back.schemas).toHaveLength(2);
  });

  it('adds a changed partition spec as the default', () => {
    const v1 = newTable();
    const { spec, lastPartitionId } = partitionSpec(
      currentSchema(v1),
      COLUMNS,
      { timePartitioning: 'none', identityFields: ['region'] },
      { previous: defaultSpec(v1), lastPartitionId: v1['last-partition-id'] },
    );
    const v2 = withSpec(v1, spec, lastPartitionId);
    expect(v2['default-spec-id']).toBe(1);
    expect(v2['last-partition-id']).toBe(1000);
    expect(defaultSpec(v2).fields).toEqual([
      { 'source-id': 2, 'field-id': 1000, name: 'region', transform: 'identity' },
    ]);
  });
});

describe('metadata JSON', () => {
  it('writes and reads 63-bit snapshot ids exactly', () => {
    const v2 = appendSnapshot(appendSnapshot(newTable(), append(1)), append(2));
    const text = tableMetadataJson(v2);
    expect(text).toContain(`"current-snapshot-id": ${snapshotIdOf('orders', 2)}`);
    expect(parseTableMetadata(text)).toEqual(v2);
  });

  it("reads another writer's metadata: small ids as bigint, -1 as no snapshot, unknown fields kept", () => {
    const text = `{"format-version":2,"table-uuid":"u","location":"s3://b/t","last-sequence-number":0,
      "last-updated-ms":1,"last-column-id":1,"current-schema-id":0,
      "schemas":[{"type":"struct","schema-id":0,"fields":[{"id":1,"name":"a","required":false,"type":"string"}]}],
      "default-spec-id":0,"partition-specs":[{"spec-id":0,"fields":[]}],"last-partition-id":999,
      "default-sort-order-id":0,"sort-orders":[{"order-id":0,"fields":[]}],"properties":{},
      "current-snapshot-id":-1,"statistics":[{"snapshot-id":12,"note":"x \\"9999999999999999999\\""}]}`;
    const parsed = parseTableMetadata(text);
    expect(parsed['current-snapshot-id']).toBeUndefined();
    expect(parsed.statistics).toEqual([{ 'snapshot-id': 12n, note: 'x "9999999999999999999"' }]);
    expect(parsed.snapshots).toEqual([]);
    expect(parsed.refs).toEqual({});
    expect(() => parseTableMetadata(text.replace('"format-version":2', '"format-version":1'))).toThrow(
      IcebergMetadataError,
    );
  });
});
