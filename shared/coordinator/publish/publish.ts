/**
 * Publishing committed checkpoints to an Iceberg table, each exactly once, in checkpoint order (C8), anchored in
 * the ledger (`ledger/table-snapshots.ts`).
 *
 * Publishing checkpoint N first publishes every earlier committed checkpoint the published mark has not reached,
 * in order (a publish that failed or never ran is caught up by a later one), at most {@link PUBLISH_CATCH_UP_LIMIT}
 * per call. Before any of it, the table is checked to still hold what the ledger says is published
 * (`rollback.ts`), and so is every state loaded on the way, as an operator can roll the table back at any moment:
 * each load that decides K is judged against the record of K-1. Then for each checkpoint K:
 *
 * 1. the ledger records K's snapshot: published; only the mark may lag (a crash between the two writes): move it,
 *    once a load of the table shows main still holds K's snapshot;
 * 2. else the table says K is in (its published-checkpoint property at or past K, or a live snapshot whose summary
 *    names K): the catalog accepted K's swap and the ledger write was lost (the unknown commit state). Record it,
 *    append nothing; unless main no longer holds it (set back past it, its snapshot perhaps expired since:
 *    `rollback.ts`), which is refused, K neither recorded nor appended again;
 * 3. else commit K as one snapshot (`iceberg/append.ts`: compare-and-swap, rebased onto a concurrent writer's
 *    commit such as compaction), the property set to K in the same swap; then record it and move the mark. The
 *    snapshot is an append of K's data files, or, when K switches readers to a replay generation (or K's files
 *    hold rows an earlier switch hides), an overwrite that makes the table show what the committed reader shows
 *    after K (`generation-changes.ts`), recomputed against each parent it is tried on.
 *
 * The table is loaded once per publish: that load is the first append's base and each append's committed state the
 * next one's; it is loaded again only after a conflict and before moving a mark that lags a recorded checkpoint.
 * 2 and 3 are one call of `appendCheckpoint`, which has each state it works on judged first (reloaded after a
 * conflict);
 * after a conflict it reads the ledger's record of K again before the next swap and, recorded meanwhile (a zombie
 * held at its swap while the live publisher went on, the table's evidence of K since removed by maintenance),
 * stops and goes to 1.
 * The snapshot id is a function of (pipeline, K), so every attempt, zombie or retry, names the same one, and the
 * ledger refuses a second.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { Clock } from '../../clock.ts';
import { PipelineError } from '../../errors.ts';
import { type AppendResult, appendCheckpoint, tableLayout } from '../../iceberg/append.ts';
import type { TableState } from '../../iceberg/catalog.ts';
import { type CheckpointIdentity, type LedgerRef, otherLedgers } from '../../iceberg/checkpoint-identity.ts';
import { SUMMARY_PIPELINE_ID } from '../../iceberg/table-metadata.ts';
import type { CheckpointStore } from '../../ledger/checkpoints.ts';
import type { TableSnapshot, TableSnapshots } from '../../ledger/table-snapshots.ts';
import type { Manifest } from '../../sink/manifest.ts';
import type { ManifestStore } from '../../sink/manifest-store.ts';
import type { CoordinatorLog } from '../parts.ts';
import { checkpointChanges } from './generation-changes.ts';
import { assertNotRolledBack, foundMissingFromMain, IcebergTableRolledBackError } from './rollback.ts';
import { type PublishTarget, publishedCheckpointProperty } from './target.ts';

/** Most checkpoints one publish appends; the next publish continues from the mark. */
export const PUBLISH_CATCH_UP_LIMIT = 10;

/** What publishing works with: the ledger's records and the bucket's manifests, the table and its catalog. */
export interface PublishParts {
  readonly pipelineId: string;
  /** The bucket of the final objects. */
  readonly bucket: string;
  readonly s3: S3Client;
  readonly clock: Clock;
  readonly log: CoordinatorLog;
  readonly store: Pick<CheckpointStore, 'readRecord'>;
  readonly manifests: Pick<ManifestStore, 'read'>;
  readonly snapshots: Pick<
    TableSnapshots,
    'read' | 'readMark' | 'createIncarnation' | 'record' | 'advanceMark'
  >;
  readonly target: PublishTarget;
}

/** A checkpoint asked to be published is not COMMITTED, or its manifest is missing. */
export class PublishStateError extends PipelineError {}

/** How one checkpoint came to be recorded as published by this call. */
export interface PublishedCheckpoint {
  readonly checkpointId: number;
  readonly snapshotId: bigint;
  /** `appended` now; `found` in the table (the unknown commit state); `recorded` in the ledger before. */
  readonly how: 'appended' | 'found' | 'recorded';
}

export interface PublishOutcome {
  readonly checkpointId: number;
  /** The published mark after this call. */
  readonly publishedUpTo: number;
  /** The checkpoints this call brought to the mark, in order. */
  readonly published: readonly PublishedCheckpoint[];
}

/** Publishes committed checkpoint `checkpointId` and every earlier one not yet published (module comment). */
export async function publishCheckpoint(parts: PublishParts, checkpointId: number): Promise<PublishOutcome> {
  await requireCommitted(parts, checkpointId);
  const { target } = parts;
  let mark = await parts.snapshots.readMark();
  if (!mark.ledger) mark = await parts.snapshots.createIncarnation(parts.clock.now());
  const run = runOf(parts, mark.ledger);
  let state = await target.catalog.load();
  noteOtherLedgers(run, state);
  assertNotRolledBack(state, mark, run.identity, target.table.location);
  const published: PublishedCheckpoint[] = [];
  const last = Math.min(checkpointId, mark.upTo + PUBLISH_CATCH_UP_LIMIT);
  for (let id = mark.upTo + 1; id <= last; id++) {
    if (id < checkpointId && !(await isCommitted(parts, id))) break;
    if (id < checkpointId) {
      parts.log.error('publishing an earlier checkpoint that was not published', {
        checkpointId: id,
        by: checkpointId,
      });
    }
    const { done, snapshot, after } = await publishOne(run, id, mark.snapshot, state);
    published.push(done);
    state = after;
    mark = { upTo: id, snapshot, ...(mark.ledger ? { ledger: mark.ledger } : {}) };
  }
  if (mark.upTo < checkpointId) {
    parts.log.error('the table is behind: later publishes continue from the published mark', {
      checkpointId,
      publishedUpTo: mark.upTo,
    });
  }
  return { checkpointId, publishedUpTo: mark.upTo, published };
}

/** One publish: its parts, and whose checkpoints it publishes (this ledger's incarnation). */
interface Run {
  readonly parts: PublishParts;
  readonly property: string;
  readonly identity: CheckpointIdentity;
  readonly ledger: LedgerRef | undefined;
  /** The manifests read by this publish, which every checkpoint's changes are judged on. */
  readonly log: Map<number, Manifest>;
}

function runOf(parts: PublishParts, ledger: LedgerRef | undefined): Run {
  return {
    parts,
    property: publishedCheckpointProperty(parts.pipelineId),
    identity: ledger ? { pipelineId: parts.pipelineId, ledger } : { pipelineId: parts.pipelineId },
    ledger,
    log: new Map(),
  };
}

/**
 * One line when the table holds evidence of the pipeline id's checkpoints from another ledger (the pipeline
 * deployed again over a table that outlived its ledger): not this ledger's, so its checkpoints of the same numbers
 * are appended, not taken for found.
 */
function noteOtherLedgers(run: Run, state: TableState | undefined): void {
  if (!state || !run.ledger) return;
  const { pipelineId } = run.identity;
  const others = otherLedgers(
    state.metadata,
    run.identity,
    run.property,
    (summary) => summary[SUMMARY_PIPELINE_ID] === pipelineId,
  );
  if (others.length === 0) return;
  run.parts.log.error(
    "the table holds this pipeline id's checkpoints of another ledger: they are not this one's",
    {
      ledger: run.ledger.id,
      others: others.join(','),
    },
  );
}

async function isCommitted(parts: PublishParts, checkpointId: number): Promise<boolean> {
  return (await parts.store.readRecord(checkpointId))?.status === 'COMMITTED';
}

async function requireCommitted(parts: PublishParts, checkpointId: number): Promise<void> {
  const record = await parts.store.readRecord(checkpointId);
  if (record?.status !== 'COMMITTED') {
    throw new PublishStateError(
      `checkpoint ${checkpointId} is ${record?.status ?? 'absent'}: only a COMMITTED checkpoint is published`,
    );
  }
}

/** A checkpoint brought to the mark, and the table's state after it, which the next checkpoint starts from. */
interface OneDone {
  readonly done: PublishedCheckpoint;
  readonly snapshot: TableSnapshot;
  readonly after: TableState | undefined;
}

/**
 * One checkpoint recorded as published, the mark moved to it (steps 1 to 3 of the module comment); `previous` is
 * the record of the checkpoint just before it, `state` the table as last loaded or committed by this publish (a
 * stale one costs the append a conflict and a reload).
 */
async function publishOne(
  run: Run,
  checkpointId: number,
  previous: TableSnapshot | undefined,
  state: TableState | undefined,
): Promise<OneDone> {
  const { parts } = run;
  const { snapshots, clock } = parts;
  const recorded = await snapshots.read(checkpointId);
  // Judged on a load made after the record was read: `state` may predate it (another publisher's swap and record
  // of this checkpoint since) and would be taken for a table that lost it.
  if (recorded) return markRecorded(run, recorded, await parts.target.catalog.load());
  const ledger: AppendNotes = {};
  const result = await append(run, checkpointId, previous, ledger, state);
  // Recorded by another publisher after this attempt's load: judged, as above, on a load made after the read.
  if (result.outcome === 'recorded' && ledger.record) {
    return markRecorded(run, ledger.record, await parts.target.catalog.load());
  }
  if (result.outcome === 'already-committed') assertFoundInMain(run, checkpointId, result, previous);
  const written = await snapshots.record(
    {
      checkpointId,
      snapshotId: result.snapshotId,
      sequenceNumber: result.sequenceNumber,
      ...(ledger.switches ? { switches: ledger.switches } : {}),
    },
    clock.now(),
  );
  await snapshots.advanceMark(written, clock.now(), run.ledger);
  const how = result.outcome === 'appended' ? 'appended' : 'found';
  if (how === 'found') {
    parts.log.error('the table held a checkpoint the ledger did not record: recorded, not appended again', {
      checkpointId,
      snapshotId: String(result.snapshotId),
      foundBy: result.foundBy,
    });
  }
  return {
    done: { checkpointId, snapshotId: written.snapshotId, how },
    snapshot: written,
    after: result.state,
  };
}

/**
 * A checkpoint the ledger records, the mark behind it: main may have lost it since (set back while the mark
 * lagged), and the mark moved over the loss would let the next checkpoint be appended over it, so `state`, a load
 * made after the record was read, is judged first.
 */
async function markRecorded(
  run: Run,
  recorded: TableSnapshot,
  state: TableState | undefined,
): Promise<OneDone> {
  const { parts } = run;
  const { checkpointId } = recorded;
  const mark = { upTo: checkpointId, snapshot: recorded };
  assertNotRolledBack(state, mark, run.identity, parts.target.table.location);
  await parts.snapshots.advanceMark(recorded, parts.clock.now(), run.ledger);
  return {
    done: { checkpointId, snapshotId: recorded.snapshotId, how: 'recorded' },
    snapshot: recorded,
    after: state,
  };
}

/**
 * Throws {@link IcebergTableRolledBackError} when the checkpoint found committed is not in main (set back past it):
 * it is neither recorded nor appended again. Its snapshot still listed, main can be restored to it; expired, the
 * property set back to the checkpoint before has it appended again once its data files are in the bucket (expiry
 * may have deleted them).
 */
function assertFoundInMain(
  run: Run,
  checkpointId: number,
  found: AppendResult,
  previous: TableSnapshot | undefined,
): void {
  const { parts } = run;
  const missing = foundMissingFromMain(found, run.identity, checkpointId, previous);
  if (missing === undefined) return;
  const location = parts.target.table.location;
  const remedy =
    found.foundBy === 'property'
      ? `once its data files are in the bucket, set ${publishedCheckpointProperty(parts.pipelineId)} to ${checkpointId - 1} and it is appended again`
      : 'restore main to it';
  throw new IcebergTableRolledBackError(
    `the Iceberg table ${location} holds checkpoint ${checkpointId} outside main (${missing}): rolled back past it, it is neither recorded nor appended again; ${remedy}`,
  );
}

/** What an append hands back beside its result: the ledger's record read after a conflict, the switches up to K. */
interface AppendNotes {
  record?: TableSnapshot;
  switches?: number[];
}

/**
 * Appends the checkpoint's data files, or finds them in the table already; every state it loads must still hold
 * `previous`, the checkpoint just before it, or nothing is appended (the rollback check on each load). After a
 * conflict it stops at the ledger's record of the checkpoint, if one was written meanwhile (kept in `ledger`).
 */
async function append(
  run: Run,
  checkpointId: number,
  previous: TableSnapshot | undefined,
  ledger: AppendNotes,
  current: TableState | undefined,
): Promise<AppendResult> {
  const { parts } = run;
  const manifest = await parts.manifests.read(checkpointId);
  if (!manifest)
    throw new PublishStateError(`checkpoint ${checkpointId} is COMMITTED but its manifest is missing`);
  const { table, catalog } = parts.target;
  run.log.set(checkpointId, manifest);
  // The switches before K: none before checkpoint 1; the record of K-1's list, unless it predates the list.
  const known = previous ? previous.switches : checkpointId === 1 ? [] : undefined;
  const files = await checkpointChanges(
    { ...parts, log: run.log },
    checkpointId,
    tableLayout(table, current?.metadata),
    known,
  );
  ledger.switches = files.switches;
  for (const { key, reason } of files.left) {
    parts.log.error('an output object is left out of the table', { checkpointId, key, reason });
  }
  return appendCheckpoint(catalog, parts.s3, {
    table,
    dataFiles: files.dataFiles,
    ...(files.changes ? { changes: files.changes } : {}),
    pipelineId: parts.pipelineId,
    ...(run.ledger ? { ledger: run.ledger } : {}),
    checkpointId,
    lanes: files.lanes,
    clock: parts.clock,
    checkpointProperty: run.property,
    loaded: { state: current },
    recorded: async () => {
      ledger.record = await parts.snapshots.read(checkpointId);
      return ledger.record;
    },
    judge: (state) => {
      const mark = previous ? { upTo: checkpointId - 1, snapshot: previous } : { upTo: 0 };
      assertNotRolledBack(state, mark, run.identity, table.location);
    },
  });
}
