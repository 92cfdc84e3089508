/**
 * Fixtures of the manifest merge tests: a partitioned table's schema and spec, manifests of this pipeline's appends
 * and of other writers (their Avro schema varied), and a manifest store in memory that counts its reads.
 */
import { createHash } from 'node:crypto';
import { decodeContainer, encodeContainer } from '../../shared/iceberg/avro-container.ts';
import { type DataFile, encodeManifest, manifestEntrySchema } from '../../shared/iceberg/manifest-file.ts';
import { addedManifestEntry, type ManifestListEntry } from '../../shared/iceberg/manifest-list.ts';
import type { ManifestStore } from '../../shared/iceberg/manifest-merge.ts';
import { partitionOnlyColumns, partitionSpec } from '../../shared/iceberg/partition-spec.ts';
import { icebergSchema } from '../../shared/iceberg/schema.ts';
import { createTableMetadata, type TableMetadata } from '../../shared/iceberg/table-metadata.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'orderId', type: 'string', nullable: false },
  { name: 'region', type: 'string', nullable: true },
];
const SETTINGS = { timePartitioning: 'hour', identityFields: ['region'] } as const;
const partitionColumns = partitionOnlyColumns(COLUMNS, SETTINGS);
export const { schema, lastColumnId } = icebergSchema(COLUMNS, { partitionColumns });
export const { spec, lastPartitionId } = partitionSpec(schema, COLUMNS, SETTINGS);
const ENTRY_SCHEMA = manifestEntrySchema(schema, spec) as { fields: { name: string; type: unknown }[] };

export function metadataWith(properties: Record<string, string> = {}): TableMetadata {
  return createTableMetadata({
    location: 's3://b/t',
    schema,
    lastColumnId,
    spec,
    lastPartitionId,
    nowMs: 0,
    properties,
  });
}

export const snap = (i: number) => 2n ** 62n + BigInt(i); // beyond a double's exact integers
export const NEW = snap(1_000);

export function file(i: number): DataFile {
  const hour = String(i % 24).padStart(2, '0');
  return {
    path: `s3://b/t/data/part-${i}.parquet`,
    recordCount: i,
    fileSizeInBytes: 100 + i,
    partition: ['2026-03-14', hour, i % 3 ? 'eu' : null],
  };
}

/** Manifests and merged manifests in memory; every read counted, a read of an absent one refused. */
export class MemoryStore implements ManifestStore {
  readonly objects = new Map<string, Buffer>();
  reads: string[] = [];
  async read(location: string): Promise<Buffer> {
    this.reads.push(location);
    const bytes = this.objects.get(location);
    if (bytes === undefined) throw new Error(`read of ${location}, which is not there`);
    return bytes;
  }
  async write(name: string, bytes: Buffer): Promise<string> {
    const location = `mem://${name}-${createHash('sha256').update(bytes).digest('hex').slice(0, 16)}`;
    this.objects.set(location, bytes);
    return location;
  }
  /** Puts `bytes` at `location` and lists it as written by `snapshotId` at `sequence` (counts from `files`). */
  list(
    location: string,
    bytes: Buffer,
    snapshotId: bigint,
    sequence: number,
    files: DataFile[],
  ): ManifestListEntry {
    this.objects.set(location, bytes);
    const entry = { path: location, length: bytes.length, schema, spec, files, snapshotId };
    return addedManifestEntry({ ...entry, sequenceNumber: BigInt(sequence) });
  }
}

/** Checkpoint i's manifest (one file, ADDED by snap(i)) listed at sequence number i, for i = count…1 (newest first). */
export function ourManifests(store: MemoryStore, count: number): ManifestListEntry[] {
  return Array.from({ length: count }, (_, n) => {
    const i = count - n;
    const bytes = encodeManifest({ schema, spec, snapshotId: snap(i), files: [file(i)] });
    return store.list(`mem://m-${i}`, bytes, snap(i), i, [file(i)]);
  });
}

export function addedManifest(store: MemoryStore, i = 1_000): ManifestListEntry {
  const bytes = encodeManifest({ schema, spec, snapshotId: NEW, files: [file(i)] });
  return store.list(`mem://new-${i}`, bytes, NEW, 1_000, [file(i)]);
}

export type Written = {
  status: number;
  snapshot_id: bigint;
  sequence_number: bigint;
  file_sequence_number: bigint;
  data_file: Record<string, unknown>;
};

export function entriesOf(store: MemoryStore, manifest: ManifestListEntry): Written[] {
  return decodeContainer(store.objects.get(manifest.manifest_path) as Buffer).records as Written[];
}

/** A manifest of another writer: `entries` with the file fields every entry needs, in `writerSchema`. */
export function foreignManifest(
  entries: {
    status: number;
    snapshot_id: bigint | null;
    seq: bigint | null;
    fileSeq?: bigint | null;
    path: string;
    extra?: Record<string, unknown>;
  }[],
  writerSchema: object = ENTRY_SCHEMA,
): Buffer {
  return encodeContainer(
    writerSchema,
    [
      ['format-version', '2'],
      ['content', 'data'],
    ],
    entries.map((entry) => ({
      status: entry.status,
      snapshot_id: entry.snapshot_id,
      sequence_number: entry.seq,
      file_sequence_number: entry.fileSeq === undefined ? entry.seq : entry.fileSeq,
      data_file: {
        content: 0,
        file_path: entry.path,
        file_format: 'PARQUET',
        partition: { dt: '2026-03-14', hour: '01', region: 'eu' },
        record_count: 5n,
        file_size_in_bytes: 50n,
        ...entry.extra,
      },
    })),
  );
}

/** `manifestEntrySchema` with `data_file` given `extra` fields, and its partition's `region` field changed. */
export function writerSchema(extra: object[], region: { name?: string; type?: unknown } = {}): object {
  const copy = structuredClone(ENTRY_SCHEMA) as {
    fields: {
      name: string;
      type: { fields: { name: string; type: { fields: { name: string; type: unknown }[] } }[] };
    }[];
  };
  const dataFile = copy.fields.find((field) => field.name === 'data_file')
    ?.type as (typeof copy.fields)[number]['type'];
  dataFile.fields.push(...(extra as (typeof dataFile.fields)[number][]));
  const partition = dataFile.fields.find((field) => field.name === 'partition')?.type;
  const field = partition?.fields.find((candidate) => candidate.name === 'region');
  if (field) Object.assign(field, region);
  return copy;
}

export function listEntryOf(
  store: MemoryStore,
  location: string,
  bytes: Buffer,
  snapshotId: bigint,
  sequence: number,
): ManifestListEntry {
  return { ...store.list(location, bytes, snapshotId, sequence, []), partitions: null };
}
