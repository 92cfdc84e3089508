/**
 * Adversarial interleavings of the Iceberg publish step against DynamoDB Local and the local S3 server, the table
 * read back by icebird: each committed checkpoint is one snapshot, in checkpoint order, and the ledger never
 * records a checkpoint as published that the table does not hold, through crashes at every write of a publish,
 * zombies racing the live publisher, pipelines sharing a table, and maintenance (rollback, expiry, property loss).
 */
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { icebergManifests, icebergMetadata } from 'icebird';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  PUBLISH_CATCH_UP_LIMIT,
  type PublishParts,
  publishCheckpoint,
} from '../../shared/coordinator/publish/publish.ts';
import { IcebergTableRolledBackError } from '../../shared/coordinator/publish/rollback.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { snapshotIdOf, type TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { finalObjectKey, parseFinalKey } from '../../shared/sink/layout.ts';
import type { Manifest } from '../../shared/sink/manifest.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import {
  commitNext as commitWith,
  compact,
  crashingLedger,
  mainCheckpoints,
  ownSnapshotId,
  type PublishSetup,
  publishSetup,
  rowsBack,
  rowsOf,
  setMain,
  stateOf,
} from '../support/publish.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('pubadv');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

type Setup = PublishSetup;

const setup = (options: { root?: string; base?: number } = {}): Setup => publishSetup(res, 'pa', options);
const commitNext = (s: Setup, count?: number) => commitWith(res, s, count);

/** The property under test: every checkpoint up to the ledger's mark is in the table, each row once. */
async function expectMarkHeld(s: Setup): Promise<void> {
  const mark = (await s.parts.snapshots.readMark()).upTo;
  const back = await rowsBack(s.catalog);
  expect(back).toEqual([...new Set(back)]);
  for (const n of rowsOf(mark, s.base)) expect(back).toContain(n);
}

/** An S3 client whose first put of a key matching `key` crashes the caller right after S3 took it. */
function crashAfterPut(inner: S3Client, key: RegExp): { s3: S3Client; fired: () => boolean } {
  let fired = false;
  const s3Proxy = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop !== 'send') return Reflect.get(target, prop, receiver);
      return async (command: unknown, ...rest: unknown[]) => {
        const send = target.send.bind(target) as (c: unknown, ...r: unknown[]) => Promise<unknown>;
        if (!fired && command instanceof PutObjectCommand && key.test(command.input.Key ?? '')) {
          fired = true;
          await send(command, ...rest);
          throw new InjectedCrashError(`after the put of ${command.input.Key}`);
        }
        return send(command, ...rest);
      };
    },
  });
  return { s3: s3Proxy, fired: () => fired };
}

describe('a crash at every write of a publish, then a retry: each checkpoint one snapshot, each row once', () => {
  const s3Crashes: [string, RegExp][] = [
    ['after the manifest', /\/metadata\/\d+-m0-[0-9a-f]+\.avro$/],
    ['after the manifest list', /\/metadata\/snap-\d+-[0-9a-f]+\.avro$/],
    ['after the version hint', /\/metadata\/version-hint\.text$/],
  ];
  for (const [when, key] of s3Crashes) {
    it(`holds through a crash ${when}`, async () => {
      const s = setup();
      await commitNext(s);
      await publishCheckpoint(s.parts, 1);
      await commitNext(s);
      const faulty = crashAfterPut(s3, key);
      const crashing: PublishParts = {
        ...s.parts,
        s3: faulty.s3,
        target: { ...s.parts.target, catalog: new FileCatalog(faulty.s3, res.bucket, s.catalog.root) },
      };
      await publishCheckpoint(crashing, 2).catch((error: unknown) => {
        expect(error).toBeInstanceOf(InjectedCrashError);
      });
      expect(faulty.fired()).toBe(true);
      // The crash leaves the table at checkpoint 1 or 2, never between; the retry brings it to 2 exactly once.
      expect(['1', '1,2']).toContain(mainCheckpoints((await stateOf(s.catalog)).metadata).join(','));
      const retried = await publishCheckpoint(s.parts, 2);
      expect(retried.publishedUpTo).toBe(2);
      const metadata = (await stateOf(s.catalog)).metadata;
      expect(mainCheckpoints(metadata)).toEqual(['1', '2']);
      expect(metadata.snapshots).toHaveLength(2);
      expect(await rowsBack(s.catalog)).toEqual(rowsOf(2));
      expect(await s.parts.snapshots.read(2)).toMatchObject({
        snapshotId: await ownSnapshotId(s, 2),
      });
    });
  }

  // The file catalog's swap is the `v<N>.metadata.json` put, but readers that follow the table without a catalog
  // (icebird here, also DuckDB and Spark's Hadoop tables) find the current version through `version-hint.text`,
  // written after it. A crash between the two (or a hint put that fails) leaves the hint at N-1; the retry finds
  // the checkpoint in the table and writes no metadata, so the catalog's load writes a hint found behind again.
  it('holds through a crash after the metadata file, before the version hint', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await commitNext(s);
    const faulty = crashAfterPut(s3, /\/metadata\/v\d+\.metadata\.json$/);
    const crashing: PublishParts = {
      ...s.parts,
      s3: faulty.s3,
      target: { ...s.parts.target, catalog: new FileCatalog(faulty.s3, res.bucket, s.catalog.root) },
    };
    await expect(publishCheckpoint(crashing, 2)).rejects.toBeInstanceOf(InjectedCrashError);
    const retried = await publishCheckpoint(s.parts, 2);
    expect(retried.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'found']]);
    expect(mainCheckpoints((await stateOf(s.catalog)).metadata)).toEqual(['1', '2']);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(2);
    // What a reader following the table sees: the hint names version 1, so checkpoint 2's rows are missing.
    const hint = await s3.send(new GetObjectCommand({ Bucket: res.bucket, Key: s.catalog.hintKey }));
    expect(await hint.Body?.transformToString()).toBe('2');
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(2));
  });

  for (const at of ['record', 'advanceMark'] as const) {
    it(`holds through a crash after the catalog swap, before the ledger's ${at}, the next checkpoint's publish catching up`, async () => {
      const s = setup();
      await commitNext(s);
      await expect(publishCheckpoint(crashingLedger(s.parts, at), 1)).rejects.toBeInstanceOf(
        InjectedCrashError,
      );
      await commitNext(s);
      const outcome = await publishCheckpoint(s.parts, 2);
      expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([
        [1, at === 'record' ? 'found' : 'recorded'],
        [2, 'appended'],
      ]);
      const metadata = (await stateOf(s.catalog)).metadata;
      expect(mainCheckpoints(metadata)).toEqual(['1', '2']);
      expect(metadata.snapshots).toHaveLength(2);
      expect(await rowsBack(s.catalog)).toEqual(rowsOf(2));
      await expectMarkHeld(s);
    });
  }
});

describe('zombies racing the live publisher', () => {
  it('a zombie of checkpoint 1 swapping after the live publisher published 1 and 2 (and maintenance expired their snapshots) appends nothing', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    let arrived!: () => void;
    const atSwap = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let zombieCommits = 0;
    const zombieCatalog: Catalog = {
      load: () => s.catalog.load(),
      commit: async (expected, next) => {
        zombieCommits++;
        arrived();
        await gate;
        return s.catalog.commit(expected, next);
      },
    };
    const zombie = publishCheckpoint(
      { ...s.parts, target: { ...s.parts.target, catalog: zombieCatalog } },
      1,
    );
    await atSwap;
    const live = await publishCheckpoint(s.parts, 2);
    expect(live.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [1, 'appended'],
      [2, 'appended'],
    ]);
    // Maintenance expires every snapshot but the head: the zombie's reload finds checkpoint 1 by the property.
    const state = await stateOf(s.catalog);
    const head = state.metadata['current-snapshot-id'];
    expect(
      await s.catalog.commit(state, {
        ...state.metadata,
        snapshots: state.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] === head),
      }),
    ).not.toBe('conflict');
    release();
    const late = await zombie;
    expect(zombieCommits).toBe(1);
    expect(late.published.map((p) => [p.checkpointId, p.how])).toEqual([[1, 'found']]);
    expect(late.publishedUpTo).toBe(1);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(2);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(2));
    expect((await s.parts.snapshots.read(1))?.snapshotId).toBe(await ownSnapshotId(s, 1));
  });

  it('a zombie and the live publisher of the same checkpoint swapping on the same loaded state: one wins, the other finds it', async () => {
    const s = setup();
    await commitNext(s);
    let waiting = 0;
    let open!: () => void;
    const both = new Promise<void>((resolve) => {
      open = resolve;
    });
    const racing: Catalog = {
      load: () => s.catalog.load(),
      commit: async (expected, next) => {
        if (++waiting === 2) open();
        await both;
        return s.catalog.commit(expected, next);
      },
    };
    const parts = { ...s.parts, target: { ...s.parts.target, catalog: racing } };
    const outcomes = await Promise.all([publishCheckpoint(parts, 1), publishCheckpoint(parts, 1)]);
    expect(outcomes.flatMap((o) => o.published.map((p) => p.how)).sort()).toEqual(['appended', 'found']);
    expect((await stateOf(s.catalog)).metadata.snapshots).toHaveLength(1);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });
});

describe('pipelines sharing one table', () => {
  it('interleaved publishes of two pipelines keep each one its own snapshots in order, each row once, a crash after the swap included', async () => {
    const a = setup();
    const b = setup({ root: a.catalog.root, base: 100 });
    expect(snapshotIdOf(a.settings.pipelineId, 1)).not.toBe(snapshotIdOf(b.settings.pipelineId, 1));
    await commitNext(a);
    await commitNext(b);
    await publishCheckpoint(a.parts, 1);
    await expect(publishCheckpoint(crashingLedger(b.parts, 'record'), 1)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    await commitNext(a);
    await publishCheckpoint(a.parts, 2);
    await commitNext(b);
    const outcome = await publishCheckpoint(b.parts, 2);
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [1, 'found'],
      [2, 'appended'],
    ]);
    const metadata = (await stateOf(a.catalog)).metadata;
    expect(mainCheckpoints(metadata, a.settings.pipelineId)).toEqual(['1', '2']);
    expect(mainCheckpoints(metadata, b.settings.pipelineId)).toEqual(['1', '2']);
    expect(metadata.snapshots).toHaveLength(4);
    expect(await rowsBack(a.catalog)).toEqual([...rowsOf(2), ...rowsOf(2, 100)].sort((x, y) => x - y));
  });
});

describe('maintenance and operators between publishes (C8)', () => {
  // A crash after checkpoint 2's swap and before its ledger record, then an operator's rollback of main to
  // checkpoint 1's snapshot followed by snapshot expiry (the usual pair: expiry drops what the rollback made
  // unreachable). Iceberg's rollback keeps the table's properties, so the published-checkpoint property still says
  // 2 though no snapshot holds its rows: the table saying 2 is in must not be taken for it.
  it('never records as published a checkpoint the table lost to a rollback and expiry before the ledger recorded it', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const first = await ownSnapshotId(s, 1);
    const state = await stateOf(s.catalog);
    const rolledBack: TableMetadata = {
      ...state.metadata,
      'current-snapshot-id': first,
      refs: { main: { 'snapshot-id': first, type: 'branch' } },
    };
    const afterRollback = await s.catalog.commit(state, rolledBack);
    if (afterRollback === 'conflict') throw new Error('the rollback met a conflict');
    const expired: TableMetadata = {
      ...afterRollback.metadata,
      snapshots: afterRollback.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] === first),
    };
    expect(await s.catalog.commit(afterRollback, expired)).not.toBe('conflict');

    // A correct publish either appends checkpoint 2 again or refuses the table as rolled back; never records it.
    const retried = await publishCheckpoint(s.parts, 2).catch((error: unknown) => error);
    await commitNext(s);
    const next = await publishCheckpoint(s.parts, 3).catch((error: unknown) => error);
    expect(
      [retried, next]
        .filter((outcome) => outcome instanceof Error)
        .every((e) => e instanceof IcebergTableRolledBackError),
    ).toBe(true);
    await expectMarkHeld(s);
  });

  it('refuses a checkpoint lost to a rollback and expiry before the ledger recorded it when main reaches an earlier checkpoint first, and appends it again once the property is set back', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    // Main set back to a compaction above checkpoint 1: its sequence number is above 1's, the walk says it.
    const compaction = await compact(s.catalog);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const second = await ownSnapshotId(s, 2);
    await setMain(s.catalog, compaction, (id) => id !== second);
    const refused = await publishCheckpoint(s.parts, 2).catch((error: Error) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      /holds checkpoint 2 outside main \(its snapshot is expired and main's history reaches checkpoint 1's first\).*set eos\..*\.published-checkpoint to 1/,
    );
    expect(await s.parts.snapshots.read(2)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    // The operator's way back, as the report says: the property set back to checkpoint 1.
    const state = await stateOf(s.catalog);
    const property = publishedCheckpointProperty(s.settings.pipelineId);
    const setBack = { ...state.metadata, properties: { ...state.metadata.properties, [property]: '1' } };
    expect(await s.catalog.commit(state, setBack)).not.toBe('conflict');
    const again = await publishCheckpoint(s.parts, 2);
    expect(again.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    expect(mainCheckpoints((await stateOf(s.catalog)).metadata)).toEqual(['1', '-', '2']);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(2));
  });

  it('refuses it by sequence numbers when the history walk cannot say: main set back to a compaction below it, every other snapshot expired', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    // Checkpoint 1's swap unrecorded, then two compactions over it and expiry: 1 is found by the property alone and
    // recorded with the second compaction's sequence number. (Main's history then ends at the first compaction,
    // which is no checkpoint's: ending at checkpoint 1's own snapshot, the walk would say.)
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 1)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    await compact(s.catalog);
    const compaction = await compact(s.catalog, { expire: true });
    expect((await publishCheckpoint(s.parts, 1)).published.map((p) => p.how)).toEqual(['found']);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    await setMain(s.catalog, compaction, (id) => id === compaction);
    await expect(publishCheckpoint(s.parts, 2)).rejects.toThrow(
      /holds checkpoint 2 outside main \(its snapshot is expired and main's head has sequence number 3, not above checkpoint 1's 3\)/,
    );
    expect(await s.parts.snapshots.read(2)).toBeUndefined();
    await expectMarkHeld(s);
  });

  it('finds a checkpoint whose snapshot alone was expired under a compaction, an earlier checkpoint still listed', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const second = await ownSnapshotId(s, 2);
    await compact(s.catalog);
    const state = await stateOf(s.catalog);
    const cut = state.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] !== second);
    expect(await s.catalog.commit(state, { ...state.metadata, snapshots: cut })).not.toBe('conflict');
    const outcome = await publishCheckpoint(s.parts, 2);
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'found']]);
    await commitNext(s);
    expect((await publishCheckpoint(s.parts, 3)).published.map((p) => p.how)).toEqual(['appended']);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(3));
    await expectMarkHeld(s);
  });

  // A metadata rewrite by another engine or a catalog migration that dropped unknown properties: the published-
  // checkpoint property is gone, but main's history holds every published snapshot, so nothing was rolled back.
  it('goes on publishing to a table that lost its properties but holds every published snapshot', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    const state = await stateOf(s.catalog);
    const kept = Object.fromEntries(
      Object.entries(state.metadata.properties).filter(([key]) => !key.startsWith('eos.')),
    );
    expect(await s.catalog.commit(state, { ...state.metadata, properties: kept })).not.toBe('conflict');
    expect(mainCheckpoints((await stateOf(s.catalog)).metadata)).toEqual(['1', '2']);
    await commitNext(s);
    const outcome = await publishCheckpoint(s.parts, 3);
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([[3, 'appended']]);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(3));
  });
});

describe('limits', () => {
  it('a table behind by more than the catch-up limit is brought up in order over later publishes, one snapshot each', async () => {
    const s = setup();
    const count = PUBLISH_CATCH_UP_LIMIT + 2;
    for (let i = 0; i < count; i++) await commitNext(s, 1);
    const first = await publishCheckpoint(s.parts, count);
    expect(first.publishedUpTo).toBe(PUBLISH_CATCH_UP_LIMIT);
    expect(first.published.map((p) => p.checkpointId)).toEqual(
      Array.from({ length: PUBLISH_CATCH_UP_LIMIT }, (_, i) => i + 1),
    );
    // A zombie of an early checkpoint in between changes nothing.
    expect((await publishCheckpoint(s.parts, 3)).published).toEqual([]);
    const second = await publishCheckpoint(s.parts, count);
    expect(second.publishedUpTo).toBe(count);
    const metadata = (await stateOf(s.catalog)).metadata;
    expect(mainCheckpoints(metadata)).toEqual(Array.from({ length: count }, (_, i) => String(i + 1)));
    expect(metadata.snapshots).toHaveLength(count);
    const n = Array.from({ length: count }, (_, i) => i);
    expect(await rowsBack(s.catalog)).toEqual([...n, ...n.map((i) => 1000 + i)]);
  });

  it('a checkpoint of thousands of final objects is one snapshot whose manifest lists each once', async () => {
    const s = setup();
    await commitNext(s);
    const real = (await s.parts.manifests.read(1)) as Manifest;
    const template = real.files.find((file) => file.stream === 'output');
    if (!template) throw new Error('no output file');
    const parsed = parseFinalKey(real.pipeline, template.key);
    if (!parsed) throw new Error('not a final key');
    const files = Array.from({ length: 3000 }, (_, i) => {
      const range = { ...parsed, partition: i, firstOffset: 0, lastOffset: 0 };
      return {
        ...template,
        partition: i,
        firstOffset: 0,
        lastOffset: 0,
        key: finalObjectKey(real.pipeline, range, parsed.encoding),
      };
    });
    const big: Manifest = { ...real, files };
    const parts: PublishParts = {
      ...s.parts,
      manifests: { read: async (id) => (id === 1 ? big : s.parts.manifests.read(id)) },
    };
    const outcome = await publishCheckpoint(parts, 1);
    expect(outcome.published.map((p) => p.how)).toEqual(['appended']);
    const metadata = await icebergMetadata({ tableUrl: s.catalog.location });
    const manifests = await icebergManifests(metadata);
    const paths = manifests.flatMap((m) => m.entries.map((e) => e.data_file.file_path));
    expect(paths).toHaveLength(3000);
    expect(new Set(paths).size).toBe(3000);
    expect((await stateOf(s.catalog)).metadata.snapshots[0]?.summary['added-data-files']).toBe('3000');
  });
});
