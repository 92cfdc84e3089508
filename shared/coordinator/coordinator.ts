/**
 * The checkpoint coordinator: the "exactly-once effect" half of the pipeline. Staged output becomes visible only
 * through a checkpoint that commits, and a checkpoint commits everything it covers or nothing (C1–C7, stated in
 * docs/architecture.md). Each step is one Lambda of the state machine in `definition.ts`; every step is safe to
 * rerun. This class is the steps' facade; their work lives beside it:
 *
 * - **begin** (C1, C2; `begin/begin.ts`): recovery of an expired checkpoint (`begin/recovery.ts`; before its
 *   decision: ABORTED; after it: taken over and rolled forward), then the cut and the allocation
 *   (`begin/allocate.ts`, `begin/switches.ts`); with nothing to commit in a state machine that publishes, the last
 *   committed checkpoint when the table lags behind it (`begin/publish-lag.ts`).
 * - **prepare** (C3), per shard: the covered entries (`prepare/covered.ts`) read once and verified, planned and
 *   merged into write-once candidate final objects (`prepare/plan-shard.ts`), the plan written
 *   (`promote/plan-store.ts`) and the vote with its digest, which covers the candidates.
 * - **decide** (C4): BEGUN → PREPARED only if every shard voted; PREPARED → COMMITTING. From here the checkpoint
 *   only rolls forward; before it, recovery presumes abort.
 * - **promote** (C5), per shard, only while COMMITTING: the voted plan (`promote/voted-plan.ts`) published, one
 *   pinned server-side copy of each candidate to its final key (`promote/promoter.ts`), and a promotion record.
 * - **commit** (C5, C7): manifest N (`commit/manifest.ts`), then COMMITTING → COMMITTED.
 * - **publish**, only with an Iceberg table to publish to, once COMMITTED: the checkpoint (and any earlier one not
 *   yet published) appended to the table exactly once, anchored in the ledger (`publish/publish.ts`).
 * - **cleanup**, per shard, once COMMITTED: staged objects and entries at or below the cut, named by the shard's
 *   voted plan (`cleanup/shard.ts`; from the ledger when the plan cannot say), superseded cut pages, and once every
 *   shard is clean the checkpoint's working objects; shard 0 also catches up on earlier cleanups
 *   (`cleanup/catch-up.ts`) and sweeps orphans and crashed begins' pages (`cleanup/orphans.ts`,
 *   `cleanup/pending-cuts.ts`).
 * - **abort** (C6; `abort/abort.ts`), for any failure before the decision: BEGUN|PREPARED → ABORTED with the
 *   reason; staged entries stay for the next checkpoint. Refused (`decided`) once COMMITTING: the state machine
 *   then rolls forward.
 *
 * ```
 *  head:   COMMITTED(N-1) ── BEGUN(N,k) ── PREPARED ── COMMITTING ────────── COMMITTED(N) ─▶
 *  steps:        begin ──▶ prepare×shards ──▶ decide ──▶ promote×shards ──▶ commit ──▶ cleanup×shards
 *  crash ⇒       ── retry; else abort / lease expiry ⇒ ABORTED ──┤├── retry; else the next execution rolls forward
 * ```
 * Every transition writes head and record in one transaction conditioned on (id, attempt, status); a zombie of
 * a superseded attempt can therefore change nothing.
 */

import type { Clock } from '../clock.ts';
import { PipelineError } from '../errors.ts';
import {
  CheckpointConflictError,
  type CheckpointRecord,
  type CheckpointStatus,
  type CheckpointStore,
} from '../ledger/checkpoints.ts';
import { parsePartitionId } from '../ledger/layout.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import { TableSnapshots } from '../ledger/table-snapshots.ts';
import { abortCheckpoint } from './abort/abort.ts';
import { beginCheckpoint } from './begin/begin.ts';
import { requireRecord } from './checkpoint-state.ts';
import { catchUpCleanups } from './cleanup/catch-up.ts';
import { sweepCoordinatorOrphans } from './cleanup/orphans.ts';
import { sweepPendingCuts } from './cleanup/pending-cuts.ts';
import { cleanShard } from './cleanup/shard.ts';
import { commitLatency, oldestOfPlans } from './commit/latency.ts';
import { buildManifest } from './commit/manifest.ts';
import { decideCheckpoint } from './decide/decide.ts';
import type {
  AbortInput,
  AbortOutput,
  BeginInput,
  BeginOutput,
  CheckpointRef,
  CommitOutput,
  DecideOutput,
  ShardInput,
  ShardOutput,
} from './messages.ts';
import {
  type CoordinatorLog,
  type CoordinatorOptions,
  type CoordinatorParts,
  coordinatorParts,
  leaseUntil,
} from './parts.ts';
import { coveredEntries } from './prepare/covered.ts';
import { planShard } from './prepare/plan-shard.ts';
import type { ShardPlan } from './promote/plan-store.ts';
import { assertPlannedObjects, Promoter } from './promote/promoter.ts';
import { loadVotedPlan } from './promote/voted-plan.ts';
import {
  NoPublishTargetError,
  type Publisher,
  type PublisherFactory,
  type PublishOutput,
} from './publish/publisher.ts';

/**
 * A shard step named a shard the checkpoint's attempt was not dealt: its vote would count toward the decision
 * without the real shard's plan, and its cleanup mark toward the cleanup's end.
 */
export class UnknownShardError extends PipelineError {
  constructor(checkpointId: number, attempt: number, shardCount: number, shard: number) {
    super(
      `checkpoint ${checkpointId} attempt ${attempt} has ${shardCount} shard(s): there is no shard ${shard}`,
    );
  }
}

function requireShard(record: CheckpointRecord, shard: number): void {
  if (shard >= record.shardCount)
    throw new UnknownShardError(record.checkpointId, record.attempt, record.shardCount, shard);
}

/** The checkpoint statuses (BEGUN, PREPARED, COMMITTING, COMMITTED, ABORTED), stored by the ledger module. */
export { CHECKPOINT_STATUS, type CheckpointStatus } from '../ledger/checkpoints.ts';
export { CheckpointStateError } from './checkpoint-state.ts';
export { VotesIncompleteError } from './decide/decide.ts';
export type { CoordinatorLog, CoordinatorOptions } from './parts.ts';
export type { PublishOutput } from './publish/publisher.ts';

/** The coordinator's options and, when its checkpoints are published to an Iceberg table, its publisher. */
export interface CoordinatorSetup extends CoordinatorOptions {
  /** `publish/step.ts` `tablePublisher(target)`: given only where the publish step runs. */
  readonly publisher?: PublisherFactory;
}

export interface Coordinator {
  begin(input: BeginInput): Promise<BeginOutput>;
  prepare(input: ShardInput): Promise<ShardOutput>;
  decide(input: CheckpointRef): Promise<DecideOutput>;
  promote(input: ShardInput): Promise<ShardOutput>;
  commit(input: CheckpointRef): Promise<CommitOutput>;
  publish(input: CheckpointRef): Promise<PublishOutput>;
  cleanup(input: ShardInput): Promise<ShardOutput>;
  abort(input: AbortInput): Promise<AbortOutput>;
}

export function createCoordinator(options: CoordinatorSetup): Coordinator {
  return new CheckpointCoordinator(options);
}

class CheckpointCoordinator implements Coordinator {
  private readonly parts: CoordinatorParts;
  private readonly store: CheckpointStore;
  private readonly log: CoordinatorLog;
  private readonly clock: Clock;
  private readonly promoter: Promoter;
  private readonly publisher: Publisher | undefined;
  /** The published mark, which begin reads on an idle pipeline of a state machine that publishes. */
  private readonly snapshots: Pick<TableSnapshots, 'readMark'>;

  constructor(options: CoordinatorSetup) {
    this.parts = coordinatorParts(options);
    this.publisher = options.publisher?.(this.parts);
    const { settings, clients, store, log, clock, concurrency, limits } = this.parts;
    this.snapshots =
      this.publisher?.snapshots ??
      new TableSnapshots(clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    this.store = store;
    this.log = log;
    this.clock = clock;
    this.promoter = new Promoter(
      clients.s3,
      settings.bucket,
      settings.pipelineId,
      Math.max(1, concurrency / 2),
      limits.maxObjectRows,
    );
  }

  private leaseUntil(now: number): number {
    return leaseUntil(this.parts.settings, now);
  }

  // ── begin ─────────────────────────────────────────────────────────────────────────────────────────────────

  async begin(input: BeginInput): Promise<BeginOutput> {
    return beginCheckpoint(this.parts, this.snapshots, input);
  }

  // ── prepare ───────────────────────────────────────────────────────────────────────────────────────────────

  async prepare(input: ShardInput): Promise<ShardOutput> {
    // COMMITTED too: a run trailing another run of its execution (Express runs one at least once) ends as done.
    const record = await this.requireRecord(input.checkpointId, input.attempt, [
      'BEGUN',
      'PREPARED',
      'COMMITTING',
      'COMMITTED',
    ]);
    requireShard(record, input.shard);
    // A retry after this shard's vote counted: the decision may already have moved on. Or, still BEGUN, after this
    // shard voted in this attempt: its plan and candidates are written and the vote names them; reading the staged
    // objects again could only find one rewritten since, and fail a shard whose vote stands.
    if (record.status !== 'BEGUN' || record.votes?.has(input.shard)) return { shard: input.shard, count: 0 };
    const { checkpointId, attempt, shard } = input;
    try {
      const plan = await this.planShard(record, shard);
      const digest = await this.parts.plans.writePlan(plan);
      const now = this.clock.now();
      // A vote renews the lease, so a long prepare is not mistaken for a dead one.
      await this.store.vote(checkpointId, attempt, shard, digest, this.leaseUntil(now), now);
      return { shard, count: plan.stagedFiles };
    } catch (error) {
      // Its vote refused, or a staged object gone: another run may have voted and gone on (then cleaned up).
      if (await this.votedByTwin(input).catch(() => false)) return { shard, count: 0 };
      throw error;
    }
  }

  /**
   * Whether another run of this step (a retry whose first invocation still runs, a second run of an Express
   * execution) voted for this shard and the attempt was decided on from there: then whatever failed in this run
   * (a vote refused because the attempt left BEGUN, a staged object its cleanup deleted) changes nothing, and
   * aborting would throw away an attempt that lost nothing.
   */
  private async votedByTwin(input: ShardInput): Promise<boolean> {
    const record = await this.store.readRecord(input.checkpointId);
    return (
      record?.attempt === input.attempt &&
      ['PREPARED', 'COMMITTING', 'COMMITTED'].includes(record.status) &&
      record.votes?.has(input.shard) === true
    );
  }

  /** One shard's plan from its covered entries (C2), verified (C3) and its candidates written (`prepare/plan-shard.ts`). */
  private async planShard(record: CheckpointRecord, shard: number): Promise<ShardPlan> {
    const cuts = await this.store.readCut(record, shard);
    // The shard's fence items in batches of 100 (their inline entries), not one read a partition.
    const fences = await this.parts.ledger.fenceItemsOf(cuts.map((cut) => parsePartitionId(cut.partition)));
    const covered: StagedFileEntry[][] = [];
    const inlinePartitions: string[] = [];
    for (const cut of cuts) {
      // C2: the entries with previous cut < lastOffset ≤ cut in one partition, each checked.
      const found = await coveredEntries(this.parts, cut, { fence: fences.get(cut.partition) ?? null });
      covered.push(found.entries);
      if (found.inline) inlinePartitions.push(cut.partition);
    }
    return planShard(this.parts, record, shard, covered, inlinePartitions);
  }

  // ── decide ────────────────────────────────────────────────────────────────────────────────────────────────

  async decide(input: CheckpointRef): Promise<DecideOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, [
      'BEGUN',
      'PREPARED',
      'COMMITTING',
      'COMMITTED',
    ]);
    return decideCheckpoint(this.parts, record, input);
  }

  // ── promote ───────────────────────────────────────────────────────────────────────────────────────────────

  async promote(input: ShardInput): Promise<ShardOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTING', 'COMMITTED']);
    requireShard(record, input.shard);
    if (record.status === 'COMMITTED') return { shard: input.shard, count: 0 };
    // Shards promote in waves with retries: keep the lease ahead of them, so the next execution does not take
    // over a roll-forward that is alive (harmless, but double work and a false CheckpointFailed).
    const now = this.clock.now();
    await this.store.renewLease(input.checkpointId, input.attempt, 'COMMITTING', this.leaseUntil(now), now);
    const plan = await this.readVotedPlan(record, input.shard);
    const from = { checkpointId: input.checkpointId, attempt: input.attempt, shard: input.shard };
    // Every object is checked against the layout before any is written: a plan with one forged object writes none.
    assertPlannedObjects(this.parts.settings.pipelineId, plan.objects, from);
    // One pinned server-side copy of each object's candidate (promoter.ts); a plan without candidates is merged
    // from its verified copies, two objects at once.
    const files = await this.promoter.promoteShard(plan.objects, from, plan.encoding, 2);
    await this.parts.plans.writePromotion({
      checkpointId: input.checkpointId,
      attempt: input.attempt,
      shard: input.shard,
      files,
    });
    // Final objects, not manifest entries: a merged object's slices are one object.
    return { shard: input.shard, count: new Set(files.map((file) => file.key)).size };
  }

  /** The plan `shard` voted for, digest-checked (`promote/voted-plan.ts`). */
  private async readVotedPlan(record: CheckpointRecord, shard: number): Promise<ShardPlan> {
    return loadVotedPlan(this.parts, record, shard);
  }

  // ── commit ────────────────────────────────────────────────────────────────────────────────────────────────

  async commit(input: CheckpointRef): Promise<CommitOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTING', 'COMMITTED']);
    const plans: ShardPlan[] = [];
    const manifest =
      record.status === 'COMMITTING'
        ? await buildManifest(this.parts, record, async (shard) => {
            const plan = await this.readVotedPlan(record, shard);
            plans.push(plan);
            return plan;
          })
        : undefined;
    let committedAt = record.committedAt;
    if (manifest) {
      await this.parts.manifests.write(manifest);
      // Before COMMITTED: a commit rolled forward after a crash here notes them again (idempotent), and the next
      // begin, which waits for COMMITTED, never offers a switch this manifest made.
      for (const generation of record.generationSwitches ?? []) {
        await this.parts.replays.markSwitched(generation, record.checkpointId);
      }
      committedAt = await this.markCommitted(record);
    }
    const files = manifest?.files ?? (await this.parts.manifests.read(record.checkpointId))?.files ?? [];
    return {
      checkpointId: record.checkpointId,
      begunAt: record.begunAt,
      files: new Set(files.map((file) => file.key)).size,
      records: files.reduce((sum, file) => sum + file.recordCount, 0),
      ...(await commitLatency(this.parts, record, committedAt, manifest && oldestOfPlans(plans))),
    };
  }

  /** The COMMITTED write's time: this call's, or the concurrent roll-forward's that won. */
  private async markCommitted(record: CheckpointRecord): Promise<number | undefined> {
    const now = this.clock.now();
    try {
      await this.store.transition({
        checkpointId: record.checkpointId,
        attempt: record.attempt,
        from: ['COMMITTING'],
        to: 'COMMITTED',
        head: { committedId: record.checkpointId, consecutiveAborts: 0 },
        record: { committedAt: now },
        now,
      });
      this.log.info('checkpoint committed', { checkpointId: record.checkpointId, attempt: record.attempt });
      return now;
    } catch (error) {
      // A concurrent roll-forward committed it first: same manifest, same outcome.
      if (!(error instanceof CheckpointConflictError)) throw error;
      return (await this.requireRecord(record.checkpointId, record.attempt, ['COMMITTED'])).committedAt;
    }
  }

  // ── publish ───────────────────────────────────────────────────────────────────────────────────────────────

  async publish(input: CheckpointRef): Promise<PublishOutput> {
    await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTED']);
    if (!this.publisher) {
      throw new NoPublishTargetError(`checkpoint ${input.checkpointId}: no Iceberg table to publish to`);
    }
    return this.publisher.publish(input.checkpointId);
  }

  // ── cleanup ───────────────────────────────────────────────────────────────────────────────────────────────

  async cleanup(input: ShardInput): Promise<ShardOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTED']);
    requireShard(record, input.shard);
    // First, and before this checkpoint deletes the previous cut's pages: earlier checkpoints whose cleanup never
    // completed are cleaned up now, from their own cut pages.
    if (input.shard === 0) await catchUpCleanups(this.parts, record);
    const removed = await cleanShard(this.parts, record, input.shard);
    if (input.shard === 0) {
      // Late writes of zombie steps of earlier checkpoints (plans, candidates) go too: nothing reads them.
      await this.parts.plans.deleteCheckpointsBelow(record.checkpointId, this.parts.orphanSweepLimit);
      // The previous committed cut is superseded by this one (begin reads only the last committed cut).
      await this.store.deleteCut(record.previousCutId);
      // A healthy pipeline never aborts: orphans (crashed attempts, fenced-out zombies) are swept here too (P3).
      await sweepCoordinatorOrphans(this.parts);
      await sweepPendingCuts(this.parts);
    }
    if (await this.store.markShardCleaned(record.checkpointId, record.attempt, input.shard)) {
      // Every shard is done: the mark moves here only from the checkpoint before (else the catch-up moves it).
      await this.store.writeCleanedMark(record.checkpointId - 1, record.checkpointId, this.clock.now());
      // Only now do the plans go: each shard's cleanup reads its own. If this is lost, the next checkpoint's
      // cleanup deletes them with the other checkpoints below it.
      await this.parts.plans.deleteCheckpoint(record.checkpointId);
    }
    return { shard: input.shard, count: removed };
  }

  // ── abort ─────────────────────────────────────────────────────────────────────────────────────────────────

  async abort(input: AbortInput): Promise<AbortOutput> {
    return abortCheckpoint(this.parts, input);
  }

  // ── shared ────────────────────────────────────────────────────────────────────────────────────────────────

  private requireRecord(
    checkpointId: number,
    attempt: number,
    statuses: readonly CheckpointStatus[],
  ): Promise<CheckpointRecord> {
    return requireRecord(this.store, checkpointId, attempt, statuses);
  }
}
