/**
 * The harness of the tests of replay switches published to an Iceberg table: a pipeline of `orders` with Parquet
 * output in hour folders and its file-catalog table, the processor (live or in replay mode) fed events of a few
 * offsets each, a checkpoint committed by the local state machine, and the rows the committed reader and icebird
 * (a reader nobody here wrote) show, as sorted `partition@offset:tag` multisets. The caller stubs the global
 * `fetch` with `localS3Fetch` (test/iceberg/icebird-s3.ts).
 */
import { icebergRead } from 'icebird';
import { expect } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { PublishParts } from '../../shared/coordinator/publish/publish.ts';
import type { TableAudit } from '../../shared/coordinator/publish/table-audit.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { decodeManifestList, encodeManifestList } from '../../shared/iceberg/manifest-list.ts';
import { s3ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { liveDataFiles, overwriteManifests } from '../../shared/iceberg/overwrite.ts';
import {
  appendSnapshot,
  currentSchema,
  defaultSpec,
  nextSnapshotBase,
} from '../../shared/iceberg/table-metadata.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import { getBytes, putIfAbsent } from '../../shared/sink/objects.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import { settingsIn, type TestResources } from '../support/aws.ts';
import { tagged, tagOf } from '../support/generations.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';
import { auditSetupTable, commitOver, stateOf } from '../support/publish.ts';

export interface ReplaySetup {
  readonly res: TestResources;
  readonly settings: Settings;
  readonly catalog: FileCatalog;
  readonly parts: PublishParts;
  readonly errors: string[];
}

/** A pipeline of its own (`idPrefix` and a unique suffix), or `pipelineId` exactly (a synthesized stack's). */
export function replaySetup(res: TestResources, idPrefix: string, pipelineId?: string): ReplaySetup {
  const settings = settingsIn(res, idPrefix, {
    ...(pipelineId ? { pipelineId } : {}),
    maxTransactionItems: 12,
    outputFormat: 'parquet',
    outputColumns: [...orderDefinition.columns],
    timePartitioning: 'hour',
  });
  const { s3, dynamodb } = res.clients;
  const catalog = new FileCatalog(s3, res.bucket, `${settings.pipelineId}/iceberg/output`);
  const errors: string[] = [];
  const parts: PublishParts = {
    pipelineId: settings.pipelineId,
    bucket: settings.bucket,
    s3,
    clock: systemClock,
    log: { info: () => {}, error: (message) => errors.push(message) },
    store: new CheckpointStore(dynamodb, settings.ledgerTable, settings.pipelineId),
    manifests: new ManifestStore(s3, settings.bucket, settings.pipelineId),
    snapshots: new TableSnapshots(dynamodb, settings.ledgerTable, settings.pipelineId),
    target: {
      catalog,
      table: publishedTable({
        location: catalog.location,
        columns: [...orderDefinition.columns],
        timePartitioning: 'hour',
      }),
    },
  };
  return { res, settings, catalog, parts, errors };
}

/** Commits the next checkpoint (the local state machine). */
export async function commitCheckpoint(s: ReplaySetup): Promise<void> {
  const outcome = await createLocalCoordinator({
    settings: s.settings,
    clients: s.res.clients,
  }).runCheckpoint();
  expect(outcome.status).toBe('committed');
}

/** Offsets [from, from + count) of partitions 0 and 1, in partition and offset order. */
export function records(from: number, count: number): RecordSpec[] {
  return [0, 1]
    .flatMap((p) => orderRecords(p, from, count))
    .sort((a, b) => a.partition - b.partition || a.offset - b.offset);
}

/**
 * `input` through the live processor (no `generation`) or the replay mapping of `generation` (rows tagged
 * `g<generation>`), `size` offsets an event.
 */
export async function deliver(
  s: ReplaySetup,
  input: readonly RecordSpec[],
  options: { generation?: number; size?: number } = {},
): Promise<void> {
  const { generation, size = 5 } = options;
  const processor = createProcessor({
    settings: generation === undefined ? s.settings : { ...s.settings, replayGeneration: generation },
    clients: s.res.clients,
    transform: generation === undefined ? builtinTransform('orders') : tagged(`g${generation}`),
  });
  const offsets = input.map((r) => r.offset);
  for (let from = Math.min(...offsets); from <= Math.max(...offsets); from += size) {
    const batch = input.filter((r) => r.offset >= from && r.offset < from + size);
    if (batch.length > 0) await processor.processEvent(mskEvent(batch));
  }
}

const rowId = (row: Record<string, unknown>) => {
  const source = row.source as { partition: number | bigint; offset: number | bigint };
  return `${Number(source.partition)}@${Number(source.offset)}:${tagOf(row)}`;
};

/** The rows readCommitted shows, as sorted `p@offset:tag` (a multiset). */
export async function committedRows(s: ReplaySetup): Promise<string[]> {
  const rows: string[] = [];
  for await (const { row } of readCommitted({
    s3: s.res.clients.s3,
    bucket: s.settings.bucket,
    pipeline: s.settings.pipelineId,
    stream: 'output',
  })) {
    rows.push(rowId(row));
  }
  return rows.sort();
}

/** The rows icebird reads from the table, in the same form. */
export async function tableRows(s: ReplaySetup): Promise<string[]> {
  const rows = await icebergRead({ tableUrl: s.catalog.location });
  return rows.map((row) => rowId(row as Record<string, unknown>)).sort();
}

/** The table shows what the committed reader shows; those rows. */
export async function expectTableFollows(s: ReplaySetup, what: string): Promise<string[]> {
  const committed = await committedRows(s);
  expect(await tableRows(s), what).toEqual(committed);
  return committed;
}

/** The summary of the snapshot of checkpoint `checkpointId`. */
export async function summaryOf(
  s: ReplaySetup,
  checkpointId: number,
): Promise<Record<string, string> | undefined> {
  const state = await s.catalog.load();
  return state?.metadata.snapshots.find(
    (snapshot) => snapshot.summary['eos.checkpoint-id'] === `${checkpointId}`,
  )?.summary;
}

/** The table audit (`eos verify --iceberg-table`) of the setup's table against its manifest log. */
export function auditReplayTable(s: ReplaySetup): Promise<TableAudit> {
  return auditSetupTable(s.res.clients.s3, s);
}

/**
 * Another writer's compaction of checkpoint 1's live output file of `partition`: its bytes copied to a key under
 * the table's own `data/` and the original removed, in one `replace` snapshot on main's head (written with this
 * repository's manifest writers, the summary of no pipeline).
 */
export async function compactLiveFile(s: ReplaySetup, partition: number): Promise<void> {
  const { s3 } = s.res.clients;
  const { bucket } = s.settings;
  const state = await stateOf(s.catalog);
  const { metadata } = state;
  const store = s3ManifestStore(s3, metadata.location);
  const head = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === metadata['current-snapshot-id'],
  );
  if (!head) throw new Error('the table has no head');
  const inherited = decodeManifestList(await store.read(head['manifest-list']));
  const original = (await s.parts.manifests.read(1))?.files.find(
    (file) => file.stream === 'output' && file.partition === partition,
  );
  if (!original) throw new Error(`checkpoint 1 has no output file of partition ${partition}`);
  const bytes = await getBytes(s3, bucket, original.key);
  if (!bytes) throw new Error('the live file is missing');
  const key = `${s.settings.pipelineId}/iceberg/output/data/compacted-${partition}.parquet`;
  await putIfAbsent(s3, bucket, key, bytes);
  const folder = /dt=([^/]+)\/hour=([^/]+)\//.exec(original.key);
  const { sequenceNumber } = nextSnapshotBase(metadata);
  const snapshotId = 7_200_000_000_000_000n + BigInt(sequenceNumber);
  const written = await overwriteManifests({
    s3,
    store,
    metadata,
    schema: currentSchema(metadata),
    spec: defaultSpec(metadata),
    snapshotId,
    sequenceNumber: BigInt(sequenceNumber),
    inherited,
    live: await liveDataFiles(store, inherited),
    changes: {
      dataFiles: [
        {
          path: `s3://${bucket}/${key}`,
          recordCount: original.recordCount,
          fileSizeInBytes: bytes.length,
          partition: [folder?.[1] ?? null, folder?.[2] ?? null],
        },
      ],
      removed: [`s3://${bucket}/${original.key}`],
      positionDeletes: [],
      operation: 'overwrite',
    },
  });
  const list = encodeManifestList({
    snapshotId,
    parentSnapshotId: head['snapshot-id'],
    sequenceNumber: BigInt(sequenceNumber),
    manifests: [...written.added, ...written.inherited],
  });
  const next = appendSnapshot(metadata, {
    snapshotId,
    manifestList: await store.write(`snap-${snapshotId}`, list),
    nowMs: Date.now(),
    previousLocation: state.location,
    added: { dataFiles: 1, records: original.recordCount, filesSize: bytes.length, partitions: 1 },
    pipelineId: 'maintenance',
    checkpointId: 0,
    lanes: [],
  });
  const snapshots = next.snapshots.map((snapshot) =>
    snapshot['snapshot-id'] === snapshotId ? { ...snapshot, summary: { operation: 'replace' } } : snapshot,
  );
  await commitOver(s.catalog, state, { ...next, snapshots });
}
