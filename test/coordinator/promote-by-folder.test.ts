/**
 * Time folders at the coordinator: planning by time folder from the census of the staged bytes prepare verified,
 * Parquet candidates, a retried promote (same bytes, same keys: C5) and a lost plan that stops it until restored, a
 * row that does not fit the Parquet columns committed once as a schema-mismatch dead letter, promote refusing a plan
 * its members do not back, and the
 * size/row limit splitting a folder. Real DynamoDB Local and S3 server; staged files are written as the processor
 * writes them with time folders on (rows carry `source.timestamp`).
 */
import { createHash } from 'node:crypto';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { censusOf, outputShapeOf } from '../../shared/coordinator/promote/folder-plan.ts';
import { WorkObjectMissingError } from '../../shared/coordinator/promote/plan-store.ts';
import { PlanRejectedError, Promoter, planFinalObjects } from '../../shared/coordinator/promote/promoter.ts';
import { checkpointWorkPrefix, stagedCopyKey } from '../../shared/coordinator/work-objects.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { parseFinalKey } from '../../shared/sink/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { decodeParquetRows } from '../../shared/sink/parquet-read.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { timeFolder } from '../../shared/sink/time-partitions.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { stageFiles } from '../support/staging.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];
// Yesterday (UTC): record times must lie within the lateness window around the staging time (now), or their
// folder would be the staging time's (shared/sink/record-time.ts).
const DAY_MS = 86_400_000;
const BASE = (Math.floor(Date.now() / DAY_MS) - 1) * DAY_MS;
const DT = new Date(BASE).toISOString().slice(0, 10);
const H7 = BASE + (7 * 60 + 10) * 60_000;
const H8 = BASE + (8 * 60 + 20) * 60_000;
const H3 = BASE + 3 * 3_600_000; // late

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pq');
});

function setup(extra: Record<string, unknown> = {}) {
  const settings: Settings = parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName('pq'),
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: COLUMNS,
    ...extra,
  });
  const clock = new ManualClock(Date.now());
  return {
    settings,
    core: createCoordinator({ settings, clients: res.clients, clock }),
    manifests: new ManifestStore(res.clients.s3, settings.bucket, settings.pipelineId),
  };
}

/** Rows as the processor stages them with time folders: lineage plus the Kafka timestamp. */
function rows(partition: number, first: number, times: readonly number[]): Record<string, unknown>[] {
  return times.map((timestamp, i) => ({
    n: first + i,
    at: timestamp,
    source: { topic: 'orders', partition, offset: first + i, timestamp },
  }));
}

async function steps(core: Coordinator, execution: string) {
  const begun = await core.begin({ execution });
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  return { begun, ref };
}

describe('planning and promoting by time folder', () => {
  it('writes one Parquet file per folder and partition, late rows in their own; a retried promote gives the same bytes, a lost plan stops it until restored', async () => {
    const { settings, core, manifests } = setup();
    await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 3, rows: rows(0, 0, [H7, H7, H3, H8]) },
      { partition: 0, firstOffset: 4, lastOffset: 5, rows: rows(0, 4, [H8, H8]) },
      { partition: 1, firstOffset: 0, lastOffset: 1, rows: rows(1, 0, [H7, H7]) },
      {
        partition: 1,
        firstOffset: 0,
        lastOffset: 1,
        stream: 'deadletter',
        rows: [{ source: { topic: 'orders', partition: 1, offset: 1, timestamp: H8 }, error: 'x', raw: {} }],
      },
    ]);
    const { begun, ref } = await steps(core, 'e1');
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    const first = new Map<string, string>();
    for await (const o of listObjects(res.clients.s3, settings.bucket, `${settings.pipelineId}/final/`)) {
      const bytes = await getBytes(res.clients.s3, settings.bucket, o.key);
      first.set(o.key, createHash('sha256').update(bytes!).digest('hex'));
    }
    // The plans are lost: promote fails loudly (nothing is derived again), and goes on once they are restored.
    const work = `${checkpointWorkPrefix(settings.pipelineId)}`;
    const lost = new Map<string, Buffer>();
    for await (const o of listObjects(res.clients.s3, settings.bucket, work)) {
      if (/\/plan-\d+-[0-9a-f]{64}\.json$/.test(o.key)) {
        lost.set(o.key, (await getBytes(res.clients.s3, settings.bucket, o.key))!);
        await res.clients.s3.send(new DeleteObjectCommand({ Bucket: settings.bucket, Key: o.key }));
      }
    }
    expect(lost.size).toBe(begun.shards.length);
    for (const shard of begun.shards)
      await expect(core.promote({ ...ref, shard })).rejects.toBeInstanceOf(WorkObjectMissingError);
    for (const [key, body] of lost)
      await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: key, Body: body }));
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    await core.commit(ref);

    const manifest = (await manifests.read(begun.checkpointId))!;
    const keys = manifest.files.map((f) => f.key.slice(`${settings.pipelineId}/final/`.length));
    expect(keys).toEqual([
      `deadletter/dt=${DT}/hour=08/orders+1+00000000000000000000-00000000000000000001.ndjson.gz`,
      `output/dt=${DT}/hour=03/orders+0+00000000000000000000-00000000000000000003.parquet`,
      `output/dt=${DT}/hour=07/orders+0+00000000000000000000-00000000000000000003.parquet`,
      `output/dt=${DT}/hour=08/orders+0+00000000000000000000-00000000000000000005.parquet`,
      `output/dt=${DT}/hour=07/orders+1+00000000000000000000-00000000000000000001.parquet`,
    ]);
    for (const file of manifest.files) {
      // Same bytes on the retried promote, and what the manifest lists.
      expect(first.get(file.key)).toBe(file.sha256);
      expect(file.format).toBe(file.stream === 'output' ? 'parquet' : 'ndjson');
      if (file.stream !== 'output') continue;
      const body = (await getBytes(res.clients.s3, settings.bucket, file.key))!;
      const found = await decodeParquetRows(body);
      expect(found.length).toBe(file.recordCount);
      const folder = parseFinalKey(settings.pipelineId, file.key)!.folder;
      for (const row of found) {
        expect(timeFolder(row.at as number, 'hour')).toBe(folder);
        expect(row.source).toEqual({ topic: 'orders', partition: file.partition, offset: row.n });
      }
    }
    expect(manifest.files.reduce((sum, f) => sum + f.recordCount, 0)).toBe(9);
  });

  it('a promote run under other settings (a redeploy after the decision) writes what the plan says', async () => {
    const { settings, core, manifests } = setup();
    await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 2, rows: rows(0, 0, [H7, H3, H7]) },
    ]);
    const { begun, ref } = await steps(core, 'e1');
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    // The new deployment: NDJSON, no folders, no columns. The decided checkpoint still rolls forward as voted.
    const redeployed = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: settings.pipelineId,
    });
    const next = createCoordinator({
      settings: redeployed,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
    });
    for (const shard of begun.shards) await next.promote({ ...ref, shard });
    await next.commit(ref);
    const manifest = (await manifests.read(begun.checkpointId))!;
    expect(
      manifest.files.map((f) => [parseFinalKey(settings.pipelineId, f.key)?.folder, f.format, f.recordCount]),
    ).toEqual([
      [`dt=${DT}/hour=03`, 'parquet', 1],
      [`dt=${DT}/hour=07`, 'parquet', 2],
    ]);
  });

  it('a row that does not fit the Parquet columns is committed once as a schema-mismatch dead letter, the rest as Parquet', async () => {
    const { settings, core, manifests } = setup();
    const bad = rows(0, 0, [H7, H7, H7]);
    bad[1] = { ...bad[1], n: 'two' };
    await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 2, rows: bad },
      // A dead letter of the same chunk (same range): one object holds both, in offset order.
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 2,
        stream: 'deadletter',
        rows: [
          {
            source: { topic: 'orders', partition: 0, offset: 2, timestamp: H7 },
            error: 'poison',
            raw: { key: null, value: null, headers: [] },
          },
        ],
      },
    ]);
    const { begun, ref } = await steps(core, 'e1');
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    await core.commit(ref);
    const manifest = (await manifests.read(begun.checkpointId))!;
    expect(manifest.files.map((f) => [f.stream, f.format, f.recordCount])).toEqual([
      ['deadletter', 'ndjson', 2],
      ['output', 'parquet', 2],
    ]);
    const dead = manifest.files.find((f) => f.stream === 'deadletter')!;
    const lines: Record<string, unknown>[] = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream: 'deadletter',
    })) {
      lines.push(row);
    }
    expect(dead.key).toContain(`/deadletter/dt=${DT}/hour=07/`);
    expect(
      lines.map((l) => [(l.source as { offset: number }).offset, String(l.error).split(':')[0]]),
    ).toEqual([
      [1, 'schema-mismatch'],
      [2, 'poison'],
    ]);
    expect(lines[0]).toMatchObject({
      row: { n: 'two', at: H7 },
      source: { topic: 'orders', partition: 0, offset: 1 },
    });
  });

  it('promote refuses a planned object whose members do not give the voted rows, writing nothing', async () => {
    const { settings } = setup();
    const [entry] = (await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 2, rows: rows(0, 0, [H7, H7, H8]) },
    ])) as [StagedFileEntry];
    const body = (await getBytes(res.clients.s3, settings.bucket, entry.key))!;
    const copy = stagedCopyKey(settings.pipelineId, 1, 1, entry.key);
    await res.clients.s3.send(new PutObjectCommand({ Bucket: settings.bucket, Key: copy, Body: body }));
    const shape = outputShapeOf(settings);
    const census = new Map([[entry.key, censusOf(entry, body, shape)]]);
    const [h7] = planFinalObjects(settings.pipelineId, [entry], undefined, shape, census);
    expect(h7).toMatchObject({ folder: `dt=${DT}/hour=07`, recordCount: 2, format: 'parquet' });
    const promoter = new Promoter(res.clients.s3, settings.bucket, settings.pipelineId);
    const forged = { ...h7!, recordCount: 3, members: [{ ...h7!.members[0]!, rows: 3 }] };
    await expect(
      promoter.promote(forged, { checkpointId: 1, attempt: 1 }, { columns: COLUMNS }),
    ).rejects.toThrow(PlanRejectedError);
    expect(await getBytes(res.clients.s3, settings.bucket, h7!.finalKey)).toBeUndefined();
    // Without the plan's columns a Parquet object cannot be written either.
    await expect(promoter.promote(h7!, { checkpointId: 1, attempt: 1 }, {})).rejects.toThrow(
      /without columns/,
    );
    const written = await promoter.promote(h7!, { checkpointId: 1, attempt: 1 }, { columns: COLUMNS });
    expect(written).toMatchObject({ key: h7!.finalKey, recordCount: 2, format: 'parquet' });
  });

  it('rows staged with a timestamp after time folders were switched off are committed without it', async () => {
    const { settings, core, manifests } = setup({ outputFormat: 'ndjson', timePartitioning: 'none' });
    const plain = (first: number, count: number) =>
      Array.from({ length: count }, (_, i) => ({
        n: first + i,
        at: H7,
        source: { topic: 'orders', partition: 0, offset: first + i },
      }));
    await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 1, rows: rows(0, 0, [H7, H3]) },
      { partition: 0, firstOffset: 2, lastOffset: 3, rows: plain(2, 2) },
    ]);
    const { begun, ref } = await steps(core, 'e1');
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    await core.commit(ref);
    const manifest = (await manifests.read(begun.checkpointId))!;
    expect(manifest.files.map((f) => f.key)).toEqual([
      `${settings.pipelineId}/final/output/topic=orders/partition=0/00000000000000000000-00000000000000000003.ndjson.gz`,
    ]);
    const found: unknown[] = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    })) {
      found.push(row);
    }
    expect(found).toEqual([...plain(0, 2).map((r, i) => ({ ...r, at: [H7, H3][i] })), ...plain(2, 2)]);
  });

  it('the row limit splits one folder into files with disjoint ranges', () => {
    const { settings } = setup({ timePartitioning: 'day', outputFormat: 'ndjson' });
    const entries: StagedFileEntry[] = [0, 1, 2, 3].map((i) => ({
      pipeline: settings.pipelineId,
      stream: 'output',
      topic: 'orders',
      partition: 0,
      firstOffset: i * 10,
      lastOffset: i * 10 + 9,
      key: `${settings.pipelineId}/_inprogress/output/topic=orders/partition=0/${String(i * 10).padStart(20, '0')}-${String(i * 10 + 9).padStart(20, '0')}.a.ndjson.gz`,
      recordCount: 10,
      bytes: 100,
      sha256: '0'.repeat(64),
      md5: '0'.repeat(32),
      gzip: true,
      attemptId: 'a',
      stagedAt: 0,
    }));
    const census = new Map(entries.map((e) => [e.key, new Map([[`dt=${DT}`, 10]])]));
    const shape = outputShapeOf(settings);
    const limits = { maxObjectBytes: 1 << 30, maxMembers: 100, maxObjectRows: 25 };
    const planned = planFinalObjects(settings.pipelineId, entries, limits, shape, census);
    expect(planned.map((p) => [p.firstOffset, p.lastOffset, p.recordCount])).toEqual([
      [0, 19, 20],
      [20, 39, 20],
    ]);
    expect(new Set(planned.map((p) => p.finalKey)).size).toBe(2);
    // Deterministic: planning again gives the same plan.
    expect(planFinalObjects(settings.pipelineId, [...entries].reverse(), limits, shape, census)).toEqual(
      planned,
    );
  });
});
