/**
 * A pipeline id used again over a table that outlived its ledger: a stack deleted and deployed again with a new
 * ledger and a new bucket, its Glue or S3 Tables table kept (the file catalog stands in for either here). The new
 * ledger's checkpoints count again from 1, and the table's snapshot summaries and published-checkpoint property
 * still name the old ledger's checkpoints of the same numbers. Against DynamoDB Local and the local S3 server, the
 * table read back by icebird.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { snapshotIdOf } from '../../shared/iceberg/table-metadata.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import {
  commitNext,
  crashingLedger,
  ownSnapshotId,
  PUBLISH_COLUMNS,
  type PublishSetup,
  publishSetup,
  rowsBack,
  withoutIncarnation,
} from '../support/publish.ts';

let before: TestResources;
beforeAll(async () => {
  before = await freshResources('pubreset');
  vi.stubGlobal('fetch', localS3Fetch(before.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

/** The `n` of the rows of `checkpoints` checkpoints of three rows per partition, offset by `base`. */
function rowsOf(checkpoints: number, base = 0): number[] {
  const n = Array.from({ length: checkpoints * 3 }, (_, i) => base + i);
  return [...n, ...n.map((i) => 1000 + i)].sort((a, b) => a - b);
}

/** The same pipeline id on a new ledger and a new bucket, publishing to `old`'s table; rows offset by `base`. */
function sameIdNewLedger(after: TestResources, old: PublishSetup, base: number): PublishSetup {
  const settings = parseSettings({
    ledgerTable: after.table,
    bucket: after.bucket,
    pipelineId: old.settings.pipelineId,
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: PUBLISH_COLUMNS,
  });
  const { s3, dynamodb } = after.clients;
  const errors: string[] = [];
  return {
    settings,
    catalog: old.catalog,
    errors,
    staged: 0,
    base,
    parts: {
      pipelineId: settings.pipelineId,
      bucket: settings.bucket,
      s3,
      clock: systemClock,
      log: { info: () => {}, error: (message) => errors.push(message) },
      store: new CheckpointStore(dynamodb, settings.ledgerTable, settings.pipelineId),
      manifests: new ManifestStore(s3, settings.bucket, settings.pipelineId),
      snapshots: new TableSnapshots(dynamodb, settings.ledgerTable, settings.pipelineId),
      target: old.parts.target,
    },
  };
}

describe("a new ledger's committed checkpoints reach a table the same pipeline id published to before", () => {
  // The table's evidence names the ledger it is of: the incarnation each ledger creates once on its published
  // mark, in the snapshot summary (eos.ledger), beside the published-checkpoint property and in the snapshot id.
  // Evidence of the old ledger is not the new one's: its checkpoint 1 is appended, not taken for the old ledger's
  // snapshot of the same number (whose rows would then never reach the table), and that is said once, in one line.
  it('appends the new ledger checkpoint 1 rows, not the old ledger checkpoint 1 snapshot taken for them', async () => {
    const old = publishSetup(before, 'pr');
    await commitNext(before, old);
    await commitNext(before, old);
    expect((await publishCheckpoint(old.parts, 2)).publishedUpTo).toBe(2);

    const after = await freshResources('pubreset2');
    const reused = sameIdNewLedger(after, old, 500);
    await commitNext(after, reused);
    const outcome = await publishCheckpoint(reused.parts, 1);

    expect(await rowsBack(old.catalog)).toEqual([...rowsOf(2), ...rowsOf(1, 500)].sort((a, b) => a - b));
    expect(outcome.published.map((p) => p.how)).toEqual(['appended']);
    expect(reused.errors.filter((line) => line.includes('another ledger'))).toHaveLength(1);
    const [oldMark, newMark] = [
      await old.parts.snapshots.readMark(),
      await reused.parts.snapshots.readMark(),
    ];
    expect(newMark.ledger?.id).not.toBe(oldMark.ledger?.id);
    expect(newMark.ledger?.adoptsUnnamed).toBe(false);
    const [oldFirst, newFirst] = [await old.parts.snapshots.read(1), await reused.parts.snapshots.read(1)];
    expect(newFirst?.snapshotId).not.toBe(oldFirst?.snapshotId);
  });

  // A ledger that published before incarnations (its mark item without one, its snapshots and property naming no
  // ledger) creates its incarnation over the mark already there and adopts that evidence: a checkpoint swapped
  // before the upgrade whose record was lost is found, not appended again; later ones name the incarnation.
  it('an upgraded ledger adopts the evidence it wrote before incarnations, and appends nothing twice', async () => {
    const s = publishSetup(before, 'pu');
    const real = s.parts.snapshots;
    const legacy = withoutIncarnation(s.parts);
    await commitNext(before, s);
    await commitNext(before, s);
    await publishCheckpoint(legacy, 1);
    await expect(publishCheckpoint(crashingLedger(legacy, 'record'), 2)).rejects.toBeInstanceOf(
      InjectedCrashError,
    );
    expect((await real.readMark()).ledger).toBeUndefined();

    await commitNext(before, s);
    const upgraded = await publishCheckpoint(s.parts, 3);
    expect(upgraded.published.map((p) => [p.checkpointId, p.how])).toEqual([
      [2, 'found'],
      [3, 'appended'],
    ]);
    expect(await rowsBack(s.catalog)).toEqual(rowsOf(3));
    const mark = await real.readMark();
    expect(mark.ledger?.adoptsUnnamed).toBe(true);
    expect((await real.read(2))?.snapshotId).toBe(snapshotIdOf(s.settings.pipelineId, 2));
    expect(mark.snapshot?.snapshotId).toBe(await ownSnapshotId(s, 3));
    expect(mark.snapshot?.snapshotId).not.toBe(snapshotIdOf(s.settings.pipelineId, 3));
    expect(s.errors.filter((line) => line.includes('another ledger'))).toEqual([]);
  });
});
