/**
 * Publishing committed checkpoints to an Iceberg table, against DynamoDB Local and the local S3 server, the table
 * read back by icebird (a reader nobody here wrote): one checkpoint is one snapshot whatever is retried, a crash
 * between the catalog's swap and the ledger's record is recorded without a second append (also once maintenance
 * expired the snapshot), earlier checkpoints are published first and in order, and a concurrent maintenance commit
 * is rebased onto. A table rolled back below what the ledger records as published: publish-rollback.test.ts.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { icebergManifests, icebergMetadata } from 'icebird';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { buildCoordinatorDefinition, functionArnSubstitution } from '../../shared/coordinator/definition.ts';
import { PublishStateError, publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import type { Catalog, TableState } from '../../shared/iceberg/catalog.ts';
import { mainHistory, type TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import { TableSnapshotConflictError } from '../../shared/ledger/table-snapshots.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import {
  checkpointsOf,
  commitNext as commitWith,
  compact,
  crashingLedger,
  ownSnapshotId,
  type PublishSetup,
  publishSetup,
  rowsBack,
} from '../support/publish.ts';
import { stageFiles } from '../support/staging.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('publish');
  s3 = res.clients.s3;
  vi.stubGlobal('fetch', localS3Fetch(s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

type Setup = PublishSetup;

const setup = (): Setup => publishSetup(res, 'pub');
const commitNext = (s: Setup, count?: number) => commitWith(res, s, count);

/** The `n` of the rows the first `staged` offsets of both partitions hold. */
function expectedRows(staged: number): number[] {
  const n = Array.from({ length: staged }, (_, i) => i);
  return [...n, ...n.map((i) => 1000 + i)].sort((a, b) => a - b);
}

async function metadataOf(catalog: Catalog): Promise<TableMetadata> {
  const state = await catalog.load();
  if (!state) throw new Error('the table has no metadata');
  return state.metadata;
}

describe('publishing a committed checkpoint to an Iceberg table (C8)', () => {
  it('makes one snapshot whose rows icebird reads back, its summary naming pipeline, checkpoint and lanes; a retry makes none', async () => {
    const s = setup();
    await commitNext(s);
    const outcome = await publishCheckpoint(s.parts, 1);
    expect(outcome).toMatchObject({ checkpointId: 1, publishedUpTo: 1 });
    expect(outcome.published).toEqual([
      { checkpointId: 1, snapshotId: await ownSnapshotId(s, 1), how: 'appended' },
    ]);
    const metadata = await metadataOf(s.catalog);
    expect(metadata.snapshots).toHaveLength(1);
    expect(metadata.snapshots[0]?.summary).toMatchObject({
      operation: 'append',
      'eos.pipeline-id': s.settings.pipelineId,
      'eos.checkpoint-id': '1',
      'eos.lanes': 'orders',
      'added-records': '6',
      'added-data-files': '2',
    });
    expect(metadata.properties[publishedCheckpointProperty(s.settings.pipelineId)]).toBe('1');
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(3));
    const recorded = await s.parts.snapshots.read(1);
    expect(recorded).toMatchObject({ snapshotId: await ownSnapshotId(s, 1), sequenceNumber: 1 });
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);

    const again = await publishCheckpoint(s.parts, 1);
    expect(again).toMatchObject({ publishedUpTo: 1, published: [] });
    expect((await metadataOf(s.catalog)).snapshots).toHaveLength(1);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(3));
  });

  it('partitions the data files by their time folders', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const metadata = await metadataOf(s.catalog);
    const spec = metadata['partition-specs'].find((p) => p['spec-id'] === metadata['default-spec-id']);
    expect(spec?.fields.map((field) => [field.name, field.transform])).toEqual([
      ['dt', 'identity'],
      ['hour', 'identity'],
    ]);
    // Each data file's partition, as icebird reads the table's manifests, is the folder of its key.
    const manifests = await icebergManifests(await icebergMetadata({ tableUrl: s.catalog.location }));
    const read = manifests
      .flatMap(({ entries }) => entries)
      .map((entry) => `${entry.data_file.file_path} ${Object.values(entry.data_file.partition).join('/')}`)
      .sort();
    const manifest = await s.parts.manifests.read(1);
    const fromKeys = (manifest?.files ?? [])
      .filter((file) => file.stream === 'output')
      .map((file) => {
        const [, dt, hour] = /\/dt=([^/]+)\/hour=(\d\d)\//.exec(file.key) ?? [];
        return `s3://${res.bucket}/${file.key} ${dt}/${hour}`;
      })
      .sort();
    expect(fromKeys).toHaveLength(2);
    expect(read).toEqual(fromKeys);
  });

  it('refuses a checkpoint that is not COMMITTED', async () => {
    const s = setup();
    await expect(publishCheckpoint(s.parts, 1)).rejects.toBeInstanceOf(PublishStateError);
    expect(await s.catalog.load()).toBeUndefined();
  });

  it('records, and does not append again, a checkpoint whose ledger write was lost after the catalog swap', async () => {
    const s = setup();
    await commitNext(s);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 1)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1']);
    expect(await s.parts.snapshots.read(1)).toBeUndefined();
    expect((await s.parts.snapshots.readMark()).upTo).toBe(0);

    const retried = await publishCheckpoint(s.parts, 1);
    expect(retried.published).toEqual([
      { checkpointId: 1, snapshotId: await ownSnapshotId(s, 1), how: 'found' },
    ]);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1']);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(3));
    expect(s.errors).toContain(
      'the table held a checkpoint the ledger did not record: recorded, not appended again',
    );
  });

  it('finds a checkpoint in the table properties once maintenance expired its snapshot, and does not append it again', async () => {
    const s = setup();
    await commitNext(s);
    await expect(publishCheckpoint(crashingLedger(s.parts, 'record'), 1)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    const replaced = await compact(s.catalog, { expire: true });
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['-']);

    const retried = await publishCheckpoint(s.parts, 1);
    expect(retried.published.map((p) => p.how)).toEqual(['found']);
    const metadata = await metadataOf(s.catalog);
    expect(metadata.snapshots.map((snapshot) => snapshot['snapshot-id'])).toEqual([replaced]);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(3));
    // Recorded with main's head's sequence number: the snapshot's own is gone with it.
    expect(await s.parts.snapshots.read(1)).toMatchObject({ sequenceNumber: 2 });

    // The next checkpoint goes on top of the maintenance snapshot.
    await commitNext(s);
    const next = await publishCheckpoint(s.parts, 2);
    expect(next.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    const after = await metadataOf(s.catalog);
    expect(checkpointsOf(after)).toEqual(['-', '2']);
    expect(mainHistory(after)).toEqual([await ownSnapshotId(s, 2), replaced]);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(6));
  });

  it('skips a published checkpoint whose snapshot maintenance expired', async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    await publishCheckpoint(s.parts, 2);
    await compact(s.catalog, { expire: true });
    for (const id of [1, 2]) expect((await publishCheckpoint(s.parts, id)).published).toEqual([]);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['-']);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(6));
  });

  it("publishes the earlier checkpoints first, in order, when the second's publish runs first", async () => {
    const s = setup();
    await commitNext(s);
    await commitNext(s);
    const outcome = await publishCheckpoint(s.parts, 2);
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [1, 'appended'],
      [2, 'appended'],
    ]);
    const metadata = await metadataOf(s.catalog);
    expect(checkpointsOf(metadata)).toEqual(['1', '2']);
    expect(mainHistory(metadata)).toEqual([await ownSnapshotId(s, 2), await ownSnapshotId(s, 1)]);
    expect(metadata.properties[publishedCheckpointProperty(s.settings.pipelineId)]).toBe('2');
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(6));
    expect((await s.parts.snapshots.readMark()).upTo).toBe(2);
    // The first's publish, late, finds both published.
    expect((await publishCheckpoint(s.parts, 1)).published).toEqual([]);
    expect(s.errors).toContain('publishing an earlier checkpoint that was not published');
  });

  it('rebases onto a maintenance commit that lands between its load and its swap', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    await commitNext(s);
    const inner = s.catalog;
    let maintenance: bigint | undefined;
    let commits = 0;
    const racing: Catalog = {
      load: () => inner.load(),
      commit: async (expected, next) => {
        commits++;
        if (maintenance === undefined) maintenance = await compact(inner);
        return inner.commit(expected, next);
      },
    };
    const outcome = await publishCheckpoint(
      { ...s.parts, target: { ...s.parts.target, catalog: racing } },
      2,
    );
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    expect(commits).toBe(2);
    const metadata = await metadataOf(s.catalog);
    expect(checkpointsOf(metadata)).toEqual(['1', '-', '2']);
    expect(mainHistory(metadata)).toEqual([
      await ownSnapshotId(s, 2),
      maintenance,
      await ownSnapshotId(s, 1),
    ]);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(6));
  });
});

describe('publishing around maintenance', () => {
  it('takes a history cut short by an expired snapshot between the head and the published one as holding it', async () => {
    const s = setup();
    await commitNext(s);
    await publishCheckpoint(s.parts, 1);
    const c1 = await compact(s.catalog);
    await compact(s.catalog);
    // Expiry of the middle snapshot only: main's history from its head stops short of checkpoint 1's snapshot.
    const state = (await s.catalog.load()) as TableState;
    const cut: TableMetadata = {
      ...state.metadata,
      snapshots: state.metadata.snapshots.filter((snapshot) => snapshot['snapshot-id'] !== c1),
    };
    expect(await s.catalog.commit(state, cut)).not.toBe('conflict');
    expect(mainHistory(cut)).not.toContain(await ownSnapshotId(s, 1));
    await commitNext(s);
    const outcome = await publishCheckpoint(s.parts, 2);
    expect(outcome.published.map((p) => [p.checkpointId, p.how])).toEqual([[2, 'appended']]);
    expect(await rowsBack(s.catalog)).toEqual(expectedRows(6));
  });

  it('makes a snapshot of no data file for a checkpoint of dead letters only, so each checkpoint is one snapshot', async () => {
    const s = setup();
    await stageFiles(res.clients, s.settings, [
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 0,
        stream: 'deadletter',
        rows: [{ source: { topic: 'orders', partition: 0, offset: 0 }, error: 'bad', raw: {} }],
      },
    ]);
    await checkpoint(res, s.settings);
    const outcome = await publishCheckpoint(s.parts, 1);
    expect(outcome.published.map((p) => p.how)).toEqual(['appended']);
    const metadata = await metadataOf(s.catalog);
    expect(metadata.snapshots[0]?.summary).toMatchObject({
      'eos.checkpoint-id': '1',
      'eos.lanes': '',
      'added-data-files': '0',
      'total-records': '0',
    });
    // icebird reads the snapshot's manifest list, empty (its icebergRead refuses a table without data files).
    const tableMetadata = await icebergMetadata({ tableUrl: s.catalog.location });
    expect(await icebergManifests(tableMetadata)).toEqual([]);
    s.staged = 1;
    await commitNext(s, 2);
    await publishCheckpoint(s.parts, 2);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1', '2']);
    expect(await rowsBack(s.catalog)).toEqual([1, 2, 1001, 1002]);
  });
});

describe('the ledger record of a published checkpoint', () => {
  it('takes the same snapshot id again and refuses another one; the mark never skips a checkpoint', async () => {
    const s = setup();
    const { snapshots } = s.parts;
    const first = await snapshots.record({ checkpointId: 1, snapshotId: 11n, sequenceNumber: 1 }, 100);
    expect(await snapshots.record({ checkpointId: 1, snapshotId: 11n, sequenceNumber: 1 }, 200)).toEqual(
      first,
    );
    await expect(
      snapshots.record({ checkpointId: 1, snapshotId: 12n, sequenceNumber: 1 }, 300),
    ).rejects.toBeInstanceOf(TableSnapshotConflictError);
    const third = await snapshots.record(
      { checkpointId: 3, snapshotId: 2n ** 63n - 1n, sequenceNumber: 3 },
      400,
    );
    await expect(snapshots.advanceMark(third, 400)).rejects.toBeInstanceOf(TableSnapshotConflictError);
    await snapshots.advanceMark(first, 500);
    await snapshots.advanceMark(first, 600);
    expect(await snapshots.readMark()).toEqual({ upTo: 1, snapshot: first });
    expect((await snapshots.read(3))?.snapshotId).toBe(2n ** 63n - 1n);
  });
});

describe('the Publish step of the state machine', () => {
  it('runs between Commit and Cleanup only when a table is configured, and goes on to Cleanup when it fails; an idle pipeline catches up through CatchUpPublish', () => {
    const plain = buildCoordinatorDefinition() as { States: Record<string, Record<string, unknown>> };
    expect(plain.States.Publish).toBeUndefined();
    expect(plain.States.Commit?.Next).toBe('Cleanup');
    const publishing = buildCoordinatorDefinition({ publish: true }) as typeof plain;
    expect(publishing.States.Commit?.Next).toBe('Publish');
    expect(publishing.States.Publish).toMatchObject({
      Type: 'Task',
      Parameters: { FunctionName: `\${${functionArnSubstitution('publish')}}` },
      ResultPath: null,
      Next: 'Cleanup',
      Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.publishError', Next: 'Cleanup' }],
    });
    // Besides Publish, only what an idle pipeline's catch-up needs differs: begin is told the machine publishes,
    // Route sends its `publish` answer to CatchUpPublish, which ends at NothingToCommit whatever it answers.
    const state = (definition: typeof plain, name: string): Record<string, unknown> => {
      const found = definition.States[name];
      if (!found) throw new Error(`the definition has no state ${name}`);
      return found;
    };
    const plainBegin = state(plain, 'Begin') as { Parameters: { Payload: object } };
    expect(state(publishing, 'Begin')).toEqual({
      ...plainBegin,
      Parameters: { ...plainBegin.Parameters, Payload: { ...plainBegin.Parameters.Payload, publish: true } },
    });
    expect(state(publishing, 'Route')).toEqual({
      ...state(plain, 'Route'),
      Choices: [
        ...(state(plain, 'Route').Choices as unknown[]),
        { Variable: '$.checkpoint.action', StringEquals: 'publish', Next: 'CatchUpPublish' },
      ],
    });
    expect(state(publishing, 'CatchUpPublish')).toEqual({
      ...state(publishing, 'Publish'),
      Next: 'NothingToCommit',
      Catch: [{ ErrorEquals: ['States.ALL'], ResultPath: '$.publishError', Next: 'NothingToCommit' }],
    });
    const differing = ['Begin', 'Route', 'Commit', 'Publish', 'CatchUpPublish'];
    const others = (definition: typeof plain) =>
      Object.fromEntries(Object.entries(definition.States).filter(([name]) => !differing.includes(name)));
    expect(others(publishing)).toEqual(others(plain));
  });

  it('publishes each checkpoint the local state machine commits, once through a crash after the catalog swap', async () => {
    const s = setup();
    const inner = s.catalog;
    let crashes = 0;
    // The catalog takes the swap and the answer is lost: the crash between the swap and the ledger's record.
    const crashing: Catalog = {
      load: () => inner.load(),
      commit: async (expected, next) => {
        const committed = await inner.commit(expected, next);
        if (committed !== 'conflict' && crashes++ === 0) throw new InjectedCrashError('publish');
        return committed;
      },
    };
    const steps: string[] = [];
    const local = createLocalCoordinator({
      settings: s.settings,
      clients: res.clients,
      publishTarget: { ...s.parts.target, catalog: crashing },
      hooks: { afterPublish: () => void steps.push('publish'), afterStep: (step) => void steps.push(step) },
    });
    await stageFiles(res.clients, s.settings, [
      {
        partition: 0,
        firstOffset: 0,
        lastOffset: 2,
        rows: [0, 1, 2].map((n) => ({ n, at: n, source: { topic: 'orders', partition: 0, offset: n } })),
      },
    ]);
    const outcome = await local.runCheckpoint();
    expect(outcome.status).toBe('committed');
    expect(crashes).toBe(1);
    expect(steps.filter((step) => step === 'publish')).toHaveLength(1);
    expect(steps.slice(steps.indexOf('commit'), steps.indexOf('commit') + 2)).toEqual(['commit', 'publish']);
    expect(outcome.invocations.filter((i) => i.step === 'publish').map((i) => i.failed)).toEqual([
      true,
      false,
    ]);
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual(['1']);
    expect(await rowsBack(s.catalog)).toEqual([0, 1, 2]);
    expect(await s.parts.snapshots.read(1)).toMatchObject({
      snapshotId: await ownSnapshotId(s, 1),
    });

    // A table rolled back under it (the metadata of before its first snapshot put back): the checkpoint still
    // commits and cleans up; the table is left as it is.
    const state = (await s.catalog.load()) as TableState;
    const { 'current-snapshot-id': _head, ...withoutHead } = state.metadata;
    const empty: TableMetadata = { ...withoutHead, refs: {}, snapshots: [], 'snapshot-log': [] };
    expect(await s.catalog.commit(state, empty)).not.toBe('conflict');
    await stageFiles(res.clients, s.settings, [
      {
        partition: 0,
        firstOffset: 3,
        lastOffset: 3,
        rows: [{ n: 3, at: 3, source: { topic: 'orders', partition: 0, offset: 3 } }],
      },
    ]);
    steps.length = 0;
    const second = await local.runCheckpoint();
    expect(second.status).toBe('committed');
    expect(second.invocations.filter((i) => i.step === 'publish').map((i) => i.failed)).toEqual([true]);
    expect(steps).toContain('cleanup');
    expect(checkpointsOf(await metadataOf(s.catalog))).toEqual([]);
    expect((await s.parts.snapshots.readMark()).upTo).toBe(1);
  });
});
