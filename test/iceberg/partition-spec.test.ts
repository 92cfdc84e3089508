import { describe, expect, it } from 'vitest';
import {
  dataFilePartition,
  IcebergPartitionError,
  type PartitionSettings,
  partitionOnlyColumns,
  partitionResultType,
  partitionSpec,
  sameSpecFields,
} from '../../shared/iceberg/partition-spec.ts';
import { icebergSchema } from '../../shared/iceberg/schema.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'region', type: 'string', nullable: true },
  { name: 'placedAt', type: 'timestamp', nullable: false },
  { name: 'placedAtMs', type: 'long', nullable: false },
];

const SOURCE = { topic: 'orders', partition: 0, offset: 1 };
const AT = Date.UTC(2026, 2, 14, 7, 30); // 2026-03-14T07:30Z
const DAY = Math.floor(AT / 86_400_000);
const HOUR = Math.floor(AT / 3_600_000);

function table(settings: PartitionSettings) {
  const partitionColumns = partitionOnlyColumns(COLUMNS, settings);
  const { schema } = icebergSchema(COLUMNS, { partitionColumns });
  return { schema, partitionColumns, ...partitionSpec(schema, COLUMNS, settings) };
}

describe('partitionSpec', () => {
  it('is unpartitioned without time partitioning or identity fields', () => {
    const { spec, lastPartitionId, partitionColumns } = table({ timePartitioning: 'none' });
    expect(spec).toEqual({ 'spec-id': 0, fields: [] });
    expect(lastPartitionId).toBe(999);
    expect(partitionColumns).toEqual([]);
  });

  it('takes the day or hour transform of a timestamp time field, then identity fields', () => {
    const { schema, spec, lastPartitionId } = table({
      timePartitioning: 'hour',
      timeField: 'placedAt',
      identityFields: ['region'],
    });
    expect(spec).toEqual({
      'spec-id': 0,
      fields: [
        { 'source-id': 3, 'field-id': 1000, name: 'placedAt_hour', transform: 'hour' },
        { 'source-id': 2, 'field-id': 1001, name: 'region', transform: 'identity' },
      ],
    });
    expect(lastPartitionId).toBe(1001);
    expect(spec.fields.map((field) => partitionResultType(schema, field))).toEqual(['int', 'string']);
  });

  it('partitions by the time folders, held only in the partition metadata, when the record time is no timestamp column', () => {
    for (const settings of [
      { timePartitioning: 'hour' },
      { timePartitioning: 'hour', timeField: 'placedAtMs' },
    ] as const) {
      const { schema, spec, partitionColumns } = table(settings);
      expect(partitionColumns).toEqual(['dt', 'hour']);
      const byId = new Map(schema.fields.map((field) => [field.id, field.name]));
      expect(spec.fields.map((field) => [byId.get(field['source-id']), field.name, field.transform])).toEqual(
        [
          ['dt', 'dt', 'identity'],
          ['hour', 'hour', 'identity'],
        ],
      );
    }
    expect(table({ timePartitioning: 'day' }).partitionColumns).toEqual(['dt']);
  });

  it('keeps a field id with its source and transform across specs and numbers new ones above last-partition-id', () => {
    const first = table({ timePartitioning: 'day', timeField: 'placedAt', identityFields: ['region'] });
    const second = partitionSpec(
      first.schema,
      COLUMNS,
      { timePartitioning: 'day', timeField: 'placedAt', identityFields: ['orderId'] },
      { previous: first.spec, lastPartitionId: first.lastPartitionId },
    );
    expect(second.spec['spec-id']).toBe(1);
    expect(second.spec.fields.map((field) => [field.name, field['field-id']])).toEqual([
      ['placedAt_day', 1000],
      ['orderId', 1002],
    ]);
    expect(sameSpecFields(first.spec, second.spec)).toBe(false);
    expect(sameSpecFields(first.spec, { ...first.spec, 'spec-id': 4 })).toBe(true);
  });

  it('refuses a field that is not a top-level column of the schema, or one named twice', () => {
    const { schema } = icebergSchema(COLUMNS);
    expect(() =>
      partitionSpec(schema, COLUMNS, { timePartitioning: 'none', identityFields: ['nope'] }),
    ).toThrow(IcebergPartitionError);
    expect(() =>
      partitionSpec(schema, COLUMNS, { timePartitioning: 'none', identityFields: ['source'] }),
    ).toThrow(/not a top-level column/);
    expect(() =>
      partitionSpec(schema, COLUMNS, { timePartitioning: 'none', identityFields: ['region', 'region'] }),
    ).toThrow(/named twice/);
  });
});

describe('dataFilePartition', () => {
  const row = (placedAt: number, region: string | null = 'eu') => ({
    orderId: 'o',
    region,
    placedAt,
    placedAtMs: placedAt,
    source: SOURCE,
  });

  it('computes time transforms and identity values from the rows', () => {
    const { schema, spec, partitionColumns } = table({
      timePartitioning: 'day',
      timeField: 'placedAt',
      identityFields: ['region', 'placedAtMs'],
    });
    expect(
      dataFilePartition(schema, spec, partitionColumns, {
        rows: [row(AT, 'eu')],
        folder: 'dt=2026-03-14',
      }),
    ).toEqual([DAY, 'eu', BigInt(AT)]);
    const hourly = table({ timePartitioning: 'hour', timeField: 'placedAt', identityFields: ['region'] });
    expect(
      dataFilePartition(hourly.schema, hourly.spec, hourly.partitionColumns, {
        rows: [row(AT, null), row(AT + 60_000, null)],
      }),
    ).toEqual([HOUR, null]);
  });

  it("reads the partition-only columns from the file's folder", () => {
    const { schema, spec, partitionColumns } = table({ timePartitioning: 'hour' });
    expect(
      dataFilePartition(schema, spec, partitionColumns, { rows: [row(0)], folder: 'dt=2026-03-14/hour=07' }),
    ).toEqual(['2026-03-14', '07']);
    expect(() => dataFilePartition(schema, spec, partitionColumns, { rows: [row(0)] })).toThrow(
      /time folder/,
    );
    expect(() =>
      dataFilePartition(schema, spec, partitionColumns, { rows: [row(0)], folder: 'dt=2026-03-14/hour=7' }),
    ).toThrow(IcebergPartitionError);
  });

  it('refuses a file whose rows are in two partitions, or outside its folder, or without rows', () => {
    const { schema, spec, partitionColumns } = table({ timePartitioning: 'day', timeField: 'placedAt' });
    expect(() =>
      dataFilePartition(schema, spec, partitionColumns, { rows: [row(AT), row(AT + 86_400_000)] }),
    ).toThrow(/two partitions/);
    // A row filed under its staging time's folder, its own time days away: readers would prune it.
    expect(() =>
      dataFilePartition(schema, spec, partitionColumns, { rows: [row(AT)], folder: 'dt=2026-03-20' }),
    ).toThrow(/outside the folder/);
    expect(() => dataFilePartition(schema, spec, partitionColumns, { rows: [] })).toThrow(/without rows/);
  });

  it('gives the empty tuple for an unpartitioned table', () => {
    const { schema, spec, partitionColumns } = table({ timePartitioning: 'none' });
    expect(dataFilePartition(schema, spec, partitionColumns, { rows: [] })).toEqual([]);
  });
});
