/**
 * The harness of the Iceberg publish tests: a pipeline with Parquet output in hour folders, a file catalog in its
 * bucket and the parts `publishCheckpoint` takes; checkpoints of rows staged on two partitions and committed by
 * the local state machine; and the rows icebird reads back. The caller stubs the global `fetch` with
 * `localS3Fetch` (test/iceberg/icebird-s3.ts) so icebird reads the local S3 server.
 */
import { icebergRead } from 'icebird';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import type { PublishParts } from '../../shared/coordinator/publish/publish.ts';
import { publishedTable } from '../../shared/coordinator/publish/target.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { CheckpointStore } from '../../shared/ledger/checkpoints.ts';
import { TableSnapshots } from '../../shared/ledger/table-snapshots.ts';
import { ManifestStore } from '../../shared/sink/manifest-store.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import { settingsIn, type TestResources } from './aws.ts';
import { checkpoint } from './checkpoint-steps.ts';
import { stageFiles } from './staging.ts';

export const PUBLISH_COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];

export interface PublishSetup {
  readonly settings: Settings;
  readonly catalog: FileCatalog;
  readonly parts: PublishParts;
  /** What the publish logged as errors. */
  readonly errors: string[];
  /** Offsets staged so far on each partition (the next checkpoint stages above them). */
  staged: number;
  /** Added to every row's `n`: pipelines sharing a table write distinct rows. */
  readonly base: number;
}

/** A fresh pipeline and its table (at `root`, default the pipeline's own `<pipeline>/iceberg/output`). */
export function publishSetup(
  res: TestResources,
  idPrefix: string,
  options: { root?: string; base?: number } = {},
): PublishSetup {
  const settings = settingsIn(res, idPrefix, {
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: PUBLISH_COLUMNS,
  });
  const { s3, dynamodb } = res.clients;
  const catalog = new FileCatalog(s3, res.bucket, options.root ?? `${settings.pipelineId}/iceberg/output`);
  const table = publishedTable({
    location: catalog.location,
    columns: PUBLISH_COLUMNS,
    timePartitioning: 'hour',
  });
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
    target: { catalog, table },
  };
  return { settings, catalog, parts, errors, staged: 0, base: options.base ?? 0 };
}

/** Stages `count` rows on two partitions and commits them as the next checkpoint (the local state machine). */
export async function commitNext(res: TestResources, setup: PublishSetup, count = 3): Promise<void> {
  const first = setup.staged;
  const last = first + count - 1;
  const rows = (partition: number) =>
    Array.from({ length: count }, (_, i) => ({
      n: setup.base + partition * 1000 + first + i,
      at: Date.UTC(2026, 2, 14, 7) + first + i,
      source: { topic: 'orders', partition, offset: first + i },
    }));
  await stageFiles(res.clients, setup.settings, [
    { partition: 0, firstOffset: first, lastOffset: last, rows: rows(0) },
    { partition: 1, firstOffset: first, lastOffset: last, rows: rows(1) },
  ]);
  setup.staged = last + 1;
  await checkpoint(res, setup.settings);
}

/** The `n` of every row icebird reads from the table, sorted. */
export async function rowsBack(catalog: FileCatalog): Promise<number[]> {
  const rows = await icebergRead({ tableUrl: catalog.location });
  return rows.map((row) => Number((row as { n: bigint | number }).n)).sort((a, b) => a - b);
}
