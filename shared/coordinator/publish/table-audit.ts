/**
 * Whether a pipeline's Iceberg table and its manifest log agree: every committed file in exactly one live snapshot,
 * no snapshot without its checkpoint. Read-only; each violation is one line.
 *
 * - Files. Every data file the readers show rows of after the checkpoint of the table's published-checkpoint
 *   property (`data-files.ts`: the checkpoints' final Parquet objects of the output, every lane, judged by the
 *   readers' rule of replay generations: `table-audit-rows.ts`) is a live data file of main's head exactly once,
 *   added by the snapshot of the checkpoint it entered the table with (its own, or the switch to its generation);
 *   and every live data file under the pipeline's `final/` prefix is one of those.
 * - Rows. The table's own position delete files hide exactly the rows of each such file the readers hide. A property that lags main's history (below) is one violation, and the files
 *   of the checkpoints main names are checked as if it did not lag, not each reported above it.
 * - Snapshots. Every listed snapshot whose summary names this pipeline names a checkpoint that has a manifest, is
 *   that checkpoint's snapshot (`checkpointSnapshotId`, of the ledger its summary names), and no two name one
 *   checkpoint; main's history, as far as it is
 *   listed, holds the pipeline's checkpoints one after another in increasing order.
 * - The property is not below the newest checkpoint a snapshot in main's history names.
 *
 * Another writer may rewrite the pipeline's files (a compaction: DELETED entries for them, ADDED for its own). Their
 * rows are then in files this audit cannot attribute without reading every row, so such files are said to be not
 * checked, once, rather than failed or guessed: those a listed snapshot of main's history removed, and, when main's
 * history is cut short by expired snapshots and the head holds other writers' files, those missing with no listed
 * snapshot to say why. A file missing with neither excuse is a violation.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import { AvroContainerError } from '../../iceberg/avro-container.ts';
import type { Catalog, TableState } from '../../iceberg/catalog.ts';
import { checkpointSnapshotId, ledgerPropertyOf, SUMMARY_LEDGER } from '../../iceberg/checkpoint-identity.ts';
import {
  filesRemovedBy,
  type LiveEntry,
  type SnapshotFiles,
  snapshotFiles,
  TableFileMissingError,
  TableFileReader,
} from '../../iceberg/table-files.ts';
import {
  IcebergMetadataError,
  mainHistory,
  mainSnapshotId,
  type Snapshot,
  SUMMARY_CHECKPOINT_ID,
  SUMMARY_PIPELINE_ID,
  snapshotIdOf,
  type TableMetadata,
} from '../../iceberg/table-metadata.ts';
import { finalPrefix } from '../../sink/layout.ts';
import type { Manifest } from '../../sink/manifest.ts';
import { ManifestLogError, type ManifestStore } from '../../sink/manifest-store.ts';
import { checkpointDataFiles, type DataFileLayout, PublishDataFileError } from './data-files.ts';
import { type ExpectedFile, expectedFiles, positionDeletes, rowViolations } from './table-audit-rows.ts';
import { publishedCheckpointProperty } from './target.ts';

export interface TableAuditParts {
  readonly pipelineId: string;
  /** The bucket of the final objects. */
  readonly bucket: string;
  readonly s3: S3Client;
  readonly manifests: Pick<ManifestStore, 'ids' | 'read'>;
  readonly catalog: Catalog;
  /** The table's location, as the report names it. */
  readonly location: string;
  /** Manifests read at once; default 16. */
  readonly concurrency?: number;
}

export interface TableAudit {
  readonly ok: boolean;
  readonly location: string;
  /** The table's `eos.<pipeline>.published-checkpoint` (0: none). */
  readonly publishedCheckpoint: number;
  /** Manifests in the pipeline's log. */
  readonly checkpoints: number;
  /** Listed snapshots whose summary names the pipeline. */
  readonly snapshots: number;
  /** Data files publishing takes from the checkpoints at or below the property. */
  readonly committedFiles: number;
  /** Live data files of main's head under the pipeline's `final/` prefix. */
  readonly liveFiles: number;
  readonly violations: readonly string[];
  /** What was not checked, and why (files rewritten by another writer, row-level deletes). */
  readonly notes: readonly string[];
}

/** Only which objects publishing takes is wanted of `checkpointDataFiles`: no partition values. */
const PATHS_ONLY: DataFileLayout = {
  schema: { type: 'struct', 'schema-id': 0, fields: [] },
  spec: { 'spec-id': 0, fields: [] },
  partitionColumns: [],
};

/** `s3://bucket/key` for any of the S3 schemes writers use, so locations compare as equal. */
function canonicalLocation(location: string): string {
  const match = /^s3[an]?:\/\/([^/]+)\/(.+)$/.exec(location);
  return match ? `s3://${match[1]}/${match[2]}` : location;
}

/** The checkpoint a snapshot's summary names, if the snapshot names `pipelineId`; `NaN` when it names none. */
function checkpointOf(snapshot: Snapshot, pipelineId: string): number | undefined {
  if (snapshot.summary[SUMMARY_PIPELINE_ID] !== pipelineId) return undefined;
  const raw = snapshot.summary[SUMMARY_CHECKPOINT_ID];
  return raw !== undefined && /^[1-9]\d{0,14}$/.test(raw) ? Number(raw) : Number.NaN;
}

/**
 * The snapshot id of checkpoint `checkpointId` of the ledger incarnation `ledger` names (undefined: evidence from
 * before incarnations).
 */
function snapshotIdNamed(pipelineId: string, checkpointId: number, ledger: string | undefined): bigint {
  const identity = ledger ? { pipelineId, ledger: { id: ledger, adoptsUnnamed: false } } : { pipelineId };
  return checkpointSnapshotId(identity, checkpointId);
}

/** What the manifest log says the table must hold. */
interface Expected {
  /** Location of each data file the table must hold after the property's checkpoint, and the checkpoint adding it. */
  readonly files: Map<string, number>;
  /** Location of every final object any manifest names, its checkpoint and, if publishing leaves it out, why. */
  readonly named: Map<string, { readonly checkpointId: number; readonly left?: string }>;
  /** What of each expected file the readers show. */
  readonly rows: Map<string, ExpectedFile>;
}

class Audit {
  readonly violations: string[] = [];
  readonly notes: string[] = [];
  snapshots = 0;
  liveFiles = 0;
  /** The ledger incarnation beside the table's property: the snapshot ids the files' checkpoints were added by. */
  ledger: string | undefined;

  constructor(
    readonly parts: TableAuditParts,
    readonly property: string,
  ) {}

  violation(line: string): void {
    this.violations.push(line);
  }

  /** The key of a location in the pipeline's bucket, else the location: what a line names. */
  nameOf(location: string): string {
    const prefix = `s3://${this.parts.bucket}/`;
    return location.startsWith(prefix) ? location.slice(prefix.length) : location;
  }

  /** Every committed manifest in order; undefined (and said) when the log cannot be read whole. */
  async manifests(): Promise<Manifest[] | undefined> {
    let ids: number[];
    try {
      ids = await this.parts.manifests.ids();
    } catch (error) {
      if (!(error instanceof ManifestLogError)) throw error;
      this.violation(`${error.message}: the table is not checked against it`);
      return undefined;
    }
    const read = await mapLimit(ids, this.parts.concurrency ?? 16, (id) => this.parts.manifests.read(id));
    const missing = ids.filter((_, index) => read[index] === undefined);
    if (missing.length > 0) {
      this.violation(
        `manifest ${missing[0]} disappeared while reading: the table is not checked against the log`,
      );
      return undefined;
    }
    return read as Manifest[];
  }

  /** The published-checkpoint property, checked to name a checkpoint of the log. */
  publishedCheckpoint(metadata: TableMetadata, logLength: number): number {
    this.ledger = metadata.properties[ledgerPropertyOf(this.property)];
    const raw = metadata.properties[this.property];
    if (raw === undefined) return 0;
    if (!/^\d{1,15}$/.test(raw)) {
      this.violation(`the table's ${this.property} is ${JSON.stringify(raw)}, not a checkpoint id`);
      return 0;
    }
    const value = Number(raw);
    if (value > logLength) {
      this.violation(`the table's ${this.property} is ${value}, but the manifest log ends at ${logLength}`);
    }
    return value;
  }

  /** The listed snapshots naming the pipeline: each its checkpoint's, of a committed checkpoint, once. */
  snapshotsAgree(metadata: TableMetadata, logLength: number): void {
    const { pipelineId } = this.parts;
    const byCheckpoint = new Map<number, bigint>();
    for (const snapshot of metadata.snapshots) {
      const checkpointId = checkpointOf(snapshot, pipelineId);
      if (checkpointId === undefined) continue;
      this.snapshots++;
      const id = snapshot['snapshot-id'];
      if (Number.isNaN(checkpointId)) {
        const raw = JSON.stringify(snapshot.summary[SUMMARY_CHECKPOINT_ID] ?? null);
        this.violation(
          `snapshot ${id} names pipeline ${pipelineId} but no checkpoint (${SUMMARY_CHECKPOINT_ID} ${raw})`,
        );
        continue;
      }
      if (checkpointId > logLength) {
        this.violation(
          `snapshot ${id} names checkpoint ${checkpointId}, which has no manifest (the manifest log ends at ${logLength})`,
        );
      } else if (id !== snapshotIdNamed(pipelineId, checkpointId, snapshot.summary[SUMMARY_LEDGER])) {
        const own = snapshotIdNamed(pipelineId, checkpointId, snapshot.summary[SUMMARY_LEDGER]);
        this.violation(`snapshot ${id} names checkpoint ${checkpointId}, whose snapshot is ${own}`);
      }
      const first = byCheckpoint.get(checkpointId);
      if (first === undefined) byCheckpoint.set(checkpointId, id);
      else this.violation(`snapshots ${first} and ${id} both name checkpoint ${checkpointId}`);
    }
  }

  /**
   * Main's history: the pipeline's checkpoints one after another, none above the property. The newest it names
   * (0: none).
   */
  historyInOrder(metadata: TableMetadata, published: number): number {
    const head = mainSnapshotId(metadata);
    if (head !== undefined && !metadata.snapshots.some((snapshot) => snapshot['snapshot-id'] === head)) {
      this.violation(`main's head ${head} is not a listed snapshot`);
    }
    const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
    let previous: number | undefined;
    for (const id of mainHistory(metadata).reverse()) {
      const checkpointId = checkpointOf(byId.get(id) as Snapshot, this.parts.pipelineId);
      if (checkpointId === undefined || Number.isNaN(checkpointId)) continue;
      if (previous !== undefined && checkpointId <= previous) {
        this.violation(`main's history names checkpoint ${checkpointId} after checkpoint ${previous}`);
      } else if (previous !== undefined && checkpointId > previous + 1) {
        const gap =
          checkpointId === previous + 2 ? `${previous + 1} has` : `${previous + 1}-${checkpointId - 1} have`;
        this.violation(
          `main's history goes from checkpoint ${previous} to ${checkpointId}: ${gap} no snapshot in it`,
        );
      }
      previous = Math.max(previous ?? 0, checkpointId);
    }
    if (previous !== undefined && previous > published) {
      this.violation(
        `the table's ${this.property} is ${published}, below checkpoint ${previous}, which main's history names`,
      );
    }
    return previous ?? 0;
  }

  /** The files the log says the table holds, of the checkpoints up to `upTo` (see {@link Expected}). */
  expected(manifests: readonly Manifest[], upTo: number): Expected {
    const named = new Map<string, { checkpointId: number; left?: string }>();
    const { bucket } = this.parts;
    for (const manifest of manifests) {
      for (const file of manifest.files) {
        named.set(`s3://${bucket}/${file.key}`, { checkpointId: manifest.checkpointId });
      }
    }
    const taken = (manifest: Manifest) => {
      try {
        const files = checkpointDataFiles(manifest, bucket, PATHS_ONLY);
        for (const { key, reason } of files.left) {
          named.set(`s3://${bucket}/${key}`, { checkpointId: manifest.checkpointId, left: reason });
        }
        return { paths: files.dataFiles.map(({ path }) => canonicalLocation(path)), listed: files.listed };
      } catch (error) {
        if (!(error instanceof PublishDataFileError)) throw error;
        this.violation(`checkpoint ${manifest.checkpointId} cannot be published: ${error.message}`);
        return { paths: [], listed: [] };
      }
    };
    const { live, hidden } = expectedFiles(manifests, upTo, taken);
    for (const [location, checkpointId] of hidden) {
      named.set(location, { checkpointId, left: `no reader shows its rows after checkpoint ${upTo}` });
    }
    const files = new Map([...live].map(([location, file]) => [location, file.addedBy]));
    return { files, named, rows: live };
  }

  /**
   * The rows of each expected live file: the position deletes of every position delete file live in main's head
   * (the table's own, another writer's, or maintenance's rewrite of them: readers apply them all) name exactly the
   * rows the readers hide (`table-audit-rows.ts`); equality delete files, which no publish writes, are noted, not
   * checked.
   */
  async rowsAgree(expected: Expected, head: SnapshotFiles): Promise<void> {
    const positional = (head.positionDeleteFiles ?? []).map(canonicalLocation);
    const equality = head.deleteFiles - positional.length;
    if (equality > 0) {
      this.notes.push(
        `${equality} equality delete files are live in main's head: the rows they remove are not checked`,
      );
    }
    const deleted = await positionDeletes(this.parts.s3, positional, canonicalLocation);
    const checked = [...expected.rows].filter(
      ([location, file]) => head.live.has(location) && (!file.whole || deleted.has(location)),
    );
    const found = await mapLimit(checked, this.parts.concurrency ?? 16, ([location, file]) =>
      rowViolations(this.parts.s3, this.parts.bucket, location, file, deleted.get(location)),
    );
    for (const line of found.flat()) this.violation(line);
  }

  /** Each expected file live once, by its checkpoint's snapshot; the files found missing. */
  expectedLive(expected: Expected, head: SnapshotFiles): { location: string; checkpointId: number }[] {
    const missing: { location: string; checkpointId: number }[] = [];
    for (const [location, checkpointId] of expected.files) {
      const entries = head.live.get(location) ?? [];
      const name = `${this.nameOf(location)} of checkpoint ${checkpointId}`;
      if (entries.length === 0) missing.push({ location, checkpointId });
      else if (entries.length > 1)
        this.violation(`${name} is a live data file ${entries.length} times in main's head`);
      else {
        const own = snapshotIdNamed(this.parts.pipelineId, checkpointId, this.ledger);
        const before = snapshotIdOf(this.parts.pipelineId, checkpointId);
        const addedBy = entries[0]?.addedBy;
        if (addedBy !== undefined && addedBy !== own && addedBy !== before) {
          this.violation(`${name} was added by snapshot ${addedBy}, not by its checkpoint's snapshot ${own}`);
        }
      }
    }
    return missing;
  }

  /** Every live data file under the pipeline's `final/` prefix is an expected one (checkpoints up to `upTo`). */
  liveExpected(expected: Expected, head: SnapshotFiles, upTo: number, published: number): void {
    const ours = `s3://${this.parts.bucket}/${finalPrefix(this.parts.pipelineId)}`;
    for (const location of head.live.keys()) {
      if (!location.startsWith(ours)) continue;
      this.liveFiles++;
      if (expected.files.has(location)) continue;
      const named = expected.named.get(location);
      const name = this.nameOf(location);
      if (named === undefined) this.violation(`${name} is a live data file that no manifest names`);
      else if (named.checkpointId > upTo) {
        this.violation(
          `${name} of checkpoint ${named.checkpointId} is a live data file, but the table's ${this.property} is ${published}`,
        );
      } else {
        this.violation(
          `${name} of checkpoint ${named.checkpointId} is a live data file, but publishing leaves it out (${named.left ?? 'not an output object'})`,
        );
      }
    }
  }
}

/** Main's head's files, with every location canonical. */
async function headFiles(reader: TableFileReader, metadata: TableMetadata): Promise<SnapshotFiles> {
  const head = mainSnapshotId(metadata);
  const snapshot = metadata.snapshots.find((candidate) => candidate['snapshot-id'] === head);
  if (snapshot === undefined) return { live: new Map(), deleteFiles: 0, positionDeleteFiles: [] };
  const files = await snapshotFiles(reader, snapshot);
  const live = new Map<string, LiveEntry[]>();
  for (const [location, entries] of files.live) {
    const canonical = canonicalLocation(location);
    live.set(canonical, [...(live.get(canonical) ?? []), ...entries]);
  }
  return { ...files, live };
}

/** The files other writers' snapshots in main's history removed, by location, with the snapshot that did. */
async function removedByOthers(
  reader: TableFileReader,
  metadata: TableMetadata,
  pipelineId: string,
): Promise<Map<string, Snapshot>> {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const removed = new Map<string, Snapshot>();
  for (const id of mainHistory(metadata)) {
    const snapshot = byId.get(id) as Snapshot;
    if (checkpointOf(snapshot, pipelineId) !== undefined || snapshot.summary.operation === 'append') continue;
    for (const location of await filesRemovedBy(reader, snapshot)) {
      removed.set(canonicalLocation(location), snapshot);
    }
  }
  return removed;
}

/** Whether main's history reaches a snapshot no longer listed (expired). */
function cutShort(metadata: TableMetadata): bigint | undefined {
  const history = mainHistory(metadata);
  const oldest = metadata.snapshots.find(
    (snapshot) => snapshot['snapshot-id'] === history[history.length - 1],
  );
  return oldest?.['parent-snapshot-id'] === undefined ? undefined : oldest['snapshot-id'];
}

/** Sorted ids as ranges: `1-3,5`. */
function idRanges(ids: Iterable<number>): string {
  const sorted = [...new Set(ids)].sort((a, b) => a - b);
  const out: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === (sorted[j] as number) + 1) j++;
    out.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return out.join(',');
}

/** Missing files: rewritten by another writer (one note for all), else violations (see the module comment). */
async function judgeMissing(
  audit: Audit,
  reader: TableFileReader,
  metadata: TableMetadata,
  missing: readonly { location: string; checkpointId: number }[],
  head: SnapshotFiles,
): Promise<void> {
  if (missing.length === 0) return;
  const removed = await removedByOthers(reader, metadata, audit.parts.pipelineId);
  const ours = `s3://${audit.parts.bucket}/${finalPrefix(audit.parts.pipelineId)}`;
  const foreign = [...head.live.keys()].filter((location) => !location.startsWith(ours)).length;
  const expiredAfter = foreign > 0 ? cutShort(metadata) : undefined;
  const by = new Set<string>();
  const checkpoints: number[] = [];
  let [rewritten, unseen] = [0, 0];
  for (const { location, checkpointId } of missing) {
    const remover = removed.get(location);
    if (remover !== undefined) {
      rewritten++;
      by.add(`${remover['snapshot-id']} (${remover.summary.operation ?? 'no operation'})`);
    } else if (expiredAfter !== undefined) unseen++;
    else {
      audit.violation(
        `${audit.nameOf(location)} of checkpoint ${checkpointId} is not a live data file of main's head`,
      );
      continue;
    }
    checkpoints.push(checkpointId);
  }
  if (checkpoints.length === 0) return;
  const why = [
    ...(rewritten > 0 ? [`${rewritten} removed by snapshot ${[...by].join(', ')}`] : []),
    ...(unseen > 0
      ? [
          `${unseen} not live, and main's history is cut short by expired snapshots below snapshot ${expiredAfter} while the head holds ${foreign} data file(s) of other writers`,
        ]
      : []),
  ];
  audit.notes.push(
    `files rewritten by another writer: not checked (${checkpoints.length} files of checkpoints ${idRanges(checkpoints)}: ${why.join('; ')})`,
  );
}

/** Audits the table against the manifest log (see the module comment). */
export async function auditTable(parts: TableAuditParts): Promise<TableAudit> {
  const audit = new Audit(parts, publishedCheckpointProperty(parts.pipelineId));
  const report = (published = 0, checkpoints = 0, committedFiles = 0): TableAudit => ({
    ok: audit.violations.length === 0,
    location: parts.location,
    publishedCheckpoint: published,
    checkpoints,
    snapshots: audit.snapshots,
    committedFiles,
    liveFiles: audit.liveFiles,
    violations: audit.violations,
    notes: audit.notes,
  });
  const state = await loaded(audit, parts);
  const manifests = await audit.manifests();
  if (state === undefined || manifests === undefined) return report();
  const { metadata } = state;
  const published = audit.publishedCheckpoint(metadata, manifests.length);
  audit.snapshotsAgree(metadata, manifests.length);
  // A property that lags main's history is one line; the files of the checkpoints main names are checked anyway.
  const upTo = Math.max(published, audit.historyInOrder(metadata, published));
  const expected = audit.expected(manifests, upTo);
  const reader = new TableFileReader(parts.s3);
  try {
    const head = await headFiles(reader, metadata);
    const missing = audit.expectedLive(expected, head);
    audit.liveExpected(expected, head, upTo, published);
    await judgeMissing(audit, reader, metadata, missing, head);
    await audit.rowsAgree(expected, head);
  } catch (error) {
    if (!isUnreadable(error)) throw error;
    audit.violation(`main's head cannot be read: ${(error as Error).message}`);
  }
  return report(published, manifests.length, expected.files.size);
}

function isUnreadable(error: unknown): boolean {
  return (
    error instanceof TableFileMissingError ||
    error instanceof AvroContainerError ||
    error instanceof IcebergMetadataError
  );
}

/** The table's state; undefined (and said) when it has none or it cannot be read. */
async function loaded(audit: Audit, parts: TableAuditParts): Promise<TableState | undefined> {
  try {
    const state = await parts.catalog.load();
    if (state === undefined)
      audit.violation(`no Iceberg table at ${parts.location}: the catalog has no metadata for it`);
    return state;
  } catch (error) {
    if (!isUnreadable(error)) throw error;
    audit.violation(`the table's metadata cannot be read: ${(error as Error).message}`);
    return undefined;
  }
}
