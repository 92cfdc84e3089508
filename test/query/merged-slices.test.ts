/**
 * `eos query` (and `eos read --export-dir`) over slices of merged final objects: merged objects and manifests built
 * by hand (`test/support/merged.ts`) in a bucket of the real local S3 server and in an export folder, queried with
 * DuckDB. Each merged object is read once; every record is counted once; a slice whose bytes are not its entry's
 * fails the query naming the object.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { exportDirObjects } from '../../cli/export-dir.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { collectCommittedFiles } from '../../shared/query/collect.ts';
import { queryCommitted } from '../../shared/query/query.ts';
import { bucketSource, type CommittedSource, exportDirectorySource } from '../../shared/query/sources.ts';
import { manifestKey } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { encodeManifest } from '../../shared/sink/manifest-store.ts';
import { CommittedFileError, readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, uniqueName } from '../support/aws.ts';
import { buildMerged, type MergedObject, putManifest, putObject } from '../support/merged.ts';

let clients: AwsClients;
let bucket: string;

beforeAll(async () => {
  ({ clients, bucket } = await freshResources('qmerged'));
});

/**
 * Checkpoint 1: one merged gzip output object (partitions 0..2) and a plain merged dead-letter object; checkpoint 2:
 * a plain merged output object (partitions 0 and 1). Written to the bucket and to an export folder.
 */
async function layout(wrongSha = false) {
  const pipeline = uniqueName('pl');
  const a = buildMerged(pipeline, { stream: 'output', checkpointId: 1 }, [
    { partition: 0, offsets: [0, 1, 2] },
    { partition: 1, offsets: [0] },
    { partition: 2, offsets: [0, 1] },
  ]);
  const dead = buildMerged(pipeline, { stream: 'deadletter', checkpointId: 1, gzip: false }, [
    { partition: 1, offsets: [1], extra: { error: 'poison' } },
  ]);
  const b = buildMerged(pipeline, { stream: 'output', checkpointId: 2, gzip: false, shard: 4 }, [
    { partition: 0, offsets: [3, 4] },
    { partition: 1, offsets: [2, 3, 4] },
  ]);
  const cut1 = { 'orders#0': 2, 'orders#1': 1, 'orders#2': 1 };
  const cut2 = { 'orders#0': 4, 'orders#1': 4, 'orders#2': 1 };
  const entries2 = wrongSha ? [b.entries[0]!, { ...b.entries[1]!, sha256: 'a'.repeat(64) }] : b.entries;
  const manifests = [
    await putManifest(clients.s3, bucket, pipeline, 1, [...a.entries, ...dead.entries], cut1, {}),
    await putManifest(clients.s3, bucket, pipeline, 2, entries2, cut2, cut1),
  ];
  const objects: MergedObject[] = [a, dead, b];
  for (const object of objects) await putObject(clients.s3, bucket, object.key, object.body);
  const exportDir = mkdtempSync(join(tmpdir(), 'eos-merged-export-'));
  const place = (key: string, body: Buffer) => {
    const path = join(exportDir, 'bucket', ...key.split('/'));
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, body);
  };
  for (const object of objects) place(object.key, object.body);
  for (const manifest of manifests)
    place(manifestKey(pipeline, manifest.checkpointId), encodeManifest(manifest as Manifest));
  return { pipeline, exportDir, objects };
}

/** A source that counts how often each key is opened. */
function counting(source: CommittedSource): { source: CommittedSource; opened: Map<string, number> } {
  const opened = new Map<string, number>();
  return {
    opened,
    source: {
      ...source,
      manifests: () => source.manifests(),
      open: (key) => {
        opened.set(key, (opened.get(key) ?? 0) + 1);
        return source.open(key);
      },
    },
  };
}

async function sql(
  source: CommittedSource,
  pipeline: string,
  text: string,
  stream: 'output' | 'deadletter' = 'output',
) {
  const out: string[] = [];
  const summary = await queryCommitted({
    source,
    pipeline,
    stream,
    sql: text,
    format: 'json',
    write: (t) => out.push(t),
  });
  return {
    summary,
    rows: out
      .join('')
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

describe('eos query over slices of merged objects', () => {
  it('counts every record once and reads the rows, from the bucket and from an export, each merged object once', async () => {
    const { pipeline, exportDir, objects } = await layout();
    for (const plain of [
      bucketSource(clients.s3, bucket, pipeline),
      exportDirectorySource(exportDir, pipeline),
    ]) {
      const { source, opened } = counting(plain);
      const { summary, rows } = await sql(
        source,
        pipeline,
        'SELECT source.partition AS p, source."offset" AS o, orderId FROM output ORDER BY p, o',
      );
      expect(summary).toMatchObject({ manifests: 2, files: 5, records: 11, rows: 11 });
      expect(rows.map((row) => `${row.p}@${row.o}:${row.orderId}`)).toEqual([
        '0@0:o0-0',
        '0@1:o0-1',
        '0@2:o0-2',
        '0@3:o0-3',
        '0@4:o0-4',
        '1@0:o1-0',
        '1@2:o1-2',
        '1@3:o1-3',
        '1@4:o1-4',
        '2@0:o2-0',
        '2@1:o2-1',
      ]);
      // The two output objects, once each; the dead letters are not the output stream's.
      expect(Object.fromEntries(opened)).toEqual({ [objects[0]!.key]: 1, [objects[2]!.key]: 1 });
      const dead = await sql(
        source,
        pipeline,
        'SELECT count(*) AS n, min(error) AS e FROM deadletter',
        'deadletter',
      );
      expect(dead.rows).toEqual([{ n: 1, e: 'poison' }]);
    }
  });

  it('writes each shown slice to a local file of its own, NDJSON gzip or plain by the merged key', async () => {
    const { pipeline } = await layout();
    const dir = mkdtempSync(join(tmpdir(), 'eos-merged-collect-'));
    const collected = await collectCommittedFiles({
      source: bucketSource(clients.s3, bucket, pipeline),
      pipeline,
      stream: 'output',
      dir,
    });
    expect(
      collected.files.map(
        (file) => `${file.format} ${file.path.slice(dir.length + 1)} ${file.entry.partition}`,
      ),
    ).toEqual([
      'ndjson 00000000.ndjson.gz 0',
      'ndjson 00000001.ndjson.gz 1',
      'ndjson 00000002.ndjson.gz 2',
      'ndjson 00000003.ndjson 0',
      'ndjson 00000004.ndjson 1',
    ]);
  });

  it('fails on a slice whose bytes are not its entry: one error naming the merged object', async () => {
    const { pipeline, exportDir, objects } = await layout(true);
    for (const source of [
      bucketSource(clients.s3, bucket, pipeline),
      exportDirectorySource(exportDir, pipeline),
    ]) {
      const failed = sql(source, pipeline, 'SELECT count(*) FROM output');
      await expect(failed).rejects.toThrow(CommittedFileError);
      await expect(sql(source, pipeline, 'SELECT count(*) FROM output')).rejects.toThrow(
        new RegExp(
          `${objects[2]!.key} does not match its manifest \\(\\d+ bytes, SHA-256 [0-9a-f]{64}; .* for its slice at \\d+-\\d+\\)`,
        ),
      );
    }
  });
});

describe('a committed source opened at a span', () => {
  it('gives exactly those bytes, from the bucket (one ranged GET) and from an export folder alike', async () => {
    const { pipeline, exportDir, objects } = await layout();
    const { key, body } = objects[0]!;
    const span = { start: 3, end: body.length - 2 };
    for (const source of [
      bucketSource(clients.s3, bucket, pipeline),
      exportDirectorySource(exportDir, pipeline),
    ]) {
      const stream = await source.open(key, span);
      const chunks: Buffer[] = [];
      for await (const chunk of stream!) chunks.push(chunk as Buffer);
      expect(Buffer.concat(chunks)).toEqual(body.subarray(span.start, span.end));
      expect(await source.open(`${key}.missing`, span)).toBeUndefined();
    }
  });
});

describe('eos read --export-dir over slices', () => {
  it('yields each record once, cutting each slice out of the exported object', async () => {
    const { pipeline, exportDir } = await layout();
    const out: string[] = [];
    for await (const { checkpointId, row } of readCommitted({
      objects: await exportDirObjects(exportDir, pipeline),
      pipeline,
    })) {
      const source = row.source as { partition: number; offset: number };
      out.push(`${checkpointId}:${source.partition}@${source.offset}`);
    }
    expect(out).toEqual([
      '1:0@0',
      '1:0@1',
      '1:0@2',
      '1:1@0',
      '1:2@0',
      '1:2@1',
      '2:0@3',
      '2:0@4',
      '2:1@2',
      '2:1@3',
      '2:1@4',
    ]);
    // And through the bucket, with ranged reads, the same.
    const { s3 } = createAwsClients();
    const fromBucket: string[] = [];
    for await (const { checkpointId, row } of readCommitted({ s3, bucket, pipeline })) {
      const source = row.source as { partition: number; offset: number };
      fromBucket.push(`${checkpointId}:${source.partition}@${source.offset}`);
    }
    expect(fromBucket).toEqual(out);
  });
});
