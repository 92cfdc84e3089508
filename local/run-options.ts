/** What a local run is given: its settings, input, faults and pacing, and the probes a caller may attach. */
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import type { CoordinatorStep } from '../shared/coordinator/definition.ts';
import type { Transform } from '../shared/transforms/types.ts';
import type { FaultRates } from './faults.ts';
import type { InputRecord } from './input.ts';
import type { ClockMode } from './run-clock.ts';

export interface RunOptions {
  readonly settings: Settings;
  /**
   * The transform every processor attempt and the oracle use; default: `loadTransform(settings.transform)` (a
   * built-in's name or a module path, relative to the working directory).
   */
  readonly transform?: Transform;
  readonly input: readonly InputRecord[];
  readonly partitions: number;
  readonly faults: FaultRates;
  readonly seed: number;
  /** Time between checkpoints (ms of the run's clock). */
  readonly checkpointIntervalMs: number;
  /** `real` for `eos local`, `virtual` for tests (no wall-clock dependence); default `real`. */
  readonly clock?: ClockMode;
  /** Virtual mode: how much time one processor attempt takes; default 100 ms. */
  readonly invocationMs?: number;
  readonly topic?: string;
  readonly batchSize?: number;
  /** The event source mapping's batching window, ms: a batch not full waits this long; default the emulator's. */
  readonly batchingWindowMs?: number;
  readonly maxPartitionsPerEvent?: number;
  /** The coordinator's changed partitions per shard; default its own (a test sets 1 to spread every run's work). */
  readonly partitionsPerShard?: number;
  /** Attempts of one batch before the run gives up on an error that was not injected; default 25. */
  readonly maxAttemptsPerBatch?: number;
  readonly onProgress?: (progress: Progress) => void;
  /**
   * Appends the input over time, this many records per second in input order (real clock only), instead of all
   * of it before the first poll; the log closes after the last record. Default: all at once (a backlog).
   */
  readonly paceRecordsPerSecond?: number;
  /** Optional probes for measurements (the benchmark): none is called, and nothing is recorded, when absent. */
  readonly observer?: RunObserver;
  /**
   * Recreates the topic once every record of `input` is acknowledged: the log starts again at offset 0
   * with these records, a new generation. The processor stops each partition whose offsets went backwards; the
   * run opens a new epoch for it, as an operator does with `eos epoch --start-new`, and goes on. The verdict is
   * per epoch: each generation's records exactly once in their own lane (`shared/ledger/epochs.ts`).
   */
  readonly recreateTopicWith?: readonly InputRecord[];
  /**
   * Redrives the dead letters after the run: `transform` is then the one with a bug, this the fixed one.
   * Once the input is committed, `eos redrive` runs with the fixed transform (crashing once at a seeded step when
   * crashes are injected, then run again), a checkpoint commits the round, and a second redrive must change
   * nothing. The verdict is judged against the fixed transform, each record by its latest outcome.
   */
  readonly redriveWith?: Transform;
  /**
   * Replays a range after the run (`replay-scenario.ts`): `transform` is then the one with a bug, this the
   * changed one. Once the input is committed, the middle half of every partition is replayed with this transform
   * into generation 1 through a second mapping, and the switch is requested at once; readers are checked after
   * every checkpoint. The verdict is judged on what readers show: this transform's outcome in the range, the
   * run's outside it; keyed state stays the run's (a replay does not touch it).
   */
  readonly replayWith?: Transform;
  /**
   * Publishes every committed checkpoint to an Iceberg table in the run's bucket (`<pipeline>/iceberg/output`, a
   * file catalog; `local/table-check.ts`), crashes of the coordinator's publish step among the faults, and judges
   * the table too: read back by icebird, it must hold each committed row once. Needs Parquet output.
   */
  readonly iceberg?: boolean;
}

/** Where a run's client set works: a processor container, the coordinator, or the runner's own read-back. */
export type ClientRole = 'processor' | 'coordinator' | 'runner';

/** Probes into a run; every time is the run's clock (epoch ms; wall time in `real` mode without faults). */
export interface RunObserver {
  /** Every client set the run makes, before any call (e.g. to attach a call or byte counter). */
  clients?(clients: AwsClients, role: ClientRole): void;
  /** A record was appended to the log. */
  appended?(partition: number, offset: number, at: number): void;
  /** The pollers start: the first delivery follows. */
  started?(at: number): void;
  /** Every record acknowledged, nothing in flight (before the final checkpoints). */
  drained?(at: number): void;
  /** A delivery was acknowledged (its offsets committed): this many records, at this time. */
  acknowledged?(records: number, at: number): void;
  /** A coordinator step (a state machine Task: one Lambda invocation) starts or returns. */
  step?(step: CoordinatorStep, phase: 'before' | 'after', at: number): void;
  /** A checkpoint's commit step returned: its manifest is written and it is COMMITTED. */
  committed?(checkpointId: number, at: number): void;
}

export interface Progress {
  readonly acknowledged: number;
  readonly total: number;
  readonly checkpointsCommitted: number;
}
