/**
 * Adversarial interleavings of Parquet output, time folders and the staged record time against the exactly-once
 * protocol: promote stays live across schema and setting changes and writes the voted bytes once under crashes
 * and zombies (each comment gives the interleaving).
 * Real DynamoDB Local and S3 server (the vitest global setup); staged files are written as the processor writes
 * them with time folders on (rows carry `source.timestamp`), via test/support/staging.ts.
 *
 * With time folders the manifest-order read is in offset order per partition AND folder only (docs/output.md says
 * so), so test/support/staging.ts expectExactlyOnce fails on any layout with late rows. The tests here compare
 * each partition's offsets sorted, and run eos verify.
 */
import { createHash } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { ManualClock } from '../../shared/clock.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../../shared/coordinator/coordinator.ts';
import { outputShapeOf, StagedCensus } from '../../shared/coordinator/promote/folder-plan.ts';
import { planFinalObjects } from '../../shared/coordinator/promote/promoter.ts';
import type { StagedFileEntry } from '../../shared/ledger/records.ts';
import { parseFinalKey } from '../../shared/sink/layout.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes, listObjects } from '../../shared/sink/objects.ts';
import { decodeParquetRows } from '../../shared/sink/parquet-read.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import {
  MAX_EARLINESS_MS,
  MAX_FOLDERS_PER_STAGED_FILE,
  MAX_LATENESS_MS,
} from '../../shared/sink/record-time.ts';
import { timeFolder } from '../../shared/sink/time-partitions.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { committedOffsets, range, stageFiles } from '../support/staging.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];
// Yesterday 07:10 UTC: inside the lateness window around the staging time (now) whatever the date of the run.
const H7 = (Math.floor(Date.now() / 86_400_000) - 1) * 86_400_000 + (7 * 60 + 10) * 60_000;
const HOUR = 3_600_000;

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvpq');
});

function settingsFor(pipelineId: string, extra: Record<string, unknown> = {}): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId,
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: COLUMNS,
    ...extra,
  });
}

function setup(extra: Record<string, unknown> = {}) {
  const settings = settingsFor(uniqueName('rvpq'), extra);
  const clock = new ManualClock(Date.now());
  return {
    settings,
    clock,
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

/** Each expected offset once per partition (any order: with time folders the reader's order is per folder). */
async function expectEachOnce(settings: Settings, expected: Record<string, number[]>): Promise<void> {
  const found: Record<string, number[]> = {};
  for (const { partition, offset } of await committedOffsets(res.clients, settings)) {
    found[partition] ??= [];
    found[partition]!.push(offset);
  }
  for (const list of Object.values(found)) list.sort((a, b) => a - b);
  expect(found).toEqual(expected);
  const verified = await verifySink({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  });
  expect(verified.problems).toEqual([]);
}

/** The committed dead letters, by partition and offset. */
async function deadLetters(
  settings: Settings,
): Promise<{ partition: number; offset: number; error: unknown; row: unknown }[]> {
  const found = [];
  for await (const { row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream: 'deadletter',
  })) {
    const source = row.source as { partition: number; offset: number };
    found.push({ partition: source.partition, offset: source.offset, error: row.error, row: row.row });
  }
  return found.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
}

type Outcome = { outcome: 'committed'; checkpointId: number } | { outcome: 'aborted'; reason: string };

/** One whole checkpoint as the state machine runs it: prepare failing → abort; else decide, promote, commit, cleanup. */
async function runCheckpoint(core: Coordinator, execution: string): Promise<Outcome | { outcome: 'empty' }> {
  const begun = await core.begin({ execution });
  if (begun.action === 'empty') return { outcome: 'empty' };
  expect(begun.action).toBe('checkpoint');
  const ref = { execution, checkpointId: begun.checkpointId, attempt: begun.attempt };
  try {
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
  } catch (error) {
    await core.abort({ ...ref, error: { Error: 'PrepareFailed', Cause: String(error) } });
    return { outcome: 'aborted', reason: String(error) };
  }
  for (const shard of begun.shards) await core.promote({ ...ref, shard });
  await core.commit(ref);
  for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
  return { outcome: 'committed', checkpointId: begun.checkpointId };
}

describe('promote stays live across output schema and setting changes', () => {
  /**
   * Hazard (stall, every partition): a schema change deployed while rows of the old schema are staged.
   *
   * Interleaving: the processor stages rows of transform v1 (columns n, at) with Parquet output on. Before the
   * next checkpoint commits them (there are always such rows on a running pipeline: up to one checkpoint interval
   * of them), the stack is redeployed with transform v2, whose schema drops `at` (or adds a required column, or
   * changes a type); the stack sets `outputColumns` from v2. Every prepare now takes the census of the v1 copies
   * with v2's columns, `censusOf` (folder-plan.ts) throws RowMisfitError, the checkpoint aborts (C6 keeps the
   * staged data)… and the next checkpoint covers the very same staged files again and aborts again, forever.
   * Because a checkpoint covers all partitions at once, no partition commits anything again: a permanent outage
   * with no operator remedy short of deleting staged data or rolling the schema back (which then stalls on the
   * v2 rows). With NDJSON the same redeploy is harmless.
   *
   * Guard (folder-plan.ts classifyRows): a staged row is projected onto the current columns (a dropped column's
   * field is dropped, an added nullable column is null); a row that still does not fit is committed once as a
   * `schema-mismatch` dead letter. The first checkpoint after the redeploy commits, each record exactly once.
   */
  it('rows staged under the previous transform schema commit at the first checkpoint after a schema change (dropped column projected away)', async () => {
    const pipelineId = uniqueName('rvpq');
    const v1 = settingsFor(pipelineId);
    await stageFiles(res.clients, v1, [
      { partition: 0, firstOffset: 0, lastOffset: 1, rows: rows(0, 0, [H7, H7]) },
    ]);
    // Redeploy: the transform's schema no longer has `at` (the time folders use the Kafka timestamp anyway).
    const v2 = settingsFor(pipelineId, { outputColumns: [COLUMNS[0]] });
    // Another partition staged by the new processor, with v2's rows: it is held hostage too.
    await stageFiles(
      res.clients,
      v2,
      [
        {
          partition: 1,
          firstOffset: 0,
          lastOffset: 1,
          rows: rows(1, 0, [H7, H7]).map(({ at: _at, ...row }) => row),
        },
      ],
      'a2',
    );
    const core = createCoordinator({
      settings: v2,
      clients: res.clients,
      clock: new ManualClock(Date.now()),
    });
    const outcomes: string[] = [];
    for (let i = 0; i < 3; i++) {
      const outcome = await runCheckpoint(core, `e${i}`);
      outcomes.push(outcome.outcome);
      if (outcome.outcome === 'committed') break;
    }
    // Without the guard: ['aborted', 'aborted', 'aborted'], each "row 1 does not fit outputColumns: column "at" is
    // not declared".
    expect(outcomes).toEqual(['committed']);
    await expectEachOnce(v2, { 'orders#0': range(0, 2), 'orders#1': range(0, 2) });
    expect(await deadLetters(v2)).toEqual([]);
  });

  /**
   * The incompatible half of the same redeploy: v2 adds a REQUIRED column (and, on another partition, changes a
   * type). The v1 rows cannot be written under v2's columns, so each is committed once as a dead letter with the
   * reason `schema-mismatch: …` and the row's fields as staged; v2's rows commit as Parquet; nothing aborts. A
   * crashed promote retried next to a zombie writes the same bytes under the same keys (deterministic).
   */
  it('rows that cannot fit the new columns (added required column, changed type) commit once as schema-mismatch dead letters', async () => {
    const pipelineId = uniqueName('rvpq');
    const v1 = settingsFor(pipelineId);
    await stageFiles(res.clients, v1, [
      { partition: 0, firstOffset: 0, lastOffset: 1, rows: rows(0, 0, [H7, H7]) },
      {
        partition: 2,
        firstOffset: 0,
        lastOffset: 0,
        rows: [{ n: 'zero', at: H7, source: { topic: 'orders', partition: 2, offset: 0, timestamp: H7 } }],
      },
    ]);
    const v2Columns: ColumnDefinition[] = [...COLUMNS, { name: 'qty', type: 'int', nullable: false }];
    const v2 = settingsFor(pipelineId, { outputColumns: v2Columns });
    await stageFiles(
      res.clients,
      v2,
      [
        {
          partition: 1,
          firstOffset: 0,
          lastOffset: 1,
          rows: rows(1, 0, [H7, H7]).map((r) => ({ ...r, qty: 3 })),
        },
      ],
      'a2',
    );
    const clock = new ManualClock(Date.now());
    const core = createCoordinator({ settings: v2, clients: res.clients, clock });
    const begun = await core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    await core.decide(ref);
    const zombie = createCoordinator({ settings: v2, clients: createAwsClients(), clock });
    await Promise.all(
      begun.shards.flatMap((shard) => [core.promote({ ...ref, shard }), zombie.promote({ ...ref, shard })]),
    );
    await core.commit(ref);
    for (const shard of begun.shards) await core.cleanup({ ...ref, shard });
    await expectEachOnce(v2, { 'orders#1': range(0, 2) });
    const dead = await deadLetters(v2);
    expect(dead.map((d) => [d.partition, d.offset])).toEqual([
      [0, 0],
      [0, 1],
      [2, 0],
    ]);
    expect(dead[0]!.error).toBe('schema-mismatch: required column "qty" is missing');
    expect(dead[0]!.row).toEqual({ n: 0, at: H7 });
    expect(dead[2]!.error).toMatch(/^schema-mismatch: column "n" must be an integer/);
    // The next checkpoint (nothing staged) finds nothing left over.
    expect((await runCheckpoint(core, 'e2')).outcome).toBe('empty');
  });

  /**
   * Hazard (stall after the decision): producer timestamps spread one staged file over as many folders as it has
   * rows, and promote's work grows with that, unbounded.
   *
   * Interleaving: Kafka's CreateTime is whatever the producer says. One batch of N records with N distinct hours
   * (a clock bug, replayed history, a hostile client) is one staged file. Prepare's census is cheap (one decode),
   * votes, and the checkpoint is decided: the plan has N final objects for that one file (folder-pack.ts
   * planFolders: one per folder × partition), each with the same single member. Building those N objects one at a
   * time, each from all its member's rows, is N reads + N writes + N² row decodes in ONE Lambda invocation per shard
   * (measured on the local S3 server when promote worked that way: N = 1,000 took ~16 s, N = 2,000 ~31 s). An MSK
   * batch holds up to 10,000 records, and a shard handles every partition dealt to it (at most 16 shards: with 20,000
   * partitions a shard holds 1,250), so a handful of such partitions in one shard exceed the 900 s Lambda limit.
   * After the decision the checkpoint can only roll forward (C4): the step times out, is retried, times out again,
   * and since only one checkpoint is ever in flight (C1) the whole pipeline stops committing. Without time folders the
   * number of final objects was bounded by the staged input (32 MiB / 2,000 files per object), never by record
   * content.
   *
   * Expected: the work of one promote invocation is bounded by the staged input it covers, not multiplied by the
   * number of distinct hours producers put in their timestamps: e.g. prepare files records whose time lies far
   * from their staging time in a bounded set of folders (or refuses to plan more than a bounded number of objects
   * per staged file), promote decodes each member once per shard rather than once per folder object, and/or
   * promote is paged so that no single invocation does unbounded work. Asserted: one staged file of 1,000 rows
   * (about 60 KB) does not turn into more than 48 final objects (two days of hour folders), and its bytes are
   * read once (by prepare, which merges the candidates; promote copies them).
   *
   * Guard: a row's folder is bounded around its file's stagedAt (record-time.ts assignFolders: more than 7 days
   * before or 1 hour after → the stagedAt folder; at most MAX_FOLDERS_PER_STAGED_FILE folders per file), the row
   * keeping its own time in its column; promote decodes each member once per shard (promoter.ts promoteShard).
   * Here half the rows lie 1..500 hours before staging (the window holds 168 of them, the folder cap 48) and half
   * 1..500 hours after it.
   */
  it('one staged file whose rows carry 1,000 distinct hours is promoted as at most 48 objects from one read of its bytes', {
    timeout: 120_000,
  }, async () => {
    const N = 1000;
    const { settings } = setup();
    const counts = { copyGets: 0, finalPuts: 0 };
    const clients = createAwsClients();
    clients.s3.middlewareStack.add(
      (next, context) => async (args) => {
        const key = String((args.input as { Key?: string }).Key ?? '');
        // Reads of the staged file's bytes (the object, or a copy of it), whoever makes them.
        if (
          context.commandName === 'GetObjectCommand' &&
          (key.includes('/staged/') || key.includes('/_inprogress/'))
        )
          counts.copyGets++;
        // Final objects are written by promote, one copy of a candidate each (or a put of one).
        if (
          (context.commandName === 'PutObjectCommand' || context.commandName === 'CopyObjectCommand') &&
          key.startsWith(`${settings.pipelineId}/final/`)
        )
          counts.finalPuts++;
        return next(args);
      },
      { step: 'initialize', name: 'parquetCounter' },
    );
    const core = createCoordinator({ settings, clients, clock: new ManualClock(Date.now()) });
    const now = Date.now();
    await stageFiles(res.clients, settings, [
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: N - 1,
        rows: rows(
          0,
          0,
          range(0, N).map((i) => (i % 2 === 0 ? now - (i / 2 + 1) * HOUR : now + ((i + 1) / 2) * HOUR)),
        ),
      },
    ]);
    const begun = await core.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    const preparedAt = Date.now();
    for (const shard of begun.shards) await core.prepare({ ...ref, shard });
    const prepareMs = Date.now() - preparedAt;
    await core.decide(ref);
    const promotedAt = Date.now();
    for (const shard of begun.shards) await core.promote({ ...ref, shard });
    const promoteMs = Date.now() - promotedAt;
    await core.commit(ref);
    // Exactly once it is (the protocol is sound), only at a cost the producer controls.
    await expectEachOnce(settings, { 'orders#0': range(0, N) });
    const summary = `prepare ${prepareMs} ms, promote ${promoteMs} ms, ${counts.finalPuts} final PUTs, ${counts.copyGets} GETs of the staged file's bytes`;
    expect(counts.finalPuts, summary).toBeLessThanOrEqual(MAX_FOLDERS_PER_STAGED_FILE);
    expect(counts.copyGets, summary).toBe(1);
    // Only the folder is clamped: every row keeps its own time in its column.
    const times = new Map<number, number>();
    for (const { row } of await committedOffsets(res.clients, settings))
      times.set(row.n as number, row.at as number);
    expect(times.size).toBe(N);
    for (const [n, at] of times)
      expect(at).toBe(n % 2 === 0 ? now - (n / 2 + 1) * HOUR : now + ((n + 1) / 2) * HOUR);
  });

  /**
   * Hazard (low: a documented bound that does not hold): "Re-encoded objects are limited to 250,000 rows (promote holds
   * their rows decoded)". planFolders (folder-pack.ts packFolder) only cuts BETWEEN members: a member whose own rows
   * of one folder exceed the cap is put into an object alone, whatever its size. The processor puts no bound on
   * rows per staged file (a chunk is bounded by transaction items, and a record may emit many rows: an order
   * exploded into line items), so e.g. 10,000 records × 30 rows is one staged file of 300,000 rows, promoted as one
   * Parquet object held decoded in the promote Lambda's memory — the very thing the cap is there to prevent; if it
   * does not fit, promote fails after the decision on every retry (a stall). Exactly the cap fits one object and
   * the cap + 1 split between two members works (asserted first: those hold).
   *
   * Expected: no planned object holds more than maxObjectRows rows (an oversized member split by row ranges into
   * several objects, or the processor cutting staged files at the cap).
   *
   * Guard (folder-pack.ts slicesOf): a member over the cap is sliced at whole offsets (from the census's offset
   * runs), each slice an object whose range is its offsets: the ranges tile the member's, the keys differ.
   */
  it('a single staged file with more rows than the 250,000-row cap is planned as several objects within the cap', () => {
    const { settings } = setup({ timePartitioning: 'day' });
    const entry = (i: number, first: number, last: number, count: number): StagedFileEntry => ({
      pipeline: settings.pipelineId,
      stream: 'output',
      topic: 'orders',
      partition: 0,
      firstOffset: first,
      lastOffset: last,
      key: `${settings.pipelineId}/_inprogress/output/topic=orders/partition=0/${String(first).padStart(20, '0')}-${String(last).padStart(20, '0')}.a${i}.ndjson.gz`,
      recordCount: count,
      bytes: count * 20,
      sha256: '0'.repeat(64),
      md5: '0'.repeat(32),
      gzip: true,
      attemptId: `a${i}`,
      stagedAt: 0,
    });
    const shape = outputShapeOf(settings);
    // The census prepare takes: rows per folder, and offset runs for a folder this large (30 rows per record).
    const censusFor = (e: StagedFileEntry) => {
      const census = new StagedCensus([['dt=2026-12-01', e.recordCount]]);
      const records = e.lastOffset - e.firstOffset + 1;
      census.runs.set(
        'dt=2026-12-01',
        range(e.firstOffset, records).map((offset) => [offset, e.recordCount / records] as const),
      );
      return census;
    };
    const planned = (entries: StagedFileEntry[]) =>
      planFinalObjects(
        settings.pipelineId,
        entries,
        undefined,
        shape,
        new Map(entries.map((e) => [e.key, censusFor(e)])),
      );
    const plan = (entries: StagedFileEntry[]) => planned(entries).map((o) => o.recordCount);
    // Boundaries between members hold.
    expect(plan([entry(1, 0, 9, 125_000), entry(2, 10, 19, 125_000)])).toEqual([250_000]);
    expect(plan([entry(1, 0, 9, 125_000), entry(2, 10, 19, 125_001)])).toEqual([125_000, 125_001]);
    // One member above the cap: two slices at a record boundary, ranges tiling the member's, distinct keys.
    const sliced = planned([entry(1, 0, 9999, 300_000)]);
    expect(sliced.map((o) => [o.firstOffset, o.lastOffset, o.recordCount])).toEqual([
      [0, 8332, 249_990],
      [8333, 9999, 50_010],
    ]);
    expect(new Set(sliced.map((o) => o.finalKey)).size).toBe(2);
    expect(sliced.flatMap((o) => o.members.map((m) => [m.fromOffset, m.toOffset, m.rows]))).toEqual([
      [0, 8332, 249_990],
      [8333, 9999, 50_010],
    ]);
  });
});

describe('promote under crashes and zombies writes the voted bytes once', () => {
  /**
   * Why it holds: promote crashing after some final objects are written, retried while a zombie of the crashed
   * promote runs concurrently, writes the same bytes under the same keys (Parquet is deterministic, keys come from
   * the voted plan), the manifest lists exactly those objects, and nothing unlisted remains. Record times on the
   * edges: -1 (Kafka's "no timestamp"), before 1970, year 10000 (all far outside the window around stagedAt, so
   * filed under the stagedAt folder), exactly on a day boundary, 1 ms
   * before it, an hour after it; a timeField of null falls back to the Kafka timestamp. No final row
   * carries the staged-only `source.timestamp`; eos verify passes.
   */
  it('crash after partial promote + concurrent zombie + retry give the voted bytes; edge times file deterministically', async () => {
    const { settings, manifests } = setup({
      timeField: 'at',
      outputColumns: [COLUMNS[0], { ...COLUMNS[1], nullable: true }],
    });
    // Boundaries near now (inside the window around stagedAt), and times far outside it (filed by stagedAt).
    const now = Date.now();
    const DAY = now - (now % 86_400_000);
    const recent = now - 4 * HOUR;
    const times = [-1, -86_400_000 * 400, DAY, DAY - 1, DAY + HOUR, Date.UTC(10000, 0, 1, 5), 0, recent];
    const staged = rows(0, 0, times).map((row, i) => (i === 7 ? { ...row, at: null } : row));
    const entries = await stageFiles(res.clients, settings, [
      { partition: 0, firstOffset: 0, lastOffset: 3, rows: staged.slice(0, 4) },
      { partition: 0, firstOffset: 4, lastOffset: 7, rows: staged.slice(4) },
      { partition: 1, firstOffset: 0, lastOffset: 1, rows: rows(1, 0, [DAY, DAY - 1]) },
    ]);
    // The first promoter dies after its second final copy.
    let puts = 0;
    const crashing = createAwsClients();
    crashing.s3.middlewareStack.add(
      (next, context) => async (args) => {
        const key = String((args.input as { Key?: string }).Key ?? '');
        // Promote publishes a candidate by one copy to its final key.
        if (context.commandName === 'CopyObjectCommand' && key.includes('/final/') && ++puts > 2)
          throw new Error('injected crash');
        return next(args);
      },
      { step: 'initialize', name: 'parquetCrash' },
    );
    const clock = new ManualClock(Date.now());
    const first = createCoordinator({ settings, clients: crashing, clock });
    const zombie = createCoordinator({ settings, clients: createAwsClients(), clock });
    const retry = createCoordinator({ settings, clients: res.clients, clock });
    const begun = await first.begin({ execution: 'e1' });
    const ref = { execution: 'e1', checkpointId: begun.checkpointId, attempt: begun.attempt };
    for (const shard of begun.shards) await first.prepare({ ...ref, shard });
    await first.decide(ref);
    const crashed = await Promise.allSettled(begun.shards.map((shard) => first.promote({ ...ref, shard })));
    expect(crashed.some((r) => r.status === 'rejected')).toBe(true);
    // The crashed run's other copies (several at once) may still land: let them.
    await new Promise((resolve) => setTimeout(resolve, 500));
    const partial = new Map<string, string>();
    for await (const o of listObjects(res.clients.s3, settings.bucket, `${settings.pipelineId}/final/`)) {
      const bytes = (await getBytes(res.clients.s3, settings.bucket, o.key))!;
      partial.set(o.key, createHash('sha256').update(bytes).digest('hex'));
    }
    expect(partial.size).toBeGreaterThan(0);
    await Promise.all(
      begun.shards.flatMap((shard) => [zombie.promote({ ...ref, shard }), retry.promote({ ...ref, shard })]),
    );
    await Promise.all([retry.commit(ref), zombie.commit(ref)]);
    for (const shard of begun.shards) await retry.cleanup({ ...ref, shard });
    const manifest = (await manifests.read(begun.checkpointId))!;
    for (const [key, sha] of partial) expect(manifest.files.find((f) => f.key === key)?.sha256).toBe(sha);
    // Each record once (read order is per partition AND folder, see docs/output.md, so compare sorted), nothing
    // unlisted under final/.
    await expectEachOnce(settings, { 'orders#0': range(0, 8), 'orders#1': range(0, 2) });
    const folders = new Map<number, string>();
    for (const file of manifest.files) {
      const body = (await getBytes(res.clients.s3, settings.bucket, file.key))!;
      for (const row of await decodeParquetRows(body)) {
        expect(Object.keys(row.source as object)).toEqual(['topic', 'partition', 'offset']);
        if (file.partition === 0)
          folders.set(row.n as number, parseFinalKey(settings.pipelineId, file.key)!.folder!);
      }
    }
    // A time outside [stagedAt − 7 days, stagedAt + 1 hour] is filed under its file's stagedAt folder.
    const filed = (time: number, stagedAt: number) =>
      timeFolder(
        time < stagedAt - MAX_LATENESS_MS || time > stagedAt + MAX_EARLINESS_MS ? stagedAt : time,
        'hour',
      );
    expect([...folders].sort(([a], [b]) => a - b).map(([, f]) => f)).toEqual(
      times.map((time, i) => filed(time, entries[i < 4 ? 0 : 1]!.stagedAt)),
    );
    expect(folders.get(2)).toBe(timeFolder(DAY, 'hour'));
    expect(folders.get(3)).toBe(timeFolder(DAY - 1, 'hour'));
    expect(folders.get(7)).toBe(timeFolder(recent, 'hour'));
  });

  /**
   * Why it holds: settings switched between checkpoints while staged objects of the old setting await promote. Rows
   * staged by a processor with time folders off (no `source.timestamp`) are committed by a coordinator switched to
   * Parquet in hour folders: filed by their entry's `stagedAt` (deterministic), each once, no staged-only field;
   * then a checkpoint of rows staged with time folders on is committed after a switch back to NDJSON without
   * folders, again each once and without the timestamp. verify passes over the mixed layout.
   */
  it('ndjson/none → parquet/hour → ndjson/none across checkpoints, staged rows of the old setting in flight', async () => {
    const pipelineId = uniqueName('rvpq');
    const plainSettings = settingsFor(pipelineId, { outputFormat: 'ndjson', timePartitioning: 'none' });
    const parquetSettings = settingsFor(pipelineId);
    const plain = (partition: number, first: number, count: number) =>
      range(first, count).map((offset) => ({
        n: offset,
        at: H7,
        source: { topic: 'orders', partition, offset },
      }));
    const [unstamped] = await stageFiles(res.clients, plainSettings, [
      { partition: 0, firstOffset: 0, lastOffset: 2, rows: plain(0, 0, 3) },
    ]);
    const clock = new ManualClock(Date.now());
    const asParquet = createCoordinator({ settings: parquetSettings, clients: res.clients, clock });
    expect((await runCheckpoint(asParquet, 'e1')).outcome).toBe('committed');
    await stageFiles(
      res.clients,
      parquetSettings,
      [{ partition: 0, firstOffset: 3, lastOffset: 4, rows: rows(0, 3, [H7, H7 - 5 * HOUR]) }],
      'a2',
    );
    const asPlain = createCoordinator({ settings: plainSettings, clients: res.clients, clock });
    expect((await runCheckpoint(asPlain, 'e2')).outcome).toBe('committed');
    await expectEachOnce(plainSettings, { 'orders#0': range(0, 5) });
    const manifests = new ManifestStore(res.clients.s3, res.bucket, pipelineId);
    const first = (await manifests.read(1))!;
    expect(first.files.map((f) => [f.format, parseFinalKey(pipelineId, f.key)?.folder])).toEqual([
      ['parquet', timeFolder(unstamped!.stagedAt, 'hour')],
    ]);
    for (const { row } of await committedOffsets(res.clients, plainSettings)) {
      expect(Object.keys(row.source as object)).toEqual(['topic', 'partition', 'offset']);
    }
  });
});
