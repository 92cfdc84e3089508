/**
 * `eos verify` and the committed reader over Parquet objects in time folders (on the local S3 server):
 * a healthy layout passes, late rows in an earlier folder are no offset-order problem, and a Parquet object that
 * lies about its rows, its format or its lineage is reported; the reader yields Parquet rows as NDJSON rows.
 */
import { createHash } from 'node:crypto';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AwsClients } from '../../shared/aws/clients.ts';
import { finalObjectKey, manifestKey, type ObjectRange } from '../../shared/sink/layout.ts';
import type { Manifest, ManifestFile } from '../../shared/sink/manifest.ts';
import { encodeParquet } from '../../shared/sink/parquet.ts';
import { CommittedFileError, readCommitted } from '../../shared/sink/reader.ts';
import { type ProblemKind, verifySink } from '../../shared/sink/verify.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { freshResources, uniqueName } from '../support/aws.ts';

let clients: AwsClients;
let bucket: string;
beforeAll(async () => {
  ({ clients, bucket } = await freshResources('vpq'));
});

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];
const H3 = 'dt=2026-12-01/hour=03';
const H7 = 'dt=2026-12-01/hour=07';

const put = (key: string, body: Uint8Array | string) =>
  clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));

async function parquetFile(
  pipeline: string,
  folder: string,
  offsets: readonly number[],
  range: [number, number],
  options: { body?: Uint8Array; recordCount?: number; partition?: number } = {},
): Promise<ManifestFile> {
  const partition = options.partition ?? 0;
  const r: ObjectRange = {
    stream: 'output',
    topic: 'orders',
    partition,
    firstOffset: range[0],
    lastOffset: range[1],
    folder,
  };
  const body =
    options.body ??
    encodeParquet(
      COLUMNS,
      offsets.map((offset) => ({ n: offset, at: 1, source: { topic: 'orders', partition: 0, offset } })),
    );
  const key = finalObjectKey(pipeline, r, 'parquet');
  await put(key, body);
  return {
    key,
    stream: 'output',
    topic: 'orders',
    partition,
    firstOffset: range[0],
    lastOffset: range[1],
    recordCount: options.recordCount ?? offsets.length,
    bytes: body.length,
    sha256: createHash('sha256').update(body).digest('hex'),
    format: 'parquet',
  };
}

async function manifest(pipeline: string, id: number, files: ManifestFile[], cut: number, previous?: number) {
  const m: Manifest = {
    version: 1,
    pipeline,
    checkpointId: id,
    previousCheckpointId: id - 1,
    cut: { 'orders#0': cut },
    previousCut: previous === undefined ? {} : { 'orders#0': previous },
    committedAt: '2026-12-01T09:00:00.000Z',
    files,
  };
  await put(manifestKey(pipeline, id), JSON.stringify(m));
}

const kinds = (problems: readonly { kind: ProblemKind }[]) =>
  [...new Set(problems.map((p) => p.kind))].sort();

describe('eos verify over Parquet in time folders', () => {
  it('passes a healthy layout with a late row in an earlier folder; the reader yields plain rows', async () => {
    const pipeline = uniqueName('pl');
    // Checkpoint 1: offsets 0-3, offset 2 late (hour 03). Checkpoint 2: offsets 4-5 in hour 03 and 07.
    const a = await parquetFile(pipeline, H7, [0, 1, 3], [0, 3]);
    const b = await parquetFile(pipeline, H3, [2], [0, 3]);
    await manifest(pipeline, 1, [b, a], 3);
    const c = await parquetFile(pipeline, H3, [5], [4, 5]);
    const d = await parquetFile(pipeline, H7, [4], [4, 5]);
    await manifest(pipeline, 2, [c, d], 5, 3);
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(result.problems).toEqual([]);
    expect(result).toMatchObject({ ok: true, files: 4, rows: { output: 6, deadletter: 0 } });
    const rows = [];
    for await (const { row } of readCommitted({ s3: clients.s3, bucket, pipeline })) rows.push(row);
    expect(rows).toEqual(
      [2, 0, 1, 3, 5, 4].map((offset) => ({
        n: offset,
        at: 1,
        source: { topic: 'orders', partition: 0, offset },
      })),
    );
  });

  it('reports a Parquet object whose rows, format or lineage are not what the manifest says', async () => {
    const pipeline = uniqueName('pl');
    const short = await parquetFile(pipeline, H7, [0, 1], [0, 1], { recordCount: 3 });
    const garbage = await parquetFile(pipeline, H3, [], [2, 2], { body: Buffer.from('not parquet at all') });
    const twice = await parquetFile(pipeline, H3, [1], [0, 1]);
    await manifest(pipeline, 1, [short, twice, garbage, { ...short, key: short.key, format: 'ndjson' }], 2);
    const result = await verifySink({ s3: clients.s3, bucket, pipeline });
    expect(kinds(result.problems)).toEqual([
      'lineage-twice',
      'listed-twice',
      'object-mismatch',
      'offset-order',
      'row-malformed',
    ]);
    expect(result.problems.find((p) => p.kind === 'row-malformed')?.message).toMatch(/^not Parquet/);
    expect(result.problems.some((p) => /listed as ndjson, the key says parquet/.test(p.message))).toBe(true);
    await expect(async () => {
      for await (const _ of readCommitted({ s3: clients.s3, bucket, pipeline })) {
        // reading is enough
      }
    }).rejects.toThrow(CommittedFileError);
  });
});
