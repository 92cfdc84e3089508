/**
 * The table audit against checkpoints committed on DynamoDB Local and published to a file-catalog table on the
 * local S3 server: a published table passes (a committed checkpoint not yet published included), and each way the
 * table and the manifest log can disagree is one line: a checkpoint appended twice, a checkpoint's files gone from
 * main's head or listed as another snapshot's, a snapshot naming a checkpoint the log does not have, a live file
 * no manifest names. A compaction by another writer is said to be not checked, once, and is no violation.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import type { TableAudit } from '../../shared/coordinator/publish/table-audit.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import { snapshotIdOf } from '../../shared/iceberg/table-metadata.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import {
  auditSetupTable,
  commitNext,
  type PublishSetup,
  publishSetup,
  withoutIncarnation,
} from '../support/publish.ts';
import {
  appendAgain,
  compact,
  dropManifest,
  headOf,
  nameCheckpoint,
  readdAsOwn,
} from '../support/table-writes.ts';

let res: TestResources;
let s3: S3Client;
beforeAll(async () => {
  res = await freshResources('audit');
  s3 = res.clients.s3;
});

/**
 * A pipeline with `published` checkpoints committed and published, and `more` committed after them; `unnamed`:
 * published as a ledger from before incarnations did, its snapshot ids those of (pipeline, checkpoint) alone that
 * the table-writes helpers derive.
 */
async function published(count: number, more = 0, unnamed = false): Promise<PublishSetup> {
  const s = publishSetup(res, 'audit');
  for (let id = 1; id <= count + more; id++) await commitNext(res, s);
  if (count > 0) await publishCheckpoint(unnamed ? withoutIncarnation(s.parts) : s.parts, count);
  return s;
}

function audit(s: PublishSetup): Promise<TableAudit> {
  return auditSetupTable(s3, s);
}

/** The final keys of a checkpoint's data files, as the audit names them. */
async function dataKeys(s: PublishSetup, checkpointId: number): Promise<string[]> {
  const manifest = await new ManifestStore(s3, s.settings.bucket, s.settings.pipelineId).read(checkpointId);
  return (manifest?.files ?? []).filter((file) => file.stream === 'output').map((file) => file.key);
}

describe('the table audit', () => {
  it('passes a published table, a committed checkpoint above the published-checkpoint property included', async () => {
    const s = await published(3, 1);
    const result = await audit(s);
    expect(result).toEqual({
      ok: true,
      location: s.catalog.location,
      publishedCheckpoint: 3,
      checkpoints: 4,
      snapshots: 3,
      committedFiles: 6,
      liveFiles: 6,
      violations: [],
      notes: [],
    });
  });

  it('reports a checkpoint appended twice: a second snapshot of it, in main after it, its files live twice', async () => {
    const s = await published(2, 0, true);
    const again = 5_000_000_000_000_000_001n;
    await appendAgain(s3, s.catalog, s.settings.pipelineId, 1, again);
    const own = snapshotIdOf(s.settings.pipelineId, 1);
    const keys = await dataKeys(s, 1);
    const result = await audit(s);
    expect(result.ok).toBe(false);
    expect(result.violations).toEqual([
      `snapshot ${again} names checkpoint 1, whose snapshot is ${own}`,
      `snapshots ${own} and ${again} both name checkpoint 1`,
      "main's history names checkpoint 1 after checkpoint 2",
      ...keys.map((key) => `${key} of checkpoint 1 is a live data file 2 times in main's head`),
    ]);
    expect(result.notes).toEqual([]);
  });

  it("reports a checkpoint's files missing from main's head when nothing recorded their removal", async () => {
    const s = await published(2, 0, true);
    await dropManifest(s3, s.catalog, s.settings.pipelineId, 2, 5_000_000_000_000_000_002n);
    const keys = await dataKeys(s, 2);
    const result = await audit(s);
    expect(result.violations).toEqual(
      keys.map((key) => `${key} of checkpoint 2 is not a live data file of main's head`),
    );
    expect(result).toMatchObject({ ok: false, committedFiles: 4, liveFiles: 2, notes: [] });
  });

  it("reports a checkpoint's files live once but added by another writer's snapshot, not its checkpoint's", async () => {
    const s = await published(2, 0, true);
    const other = 5_000_000_000_000_000_011n;
    await readdAsOwn(s3, s.catalog, s.settings.pipelineId, 1, other);
    const own = snapshotIdOf(s.settings.pipelineId, 1);
    const keys = await dataKeys(s, 1);
    const result = await audit(s);
    expect(result.violations).toEqual(
      keys.map(
        (key) =>
          `${key} of checkpoint 1 was added by snapshot ${other}, not by its checkpoint's snapshot ${own}`,
      ),
    );
    expect(result).toMatchObject({ ok: false, liveFiles: 4, notes: [] });
  });

  it('reports missing files also when main is cut short by expiry, if no other writer holds any file', async () => {
    const s = await published(2, 0, true);
    await dropManifest(s3, s.catalog, s.settings.pipelineId, 2, 5_000_000_000_000_000_003n, { expire: true });
    const keys = await dataKeys(s, 2);
    const result = await audit(s);
    expect(result.violations).toEqual(
      keys.map((key) => `${key} of checkpoint 2 is not a live data file of main's head`),
    );
    expect(result.snapshots).toBe(0);
  });

  it('reports a foreign snapshot naming the pipeline with a checkpoint the manifest log does not have', async () => {
    const s = await published(1);
    const forged = 5_000_000_000_000_000_004n;
    await nameCheckpoint(s3, s.catalog, s.settings.pipelineId, '99', forged);
    const property = publishedCheckpointProperty(s.settings.pipelineId);
    const result = await audit(s);
    expect(result.violations).toEqual([
      `snapshot ${forged} names checkpoint 99, which has no manifest (the manifest log ends at 1)`,
      "main's history goes from checkpoint 1 to 99: 2-98 have no snapshot in it",
      `the table's ${property} is 1, below checkpoint 99, which main's history names`,
    ]);
  });

  it('reports a snapshot naming the pipeline without a checkpoint, and a live file under final/ no manifest names', async () => {
    const s = await published(1);
    await nameCheckpoint(s3, s.catalog, s.settings.pipelineId, 'x', 5_000_000_000_000_000_005n);
    const stray = `${s.settings.pipelineId}/final/output/stray.parquet`;
    await compact(s3, s.catalog, 5_000_000_000_000_000_006n, `s3://${s.settings.bucket}/${stray}`);
    const result = await audit(s);
    expect(result.violations).toEqual([
      `snapshot 5000000000000000005 names pipeline ${s.settings.pipelineId} but no checkpoint (eos.checkpoint-id "x")`,
      `${stray} is a live data file that no manifest names`,
    ]);
  });

  it('reports a property lost to another writer in one line, and still checks the files main names', async () => {
    const s = await published(2);
    const property = publishedCheckpointProperty(s.settings.pipelineId);
    const head = await headOf(s3, s.catalog);
    const { [property]: _lost, ...kept } = head.metadata.properties;
    expect(await s.catalog.commit(head.state, { ...head.metadata, properties: kept })).not.toBe('conflict');
    expect(await audit(s)).toEqual({
      ok: false,
      location: s.catalog.location,
      publishedCheckpoint: 0,
      checkpoints: 2,
      snapshots: 2,
      committedFiles: 4,
      liveFiles: 4,
      violations: [`the table's ${property} is 0, below checkpoint 2, which main's history names`],
      notes: [],
    });
  });

  it('says once that files a compaction rewrote are not checked, and fails nothing; publishing goes on over it', async () => {
    const s = await published(2);
    const compaction = 5_000_000_000_000_000_007n;
    const into = `${s.catalog.location}/data/compacted-0.parquet`;
    await compact(s3, s.catalog, compaction, into);
    const note = `files rewritten by another writer: not checked (4 files of checkpoints 1-2: 4 removed by snapshot ${compaction} (replace))`;
    expect(await audit(s)).toMatchObject({ ok: true, violations: [], notes: [note], liveFiles: 0 });

    await commitNext(res, s);
    await publishCheckpoint(s.parts, 3);
    expect(await audit(s)).toMatchObject({
      ok: true,
      violations: [],
      notes: [note],
      publishedCheckpoint: 3,
      snapshots: 3,
      committedFiles: 6,
      liveFiles: 2,
    });
  });

  it('after the compaction expired, files gone below where main is cut short are not checked while other files are live', async () => {
    const s = await published(2);
    await compact(
      s3,
      s.catalog,
      5_000_000_000_000_000_008n,
      `${s.catalog.location}/data/compacted-0.parquet`,
    );
    await commitNext(res, s);
    await publishCheckpoint(s.parts, 3);
    // Expiry keeps main's head alone: the compaction that recorded what it removed is no longer listed.
    const head = await headOf(s3, s.catalog);
    const expired = {
      ...head.metadata,
      snapshots: [head.snapshot],
      'snapshot-log': head.metadata['snapshot-log'].slice(-1),
    };
    expect(await s.catalog.commit(head.state, expired)).not.toBe('conflict');
    const result = await audit(s);
    expect(result).toMatchObject({ ok: true, violations: [], snapshots: 1, liveFiles: 2 });
    expect(result.notes).toEqual([
      `files rewritten by another writer: not checked (4 files of checkpoints 1-2: 4 not live, and main's history is cut short by expired snapshots below snapshot ${head.snapshot['snapshot-id']} while the head holds 1 data file(s) of other writers)`,
    ]);
  });

  it('reports a table without metadata in one line', async () => {
    const s = publishSetup(res, 'audit');
    await commitNext(res, s);
    expect(await audit(s)).toMatchObject({
      ok: false,
      violations: [`no Iceberg table at ${s.catalog.location}: the catalog has no metadata for it`],
    });
  });
});
