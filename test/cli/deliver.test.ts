/**
 * `eos deliver` through `main()`, against the real local parts: an input file's records delivered to the processor
 * as an event source mapping delivers them (the live mapping, or a generation's replay mapping), then committed by
 * `eos checkpoint`; a second run is a redelivery; a recreated topic stops its partitions until a new epoch.
 */
import { utimesSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { eos } from '../support/eos.ts';
import { order } from '../support/msk.ts';

let res: TestResources;
let dir: string;
beforeAll(async () => {
  res = await freshResources('clideliver');
  dir = await mkdtemp(join(tmpdir(), 'eos-deliver-'));
});

interface Line {
  readonly partition: number;
  readonly key: string;
  readonly value: string;
  readonly headers?: Record<string, string>;
  readonly timestamp?: number;
}

/** An input file of orders: `perPartition` records on each of two partitions, ids prefixed by `tag`. */
function ordersFile(name: string, tag: string, perPartition: number, timestamps = false): string {
  const lines: Line[] = [];
  for (let i = 0; i < perPartition; i++) {
    for (const partition of [0, 1]) {
      const id = `${tag}-${partition}-${i}`;
      lines.push({
        partition,
        key: id,
        value: order(id, 'cust-1', '10.00', i % 3 === 0 ? 'GBP' : 'USD'),
        headers: { 'idempotency-key': id },
        ...(timestamps ? { timestamp: 1_764_374_400_000 + i } : {}),
      });
    }
  }
  const file = join(dir, name);
  writeFileSync(file, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
  return file;
}

const target = (settings: Settings) => [
  '--table',
  settings.ledgerTable,
  '--bucket',
  settings.bucket,
  '--pipeline',
  settings.pipelineId,
];

/** The committed rows readers show: `generation:offset` per partition, sorted. */
async function committed(settings: Settings): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    const source = row.source as { partition: number; offset: number };
    rows.push(`${file.topic}:${source.partition}@${source.offset}`);
  }
  return rows.sort();
}

describe('eos deliver', () => {
  it('delivers a file as the live mapping does; eos checkpoint commits it; a second run is a redelivery', async () => {
    const settings = settingsIn(res, 'clideliver');
    const file = ordersFile('live.jsonl', 'live', 5);
    const first = await eos(['deliver', '--input', file, '--batch-size', '2', ...target(settings)]);
    expect(first).toMatchObject({ code: 0, err: '' });
    expect(first.out).toBe(
      [
        'orders-0: offsets 0..4: 5 records in 3 batches: 5 output rows and 0 dead letters staged',
        'orders-1: offsets 0..4: 5 records in 3 batches: 5 output rows and 0 dead letters staged',
        'next: eos checkpoint commits what was staged',
        '',
      ].join('\n'),
    );
    expect(await committed(settings)).toEqual([]);
    // Both partitions' ranges are slices of one merged final object.
    expect((await eos(['checkpoint', ...target(settings)])).out).toBe(
      'checkpoint 1 committed: 10 rows in 1 file\n',
    );
    expect(await committed(settings)).toHaveLength(10);

    // The same file again, its records without a timestamp of their own: the same records, so a redelivery.
    const again = await eos(['deliver', '--input', file, ...target(settings)]);
    expect(again).toMatchObject({ code: 0 });
    expect(again.out).toBe(
      [
        'orders-0: offsets 0..4: 5 records in 1 batch: nothing staged (5 redelivered)',
        'orders-1: offsets 0..4: 5 records in 1 batch: nothing staged (5 redelivered)',
        'nothing new staged',
        '',
      ].join('\n'),
    );
    expect((await eos(['checkpoint', ...target(settings)])).out).toMatch(/^nothing to commit/);
  });

  it('stops the partitions of a recreated topic (confirmed, exit 1) until eos epoch --start-new; then stages in the new epoch', async () => {
    const settings = settingsIn(res, 'clideliver');
    const before = ordersFile('before.jsonl', 'before', 4, true);
    expect((await eos(['deliver', '--input', before, ...target(settings)])).code).toBe(0);
    expect((await eos(['checkpoint', ...target(settings)])).code).toBe(0);

    const recreated = ordersFile('recreated.jsonl', 'after', 3, true);
    const stopped = await eos(['deliver', '--input', recreated, ...target(settings)]);
    expect(stopped.code).toBe(1);
    expect(stopped.out).toMatch(
      /^orders-0: STOPPED at offsets 0\.\.2: offsets of orders-0 went backwards: .*; eos epoch shows the stop \(docs\/operations\.md#offsets-went-backwards\)$/m,
    );
    expect(stopped.out).toMatch(/^orders-1: STOPPED at offsets 0\.\.2: /m);
    expect(stopped.out).toMatch(/^nothing new staged$/m);
    const epochs = await eos(['epoch', '--table', settings.ledgerTable, '--pipeline', settings.pipelineId]);
    expect(epochs.out).toMatch(/^orders-0: epoch 0 \(orders\), fence 3, STOPPED$/m);
    expect(epochs.out).toMatch(/confirmed: seen by 2 invocations/);

    const switched = await eos([
      'epoch',
      '--table',
      settings.ledgerTable,
      '--pipeline',
      settings.pipelineId,
      '--start-new',
      '--topic',
      'orders',
    ]);
    expect(switched.code).toBe(0);
    const resumed = await eos(['deliver', '--input', recreated, ...target(settings)]);
    expect(resumed).toMatchObject({ code: 0 });
    expect(resumed.out).toMatch(
      /^orders-0: offsets 0\.\.2: 3 records in 1 batch: 3 output rows and 0 dead letters staged \(lane orders~1\)$/m,
    );
    expect((await eos(['checkpoint', ...target(settings)])).out).toBe(
      'checkpoint 2 committed: 6 rows in 1 file\n',
    );
    const rows = await committed(settings);
    expect(rows.filter((row) => row.startsWith('orders~1:'))).toHaveLength(6);
    expect(rows).toHaveLength(14);
  });

  it('delivers a file as a generation replay mapping does: only the planned range is staged, and the switch commits it', async () => {
    const settings = settingsIn(res, 'clideliver');
    const file = ordersFile('replayed.jsonl', 'replayed', 6, true);
    await eos(['deliver', '--input', file, ...target(settings)]);
    await eos(['checkpoint', ...target(settings)]);
    const ledger = ['--table', settings.ledgerTable, '--pipeline', settings.pipelineId];
    const planned = await eos([
      'replay',
      ...ledger,
      '--topic',
      'orders',
      '--from-offset',
      '2',
      '--to-offset',
      '3',
    ]);
    expect(planned.out).toMatch(/eos deliver --generation 1 --input <file>/);
    expect((await eos(['replay', ...ledger, '--switch', '1'])).code).toBe(0);

    const replayed = await eos(['deliver', '--input', file, '--generation', '1', ...target(settings)]);
    expect(replayed).toMatchObject({ code: 0, err: '' });
    expect(replayed.out).toBe(
      [
        'orders-0: offsets 0..5: 6 records in 1 batch: 2 output rows and 0 dead letters staged (lane orders~g1)',
        'orders-1: offsets 0..5: 6 records in 1 batch: 2 output rows and 0 dead letters staged (lane orders~g1)',
        'next: eos checkpoint commits what was staged',
        '',
      ].join('\n'),
    );
    expect((await eos(['checkpoint', ...target(settings)])).out).toMatch(
      /^checkpoint 2 committed: 4 rows in 1 file; readers switched to generation 1\n$/,
    );
    const rows = await committed(settings);
    expect(rows).toHaveLength(12);
    expect(rows.filter((row) => row.startsWith('orders~g1:')).sort()).toEqual([
      'orders~g1:0@2',
      'orders~g1:0@3',
      'orders~g1:1@2',
      'orders~g1:1@3',
    ]);
  });

  it('prints JSON with --json', async () => {
    const settings = settingsIn(res, 'clideliver');
    const file = ordersFile('json.jsonl', 'json', 2, true);
    const run = await eos(['deliver', '--input', file, '--json', ...target(settings)]);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.out)).toMatchObject({
      topic: 'orders',
      partitions: [
        { partition: 0, firstOffset: 0, lastOffset: 1, records: 2, stagedRows: 2, lanes: ['orders'] },
        { partition: 1, firstOffset: 0, lastOffset: 1, records: 2, stagedRows: 2, lanes: ['orders'] },
      ],
    });
  });

  it('refuses what cannot be delivered: no input, a bad line, a generation without a plan', async () => {
    const settings = settingsIn(res, 'clideliver');
    expect(await eos(['deliver', ...target(settings)])).toMatchObject({
      code: 2,
      err: "error: required option '--input <file.jsonl>' not specified\n",
    });
    const bad = join(dir, 'bad.jsonl');
    writeFileSync(
      bad,
      '{"partition": 0, "key": "a", "value": "b"}\n{"partition": 5, "key": "a", "value": "b"}\n',
    );
    expect(await eos(['deliver', '--input', bad, '--partitions', '2', ...target(settings)])).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: .*bad\.jsonl:2: partition 5 is out of range \(--partitions 2: 0\.\.1\)\n$/,
      ),
    });
    const file = ordersFile('noplan.jsonl', 'noplan', 1, true);
    const noPlan = await eos(['deliver', '--input', file, '--generation', '4', ...target(settings)]);
    expect(noPlan.code).toBe(2);
    expect(noPlan.err).toMatch(/^error: .*generation 4.*\n$/);
  });

  it('without --partitions, delivers to as many partitions as the file names', async () => {
    const settings = settingsIn(res, 'clideliver');
    const file = join(dir, 'three.jsonl');
    writeFileSync(
      file,
      [0, 1, 2]
        .map((partition) => JSON.stringify({ partition, key: `k${partition}`, value: 'not an order' }))
        .join('\n'),
    );
    const delivered = await eos(['deliver', '--input', file, '--json', ...target(settings)]);
    expect(delivered.code).toBe(0);
    const { partitions } = JSON.parse(delivered.out) as {
      partitions: { partition: number; records: number }[];
    };
    expect(partitions.map((p) => [p.partition, p.records])).toEqual([
      [0, 1],
      [1, 1],
      [2, 1],
    ]);
  });

  it('gives the records without a timestamp of their own the file modification time', async () => {
    const settings = settingsIn(res, 'clideliver');
    const file = join(dir, 'mtime.jsonl');
    writeFileSync(file, '{"partition": 0, "key": "k", "value": "not an order"}\n');
    const at = new Date('2026-11-30T10:00:00Z');
    utimesSync(file, at, at);
    await eos(['deliver', '--input', file, ...target(settings)]);
    await eos(['checkpoint', ...target(settings)]);
    const timestamps: unknown[] = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
      stream: 'deadletter',
    })) {
      timestamps.push((row.raw as { timestamp?: unknown }).timestamp);
    }
    expect(timestamps).toEqual([at.getTime()]);
  });
});
