/**
 * Iceberg v2 table metadata (spec, "Table Metadata"): creating a table's first metadata, adding a schema or a
 * partition spec, appending a snapshot, and reading and writing the JSON. Pure functions: the caller gives the
 * time, the table's location and the previous metadata file; nothing here reads or writes storage.
 *
 * One checkpoint is one `append` snapshot. Its id is a function of the pipeline id and the checkpoint id
 * ({@link snapshotIdOf}), so every attempt to commit a checkpoint computes the same snapshot, and its summary
 * carries `eos.pipeline-id`, `eos.checkpoint-id` and `eos.lanes` beside the spec's counts, so the table itself says
 * which checkpoint each snapshot is ({@link snapshotOfCheckpoint}).
 *
 * Metadata another writer committed (table maintenance) may hold fields this module does not model: they are kept
 * as they are. Snapshot ids are bigint (all 63 bits are used); `metadata-json.ts` reads and writes the JSON.
 */
import { createHash } from 'node:crypto';
import { PipelineError } from '../errors.ts';
import { type PartitionSpec, sameSpecFields } from './partition-spec.ts';
import { type IcebergSchema, nameMapping, sameFields } from './schema.ts';

export interface Snapshot {
  readonly 'snapshot-id': bigint;
  readonly 'parent-snapshot-id'?: bigint;
  readonly 'sequence-number': number;
  readonly 'timestamp-ms': number;
  readonly 'manifest-list': string;
  readonly summary: Readonly<Record<string, string>>;
  readonly 'schema-id'?: number;
}

export interface SnapshotRef {
  readonly 'snapshot-id': bigint;
  readonly type: 'branch' | 'tag';
}

export interface SortOrder {
  readonly 'order-id': number;
  readonly fields: readonly unknown[];
}

export interface TableMetadata {
  readonly 'format-version': 2;
  readonly 'table-uuid': string;
  readonly location: string;
  readonly 'last-sequence-number': number;
  readonly 'last-updated-ms': number;
  readonly 'last-column-id': number;
  readonly 'current-schema-id': number;
  readonly schemas: readonly IcebergSchema[];
  readonly 'default-spec-id': number;
  readonly 'partition-specs': readonly PartitionSpec[];
  readonly 'last-partition-id': number;
  readonly 'default-sort-order-id': number;
  readonly 'sort-orders': readonly SortOrder[];
  readonly properties: Readonly<Record<string, string>>;
  readonly 'current-snapshot-id'?: bigint;
  readonly refs: Readonly<Record<string, SnapshotRef>>;
  readonly snapshots: readonly Snapshot[];
  readonly 'snapshot-log': readonly { readonly 'timestamp-ms': number; readonly 'snapshot-id': bigint }[];
  readonly 'metadata-log': readonly { readonly 'timestamp-ms': number; readonly 'metadata-file': string }[];
  /** Fields of other writers, kept as they are. */
  readonly [other: string]: unknown;
}

/** Metadata this module cannot work on (another format version, no current schema or spec). */
export class IcebergMetadataError extends PipelineError {}

/** The summary keys naming a snapshot's checkpoint. */
export const SUMMARY_PIPELINE_ID = 'eos.pipeline-id';
export const SUMMARY_CHECKPOINT_ID = 'eos.checkpoint-id';
export const SUMMARY_LANES = 'eos.lanes';

/** How many previous metadata files the metadata log keeps unless the table says otherwise (the spec's default). */
export const DEFAULT_PREVIOUS_VERSIONS_MAX = 100;

/** The snapshot id of a pipeline's checkpoint: positive, 63 bits, the same on every attempt. */
export function snapshotIdOf(pipelineId: string, checkpointId: number): bigint {
  const digest = createHash('sha256').update(`eos-iceberg-snapshot\0${pipelineId}\0${checkpointId}`).digest();
  const id = digest.readBigUInt64BE(0) & (2n ** 63n - 1n);
  return id === 0n ? 1n : id;
}

/** A table's uuid derived from its location: two creators of the same table write the same first metadata. */
export function tableUuidOf(location: string): string {
  const hex = createHash('sha256').update(`eos-iceberg-table\0${location}`).digest('hex');
  const variant = ((Number.parseInt(hex[16] ?? '0', 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

export interface NewTable {
  /** `s3://<bucket>/<table root>`, no trailing slash. */
  readonly location: string;
  readonly schema: IcebergSchema;
  readonly lastColumnId: number;
  readonly spec: PartitionSpec;
  readonly lastPartitionId: number;
  readonly nowMs: number;
  readonly properties?: Readonly<Record<string, string>>;
  /** Default {@link tableUuidOf} the location. */
  readonly tableUuid?: string;
}

/** The first metadata of a table: no snapshot yet, the schema's name mapping among its properties. */
export function createTableMetadata(table: NewTable): TableMetadata {
  return {
    'format-version': 2,
    'table-uuid': table.tableUuid ?? tableUuidOf(table.location),
    location: table.location,
    'last-sequence-number': 0,
    'last-updated-ms': table.nowMs,
    'last-column-id': table.lastColumnId,
    'current-schema-id': table.schema['schema-id'],
    schemas: [table.schema],
    'default-spec-id': table.spec['spec-id'],
    'partition-specs': [table.spec],
    'last-partition-id': table.lastPartitionId,
    'default-sort-order-id': 0,
    'sort-orders': [{ 'order-id': 0, fields: [] }],
    properties: {
      'write.format.default': 'parquet',
      ...table.properties,
      'schema.name-mapping.default': nameMapping(table.schema),
    },
    refs: {},
    snapshots: [],
    'snapshot-log': [],
    'metadata-log': [],
  };
}

/** The table's current schema. */
export function currentSchema(metadata: TableMetadata): IcebergSchema {
  const schema = metadata.schemas.find(
    (candidate) => candidate['schema-id'] === metadata['current-schema-id'],
  );
  if (!schema)
    throw new IcebergMetadataError(`the current schema ${metadata['current-schema-id']} is not listed`);
  return schema;
}

/** The table's default partition spec. */
export function defaultSpec(metadata: TableMetadata): PartitionSpec {
  const spec = metadata['partition-specs'].find(
    (candidate) => candidate['spec-id'] === metadata['default-spec-id'],
  );
  if (!spec) throw new IcebergMetadataError(`the default spec ${metadata['default-spec-id']} is not listed`);
  return spec;
}

/** The metadata with `schema` current (added unless a listed schema has its fields), name mapping updated. */
export function withSchema(
  metadata: TableMetadata,
  schema: IcebergSchema,
  lastColumnId: number,
): TableMetadata {
  if (sameFields(currentSchema(metadata), schema)) return metadata;
  const listed = metadata.schemas.find((candidate) => sameFields(candidate, schema));
  const schemaId = listed?.['schema-id'] ?? Math.max(...metadata.schemas.map((s) => s['schema-id'])) + 1;
  const added = listed ?? { ...schema, 'schema-id': schemaId };
  return {
    ...metadata,
    'last-column-id': Math.max(metadata['last-column-id'], lastColumnId),
    'current-schema-id': schemaId,
    schemas: listed ? metadata.schemas : [...metadata.schemas, added],
    properties: { ...metadata.properties, 'schema.name-mapping.default': nameMapping(added) },
  };
}

/** The metadata with `spec` the default (added unless a listed spec has its fields). */
export function withSpec(
  metadata: TableMetadata,
  spec: PartitionSpec,
  lastPartitionId: number,
): TableMetadata {
  if (sameSpecFields(defaultSpec(metadata), spec)) return metadata;
  const listed = metadata['partition-specs'].find((candidate) => sameSpecFields(candidate, spec));
  const specId = listed?.['spec-id'] ?? Math.max(...metadata['partition-specs'].map((s) => s['spec-id'])) + 1;
  return {
    ...metadata,
    'last-partition-id': Math.max(metadata['last-partition-id'], lastPartitionId),
    'default-spec-id': specId,
    'partition-specs': listed
      ? metadata['partition-specs']
      : [...metadata['partition-specs'], { ...spec, 'spec-id': specId }],
  };
}

/** The snapshot the `main` branch points at, if any. */
export function mainSnapshotId(metadata: TableMetadata): bigint | undefined {
  return metadata.refs.main?.['snapshot-id'] ?? metadata['current-snapshot-id'] ?? undefined;
}

/** Where the next snapshot goes: its parent (main's head) and its sequence number. */
export function nextSnapshotBase(metadata: TableMetadata): {
  parentSnapshotId?: bigint;
  sequenceNumber: number;
} {
  const parent = mainSnapshotId(metadata);
  return {
    ...(parent === undefined ? {} : { parentSnapshotId: parent }),
    sequenceNumber: metadata['last-sequence-number'] + 1,
  };
}

/** The ids of main's history, newest first (parent links followed while the snapshots are still listed). */
export function mainHistory(metadata: TableMetadata): bigint[] {
  const byId = new Map(metadata.snapshots.map((snapshot) => [snapshot['snapshot-id'], snapshot]));
  const history: bigint[] = [];
  for (let id = mainSnapshotId(metadata); id !== undefined && byId.has(id); ) {
    history.push(id);
    id = byId.get(id)?.['parent-snapshot-id'];
  }
  return history;
}

/** The snapshot whose summary names this pipeline's checkpoint, and whether main's history holds it. */
export function snapshotOfCheckpoint(
  metadata: TableMetadata,
  pipelineId: string,
  checkpointId: number,
): { snapshot: Snapshot; inMainHistory: boolean } | undefined {
  const snapshot = metadata.snapshots.find(
    (candidate) =>
      candidate.summary[SUMMARY_PIPELINE_ID] === pipelineId &&
      candidate.summary[SUMMARY_CHECKPOINT_ID] === String(checkpointId),
  );
  if (!snapshot) return undefined;
  return { snapshot, inMainHistory: mainHistory(metadata).includes(snapshot['snapshot-id']) };
}

/** What an append adds, and the checkpoint it is. */
export interface AppendedSnapshot {
  readonly snapshotId: bigint;
  readonly manifestList: string;
  readonly nowMs: number;
  /** The location of the metadata file `metadata` was read from, for the metadata log; none for a new table. */
  readonly previousLocation?: string;
  readonly added: {
    readonly dataFiles: number;
    readonly records: number;
    readonly filesSize: number;
    readonly partitions: number;
  };
  readonly pipelineId: string;
  readonly checkpointId: number;
  readonly lanes: readonly string[];
  /**
   * What an overwrite (`overwrite.ts`) takes out and the position deletes it adds; with it the snapshot's
   * operation is `overwrite`.
   */
  readonly overwrite?: {
    readonly removedFiles: number;
    readonly removedRecords: number;
    readonly removedBytes: number;
    readonly deleteFiles: number;
    readonly positionDeletes: number;
  };
}

type Delta = Readonly<Record<string, number>>;

/** The spec's totals: the parent's plus `delta`; a total the parent's summary lacks is left out. */
function totals(parent: Snapshot | undefined, delta: Delta): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of TOTALS) {
    const before = parent === undefined ? '0' : parent.summary[key];
    if (before === undefined || !/^\d+$/.test(before)) continue;
    out[key] = String(BigInt(before) + BigInt(delta[key] ?? 0));
  }
  return out;
}

const TOTALS = [
  'total-data-files',
  'total-records',
  'total-files-size',
  'total-delete-files',
  'total-position-deletes',
  'total-equality-deletes',
] as const;

/** The summary fields of what the snapshot adds and removes, and its totals. */
function changeSummary(parent: Snapshot | undefined, append: AppendedSnapshot): Record<string, string> {
  const { added, overwrite } = append;
  const removed = overwrite ?? {
    removedFiles: 0,
    removedRecords: 0,
    removedBytes: 0,
    deleteFiles: 0,
    positionDeletes: 0,
  };
  const summary: Record<string, string> = {
    operation: overwrite ? 'overwrite' : 'append',
    'added-data-files': String(added.dataFiles),
    'added-records': String(added.records),
    'added-files-size': String(added.filesSize),
    'changed-partition-count': String(added.partitions),
  };
  if (overwrite) {
    summary['deleted-data-files'] = String(removed.removedFiles);
    summary['deleted-records'] = String(removed.removedRecords);
    summary['removed-files-size'] = String(removed.removedBytes);
    summary['added-delete-files'] = String(removed.deleteFiles);
    summary['added-position-delete-files'] = String(removed.deleteFiles);
    summary['added-position-deletes'] = String(removed.positionDeletes);
  }
  return {
    ...summary,
    ...totals(parent, {
      'total-data-files': added.dataFiles - removed.removedFiles,
      'total-records': added.records - removed.removedRecords,
      'total-files-size': added.filesSize - removed.removedBytes,
      'total-delete-files': removed.deleteFiles,
      'total-position-deletes': removed.positionDeletes,
    }),
  };
}

/** The metadata with one more `append` (or `overwrite`) snapshot at the head of main (see the module comment). */
export function appendSnapshot(metadata: TableMetadata, append: AppendedSnapshot): TableMetadata {
  if (metadata.snapshots.some((listed) => listed['snapshot-id'] === append.snapshotId)) {
    throw new IcebergMetadataError(`snapshot ${append.snapshotId} is already in the table`);
  }
  const { parentSnapshotId, sequenceNumber } = nextSnapshotBase(metadata);
  const parent = metadata.snapshots.find((snapshot) => snapshot['snapshot-id'] === parentSnapshotId);
  const timestamp = Math.max(append.nowMs, metadata['last-updated-ms']);
  const snapshot: Snapshot = {
    'snapshot-id': append.snapshotId,
    ...(parentSnapshotId === undefined ? {} : { 'parent-snapshot-id': parentSnapshotId }),
    'sequence-number': sequenceNumber,
    'timestamp-ms': timestamp,
    'manifest-list': append.manifestList,
    summary: {
      ...changeSummary(parent, append),
      [SUMMARY_PIPELINE_ID]: append.pipelineId,
      [SUMMARY_CHECKPOINT_ID]: String(append.checkpointId),
      [SUMMARY_LANES]: append.lanes.join(','),
    },
    'schema-id': metadata['current-schema-id'],
  };
  const keep = Number(
    metadata.properties['write.metadata.previous-versions-max'] ?? DEFAULT_PREVIOUS_VERSIONS_MAX,
  );
  const metadataLog =
    append.previousLocation === undefined
      ? metadata['metadata-log']
      : [
          ...metadata['metadata-log'],
          { 'timestamp-ms': metadata['last-updated-ms'], 'metadata-file': append.previousLocation },
        ];
  return {
    ...metadata,
    'last-sequence-number': sequenceNumber,
    'last-updated-ms': timestamp,
    'current-snapshot-id': append.snapshotId,
    refs: { ...metadata.refs, main: { 'snapshot-id': append.snapshotId, type: 'branch' } },
    snapshots: [...metadata.snapshots, snapshot],
    'snapshot-log': [
      ...metadata['snapshot-log'],
      { 'timestamp-ms': timestamp, 'snapshot-id': append.snapshotId },
    ],
    'metadata-log': metadataLog.slice(Math.max(0, metadataLog.length - keep)),
  };
}
