/**
 * The manifest of a committed checkpoint (C5, C7): the only index of committed output. Manifests form a gap-free
 * ordered log under `<pipeline>/_manifests/<N, 12 digits>.json` (outside `final/`, which holds data only); reading all of them in order gives every
 * committed record exactly once.
 */
import type { Stream } from '../ledger/layout.ts';
import type { GenerationSwitch } from './generation-switch.ts';

export interface ManifestFile {
  /**
   * The final object's key: deterministic in pipeline, stream, topic, partition and offset range
   * (`finalObjectKey`), or, for a slice of a merged object, in its checkpoint, attempt, shard and index
   * (`mergedObjectKey`).
   */
  readonly key: string;
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly recordCount: number;
  /** The entry's bytes: the whole object's, or the slice's of a merged object. */
  readonly bytes: number;
  /** Hex SHA-256 of the entry's bytes (the whole object's, or the slice's). */
  readonly sha256: string;
  /**
   * Only for a slice of a merged final object (several partitions' ranges concatenated in one NDJSON object): where
   * the entry's `bytes` start in the object, so that bytes [sliceStart, sliceStart + bytes) are this range's rows,
   * a whole NDJSON (gzip) stream on its own. The slices of one object tile it (ordered by `sliceStart`), and all of
   * them are listed by one manifest. Absent: the entry
   * is the whole object.
   */
  readonly sliceStart?: number;
  /**
   * How the object is encoded; the key's extension says the same (`.ndjson[.gz]`, `.parquet`).
   * Absent in manifests written before Parquet existed: NDJSON.
   */
  readonly format?: 'ndjson' | 'parquet';
}

export interface Manifest {
  readonly version: 1;
  readonly pipeline: string;
  readonly checkpointId: number;
  /** The checkpoint committed before this one; 0 for the first. */
  readonly previousCheckpointId: number;
  /** Per partition (`<topic>#<partition>`), the staged offset this checkpoint covers up to (C2). */
  readonly cut: Record<string, number>;
  /** The previous checkpoint's cut: this one covers offsets above it. */
  readonly previousCut: Record<string, number>;
  /** ISO-8601. */
  readonly committedAt: string;
  /** Sorted by stream, topic, partition, firstOffset. */
  readonly files: readonly ManifestFile[];
  /**
   * Replay generations this checkpoint switches readers to (`shared/replay/`), by generation: from this manifest
   * on, each listed range is read from its generation's lane. Absent: none (and in every manifest before replays).
   */
  readonly generations?: readonly GenerationSwitch[];
}
