/**
 * What publishing costs, counted on the SDK clients and on the catalog's loads: a publish of one checkpoint, a
 * catch-up of several, a publish of a checkpoint already published; and what each append adds to the metadata
 * every later append and every reader opens. Against DynamoDB Local and the local S3 server.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { type PublishParts, publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { appendCheckpoint } from '../../shared/iceberg/append.ts';
import type { Catalog } from '../../shared/iceberg/catalog.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { decodeManifestList } from '../../shared/iceberg/manifest-list.ts';
import { s3ObjectOf } from '../../shared/iceberg/metadata-json.ts';
import { mainSnapshotId } from '../../shared/iceberg/table-metadata.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { checkpoint, outputTable } from '../iceberg/catalog-drive.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { commitNext, type PublishSetup, publishSetup } from '../support/publish.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubcost');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

interface Counted {
  readonly parts: PublishParts;
  readonly calls: CallCounter;
  loads: number;
  reset(): void;
}

/** `s`'s publish parts on clients of their own, every AWS call and every catalog load counted. */
function counted(s: PublishSetup): Counted {
  const clients = createAwsClients();
  const calls = new CallCounter().attach(clients);
  const { settings } = s;
  const inner = new FileCatalog(clients.s3, res.bucket, s.catalog.root);
  const catalog: Catalog = {
    load: () => {
      out.loads++;
      return inner.load();
    },
    commit: (expected, next) => inner.commit(expected, next),
  };
  const out: Counted = {
    calls,
    loads: 0,
    reset() {
      calls.reset();
      out.loads = 0;
    },
    parts: {
      ...s.parts,
      s3: clients.s3,
      store: new CheckpointStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId),
      manifests: new ManifestStore(clients.s3, settings.bucket, settings.pipelineId),
      snapshots: new TableSnapshots(clients.dynamodb, settings.ledgerTable, settings.pipelineId),
      target: { ...s.parts.target, catalog },
    },
  };
  return out;
}

describe('what a publish costs', () => {
  // A publish loads the table once: the rollback check's load is the first append's base, and each append's
  // committed state the next one's; it reloads only after a conflict. A file catalog load is three GETs (hint,
  // v<N>, a probe of v<N+1>), a Glue load a GetTable and the metadata JSON, which holds every unexpired snapshot.
  it('loads the table once per publish, whether it appends one checkpoint or catches up three', async () => {
    const s = publishSetup(res, 'pc');
    const c = counted(s);
    await commitNext(res, s);
    await publishCheckpoint(c.parts, 1);
    await commitNext(res, s);
    c.reset();
    await publishCheckpoint(c.parts, 2);
    expect(c.loads).toBe(1);
    for (let i = 0; i < 3; i++) await commitNext(res, s);
    c.reset();
    await publishCheckpoint(c.parts, 5);
    expect(c.loads).toBe(1);
  });

  // Sound: what a publish writes. Per checkpoint appended, four objects (manifest, manifest list, metadata file,
  // version hint) and two ledger items (the snapshot record, the mark); nothing for a checkpoint already published,
  // whose publish (a retry, a zombie, an idle execution racing the next checkpoint's) costs a load and two GetItems.
  it('writes four objects and two ledger items per checkpoint appended, and nothing for one already published', async () => {
    const s = publishSetup(res, 'pc');
    const c = counted(s);
    await commitNext(res, s);
    await publishCheckpoint(c.parts, 1);
    for (let i = 0; i < 3; i++) await commitNext(res, s);
    c.reset();
    await publishCheckpoint(c.parts, 4);
    const catchUp = c.calls.snapshot();
    expect([catchUp['s3:PutObject'], catchUp['dynamodb:PutItem']]).toEqual([12, 6]);
    c.reset();
    expect((await publishCheckpoint(c.parts, 4)).published).toEqual([]);
    expect(c.calls.snapshot()).toEqual({ 'dynamodb:GetItem': 2, 's3:GetObject': 3 });
    expect(c.loads).toBe(1);
  });
});

describe('what each append leaves for the next', () => {
  // A pipeline checkpointing every minute appends 1440 snapshots a day. Without merging, every append rewrites a
  // list naming every earlier manifest (metadata growing quadratically with the table's age) and every reader opens
  // each of them to plan a scan. Appends merge the parent's manifests as Iceberg's merge append does, once the list
  // reaches commit.manifest.min-count-to-merge (100 by default): `iceberg/manifest-merge.ts`.
  it('keeps the head manifest list within 100 manifests after 101 appended checkpoints', async () => {
    const catalog = new FileCatalog(res.clients.s3, res.bucket, `${uniqueName('growth')}/iceberg/output`);
    const table = outputTable(catalog.location);
    for (let id = 1; id <= 101; id++) {
      const file = {
        path: `${catalog.location}/data/part-${id}.parquet`,
        recordCount: 1,
        fileSizeInBytes: 100,
        partition: [],
      };
      await appendCheckpoint(catalog, res.clients.s3, checkpoint(table, id, [file]));
    }
    const state = await catalog.load();
    const head = state?.metadata.snapshots.find((s) => s['snapshot-id'] === mainSnapshotId(state.metadata));
    if (!head) throw new Error('the table has no head');
    const { bucket, key } = s3ObjectOf(head['manifest-list']);
    const bytes = await getBytes(res.clients.s3, bucket, key);
    if (!bytes) throw new Error('the head manifest list is missing');
    expect(decodeManifestList(bytes).length).toBeLessThanOrEqual(100);
  });
});
