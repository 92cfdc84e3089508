/**
 * The verdict on a local run's Iceberg table: read back by icebird (a reader nobody here wrote) from the local S3
 * server, it must hold every committed output row of the live lanes exactly once (each final Parquet object's
 * rows, by lineage), its snapshots must name each committed checkpoint exactly once, and the ledger's published
 * mark must have reached the last committed checkpoint.
 *
 * icebird fetches `s3://<bucket>/<key>` as `https://<bucket>.s3.amazonaws.com/<key>` with the global `fetch`;
 * while a table is read, `fetch` answers those requests from the run's S3 client instead (ranges included) and
 * passes every other request on unchanged.
 */
import { GetObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import { FileCatalog } from '../shared/iceberg/file-catalog.ts';
import { SUMMARY_CHECKPOINT_ID, SUMMARY_PIPELINE_ID } from '../shared/iceberg/table-metadata.ts';
import { CheckpointStore } from '../shared/ledger/checkpoints.ts';
import { generationOfLane } from '../shared/ledger/epochs.ts';
import { TableSnapshots } from '../shared/ledger/table-snapshots.ts';
import { parseFinalKey } from '../shared/sink/layout.ts';
import { isNotFound } from '../shared/sink/objects.ts';
import { readFinalRows } from '../shared/sink/verify.ts';

/** Where a run's table lives in its bucket. */
export function runTableRoot(pipeline: string): string {
  return `${pipeline}/iceberg/output`;
}

export interface TableReport {
  readonly location: string;
  /** Snapshots naming a checkpoint of this pipeline. */
  readonly snapshots: number;
  /** Rows icebird read back from the table. */
  readonly rows: number;
  /** Committed output rows the table should hold: the final Parquet objects' rows of the live lanes. */
  readonly committedRows: number;
  /**
   * By lineage: committed rows the table lacks, and rows it holds more than were committed; then rows of a
   * committed lineage whose contents (or partition) are no committed row's.
   */
  readonly missing: number;
  readonly extra: number;
  readonly differing: number;
  /** The ledger's published mark, and the last committed checkpoint it should have reached. */
  readonly publishedUpTo: number;
  readonly committedUpTo: number;
}

const S3_HOST = /^([a-z0-9.-]+)\.s3\.amazonaws\.com$/;
const readers = new Map<string, S3Client>();
let passOn: typeof fetch | undefined;

async function localFetch(input: Parameters<typeof fetch>[0], init?: RequestInit): Promise<Response> {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const s3 = readers.get(S3_HOST.exec(url.hostname)?.[1] ?? '');
  if (!s3 || !passOn) return (passOn ?? fetch)(input, init);
  const range = new Headers(init?.headers).get('Range') ?? undefined;
  const bucket = S3_HOST.exec(url.hostname)?.[1];
  try {
    const object = await s3.send(
      new GetObjectCommand({ Bucket: bucket, Key: decodeURIComponent(url.pathname.slice(1)), Range: range }),
    );
    return new Response(await object.Body!.transformToByteArray(), { status: range ? 206 : 200 });
  } catch (error) {
    if (isNotFound(error)) return new Response('not found', { status: 404, statusText: 'Not Found' });
    throw error;
  }
}

/** Runs `read` with `fetch` answering the bucket's objects from `s3` (see the module comment). */
async function withBucketFetch<T>(bucket: string, s3: S3Client, read: () => Promise<T>): Promise<T> {
  readers.set(bucket, s3);
  if (passOn === undefined) {
    passOn = globalThis.fetch;
    globalThis.fetch = localFetch as typeof fetch;
  }
  try {
    return await read();
  } finally {
    readers.delete(bucket);
    if (readers.size === 0 && passOn !== undefined) {
      globalThis.fetch = passOn;
      passOn = undefined;
    }
  }
}

function lineageKey(row: Record<string, unknown>): string {
  const source = row.source as { topic?: unknown; partition?: unknown; offset?: unknown } | undefined;
  return `${String(source?.topic)}/${Number(source?.partition)}/${Number(source?.offset)}`;
}

/**
 * A row's contents in one spelling whichever reader decoded it: keys sorted, integers and times as decimal
 * strings (icebird may give a long as a bigint and a timestamp as a Date where the sink's reader gives numbers).
 */
function contents(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'bigint' || typeof value === 'number') return String(value);
  if (value instanceof Date) return String(value.getTime());
  if (Array.isArray(value)) return `[${value.map(contents).join(',')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${contents(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

function counts(keys: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const key of keys) out.set(key, (out.get(key) ?? 0) + 1);
  return out;
}

export interface RowComparison {
  readonly missing: number;
  readonly extra: number;
  readonly differing: number;
}

/** A committed row and the time folder of its object (`dt`, `hour`: the table's partition values). */
export interface CommittedRow {
  readonly row: Record<string, unknown>;
  readonly folder: ReadonlyMap<string, string>;
}

function folderValues(folder: string | undefined): Map<string, string> {
  return new Map(
    (folder ?? '')
      .split('/')
      .filter(Boolean)
      .map((part) => part.split('=') as [string, string]),
  );
}

/**
 * A table row's contents without its partition columns, and the values it gives them. The data files do not hold
 * the folder keys (they are partition values in the manifests): a reader may fill them from there, as the spec
 * asks of identity partitions, or leave them out (undefined), as icebird does.
 */
function tableRow(
  row: Record<string, unknown>,
  partitionColumns: ReadonlySet<string>,
): { readonly contents: string; readonly folder: string | undefined } {
  const given = [...partitionColumns]
    .filter((name) => row[name] !== null && row[name] !== undefined)
    .map((name) => `${name}=${String(row[name])}`);
  const kept = Object.entries(row).filter(([name]) => !partitionColumns.has(name));
  return {
    contents: contents(Object.fromEntries(kept)),
    folder: given.length === 0 ? undefined : given.join('/'),
  };
}

/**
 * How the table's rows differ from the committed rows: by lineage (each once); then by contents, which tell apart
 * rows of one lineage in two epochs (a recreated topic starts again at offset 0), each row matched to a committed
 * row of equal contents whose object's folder is the partition the reader gave it, if it gave one.
 */
export function compareRows(
  table: readonly Record<string, unknown>[],
  committed: readonly CommittedRow[],
): RowComparison {
  const [inTable, expected] = [
    counts(table.map(lineageKey)),
    counts(committed.map(({ row }) => lineageKey(row))),
  ];
  let missing = 0;
  let extra = 0;
  for (const [key, n] of expected) missing += Math.max(0, n - (inTable.get(key) ?? 0));
  for (const [key, n] of inTable) extra += Math.max(0, n - (expected.get(key) ?? 0));
  const partitionColumns = new Set(committed.flatMap(({ folder }) => [...folder.keys()]));
  const folders = new Map<string, string[]>();
  for (const { row, folder } of committed) {
    const key = contents(row);
    folders.set(key, [...(folders.get(key) ?? []), [...folder].map(([k, v]) => `${k}=${v}`).join('/')]);
  }
  let unmatched = 0;
  for (const row of table) {
    const { contents: key, folder } = tableRow(row, partitionColumns);
    const left = folders.get(key) ?? [];
    const at = folder === undefined ? 0 : left.indexOf(folder);
    if (left.length === 0 || at < 0) unmatched++;
    else left.splice(at, 1);
  }
  // A row of the wrong lineage is extra and unmatched both: counted once, as extra.
  return { missing, extra, differing: Math.max(0, unmatched - extra) };
}

function rowViolations({ missing, extra, differing }: RowComparison): string[] {
  return [
    ...(missing > 0 ? [`the Iceberg table lacks ${missing} committed rows`] : []),
    ...(extra > 0 ? [`the Iceberg table holds ${extra} rows more than were committed`] : []),
    ...(differing > 0 ? [`${differing} rows of the Iceberg table differ from the committed rows`] : []),
  ];
}

/** Reads the run's table back and judges it (see the module comment). */
export async function judgeTable(
  clients: AwsClients,
  settings: Settings,
): Promise<{ readonly report: TableReport; readonly violations: string[] }> {
  const { s3, dynamodb } = clients;
  const pipeline = settings.pipelineId;
  const catalog = new FileCatalog(s3, settings.bucket, runTableRoot(pipeline));
  const state = await catalog.load();
  const committedUpTo =
    (await new CheckpointStore(dynamodb, settings.ledgerTable, pipeline).readHead())?.committedId ?? 0;
  const publishedUpTo = (await new TableSnapshots(dynamodb, settings.ledgerTable, pipeline).readMark()).upTo;
  const named = (state?.metadata.snapshots ?? [])
    .filter((snapshot) => snapshot.summary[SUMMARY_PIPELINE_ID] === pipeline)
    .map((snapshot) => Number(snapshot.summary[SUMMARY_CHECKPOINT_ID]))
    .sort((a, b) => a - b);
  const hasData = (state?.metadata.snapshots ?? []).some(
    (s) => Number(s.summary['total-data-files'] ?? 0) > 0,
  );
  const tableRows = hasData
    ? await withBucketFetch(settings.bucket, s3, async () => {
        // Loaded only for a run with a table: icebird is a development dependency, which an installed package
        // running `eos local` without a table does not have.
        const { icebergRead } = await import('icebird');
        return icebergRead({ tableUrl: catalog.location });
      })
    : [];
  const committed = (await readFinalRows({ s3, bucket: settings.bucket, pipeline })).filter((row) => {
    const parsed = parseFinalKey(pipeline, row.key);
    return row.stream === 'output' && parsed?.encoding === 'parquet' && generationOfLane(parsed.topic) === 0;
  });
  const comparison = compareRows(
    tableRows,
    committed.map(({ key, row }) => ({ row, folder: folderValues(parseFinalKey(pipeline, key)?.folder) })),
  );
  const violations = [
    ...(publishedUpTo === committedUpTo
      ? []
      : [`the Iceberg table is published up to checkpoint ${publishedUpTo} of ${committedUpTo} committed`]),
    ...(named.length === committedUpTo && named.every((id, index) => id === index + 1)
      ? []
      : [
          `the Iceberg table's snapshots name checkpoints ${named.join(',')}, not 1 to ${committedUpTo} once each`,
        ]),
    ...rowViolations(comparison),
  ];
  return {
    report: {
      location: catalog.location,
      snapshots: named.length,
      rows: tableRows.length,
      committedRows: committed.length,
      ...comparison,
      publishedUpTo,
      committedUpTo,
    },
    violations,
  };
}
