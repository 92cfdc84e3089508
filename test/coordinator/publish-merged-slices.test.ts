/**
 * Iceberg data files are Parquet only, and merged final objects NDJSON only (`shared/sink/entry-bytes.ts`): a
 * checkpoint whose manifest lists slices of merged objects publishes its Parquet objects as before, leaves each
 * merged output object out once (said so) and its dead-letter slices silently, and refuses the whole checkpoint when
 * a slice's key is not one of its own merged objects or a slice claims to be Parquet.
 */
import { describe, expect, it } from 'vitest';
import { checkpointDataFiles, PublishDataFileError } from '../../shared/coordinator/publish/data-files.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { tableLayout } from '../../shared/iceberg/append.ts';
import { finalObjectKey } from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { mergedKey } from '../support/merged.ts';

const PIPELINE = 'orders-pl';
const LAYOUT = tableLayout(
  publishedTable({
    location: 's3://b/t',
    columns: [{ name: 'n', type: 'long', nullable: false }],
    timePartitioning: 'none',
  }),
);

const merged = (stream: 'output' | 'deadletter', checkpointId = 4, pipeline = PIPELINE) =>
  mergedKey(pipeline, { stream, checkpointId });

function slice(
  key: string,
  partition: number,
  sliceStart: number,
  overrides: Partial<ManifestFile> = {},
): ManifestFile {
  return {
    key,
    stream: key.includes('/deadletter/') ? 'deadletter' : 'output',
    topic: 'orders',
    partition,
    firstOffset: 0,
    lastOffset: 9,
    recordCount: 10,
    bytes: 100,
    sha256: 'a'.repeat(64),
    sliceStart,
    ...overrides,
  };
}

const parquet: ManifestFile = {
  key: finalObjectKey(
    PIPELINE,
    { stream: 'output', topic: 'orders', partition: 7, firstOffset: 0, lastOffset: 9 },
    'parquet',
  ),
  stream: 'output',
  topic: 'orders',
  partition: 7,
  firstOffset: 0,
  lastOffset: 9,
  recordCount: 10,
  bytes: 999,
  sha256: 'b'.repeat(64),
  format: 'parquet',
};

const manifest = (files: ManifestFile[]): Manifest => ({
  version: 1,
  pipeline: PIPELINE,
  checkpointId: 4,
  previousCheckpointId: 3,
  cut: {},
  previousCut: {},
  committedAt: '2026-12-06T10:00:00.000Z',
  files,
});

describe('checkpointDataFiles with slices of merged objects', () => {
  it('publishes the Parquet objects, leaves a merged output object out once and its dead letters silently', () => {
    const files = [
      slice(merged('output'), 0, 0),
      slice(merged('output'), 1, 100),
      slice(merged('deadletter'), 0, 0),
      parquet,
    ];
    const out = checkpointDataFiles(manifest(files), 'bkt', LAYOUT);
    expect(out.dataFiles.map((file) => file.path)).toEqual([`s3://bkt/${parquet.key}`]);
    expect(out.listed).toEqual([parquet]);
    expect(out.left).toEqual([
      {
        key: merged('output'),
        reason: 'a slice of a merged NDJSON object: only Parquet objects are data files',
      },
    ]);
  });

  it.each([
    [
      'a merged object of another checkpoint',
      slice(merged('output', 3), 0, 0),
      /merged object of checkpoint 3/,
    ],
    [
      'a merged object of another pipeline',
      slice(merged('output', 4, 'other'), 0, 0),
      /not the final data key of a merged object/,
    ],
    ['a per-partition final key', slice(parquet.key, 7, 0), /not the final data key of a merged object/],
    ['a slice claiming to be Parquet', slice(merged('output'), 0, 0, { format: 'parquet' }), /parquet slice/],
  ])('refuses the checkpoint for a slice of %s, in one line', (_what, bad, message) => {
    expect(() => checkpointDataFiles(manifest([parquet, bad]), 'bkt', LAYOUT)).toThrow(PublishDataFileError);
    expect(() => checkpointDataFiles(manifest([parquet, bad]), 'bkt', LAYOUT)).toThrow(message);
    try {
      checkpointDataFiles(manifest([parquet, bad]), 'bkt', LAYOUT);
    } catch (error) {
      expect((error as Error).message.split('\n')).toHaveLength(1);
    }
  });
});
