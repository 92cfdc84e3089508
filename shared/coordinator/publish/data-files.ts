/**
 * The Iceberg data files of a committed checkpoint: its manifest's final Parquet objects of the `output` stream,
 * as they are (no copy: a final object never changes, C7, so the table can name it for good). Each one's partition
 * tuple is its time folder, read from its key: the table is partitioned by the folders (`dt`, `hour`, identity
 * transforms of columns held only in the partition metadata, `partition-spec.ts`), never by a transform of a row
 * column, because the sink files a row whose time lies far from its staging under the staging time's folder: a
 * day or hour transform of the column would name a partition some of the file's rows are not in, and readers
 * would prune them away.
 *
 * Left out, and said so: dead letters (not the table's rows) and NDJSON output objects (a checkpoint from before the
 * output was Parquet: Iceberg data files are Parquet here), slices of merged final objects among them (merged
 * objects are NDJSON only, `sink/entry-bytes.ts`: a slice is never a data file, and a slice listed as Parquet is
 * refused). Every lane's files are data files, replay generations'
 * included: which of their rows the table shows is the readers' rule (`generation-changes.ts`).
 */
import { PipelineError } from '../../errors.ts';
import type { DataFile } from '../../iceberg/manifest-file.ts';
import type { PartitionSpec, PartitionTuple } from '../../iceberg/partition-spec.ts';
import type { IcebergSchema } from '../../iceberg/schema.ts';
import { isSlice, sliceEntryProblem } from '../../sink/entry-bytes.ts';
import { parseFinalKey } from '../../sink/layout.ts';
import type { Manifest, ManifestFile } from '../../sink/manifest.ts';

/**
 * A manifest's file cannot be a data file of the table (its key is no final data key of this pipeline, or the
 * table's spec partitions by more than the time folders): nothing of the checkpoint is published.
 */
export class PublishDataFileError extends PipelineError {}

/** The table's layout the files are described in (`tableLayout` of `iceberg/append.ts`). */
export interface DataFileLayout {
  readonly schema: IcebergSchema;
  readonly spec: PartitionSpec;
  /** The columns held only in the partition metadata: the folder keys. */
  readonly partitionColumns: readonly string[];
}

export interface CheckpointDataFiles {
  readonly dataFiles: DataFile[];
  /** The manifest's entry of each data file, in the same order. */
  readonly listed: ManifestFile[];
  /** The lanes whose records the data files hold, sorted. */
  readonly lanes: string[];
  /** Output objects left out of the table, with why (dead letters are not counted). */
  readonly left: readonly { readonly key: string; readonly reason: string }[];
}

/** The folder's value of each spec field (folder keys only); null for a file without a folder. */
function partitionOf(layout: DataFileLayout, folder: string | undefined, key: string): PartitionTuple {
  const values = new Map(
    (folder ?? '')
      .split('/')
      .filter(Boolean)
      .map((part) => part.split('=') as [string, string]),
  );
  return layout.spec.fields.map((field) => {
    const source = layout.schema.fields.find((candidate) => candidate.id === field['source-id']);
    if (!source || field.transform !== 'identity' || !layout.partitionColumns.includes(source.name)) {
      throw new PublishDataFileError(
        `partition field ${field.name} is not a time folder key: the partition of ${key} is its folder only`,
      );
    }
    // A file from before time folders were switched on has none: its rows are in the null partition.
    return values.get(source.name) ?? null;
  });
}

function leftReason(file: ManifestFile): string | undefined {
  if ((file.format ?? 'ndjson') !== 'parquet') return 'an NDJSON object: only Parquet objects are data files';
  return undefined;
}

/** The data files of `manifest` (see the module comment); `bucket` holds its final objects. */
export function checkpointDataFiles(
  manifest: Manifest,
  bucket: string,
  layout: DataFileLayout,
): CheckpointDataFiles {
  const dataFiles: DataFile[] = [];
  const listed: ManifestFile[] = [];
  const lanes = new Set<string>();
  const left: { key: string; reason: string }[] = [];
  for (const file of manifest.files) {
    if (isSlice(file)) {
      // A slice of a merged NDJSON object: its key must still be one of this checkpoint's merged objects.
      const problem = sliceEntryProblem(manifest.pipeline, manifest.checkpointId, file);
      if (problem !== undefined) {
        throw new PublishDataFileError(
          `manifest ${manifest.checkpointId} lists ${file.key}, which ${problem}: a slice is never a data file`,
        );
      }
      // Once per merged object, not once per slice.
      if (file.stream === 'output' && !left.some(({ key }) => key === file.key)) {
        left.push({
          key: file.key,
          reason: 'a slice of a merged NDJSON object: only Parquet objects are data files',
        });
      }
      continue;
    }
    const parsed = parseFinalKey(manifest.pipeline, file.key);
    if (!parsed || parsed.stream !== file.stream || parsed.topic !== file.topic) {
      throw new PublishDataFileError(
        `manifest ${manifest.checkpointId} lists ${file.key}, which is no final data key of ${manifest.pipeline}`,
      );
    }
    if (file.stream !== 'output') continue;
    const reason = leftReason(file);
    if (reason !== undefined) {
      left.push({ key: file.key, reason });
      continue;
    }
    lanes.add(file.topic);
    listed.push(file);
    dataFiles.push({
      path: `s3://${bucket}/${file.key}`,
      recordCount: file.recordCount,
      fileSizeInBytes: file.bytes,
      partition: partitionOf(layout, parsed.folder, file.key),
    });
  }
  return { dataFiles, listed, lanes: [...lanes].sort(), left };
}
