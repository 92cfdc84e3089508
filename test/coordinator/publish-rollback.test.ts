/**
 * A table rolled back below what the ledger records as published, against DynamoDB Local and the local S3 server:
 * main set back, an older metadata file put back, main set back over an expired snapshot, before a publish, while
 * one runs, or while the mark lags a recorded checkpoint; each is refused with `IcebergTableRolledBackError` in one line, nothing appended over it.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { IcebergTableRolledBackError } from '../../shared/coordinator/publish/rollback.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import type { Snapshot, TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import {
  checkpointsOf,
  commitOver,
  commitNext as commitWith,
  compact,
  crashingLedger,
  expire,
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
  res = await freshResources('pubroll');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

type Setup = PublishSetup;

const setup = (options: { root?: string; base?: number } = {}): Setup => publishSetup(res, 'pr', options);
const commitNext = (s: Setup, count?: number) => commitWith(res, s, count);

const metadataOf = async (catalog: Catalog): Promise<TableMetadata> => (await stateOf(catalog)).metadata;

describe('publishing a committed checkpoint to an Iceberg table (C8)', () => {
  it('reports a table whose main was rolled back below a published checkpoint in one line, and appends nothing', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    // Main set back to checkpoint 1's snapshot (Iceberg's rollback_to_snapshot): properties stay as they were.
    const state = (await s.catalog.load()) as TableState;
    const first = await ownSnapshotId(s, 1);
    const rolledBack: TableMetadata = {
      ...state.metadata,
      'current-snapshot-id': first,
      refs: { main: { 'snapshot-id': first, type: 'branch' } },
    };
    expect(await s.catalog.commit(state, rolledBack)).not.toBe('conflict');
    await commitNext(s);

    const refused = publishCheckpoint(s.parts, 3);
    await expect(refused).rejects.toBeInstanceOf(IcebergTableRolledBackError);
    const message = await refused.catch((error: Error) => error.message);
    expect(message).not.toContain('\n');
    expect(message).toMatch(/rolled back below checkpoint 2 .*not in main's history/);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1', '2']);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(2);
    // A retry of the published checkpoint reports it too.
    await expect(publishCheckpoint(s.parts, 2)).rejects.toBeInstanceOf(IcebergTableRolledBackError);
  });

  it('reports a table whose metadata was set back to a version from before a published checkpoint', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const before = (await s.catalog.load()) as TableState;
    await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    // The version of checkpoint 1 committed again, as an operator restoring an old metadata file would.
    const current = (await s.catalog.load()) as TableState;
    expect(await s.catalog.commit(current, before.metadata)).not.toBe('conflict');
    await commitNext(s);
    await expect(publishCheckpoint(s.parts, 3)).rejects.toThrow(
      /rolled back below checkpoint 2 .*main's head has sequence number 1, below 2; its eos\..*\.published-checkpoint is 1\)/,
    );
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1']);
  });

  it('reports main set back below a published checkpoint whose snapshot maintenance expired', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const old = (await s.catalog.load()) as TableState;
    await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    await compact(s.catalog, { expire: true });
    // Main set to checkpoint 1's snapshot again, listed once more, properties as they are now.
    const state = (await s.catalog.load()) as TableState;
    const first = old.metadata.snapshots[0] as Snapshot;
    const rolledBack: TableMetadata = {
      ...state.metadata,
      'current-snapshot-id': first['snapshot-id'],
      refs: { main: { 'snapshot-id': first['snapshot-id'], type: 'branch' } },
      snapshots: [...state.metadata.snapshots, first],
    };
    expect(await s.catalog.commit(state, rolledBack)).not.toBe('conflict');
    await commitNext(s);
    await expect(publishCheckpoint(s.parts, 3)).rejects.toThrow(
      /rolled back below checkpoint 2 .*sequence number 1, below 2/,
    );
  });
});

describe('an operator rolling the table back while the ledger is behind it (C8)', () => {
  it('refuses a publish whose swap meets an operator setting main back past the previous checkpoint, and rebases nothing onto it', async () => {
    const s = setup();
    for (let i = 0; i < 3; i++) await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    const first = await ownSnapshotId(s, 1);
    let rolledBack = false;
    // The publish of 3 passed the check of the mark on its first load; its swap then meets the rollback.
    const racing: Catalog = {
      load: () => s.catalog.load(),
      commit: async (expected, next) => {
        if (!rolledBack) {
          rolledBack = true;
          await setMain(s.catalog, first);
        }
        return s.catalog.commit(expected, next);
      },
    };
    const refused = await publishCheckpoint(
      { ...s.parts, target: { ...s.parts.target, catalog: racing } },
      3,
    ).catch((error: unknown) => error);
    expect(rolledBack).toBe(true);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(/rolled back below checkpoint 2 .*not in main's history/);
    const metadata = await metadataOf(s.catalog);
    expect(mainCheckpoints(metadata)).toEqual(['1']);
    expect(checkpointsOf(metadata)).toEqual(['1', '2']);
    expect(await s.parts.snapshots.read(3)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(2);
    // Every later publish is refused too: the mark's checkpoint is not in main.
    await expect(publishCheckpoint(s.parts, 3)).rejects.toBeInstanceOf(IcebergTableRolledBackError);
  });

  it('refuses to move the mark to a recorded checkpoint main lost while the mark lagged it, and appends nothing over it', async () => {
    const s = setup();
    for (let i = 0; i < 3; i++) await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'advanceMark'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    expect((await s.parts.snapshots.read(2))?.snapshotId).toBe(await ownSnapshotId(s, 2));
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    await setMain(s.catalog, await ownSnapshotId(s, 1));

    const refused = await publishCheckpoint(s.parts, 3).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(/rolled back below checkpoint 2 .*not in main's history/);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await s.parts.snapshots.read(3)).toBeUndefined();
    const metadata = await metadataOf(s.catalog);
    expect(mainCheckpoints(metadata)).toEqual(['1']);
    expect(checkpointsOf(metadata)).toEqual(['1', '2']);
  });

  it('refuses a checkpoint found by its snapshot when main, set back below it with a compaction on top, has a history cut at its parent', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const [first, second] = await Promise.all([1, 2].map((id) => ownSnapshotId(s, id)));
    // Main set back to 1, a compaction on it, then 1's snapshot expired: main's history and 2's both end at 1.
    await setMain(s.catalog, first as bigint);
    await compact(s.catalog);
    await expire(s.catalog, (id) => id !== first);
    const before = await metadataOf(s.catalog);
    expect(checkpointsOf(before)).toEqual(['2', '-']);
    expect(before['last-sequence-number']).toBeGreaterThan(2);

    const refused = await publishCheckpoint(s.parts, 2).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      new RegExp(
        `holds checkpoint 2 outside main \\(snapshot ${second} is not in main's history: main branches off below it.*restore main to it`,
      ),
    );
    expect(await s.parts.snapshots.read(2)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });

  it("refuses a checkpoint found by its snapshot when main's history and the snapshot's end at the same expired compaction below it", async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const below = await compact(s.catalog);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    // Main set back to the compaction 2 went on, another compaction on it, the first one expired: both histories
    // end at it, which is no checkpoint's, and main's head has the highest sequence number.
    await setMain(s.catalog, below);
    await compact(s.catalog);
    await expire(s.catalog, (id) => id !== below);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1', '2', '-']);

    const refused = await publishCheckpoint(s.parts, 2).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      new RegExp(`main branches off below it \\(both histories end at expired snapshot ${below}\\)`),
    );
    expect(await s.parts.snapshots.read(2)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });

  it('refuses to move the mark to a recorded checkpoint whose snapshot expired after main was set back below it and compacted', async () => {
    const s = setup();
    for (let i = 0; i < 3; i++) await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'advanceMark'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const second = await ownSnapshotId(s, 2);
    // Main set back to 1, a compaction on it (its sequence number above 2's), 2's snapshot expired.
    await setMain(s.catalog, await ownSnapshotId(s, 1));
    await compact(s.catalog);
    await expire(s.catalog, (id) => id !== second);
    expect(mainCheckpoints(await metadataOf(s.catalog))).toEqual(['1', '-']);

    const refused = await publishCheckpoint(s.parts, 3).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      /rolled back below checkpoint 2 .*not in main's history, which reaches checkpoint 1's snapshot first/,
    );
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await s.parts.snapshots.read(3)).toBeUndefined();
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });

  it("refuses a first checkpoint found by the property alone when main, set back to another pipeline's snapshot below it, has a whole history without it", async () => {
    const other = setup();
    const s = setup({ root: other.catalog.root, base: 100 });
    await commitNext(other);
    await publishCheckpoint(other.parts, 1);
    await commitNext(s);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 1)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    // Main set back to the other pipeline's snapshot, this pipeline's first snapshot expired: only the property
    // still names checkpoint 1, and main's history, listed to its first snapshot, never meets it.
    const otherFirst = await ownSnapshotId(other, 1);
    await setMain(s.catalog, otherFirst, (id) => id === otherFirst);

    const refused = await publishCheckpoint(s.parts, 1).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      /holds checkpoint 1 outside main \(its snapshot is expired and main's history, listed to its first snapshot, does not hold it\)/,
    );
    expect(await s.parts.snapshots.read(1)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(0);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });

  it('refuses to move the mark to a recorded checkpoint lost to an older metadata file put back, a compaction reusing its sequence number and the snapshot below expired', async () => {
    const s = setup();
    for (let i = 0; i < 3; i++) await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const old = await stateOf(s.catalog);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'advanceMark'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    // The metadata of checkpoint 1 put back (its last sequence number with it), a compaction on it taking 2's
    // sequence number, and 1's snapshot expired: main's history ends at 1's snapshot, its head no lower than 2's.
    await commitOver(s.catalog, await stateOf(s.catalog), old.metadata);
    const compaction = await compact(s.catalog);
    await expire(s.catalog, (id) => id === compaction);
    const metadata = await metadataOf(s.catalog);
    expect(metadata.snapshots.map((snapshot) => snapshot['sequence-number'])).toEqual([2]);

    const refused = await publishCheckpoint(s.parts, 3).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IcebergTableRolledBackError);
    expect((refused as Error).message).toMatch(
      /rolled back below checkpoint 2 .*not in main's history, which reaches checkpoint 1's snapshot first/,
    );
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await s.parts.snapshots.read(3)).toBeUndefined();
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(1));
  });
});
