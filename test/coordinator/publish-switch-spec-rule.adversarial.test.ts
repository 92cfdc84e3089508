/**
 * The table a replay switch leaves, read by the Iceberg spec's rule for position deletes rather than icebird's
 * (which applies every position delete file to every data file of its path, whatever the sequence numbers,
 * partitions and specs): a position delete applies to a live data file when its `file_path` is the data file's
 * location as written, its data sequence number is at or above the data file's, and it has the data file's spec
 * and partition (spec, "Scan Planning"; Athena and Spark read so). Read this way, after every checkpoint, the table
 * holds exactly the committed reader's rows as a multiset: through two switches, appends, a catch-up and a table
 * whose manifests are merged on every commit (`commit.manifest.min-count-to-merge` 2, so live files move into
 * merged manifests between the switches). Against DynamoDB Local and the local S3 server.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { decodeContainer } from '../../shared/iceberg/avro-container.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { ENTRY_DELETED } from '../../shared/iceberg/manifest-entries.ts';
import { ENTRY_ADDED } from '../../shared/iceberg/manifest-file.ts';
import { decodeManifestList } from '../../shared/iceberg/manifest-list.ts';
import { MANIFEST_MIN_COUNT_TO_MERGE, s3ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { ReplayStore } from '../../shared/replay/store.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { decodeParquetRows } from '../../shared/sink/parquet-read.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { plan, switchTo, tagOf } from '../support/generations.ts';
import { commitOver, publishSetup, rowsBack, stateOf } from '../support/publish.ts';
import { stageFiles } from '../support/staging.ts';
import {
  commitCheckpoint,
  committedRows,
  compactLiveFile,
  deliver,
  expectTableFollows,
  type ReplaySetup,
  records,
  replaySetup,
} from './publish-replay-harness.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubspec');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const offsetN = (row: Record<string, unknown>) =>
  `${Number((row.source as { offset: number }).offset)}:${Number(row.n)}`;

/** A row as the replay harness names it: `p@offset:tag`. */
function harnessId(row: Record<string, unknown>): string {
  const source = row.source as { partition: number; offset: number };
  return `${source.partition}@${source.offset}:${tagOf(row)}`;
}

/** A live entry of main's head as the spec resolves it. */
interface LiveFile {
  readonly path: string;
  readonly content: number;
  readonly sequence: bigint;
  readonly specId: number;
  readonly partition: string;
}

interface RawEntry {
  readonly status: number;
  readonly sequence_number?: bigint | null;
  readonly data_file: {
    readonly content?: number;
    readonly file_path: string;
    readonly partition: Record<string, unknown>;
  };
}

const bytesOf = async (location: string): Promise<Buffer> => {
  const match = /^s3:\/\/([^/]+)\/(.+)$/.exec(location) as RegExpExecArray;
  const body = await getBytes(res.clients.s3, match[1] as string, match[2] as string);
  if (!body) throw new Error(`${location} is missing`);
  return Buffer.from(body);
};

/** Main head's live entries, each with its data sequence number resolved by the spec's inheritance rule. */
async function liveEntries(s: Pick<ReplaySetup, 'catalog'>): Promise<LiveFile[]> {
  const { metadata } = await stateOf(s.catalog);
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  if (!head) throw new Error('the table has no head');
  const store = s3ManifestStore(res.clients.s3, metadata.location);
  const out: LiveFile[] = [];
  for (const manifest of decodeManifestList(await store.read(head['manifest-list']))) {
    const { records: entries } = decodeContainer(await store.read(manifest.manifest_path));
    for (const entry of entries as RawEntry[]) {
      if (entry.status === ENTRY_DELETED) continue;
      const inherited = entry.status === ENTRY_ADDED ? manifest.sequence_number : undefined;
      const sequence = entry.sequence_number ?? inherited;
      if (sequence === undefined)
        throw new Error(`an EXISTING entry of ${manifest.manifest_path} has no sequence`);
      out.push({
        path: entry.data_file.file_path,
        content: entry.data_file.content ?? manifest.content,
        sequence,
        specId: manifest.partition_spec_id,
        partition: JSON.stringify(entry.data_file.partition, (_k, v) => (typeof v === 'bigint' ? `${v}` : v)),
      });
    }
  }
  return out;
}

/** The manifest paths of main's head. */
async function headManifests(s: ReplaySetup): Promise<string[]> {
  const { metadata } = await stateOf(s.catalog);
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  const store = s3ManifestStore(res.clients.s3, metadata.location);
  return decodeManifestList(await store.read(head?.['manifest-list'] ?? '')).map((m) => m.manifest_path);
}

/** The rows a reader following the spec's position-delete rule shows, as `p@offset:tag`, sorted. */
async function specRows(
  s: Pick<ReplaySetup, 'catalog'>,
  id: (row: Record<string, unknown>) => string = harnessId,
): Promise<string[]> {
  const entries = await liveEntries(s);
  const deletes = entries.filter((entry) => entry.content === 1);
  const deleted = new Map<string, { pos: number; file: LiveFile }[]>();
  for (const file of deletes) {
    for (const row of await decodeParquetRows(await bytesOf(file.path))) {
      const list = deleted.get(String(row.file_path)) ?? [];
      list.push({ pos: Number(row.pos), file });
      deleted.set(String(row.file_path), list);
    }
  }
  const rows: string[] = [];
  for (const data of entries.filter((entry) => entry.content === 0)) {
    const applies = (deleted.get(data.path) ?? []).filter(
      ({ file }) =>
        file.sequence >= data.sequence && file.specId === data.specId && file.partition === data.partition,
    );
    const positions = new Set(applies.map(({ pos }) => pos));
    (await decodeParquetRows(await bytesOf(data.path))).forEach((row, position) => {
      if (positions.has(position)) return;
      rows.push(id(row));
    });
  }
  return rows.sort();
}

/** Commits the next checkpoint; `publish` publishes up to it and checks the spec reader against the reader. */
async function step(s: ReplaySetup, what: string, publish = true): Promise<void> {
  await commitCheckpoint(s);
  if (!publish) return;
  const manifests = await s.parts.manifests.read((await s.parts.snapshots.readMark()).upTo + 1);
  let last = manifests?.checkpointId ?? 0;
  while (await s.parts.manifests.read(last + 1)) last++;
  expect((await publishCheckpoint(s.parts, last)).publishedUpTo, what).toBe(last);
  await expectTableFollows(s, what);
  expect(await specRows(s), what).toEqual(await committedRows(s));
}

describe('a switched table read by the spec’s position-delete rule', { timeout: 180_000 }, () => {
  it('shows the committed reader’s rows through two switches, appends and a catch-up, manifests merged on every commit', async () => {
    const s = replaySetup(res, 'pubspec');
    await deliver(s, records(0, 20));
    await step(s, 'the live output');
    const state = await stateOf(s.catalog);
    await commitOver(s.catalog, state, {
      ...state.metadata,
      properties: { ...state.metadata.properties, [MANIFEST_MIN_COUNT_TO_MERGE]: '2' },
    });
    await deliver(s, records(20, 5));
    await step(s, 'an append, manifests merged');
    await plan(res, s.settings, 3, 22);
    await deliver(s, records(0, 25), { generation: 1, size: 4 });
    await switchTo(res, s.settings, 1);
    await step(s, 'generation 1 over 3..22');
    await deliver(s, records(25, 5));
    await step(s, 'an append after the switch');
    // The live and generation files now sit in a merged manifest beside the switch's delete manifest.
    expect((await headManifests(s)).map((path) => /-(m\d+|pd)-/.exec(path)?.[1])).toEqual(['m0', 'm1', 'pd']);
    await deliver(s, records(30, 5));
    await step(s, 'another append, not published', false);
    await plan(res, s.settings, 10, 27);
    await deliver(s, records(0, 35), { generation: 2, size: 6 });
    await switchTo(res, s.settings, 2);
    await step(s, 'generation 2 over 10..27, caught up with the append before it', false);
    await deliver(s, records(35, 5));
    await step(s, 'the catch-up of both and an append');
    const rows = await committedRows(s);
    expect(['g1', 'g2', 'v1'].map((tag) => rows.filter((row) => row.endsWith(`:${tag}`)).length)).toEqual([
      14, 36, 30,
    ]);
  });

  it.each([
    ['before the publish loads the table', false],
    ['between its load and its swap', true],
  ])(
    'a switch of partition 0 goes on over a compaction of partition 1 %s, removing a file from the compaction’s manifest',
    async (_when, between) => {
      const s = replaySetup(res, 'pubspec');
      await deliver(s, records(0, 20));
      await step(s, 'the live output');
      await plan(res, s.settings, 0, 19, [0]);
      await deliver(
        s,
        records(0, 20).filter((r) => r.partition === 0),
        { generation: 1, size: 4 },
      );
      await switchTo(res, s.settings, 1);
      await commitCheckpoint(s);
      let catalog: Catalog = s.catalog;
      if (between) {
        let done = false;
        catalog = {
          load: () => s.catalog.load(),
          commit: async (expected, next) => {
            if (!done) {
              done = true;
              await compactLiveFile(s, 1);
            }
            return s.catalog.commit(expected, next);
          },
        };
      } else await compactLiveFile(s, 1);
      const out = await publishCheckpoint({ ...s.parts, target: { ...s.parts.target, catalog } }, 2);
      expect(out.published.map((p) => p.how)).toEqual(['appended']);
      await expectTableFollows(s, 'the switch over the compaction');
      expect(await specRows(s)).toEqual(await committedRows(s));
      const { metadata } = await stateOf(s.catalog);
      expect(metadata.snapshots.map((snapshot) => snapshot.summary.operation)).toEqual([
        'append',
        'replace',
        'overwrite',
      ]);
      expect(metadata.snapshots.at(-1)?.summary).toMatchObject({
        'deleted-data-files': '1',
        'added-position-deletes': '0',
      });
    },
  );

  it('files of one partition in two time folders with interleaved offsets: each file’s rows deleted in its own partition', async () => {
    const s = publishSetup(res, 'pubspec');
    const now = Date.now();
    const rows = (base: number, offsets: number[], hoursAgo: (offset: number) => number) =>
      offsets.map((offset) => ({
        n: base + offset,
        at: now,
        source: { topic: 'orders', partition: 0, offset, timestamp: now - hoursAgo(offset) * 3_600_000 },
      }));
    const all = Array.from({ length: 20 }, (_, i) => i);
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: 19, rows: rows(0, all, (o) => 2 + (o % 2)) },
    ]);
    await checkpoint(res, s.settings);
    await publishCheckpoint(s.parts, 1);
    const live = (await s.parts.manifests.read(1))?.files.filter((file) => file.stream === 'output') ?? [];
    // Both files list the staged file's range, in two folders (two partitions of the table).
    expect(
      live.map((file) => [file.firstOffset, file.lastOffset, /hour=(\d+)/.exec(file.key)?.[1]]),
    ).toHaveLength(2);
    expect(new Set(live.map((file) => /dt=[^/]+\/hour=\d+/.exec(file.key)?.[0])).size).toBe(2);
    const replays = new ReplayStore(res.clients.dynamodb, res.table, s.settings.pipelineId);
    expect(await replays.create(1, [{ lane: 'orders', partition: 0, from: 5, to: 12 }], now)).toBe(true);
    const range = all.filter((o) => o >= 5 && o <= 12);
    await stageFiles(
      res.clients,
      s.settings,
      [
        {
          topic: 'orders~g1',
          partition: 0,
          firstOffset: 5,
          lastOffset: 12,
          rows: rows(100, range, () => 0),
        },
      ],
      'g1',
    );
    expect(await replays.requestSwitch(1, now)).toBe('requested');
    await checkpoint(res, s.settings);
    await publishCheckpoint(s.parts, 2);
    const expected: string[] = [];
    for await (const { row } of readCommitted({
      s3: res.clients.s3,
      bucket: res.bucket,
      pipeline: s.settings.pipelineId,
    })) {
      expected.push(offsetN(row));
    }
    expect(expected).toHaveLength(20);
    expect(await rowsBack(s.catalog)).toEqual(
      expected.map((id) => Number(id.split(':')[1])).sort((a, b) => a - b),
    );
    expect(await specRows(s, offsetN)).toEqual(expected.sort());
  });
});
