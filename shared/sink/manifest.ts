/**
 * The manifest of a committed checkpoint (C5, C7): the only index of committed output. Manifests form a gap-free
 * ordered log under `<pipeline>/_manifests/<N, 12 digits>.json` (outside `final/`, which holds data only); reading all of them in order gives every
 * committed record exactly once.
 */
import type { Stream } from '../ledger/layout.ts';
import type { GenerationSwitch } from './generation-switch.ts';

export interface ManifestFile {
  /** The final object's key (deterministic in pipeline, stream, topic, partition and offset range). */
  readonly key: string;
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly recordCount: number;
  readonly bytes: number;
  /** Hex SHA-256 of the final object's bytes. */
  readonly sha256: string;
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
