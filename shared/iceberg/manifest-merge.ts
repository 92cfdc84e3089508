/**
 * Merging a table's small data manifests while an append writes its manifest list, so that the list stays short:
 * each append names its own manifest and every manifest of its parent, and without a merge a table appended to
 * once a minute has a list of 1,440 manifests after a day, rewritten by every append and opened whole by every
 * reader. Iceberg's own appends do the same (MergeAppend), steered by the same table properties with the same
 * defaults: `commit.manifest-merge.enabled` (true), `commit.manifest.min-count-to-merge` (100),
 * `commit.manifest.target-size-bytes` (8 MB).
 *
 * Which: the parent's data manifests of any writer (this pipeline's appends, a compaction's, another engine's
 * appends): a data manifest's entries mean the same whichever manifest holds them, and leaving another writer's
 * manifests out would leave the list growing for a table that other writers append to as well. Delete manifests
 * and encrypted manifests (a `key_metadata`) are kept as they are. A data manifest is carried into a merged one
 * only when nothing of it is lost: its partition record has the types the table's spec gives (the spec is looked
 * up by the manifest's spec id), each entry's file fields are ones the merged manifest writes (fields the spec
 * says v2 writers drop, such as v1's `block_size_in_bytes`, excepted) and its inherited values can be resolved;
 * otherwise it is kept as it is.
 *
 * When: per partition spec, the parent's data manifests, newest first as the list has them, are packed from the
 * oldest into bins of at most the target size (by manifest length), so that the under-filled bin is the newest.
 * The newest bin is merged once it and the append's own manifests of that spec number at least the minimum count
 * (the new manifest opens Iceberg's newest bin); an older bin, which is full, whenever it holds two manifests or
 * more. A manifest larger than the target is a bin of its own and never rewritten.
 *
 * How: each live entry (ADDED or EXISTING) is written as EXISTING with its snapshot id and its data and file
 * sequence numbers explicit (spec, "Sequence Number Inheritance": an existing file written to a new manifest keeps
 * its original values). A null snapshot id is inherited from the list entry's `added_snapshot_id`; null sequence
 * numbers from the list entry's sequence number when the entry is ADDED or the manifest's sequence number is 0 (a
 * v1 manifest), as Iceberg's readers resolve them. DELETED entries are dropped: they record removals by earlier
 * snapshots, and the new snapshot removes nothing. The merged manifest is the new snapshot's: its list entry has
 * the snapshot's id and sequence number, and its minimum sequence number is its entries' lowest.
 *
 * Names: the n-th merged manifest of a snapshot is `<snapshot id>-m<n>` (n from 1: the append's own is `-m0`)
 * followed by a digest of its bytes, which are a function of the parent's list and the table's schema and specs;
 * a retried append on the same parent rewrites the same keys, one on another parent writes other keys.
 */
import { createHash } from 'node:crypto';
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../concurrency.ts';
import { getBytes, putIfAbsent } from '../sink/objects.ts';
import { avroType, decodeContainer, toAvroValue } from './avro-container.ts';
import { ENTRY_DELETED, ENTRY_EXISTING } from './manifest-entries.ts';
import {
  type DataFile,
  ENTRY_ADDED,
  encodeManifestEntries,
  type ManifestEntryRecord,
  manifestEntrySchema,
} from './manifest-file.ts';
import { type ManifestListEntry, partitionSummaries } from './manifest-list.ts';
import { s3ObjectOf } from './metadata-json.ts';
import type { PartitionSpec } from './partition-spec.ts';
import type { IcebergSchema } from './schema.ts';
import { TableFileMissingError } from './table-files.ts';
import { currentSchema, type TableMetadata } from './table-metadata.ts';

export const MANIFEST_MERGE_ENABLED = 'commit.manifest-merge.enabled';
export const MANIFEST_MIN_COUNT_TO_MERGE = 'commit.manifest.min-count-to-merge';
export const MANIFEST_TARGET_SIZE_BYTES = 'commit.manifest.target-size-bytes';

export interface ManifestMergeSettings {
  readonly enabled: boolean;
  readonly minCountToMerge: number;
  readonly targetSizeBytes: bigint;
}

export const DEFAULT_MIN_COUNT_TO_MERGE = 100;
export const DEFAULT_TARGET_SIZE_BYTES = 8n * 1024n * 1024n;

/** The merge settings a table's properties give; a value that is not a positive whole number takes the default. */
export function manifestMergeSettings(properties: Readonly<Record<string, string>>): ManifestMergeSettings {
  const positive = (key: string): string | undefined => {
    const value = properties[key]?.trim();
    return value !== undefined && /^[1-9]\d{0,17}$/.test(value) ? value : undefined;
  };
  const minCount = positive(MANIFEST_MIN_COUNT_TO_MERGE);
  const target = positive(MANIFEST_TARGET_SIZE_BYTES);
  return {
    enabled: properties[MANIFEST_MERGE_ENABLED]?.trim().toLowerCase() !== 'false',
    minCountToMerge: minCount === undefined ? DEFAULT_MIN_COUNT_TO_MERGE : Number(minCount),
    targetSizeBytes: target === undefined ? DEFAULT_TARGET_SIZE_BYTES : BigInt(target),
  };
}

/** Where the manifests are read from and the merged ones written. */
export interface ManifestStore {
  /** The bytes of the manifest at `location`; throws when it is missing. */
  read(location: string): Promise<Buffer>;
  /** Writes `bytes` once under a key of `name` and a digest of the bytes; the location written. */
  write(name: string, bytes: Buffer): Promise<string>;
}

/**
 * Manifests of the table at `tableLocation` (`s3://…`, no trailing slash) on S3: merged ones written as the
 * append writes its own, `<table>/metadata/<name>-<digest>.avro`, once (`If-None-Match`).
 */
export function s3ManifestStore(s3: S3Client, tableLocation: string): ManifestStore {
  return {
    async read(location) {
      const { bucket, key } = s3ObjectOf(location);
      const bytes = await getBytes(s3, bucket, key);
      if (bytes === undefined) throw new TableFileMissingError(`the manifest ${location} is missing`);
      return bytes;
    },
    async write(name, bytes) {
      const digest = createHash('sha256').update(bytes).digest('hex').slice(0, 32);
      const location = `${tableLocation}/metadata/${name}-${digest}.avro`;
      const { bucket, key } = s3ObjectOf(location);
      // A key named by its bytes' digest: an object already there holds these bytes.
      await putIfAbsent(s3, bucket, key, bytes, { contentType: 'application/octet-stream' });
      return location;
    },
  };
}

export interface ManifestListMerge {
  /** The metadata the snapshot is appended to: its current schema, its specs, its properties. */
  readonly metadata: TableMetadata;
  /** The snapshot whose list is written, and its sequence number. */
  readonly snapshotId: bigint;
  readonly sequenceNumber: bigint;
  /** The manifests the append adds, first in the list. */
  readonly added: readonly ManifestListEntry[];
  /** The parent's list (none for a first snapshot). */
  readonly inherited: readonly ManifestListEntry[];
}

/** Manifests read at once. */
const READ_CONCURRENCY = 8;

/**
 * The manifests of the snapshot's list: the added ones, then the parent's with bins of small data manifests merged
 * (see the module comment). Reads only the manifests it merges, and writes the merged ones.
 */
export async function mergedManifestList(
  merge: ManifestListMerge,
  store: ManifestStore,
): Promise<ManifestListEntry[]> {
  const settings = manifestMergeSettings(merge.metadata.properties);
  const bins = settings.enabled ? binsToMerge(merge, settings) : [];
  if (bins.length === 0) return [...merge.added, ...merge.inherited];
  const results = new Map<ManifestListEntry, ManifestListEntry[]>();
  let written = 0;
  for (const bin of bins) {
    results.set(bin[0] as ManifestListEntry, await mergeBin(merge, bin, store, () => ++written));
  }
  const merged = new Set(bins.flat());
  const out = [...merge.added];
  for (const manifest of merge.inherited) {
    const result = results.get(manifest);
    if (result !== undefined) out.push(...result);
    else if (!merged.has(manifest)) out.push(manifest);
  }
  return out;
}

/** The bins of the parent's data manifests to merge, in list order, each of two manifests or more. */
export function binsToMerge(
  merge: ManifestListMerge,
  settings: ManifestMergeSettings,
): ManifestListEntry[][] {
  const groups = new Map<number, ManifestListEntry[]>();
  for (const manifest of merge.inherited) {
    if (manifest.content !== 0 || manifest.key_metadata !== null) continue;
    const group = groups.get(manifest.partition_spec_id);
    if (group === undefined) groups.set(manifest.partition_spec_id, [manifest]);
    else group.push(manifest);
  }
  const chosen = new Set<ManifestListEntry[]>();
  for (const [specId, group] of groups) {
    const bins = packFromOldest(group, settings.targetSizeBytes);
    const adding = merge.added.filter((manifest) => manifest.partition_spec_id === specId).length;
    bins.forEach((bin, index) => {
      const enough = index > 0 || bin.length + adding >= settings.minCountToMerge;
      if (bin.length >= 2 && enough) chosen.add(bin);
    });
  }
  return merge.inherited.flatMap((manifest) => [...chosen].filter((bin) => bin[0] === manifest));
}

/**
 * `group` (newest first) in consecutive bins of at most `target` bytes, filled from its oldest manifest: the
 * newest bin, first, is the one left under-filled.
 */
function packFromOldest(group: readonly ManifestListEntry[], target: bigint): ManifestListEntry[][] {
  const bins: ManifestListEntry[][] = [];
  let bin: ManifestListEntry[] = [];
  let size = 0n;
  for (let index = group.length - 1; index >= 0; index--) {
    const manifest = group[index] as ManifestListEntry;
    if (bin.length > 0 && size + manifest.manifest_length > target) {
      bins.unshift(bin);
      [bin, size] = [[], 0n];
    }
    bin.unshift(manifest);
    size += manifest.manifest_length;
  }
  if (bin.length > 0) bins.unshift(bin);
  return bins;
}

/** How a spec's merged manifest is written: the Avro schema, what it carries, its partition record's signature. */
interface MergeTarget {
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  readonly avroSchema: object;
  readonly validate: (value: unknown) => boolean;
  readonly fileFields: ReadonlySet<string>;
  readonly partitionSignature: string;
}

/** Data file fields the spec has v2 writers leave out (v1's, and deprecated ones): dropped, not carried. */
const DROPPED_FILE_FIELDS = new Set([
  'block_size_in_bytes',
  'file_ordinal',
  'sort_columns',
  'distinct_counts',
]);
const ENTRY_FIELDS = new Set([
  'status',
  'snapshot_id',
  'sequence_number',
  'file_sequence_number',
  'data_file',
]);

type AvroRecordSchema = { readonly fields?: readonly { name: string; type: unknown; 'field-id'?: number }[] };

function fieldType(record: unknown, name: string): unknown {
  if (typeof record !== 'object' || record === null) return undefined;
  return (record as AvroRecordSchema).fields?.find((field) => field.name === name)?.type;
}

/** JSON with object keys sorted, so that two writers' equal types compare equal. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.entries(value).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonical(item)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The partition record of a `manifest_entry` schema as names, field ids and value types; undefined: none. */
function partitionSignature(entrySchema: unknown): string | undefined {
  const partition = fieldType(fieldType(entrySchema, 'data_file'), 'partition') as
    | AvroRecordSchema
    | undefined;
  if (typeof partition !== 'object' || partition === null || !Array.isArray(partition.fields))
    return undefined;
  const valueType = (type: unknown) =>
    Array.isArray(type) && type.length === 2 && type.includes('null') ? type.find((t) => t !== 'null') : type;
  return canonical(partition.fields.map((field) => [field.name, field['field-id'], valueType(field.type)]));
}

/** The merged manifest's layout for spec `specId` of `metadata`; undefined when this module cannot type it. */
function mergeTarget(metadata: TableMetadata, specId: number): MergeTarget | undefined {
  const spec = metadata['partition-specs'].find((candidate) => candidate['spec-id'] === specId);
  if (spec === undefined) return undefined;
  const schema = currentSchema(metadata);
  try {
    const avroSchema = manifestEntrySchema(schema, spec);
    const type = avroType(avroSchema);
    const signature = partitionSignature(avroSchema);
    if (signature === undefined) return undefined;
    const dataFile = fieldType(avroSchema, 'data_file') as AvroRecordSchema;
    return {
      schema,
      spec,
      avroSchema,
      validate: (value) => type.isValid(value),
      fileFields: new Set((dataFile.fields ?? []).map((field) => field.name)),
      partitionSignature: signature,
    };
  } catch {
    // A spec over a column or transform this module does not type (another writer's).
    return undefined;
  }
}

interface SourceEntry {
  readonly status: number;
  readonly snapshot_id?: bigint | null;
  readonly sequence_number?: bigint | null;
  readonly file_sequence_number?: bigint | null;
  readonly data_file: Readonly<Record<string, unknown>>;
}

/** A live entry of `manifest` as EXISTING with its inherited values explicit; undefined when it cannot be. */
function existingEntry(
  record: SourceEntry,
  manifest: ManifestListEntry,
  target: MergeTarget,
): ManifestEntryRecord | undefined {
  const file = record.data_file;
  if (Object.keys(record).some((key) => !ENTRY_FIELDS.has(key))) return undefined;
  const lost = Object.entries(file).some(
    ([key, value]) => value !== null && !target.fileFields.has(key) && !DROPPED_FILE_FIELDS.has(key),
  );
  if (lost || (file.content ?? 0) !== 0) return undefined;
  const inherits = record.status === ENTRY_ADDED || manifest.sequence_number === 0n;
  const inherited = inherits ? manifest.sequence_number : undefined;
  const sequence = record.sequence_number ?? inherited;
  const fileSequence = record.file_sequence_number ?? inherited;
  if (sequence === undefined || fileSequence === undefined) return undefined;
  const carried = Object.fromEntries([...target.fileFields].map((key) => [key, file[key] ?? null]));
  const entry: ManifestEntryRecord = {
    status: ENTRY_EXISTING,
    snapshot_id: record.snapshot_id ?? manifest.added_snapshot_id,
    sequence_number: sequence,
    file_sequence_number: fileSequence,
    data_file: { ...carried, content: 0 },
  };
  return target.validate(toAvroValue(target.avroSchema, entry)) ? entry : undefined;
}

/** The live entries of `manifest` as EXISTING ones; undefined when it cannot be carried whole (module comment). */
function carriedEntries(
  manifest: ManifestListEntry,
  bytes: Buffer,
  target: MergeTarget,
): ManifestEntryRecord[] | undefined {
  const { metadata, schema, records } = decodeContainer(bytes);
  if (metadata.get('content') === 'deletes') return undefined;
  if (partitionSignature(schema) !== target.partitionSignature) return undefined;
  const entries: ManifestEntryRecord[] = [];
  for (const record of records as SourceEntry[]) {
    if (record.status === ENTRY_DELETED) continue;
    const entry = existingEntry(record, manifest, target);
    if (entry === undefined) return undefined;
    entries.push(entry);
  }
  return entries;
}

/** The list entry of a merged manifest of EXISTING `entries`, written by the merging snapshot. */
function mergedListEntry(
  merge: ManifestListMerge,
  target: MergeTarget,
  entries: readonly ManifestEntryRecord[],
  path: string,
  length: number,
): ManifestListEntry {
  const files: DataFile[] = entries.map((entry) => {
    const partition = (entry.data_file.partition ?? {}) as Record<string, DataFile['partition'][number]>;
    return {
      path: String(entry.data_file.file_path),
      recordCount: 0,
      fileSizeInBytes: 0,
      partition: target.spec.fields.map((field) => partition[field.name] ?? null),
    };
  });
  let lowest = entries[0]?.sequence_number as bigint;
  for (const entry of entries)
    if ((entry.sequence_number as bigint) < lowest) lowest = entry.sequence_number as bigint;
  return {
    manifest_path: path,
    manifest_length: BigInt(length),
    partition_spec_id: target.spec['spec-id'],
    content: 0,
    sequence_number: merge.sequenceNumber,
    min_sequence_number: lowest,
    added_snapshot_id: merge.snapshotId,
    added_files_count: 0,
    existing_files_count: entries.length,
    deleted_files_count: 0,
    added_rows_count: 0n,
    existing_rows_count: entries.reduce(
      (sum, entry) => sum + BigInt(entry.data_file.record_count as bigint),
      0n,
    ),
    deleted_rows_count: 0n,
    partitions: partitionSummaries(target.schema, target.spec, files),
    key_metadata: null,
  };
}

/**
 * The bin's manifests as the list names them after the merge: the merged manifest of those that can be carried
 * (none when they hold no live entry), then the others as they are; the bin as it is when fewer than two can be.
 */
async function mergeBin(
  merge: ManifestListMerge,
  bin: readonly ManifestListEntry[],
  store: ManifestStore,
  nextIndex: () => number,
): Promise<ManifestListEntry[]> {
  const target = mergeTarget(merge.metadata, (bin[0] as ManifestListEntry).partition_spec_id);
  if (target === undefined) return [...bin];
  const carried = await mapLimit(bin, READ_CONCURRENCY, async (manifest) =>
    carriedEntries(manifest, await store.read(manifest.manifest_path), target),
  );
  const kept = bin.filter((_, index) => carried[index] === undefined);
  if (bin.length - kept.length < 2) return [...bin];
  const entries = carried.flatMap((found) => found ?? []);
  if (entries.length === 0) return kept;
  const bytes = encodeManifestEntries(target.schema, target.spec, entries);
  const path = await store.write(`${merge.snapshotId}-m${nextIndex()}`, bytes);
  return [mergedListEntry(merge, target, entries, path, bytes.length), ...kept];
}

/** A parent's data manifest rewritten by an overwrite: its list entry, and the rows and bytes of what it removed. */
export interface RewrittenManifest {
  readonly entry: ManifestListEntry;
  readonly removedRecords: bigint;
  readonly removedBytes: bigint;
}

/**
 * `manifest` of the parent's list rewritten by the snapshot of `merge` with each live entry naming a path of
 * `removed` DELETED by that snapshot and every other live entry EXISTING (as Iceberg's overwrite rewrites the
 * manifests holding the files it removes); undefined when its entries cannot be carried whole (another writer's
 * manifest of a layout this module does not type): the caller cannot remove files from it. Written once under
 * `<snapshot id>-d<index>` and a digest of its bytes.
 */
export async function manifestWithout(
  merge: Pick<ManifestListMerge, 'metadata' | 'snapshotId' | 'sequenceNumber'>,
  manifest: ManifestListEntry,
  removed: ReadonlySet<string>,
  store: ManifestStore,
  index: number,
): Promise<RewrittenManifest | undefined> {
  const target = mergeTarget(merge.metadata, manifest.partition_spec_id);
  if (target === undefined) return undefined;
  const carried = carriedEntries(manifest, await store.read(manifest.manifest_path), target);
  if (carried === undefined) return undefined;
  const entries = carried.map((entry) =>
    removed.has(String(entry.data_file.file_path))
      ? { ...entry, status: ENTRY_DELETED, snapshot_id: merge.snapshotId }
      : entry,
  );
  const gone = entries.filter((entry) => entry.status === ENTRY_DELETED);
  const kept = entries.filter((entry) => entry.status !== ENTRY_DELETED);
  const sum = (list: readonly ManifestEntryRecord[], field: string) =>
    list.reduce((total, entry) => total + BigInt(entry.data_file[field] as bigint), 0n);
  const bytes = encodeManifestEntries(target.schema, target.spec, entries);
  const path = await store.write(`${merge.snapshotId}-d${index}`, bytes);
  const listed = mergedListEntry(merge as ManifestListMerge, target, entries, path, bytes.length);
  return {
    entry: {
      ...listed,
      existing_files_count: kept.length,
      deleted_files_count: gone.length,
      existing_rows_count: sum(kept, 'record_count'),
      deleted_rows_count: sum(gone, 'record_count'),
    },
    removedRecords: sum(gone, 'record_count'),
    removedBytes: sum(gone, 'file_size_in_bytes'),
  };
}
