/**
 * A committed checkpoint's Iceberg data files, from its manifest alone: its Parquet output objects as they are,
 * each partitioned by its time folder, replay generations' lanes included (which of their rows the table shows is
 * generation-changes.ts's); dead letters and NDJSON objects left out (the latter said so); a key that is no final
 * data key of the pipeline refuses the whole checkpoint.
 */
import { describe, expect, it } from 'vitest';
import { checkpointDataFiles, PublishDataFileError } from '../../shared/coordinator/publish/data-files.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { tableLayout } from '../../shared/iceberg/append.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [{ name: 'n', type: 'long', nullable: false }];
const PIPELINE = 'orders-pl';

function file(key: string, overrides: Partial<ManifestFile> = {}): ManifestFile {
  const topic = /(?:topic=|\/)([a-z~0-9]+)(?:\/partition=|\+)/.exec(key)?.[1] ?? 'orders';
  return {
    key: `${PIPELINE}/final/${key}`,
    stream: key.startsWith('deadletter') ? 'deadletter' : 'output',
    topic,
    partition: 0,
    firstOffset: 0,
    lastOffset: 9,
    recordCount: 10,
    bytes: 1234,
    sha256: 'a'.repeat(64),
    format: key.endsWith('.parquet') ? 'parquet' : 'ndjson',
    ...overrides,
  };
}

function manifest(files: ManifestFile[]): Manifest {
  return {
    version: 1,
    pipeline: PIPELINE,
    checkpointId: 4,
    previousCheckpointId: 3,
    cut: {},
    previousCut: {},
    committedAt: '2026-03-14T07:00:00.000Z',
    files,
  };
}

const RANGE = '00000000000000000000-00000000000000000009';

function layout(timePartitioning: 'hour' | 'day' | 'none', partitioning?: 'none') {
  return tableLayout(
    publishedTable({
      location: 's3://b/t',
      columns: COLUMNS,
      timePartitioning,
      ...(partitioning ? { partitioning } : {}),
    }),
  );
}

describe('checkpointDataFiles', () => {
  it('describes each Parquet output object of every lane as it is, partitioned by its folder, and leaves the rest out', () => {
    const files = [
      file(`output/dt=2026-03-14/hour=07/orders+0+${RANGE}.parquet`),
      file(`output/dt=2026-03-14/hour=08/orders~2+1+${RANGE}.parquet`, { partition: 1, recordCount: 3 }),
      file(`output/dt=2026-03-14/hour=07/orders~g1+0+${RANGE}.parquet`),
      file(`output/dt=2026-03-14/hour=07/orders+3+${RANGE}.ndjson.gz`, { partition: 3 }),
      file(`deadletter/dt=2026-03-14/hour=07/orders+0+${RANGE}.ndjson.gz`),
    ];
    const out = checkpointDataFiles(manifest(files), 'bkt', layout('hour'));
    expect(out.dataFiles).toEqual([
      {
        path: `s3://bkt/${PIPELINE}/final/output/dt=2026-03-14/hour=07/orders+0+${RANGE}.parquet`,
        recordCount: 10,
        fileSizeInBytes: 1234,
        partition: ['2026-03-14', '07'],
      },
      {
        path: `s3://bkt/${PIPELINE}/final/output/dt=2026-03-14/hour=08/orders~2+1+${RANGE}.parquet`,
        recordCount: 3,
        fileSizeInBytes: 1234,
        partition: ['2026-03-14', '08'],
      },
      {
        path: `s3://bkt/${PIPELINE}/final/output/dt=2026-03-14/hour=07/orders~g1+0+${RANGE}.parquet`,
        recordCount: 10,
        fileSizeInBytes: 1234,
        partition: ['2026-03-14', '07'],
      },
    ]);
    expect(out.listed.map((listed) => listed.key)).toEqual(files.slice(0, 3).map((listed) => listed.key));
    expect(out.lanes).toEqual(['orders', 'orders~2', 'orders~g1']);
    expect(out.left.map((left) => [left.key.split('/').pop(), left.reason])).toEqual([
      [`orders+3+${RANGE}.ndjson.gz`, 'an NDJSON object: only Parquet objects are data files'],
    ]);
  });

  it('takes the day of an hour folder in a table by day, nulls for an object without a folder, none unpartitioned', () => {
    const files = [
      file(`output/dt=2026-03-14/hour=07/orders+0+${RANGE}.parquet`),
      file(`output/topic=orders/partition=0/${RANGE}.parquet`),
    ];
    const byDay = checkpointDataFiles(manifest(files), 'bkt', layout('day'));
    expect(byDay.dataFiles.map((f) => f.partition)).toEqual([['2026-03-14'], [null]]);
    const none = checkpointDataFiles(manifest(files), 'bkt', layout('hour', 'none'));
    expect(none.dataFiles.map((f) => f.partition)).toEqual([[], []]);
  });

  it('refuses a manifest listing a key that is no final data key of the pipeline', () => {
    for (const key of [
      `other-pl/final/output/dt=2026-03-14/hour=07/orders+0+${RANGE}.parquet`,
      `${PIPELINE}/_inprogress/output/topic=orders/partition=0/${RANGE}.a1.ndjson.gz`,
      `${PIPELINE}/final/output/dt=2026-03-14/hour=7/orders+0+${RANGE}.parquet`,
    ]) {
      const forged = { ...file(`output/topic=orders/partition=0/${RANGE}.parquet`), key };
      expect(() => checkpointDataFiles(manifest([forged]), 'bkt', layout('hour'))).toThrow(
        PublishDataFileError,
      );
    }
  });

  it('refuses a table partitioned by more than the time folders', () => {
    const table = publishedTable({ location: 's3://b/t', columns: COLUMNS, timePartitioning: 'none' });
    const byColumn = tableLayout({
      ...table,
      partitioning: { timePartitioning: 'none', identityFields: ['n'] },
    });
    const files = [file(`output/topic=orders/partition=0/${RANGE}.parquet`)];
    expect(() => checkpointDataFiles(manifest(files), 'bkt', byColumn)).toThrow(
      /partition field n is not a time folder key/,
    );
  });
});
