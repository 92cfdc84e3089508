/**
 * The checkpoint coordinator: the "exactly-once effect" half of the pipeline. Staged output becomes visible only
 * through a checkpoint that commits, and a checkpoint commits everything it covers or nothing (C1–C7 of
 * DESIGN.md). Each step is one Lambda of the state machine in `definition.ts`; every step is safe to rerun.
 *
 * ## Protocol
 *
 * - **begin** (C1, C2). Reads the head. A live checkpoint of another execution → `busy` (exit cleanly). An expired
 *   one is recovered first: before its decision it is ABORTED; after it (COMMITTING) it is taken over and rolled
 *   forward (`commit`). Then the cut = every partition's fence `stagedOffset` (one strongly consistent Query).
 *   Unchanged since the last committed cut → `empty`: no id is allocated, so the manifest log has no gap. Else
 *   id N = last committed + 1 (attempt k+1 after k aborted attempts of N) is allocated by ONE transaction
 *   conditioned on the head being exactly what was read: of two executions started together one wins, the
 *   other finds the head changed and exits `busy`. The cut is written first, as cut pages under a fresh `cutId`
 *   (the changed partitions dealt round-robin to ≤ 16 shards, then the unchanged ones), and the record names the
 *   cutId and page counts: no item grows with the number of partitions (L3). A begin that loses the race deletes
 *   its pages; one that crashes between the pages and the allocation leaves them unreferenced (never read) — but
 *   it noted the cutId first (a pending-cut note, cleared once allocated), so a cleanup deletes them later. A begin
 *   after an aborted attempt deletes that attempt's pages (again: its abort may have died before doing so).
 * - **prepare** (C3), per shard. For every covered staged entry (previous cut < lastOffset ≤ cut, both streams)
 *   copy the object server-side to `<pl>/_coordinator/<N>/<attempt>/staged/…` (`staged-copy.ts`, write-once,
 *   a prefix no processor can write) and read the COPY (`staged-check.ts` `verifyStagedContents`, bounded
 *   concurrency): size, SHA-256 (the checksum promote checks on the same copy, so a yes vote never leads to a
 *   promote that cannot finish, and a processor that rewrites its staged object after the vote changes nothing
 *   that is promoted: issue 17, review R2b-1), NDJSON that concatenates safely
 *   (gzip fully consumed, last row newline-terminated) and exactly the entry's `recordCount` rows (the count the
 *   manifest will carry and the reader checks); any failure throws `StagedObjectInvalidError` naming the object,
 *   which Catches into abort. Before that, every entry's object key
 *   must be the staged key of exactly that entry in this pipeline (`assertStagedEntry`) and start above the previous
 *   cut: an entry a compromised processor forged to point at a manifest, a final object or another pipeline,
 *   or to reach into offsets an earlier manifest lists, aborts the attempt with the reason. Then plan the final objects (`promoter.ts`), persist the plan
 *   write-once under a key naming its SHA-256 (review R3-1), and vote (a set on the record,
 *   conditioned on (attempt, BEGUN)) together with the plan's SHA-256; a vote renews the lease, so a long prepare
 *   is not mistaken for a dead one.
 * - **decide** (C4). BEGUN → PREPARED only if every shard voted; PREPARED → COMMITTING with the decision time.
 *   From here the checkpoint only rolls forward; before it, recovery presumes abort.
 * - **promote** (C5), per shard, only while COMMITTING: read the plan only if it hashes to the digest of the
 *   shard's vote, check each object's final key and members against the layout (`assertPlannedObject`), then
 *   write the planned final objects, read from the attempt's verified copies, under deterministic keys (same bytes on every retry; `If-None-Match` +
 *   checksum compare on real S3) and record their manifest entries.
 * - **commit** (C5, C7): write manifest N (gap-free, chained by `previousCheckpointId`; its bytes are a canonical,
 *   pure function of the checkpoint: digest-checked plans, promotion records that must match them object for
 *   object, and the cut pages), then COMMITTING → COMMITTED (head: committedId = N).
 * - **cleanup**, per shard, only once COMMITTED: delete the staged objects and entries at or below the committed
 *   cut (leftovers of earlier cleanups included), the checkpoint's working objects (plans, promotion records and
 *   verified copies, of every attempt; and any left below N by zombie steps) and the previous committed
 *   checkpoint's cut pages (superseded by this one's). Only a key that is the staged key of exactly its entry is
 *   deleted; an entry naming anything else loses only its ledger item (logged). Each shard adds itself to the
 *   record's `cleanedShards`; the last one moves the cleaned-up mark to N. Shard 0 first catches up on earlier
 *   committed checkpoints whose cleanup never completed (mark < N-1: an execution cut off after COMMITTED, a
 *   failed cleanup), at most 10 per run, then sweeps orphans incrementally (a mark in the ledger, so each sweep
 *   continues where the last one stopped) and the pages of crashed begins. Idempotent.
 * - **abort** (C6), for any failure before the decision: BEGUN|PREPARED → ABORTED with the reason (logged at
 *   error level, counted in the head's `consecutiveAborts` and the record's bounded `abortCount`/`recentAborts`;
 *   the attempt's cut pages are deleted). Staged entries stay, so the next checkpoint covers
 *   the same data again — and, if an object is bad, aborts again, loudly, rather than commit past it. Deletes the
 *   attempt's working objects (its verified copies too) and orphan staged objects older than `orphanGraceSeconds`. Refuses (`decided`)
 *   if the checkpoint is already COMMITTING; the state machine then rolls forward. (An attempt aborted by lease
 *   expiry in begin keeps its working objects until checkpoint N's cleanup deletes every attempt's.)
 *
 * ## Timeline of one checkpoint (and who may write what)
 *
 * ```
 *  processor:  stage ─ stage ─ stage ─┬─ stage ─ stage ─────────── stage ─ stage ────────────▶ (entries > cut N)
 *                                     │ cut N read here (fences)
 *  head:       COMMITTED(N-1) ── BEGUN(N,k) ── PREPARED ── COMMITTING ────────── COMMITTED(N) ─▶
 *  steps:            begin ──▶ prepare×shards ──▶ decide ──▶ promote×shards ──▶ commit ──▶ cleanup×shards
 *  S3 final/:        ·            ·                 ·        objects of N      manifest N     ·
 *  crash here ⇒      ───── retry; else abort / lease expiry ⇒ ABORTED ──┤├── retry; else next execution
 *                                (nothing promoted, data stays)        │    takes over, rolls forward
 *                                                                   decision
 * ```
 * Every transition writes head and record in one transaction conditioned on (id, attempt, status); a zombie of
 * a superseded attempt can therefore change nothing.
 */

import { randomUUID } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { isTransient } from '../aws/classify.ts';
import type { AwsClients } from '../aws/clients.ts';
import { type Clock, systemClock } from '../clock.ts';
import { mapLimit } from '../concurrency.ts';
import type { Settings } from '../config/settings.ts';
import { PipelineError } from '../errors.ts';
import {
  BEFORE_DECISION_STATUSES,
  CheckpointConflictError,
  type CheckpointHead,
  type CheckpointRecord,
  type CheckpointStatus,
  CheckpointStore,
  type CutEntry,
  CutPagesError,
  isInFlight,
  truncateReason,
} from '../ledger/checkpoints.ts';
import { generationLaneOf } from '../ledger/epochs.ts';
import { padCheckpointId, parsePartitionId, partitionId } from '../ledger/layout.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import { type DeleteTarget, StagedEntries } from '../ledger/staged-entries.ts';
import { commitLatencyMs, oldestCoveredStagedAt } from '../observability/commit-latency.ts';
import { phaseOf } from '../replay/plan.ts';
import { MalformedReplayPlanError, ReplayStore } from '../replay/store.ts';
import type { GenerationSwitch } from '../sink/generation-switch.ts';
import type { Manifest } from '../sink/manifest.ts';
import { ManifestStore, sortManifestFiles } from '../sink/manifest-store.ts';
import { deleteKeys, getBytes } from '../sink/objects.ts';
import { mayHoldStagedTime } from '../sink/record-time.ts';
import { sweepOrphans } from './cleanup/orphans.ts';
import {
  type AbortInput,
  type AbortOutput,
  abortInputSchema,
  type BeginInput,
  type BeginOutput,
  type CheckpointRef,
  type CommitOutput,
  type DecideOutput,
  describeCaughtError,
  type ShardInput,
  type ShardOutput,
} from './messages.ts';
import { verifyStagedContents } from './prepare/staged-check.ts';
import {
  censusOf,
  type FolderCounts,
  type OutputShape,
  outputShapeOf,
  planEncoding,
  reencodes,
} from './promote/folder-plan.ts';
import {
  PlanDigestMismatchError,
  PlanStore,
  PromotionRecordError,
  planDigest,
  type ShardPlan,
  type ShardPromotion,
  WorkObjectMissingError,
} from './promote/plan-store.ts';
import {
  assertPlannedObject,
  assertStagedEntry,
  DEFAULT_PROMOTION_LIMITS,
  Promoter,
  type PromotionLimits,
  planFinalObjects,
  StagedEntryRejectedError,
  StagedObjectLostError,
} from './promote/promoter.ts';
import { dealToShards, shardCountFor, shardList, splitCut } from './shards.ts';
import { stagedCopyKey } from './work-objects.ts';

/** A step was asked to act on a checkpoint that is not in the status the step needs (superseded, or out of order). */
export class CheckpointStateError extends PipelineError {
  constructor(
    readonly checkpointId: number,
    readonly attempt: number,
    readonly found: string,
    expected: string,
  ) {
    super(`checkpoint ${checkpointId} attempt ${attempt} is ${found}, expected ${expected}`);
  }
}

/** Decide found shards that did not vote: prepare did not complete for this attempt. */
export class VotesIncompleteError extends PipelineError {}

/** The sink of the coordinator's log lines (a Powertools Logger fits). */
export interface CoordinatorLog {
  info(message: string, extra?: Record<string, unknown>): void;
  error(message: string, extra?: Record<string, unknown>): void;
}

export interface CoordinatorOptions {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly clock?: Clock;
  readonly log?: CoordinatorLog;
  readonly promotionLimits?: Partial<PromotionLimits>;
  /** S3 requests in flight per shard (verification, promotion, deletion). Default 16. */
  readonly concurrency?: number;
  /** Most staged objects one orphan sweep examines (it continues from there next time). Default 10,000. */
  readonly orphanSweepLimit?: number;
}

/** The checkpoint statuses (BEGUN, PREPARED, COMMITTING, COMMITTED, ABORTED), stored by the ledger module. */
export { CHECKPOINT_STATUS, type CheckpointStatus } from '../ledger/checkpoints.ts';

const silentLog: CoordinatorLog = { info: () => {}, error: () => {} };

export interface Coordinator {
  begin(input: BeginInput): Promise<BeginOutput>;
  prepare(input: ShardInput): Promise<ShardOutput>;
  decide(input: CheckpointRef): Promise<DecideOutput>;
  promote(input: ShardInput): Promise<ShardOutput>;
  commit(input: CheckpointRef): Promise<CommitOutput>;
  cleanup(input: ShardInput): Promise<ShardOutput>;
  abort(input: AbortInput): Promise<AbortOutput>;
}

export function createCoordinator(options: CoordinatorOptions): Coordinator {
  return new CheckpointCoordinator(options);
}

/** Longest a step (a Lambda) can run: a pending cut older than this and the lease is not being written any more. */
const MAX_STEP_SECONDS = 900;
/** Most pending-cut notes one cleanup examines. */
const PENDING_CUT_SWEEP_LIMIT = 100;

/** Most earlier checkpoints one cleanup catches up on (see catchUpCleanups). */
const CATCH_UP_LIMIT = 10;

const NOTHING: BeginOutput = { action: 'busy', checkpointId: 0, attempt: 0, shards: [] };

class CheckpointCoordinator implements Coordinator {
  private readonly settings: Settings;
  private readonly clock: Clock;
  private readonly log: CoordinatorLog;
  private readonly store: CheckpointStore;
  private readonly ledger: StagedEntries;
  private readonly plans: PlanStore;
  private readonly manifests: ManifestStore;
  private readonly replays: ReplayStore;
  private readonly promoter: Promoter;
  private readonly limits: PromotionLimits;
  /** What final objects look like (format, time folders): recorded in each plan, read by promote from there. */
  private readonly shape: OutputShape;
  private readonly concurrency: number;
  private readonly clients: AwsClients;
  private readonly orphanSweepLimit: number;

  constructor(options: CoordinatorOptions) {
    const { settings, clients } = options;
    this.settings = settings;
    this.shape = outputShapeOf(settings);
    this.clients = clients;
    this.clock = options.clock ?? systemClock;
    this.log = options.log ?? silentLog;
    this.store = new CheckpointStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    this.ledger = new StagedEntries(clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    this.plans = new PlanStore(clients.s3, settings.bucket, settings.pipelineId);
    this.manifests = new ManifestStore(clients.s3, settings.bucket, settings.pipelineId);
    this.replays = new ReplayStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId);
    this.concurrency = options.concurrency ?? 16;
    this.limits = { ...DEFAULT_PROMOTION_LIMITS, ...options.promotionLimits };
    this.promoter = new Promoter(
      clients.s3,
      settings.bucket,
      settings.pipelineId,
      Math.max(1, this.concurrency / 2),
      this.limits.maxObjectRows,
    );
    this.orphanSweepLimit = options.orphanSweepLimit ?? 10_000;
  }

  private leaseUntil(now: number): number {
    return now + this.settings.checkpointLeaseSeconds * 1000;
  }

  // ── begin ─────────────────────────────────────────────────────────────────────────────────────────────────

  async begin(input: BeginInput): Promise<BeginOutput> {
    const now = this.clock.now();
    let head = await this.store.readHead();
    if (head && isInFlight(head.status)) {
      if (head.owner === input.execution) return this.resume(head);
      if (head.leaseUntil > now) {
        this.log.info('another checkpoint is in flight', {
          checkpointId: head.checkpointId,
          owner: head.owner,
        });
        return NOTHING;
      }
      if (head.status === 'COMMITTING') return this.rollForward(head, input.execution, now);
      if (!(await this.abortExpired(head, input.execution, now))) return NOTHING;
      head = await this.store.readHead();
    }
    const committedId = head?.committedId ?? 0;
    const previous = await this.store.committedCut(committedId);
    // C2: per partition, the staged offset read now; never below the committed cut (a partition the fences no
    // longer show keeps its committed offset, so the cut never drops a partition).
    const cut = new Map<string, CutEntry>();
    for (const [partition, offset] of previous.cut)
      cut.set(partition, { partition, previous: offset, cut: offset });
    for (const [partition, staged] of Object.entries(await this.ledger.readFences())) {
      const before = previous.cut.get(partition) ?? -1;
      cut.set(partition, { partition, previous: before, cut: Math.max(staged, before) });
    }
    const { changed, unchanged } = splitCut(cut.values());
    const switches = await this.coveredSwitches(cut);
    // A requested switch whose ranges are all committed already needs a checkpoint of its own on an idle pipeline.
    if (changed.length === 0 && switches.length === 0) {
      return { action: 'empty', checkpointId: 0, attempt: 0, shards: [] };
    }

    const checkpointId = committedId + 1;
    const attempt = head && head.checkpointId === checkpointId ? head.attempt + 1 : 1;
    // An abort that crashed between marking the attempt ABORTED and deleting its cut pages, and was never retried,
    // left them behind; the allocation below overwrites the record that names them, so they go now (idempotent).
    if (head?.status === 'ABORTED' && head.checkpointId === checkpointId) {
      const aborted = await this.store.readRecord(checkpointId);
      if (aborted?.status === 'ABORTED' && aborted.attempt === head.attempt)
        await this.store.deleteCut(aborted.cutId);
    }
    const shardCount = shardCountFor(changed.length);
    // Unique to this begin: two racing begins never write the same pages, and the loser's are never named.
    const cutId = `${padCheckpointId(checkpointId)}#${attempt}#${randomUUID()}`;
    // Noted first: if this begin dies before the allocation names the cut, a later cleanup finds the pages.
    await this.store.notePendingCut(cutId, now);
    const cutPages = await this.store.writeCut(cutId, dealToShards(changed, shardCount), unchanged);
    const record: CheckpointRecord = {
      pipeline: this.settings.pipelineId,
      checkpointId,
      attempt,
      status: 'BEGUN',
      owner: input.execution,
      cutId,
      cutPages,
      partitions: cut.size,
      changedPartitions: changed.length,
      previousCheckpointId: committedId,
      previousCutId: previous.record?.cutId ?? '',
      shardCount,
      ...(switches.length === 0 ? {} : { generationSwitches: switches }),
      begunAt: now,
    };
    if (!(await this.store.allocate(head, record, this.leaseUntil(now), now))) {
      this.log.info('lost the race to allocate a checkpoint', { checkpointId });
      await this.store.deleteCut(cutId);
      await this.store.clearPendingCut(cutId);
      return NOTHING;
    }
    await this.store.clearPendingCut(cutId);
    this.log.info('checkpoint begun', {
      checkpointId,
      attempt,
      partitions: changed.length,
      shards: record.shardCount,
    });
    return { action: 'checkpoint', checkpointId, attempt, shards: shardList(record.shardCount) };
  }

  /** A retried begin of the execution that already allocated: hand back the same checkpoint. */
  private async resume(head: CheckpointHead): Promise<BeginOutput> {
    const record = await this.requireRecord(head.checkpointId, head.attempt, [head.status]);
    const action = head.status === 'COMMITTING' ? 'commit' : 'checkpoint';
    return {
      action,
      checkpointId: head.checkpointId,
      attempt: head.attempt,
      shards: shardList(record.shardCount),
    };
  }

  /** Recovery after the decision (C4): take the expired checkpoint over and roll it forward. */
  private async rollForward(head: CheckpointHead, execution: string, now: number): Promise<BeginOutput> {
    if (!(await this.store.takeOver(head, execution, this.leaseUntil(now), now))) return NOTHING;
    const record = await this.requireRecord(head.checkpointId, head.attempt, ['COMMITTING']);
    this.log.error('recovering an expired checkpoint after its decision: rolling forward', {
      checkpointId: head.checkpointId,
      attempt: head.attempt,
      previousOwner: head.owner,
    });
    return {
      action: 'commit',
      checkpointId: head.checkpointId,
      attempt: head.attempt,
      shards: shardList(record.shardCount),
    };
  }

  /** Recovery before the decision (C4): presume abort. False when another execution changed it first. */
  private async abortExpired(head: CheckpointHead, execution: string, now: number): Promise<boolean> {
    const reason = `lease expired in ${head.status} (owner ${head.owner}); recovered by ${execution}`;
    try {
      await this.markAborted(head, reason, now);
      return true;
    } catch (error) {
      if (error instanceof CheckpointConflictError) return false;
      throw error;
    }
  }

  private async markAborted(head: CheckpointHead, fullReason: string, now: number): Promise<void> {
    const consecutiveAborts = head.consecutiveAborts + 1;
    const reason = truncateReason(fullReason);
    // Read-modify-write of the bounded history is safe: the transition below is conditioned on (attempt, status
    // before the decision), and only an abort of this very attempt — which that condition lets through once —
    // changes the history.
    const current = await this.store.readRecord(head.checkpointId);
    const history = CheckpointStore.abortHistory(current?.attempt === head.attempt ? current : undefined, {
      attempt: head.attempt,
      reason,
      at: now,
    });
    await this.store.transition({
      checkpointId: head.checkpointId,
      attempt: head.attempt,
      from: BEFORE_DECISION_STATUSES,
      to: 'ABORTED',
      head: { consecutiveAborts, lastAbortReason: reason },
      record: { abortedAt: now, abortReason: reason, ...history },
      now,
    });
    this.log.error('checkpoint aborted: its staged data waits for the next checkpoint', {
      checkpointId: head.checkpointId,
      attempt: head.attempt,
      reason: fullReason,
      consecutiveAborts,
    });
    // The attempt's cut is never read again (a zombie step of it fails on the missing pages, harmlessly).
    if (current?.attempt === head.attempt) await this.store.deleteCut(current.cutId);
  }

  // ── prepare ───────────────────────────────────────────────────────────────────────────────────────────────

  async prepare(input: ShardInput): Promise<ShardOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, [
      'BEGUN',
      'PREPARED',
      'COMMITTING',
    ]);
    // A retry after this shard's vote counted: the decision may already have moved on.
    if (record.status !== 'BEGUN') return { shard: input.shard, count: 0 };
    const plan = await this.planShard(record, input.shard, true);
    const { checkpointId, attempt, shard } = input;
    const stagedFiles = plan.stagedFiles;
    const digest = await this.plans.writePlan(plan);
    const now = this.clock.now();
    await this.store.vote(checkpointId, attempt, shard, digest, this.leaseUntil(now), now);
    return { shard, count: stagedFiles };
  }

  /**
   * One shard's plan: its covered entries (C2), checked against the layout, verified (C3) when `verify`, grouped
   * into final objects. A pure function of the cut pages, the covered ledger entries and the promotion limits, so
   * planning again yields the same bytes (see {@link readVotedPlan}).
   */
  private async planShard(record: CheckpointRecord, shard: number, verify: boolean): Promise<ShardPlan> {
    const covered: StagedFileEntry[][] = [];
    for (const cut of await this.store.readCut(record, shard)) covered.push(await this.coveredEntries(cut));
    // Every covered object of the shard is read with bounded concurrency, across its partitions.
    const { checkpointId, attempt } = record;
    // Copied under the coordinator's prefix first, and the copy verified (issue 17, review R2b-1): promote reads
    // the copy, so what this vote is for cannot be rewritten by the processor after it.
    const pipeline = this.settings.pipelineId;
    const copyKeyOf = (entry: StagedFileEntry) => stagedCopyKey(pipeline, checkpointId, attempt, entry.key);
    // Re-encoded streams (Parquet, time folders: issue 12) are planned from each copy's rows per folder. So is a
    // stream holding rows staged with a timestamp while time folders were on (switched off since): re-encoded
    // without folders, so that the staged-only field never reaches a final row.
    const census = new Map<string, FolderCounts>();
    const needsCensus = (entry: StagedFileEntry) =>
      entry.recordCount > 0 && reencodes(this.shape, entry.stream);
    const take = (entry: StagedFileEntry, body: Uint8Array, text: string) => {
      if (needsCensus(entry) || (entry.recordCount > 0 && mayHoldStagedTime(text))) {
        census.set(entry.key, censusOf(entry, body, this.shape));
      }
    };
    if (verify) {
      await verifyStagedContents(
        this.clients.s3,
        this.settings.bucket,
        covered.flat(),
        copyKeyOf,
        this.concurrency,
        take,
      );
    } else {
      await this.censusOfCopies(
        covered.flat().filter((entry) => entry.recordCount > 0),
        copyKeyOf,
        take,
      );
    }
    let stagedFiles = 0;
    const objects = [];
    for (const entries of covered) {
      stagedFiles += entries.length;
      objects.push(...planFinalObjects(pipeline, entries, this.limits, this.shape, census));
    }
    const encoding = planEncoding(this.shape);
    return { checkpointId, attempt, shard, stagedFiles, objects, ...(encoding ? { encoding } : {}) };
  }

  /** The census of copies already verified by the vote (a plan derived again, {@link readVotedPlan}). */
  private async censusOfCopies(
    entries: readonly StagedFileEntry[],
    copyKeyOf: (entry: StagedFileEntry) => string,
    take: (entry: StagedFileEntry, body: Uint8Array, text: string) => void,
  ): Promise<void> {
    await mapLimit(entries, this.concurrency, async (entry) => {
      const key = copyKeyOf(entry);
      const body = await getBytes(this.clients.s3, this.settings.bucket, key);
      if (!body) throw new StagedObjectLostError(entry.key, `missing its verified copy ${key}`);
      take(entry, body, (entry.gzip ? gunzipSync(body) : Buffer.from(body)).toString('utf8'));
    });
  }

  /**
   * C2: the entries with previous cut < lastOffset ≤ cut in one partition, each refused unless its object key is
   * the staged key of exactly that entry in this pipeline (an entry is processor-written: trust nothing in it).
   */
  private async coveredEntries(cut: CutEntry): Promise<StagedFileEntry[]> {
    const { topic, partition } = parsePartitionId(cut.partition);
    const entries: StagedFileEntry[] = [];
    for await (const item of this.ledger.items(topic, partition, { above: cut.previous, upTo: cut.cut })) {
      if (item.kind === 'rejected') {
        // A copy of an entry's attributes at another entry's key (review R2b-5/6) covers nothing: the entry it
        // names is covered at its own key, by the checkpoint whose cut reaches it. Anything else is refused.
        if (item.reason === 'misplaced') {
          this.log.error("prepare: a ledger item lies at another entry's key; ignoring it", {
            partition: cut.partition,
            sk: item.at.sk,
          });
          continue;
        }
        throw new StagedEntryRejectedError(
          String(item.item.key),
          `the ledger item at ${item.at.sk} in ${cut.partition} is not a staged entry`,
        );
      }
      const { entry } = item;
      assertStagedEntry(this.settings.pipelineId, entry, { topic, partition });
      // An entry reaching at or below the previous cut would put offsets an earlier manifest already lists into
      // this one (review R2-3), one above the cut offsets a later one will (R2b-6): the attempt aborts instead.
      if (entry.firstOffset <= cut.previous || entry.lastOffset > cut.cut) {
        throw new StagedEntryRejectedError(
          entry.key,
          `its offsets ${entry.firstOffset}-${entry.lastOffset} are not within ${cut.partition}'s ${cut.previous + 1}-${cut.cut}`,
        );
      }
      entries.push(entry);
    }
    return entries;
  }

  // ── decide ────────────────────────────────────────────────────────────────────────────────────────────────

  async decide(input: CheckpointRef): Promise<DecideOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, [
      'BEGUN',
      'PREPARED',
      'COMMITTING',
    ]);
    if (record.status === 'COMMITTING')
      return { checkpointId: record.checkpointId, decidedAt: record.decidedAt ?? 0 };
    const now = this.clock.now();
    const ref = { checkpointId: input.checkpointId, attempt: input.attempt, now };
    if (record.status === 'BEGUN') {
      const votes = record.votes?.size ?? 0;
      if (votes !== record.shardCount) {
        throw new VotesIncompleteError(
          `checkpoint ${input.checkpointId} attempt ${input.attempt}: ${votes} of ${record.shardCount} shards voted`,
        );
      }
      await this.store.transition({
        ...ref,
        from: ['BEGUN'],
        to: 'PREPARED',
        recordCondition: {
          expression: 'size(votes) = :shardCount',
          values: { ':shardCount': record.shardCount },
        },
      });
    }
    await this.store.transition({
      ...ref,
      from: ['PREPARED'],
      to: 'COMMITTING',
      head: { leaseUntil: this.leaseUntil(now) },
      record: { decidedAt: now },
    });
    this.log.info('checkpoint decided: COMMITTING', {
      checkpointId: input.checkpointId,
      attempt: input.attempt,
    });
    return { checkpointId: input.checkpointId, decidedAt: now };
  }

  /**
   * The replay generations whose switch an operator requested, not yet named by a committed manifest, and whose
   * every range this cut covers: the generation lane's cut at or past the range's `to`, so each record of the
   * range is committed by this checkpoint or an earlier one (`shared/replay/plan.ts`). One Query per begin.
   */
  private async coveredSwitches(cut: ReadonlyMap<string, CutEntry>): Promise<number[]> {
    const covered: number[] = [];
    const malformed = (error: Error) =>
      this.log.error('a replay plan is malformed: left out of every switch', { error: error.message });
    for (const plan of await this.replays.list(malformed)) {
      if (phaseOf(plan) !== 'switch-requested') continue;
      const waiting = plan.ranges.filter(
        (range) =>
          (cut.get(partitionId(generationLaneOf(range.lane, plan.generation), range.partition))?.cut ?? -1) <
          range.to,
      );
      if (waiting.length === 0) covered.push(plan.generation);
      else {
        this.log.info('replay switch waits for its ranges to be staged', {
          generation: plan.generation,
          waitingPartitions: waiting.length,
        });
      }
    }
    return covered;
  }

  // ── promote ───────────────────────────────────────────────────────────────────────────────────────────────

  async promote(input: ShardInput): Promise<ShardOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTING', 'COMMITTED']);
    if (record.status === 'COMMITTED') return { shard: input.shard, count: 0 };
    // Shards promote in waves with retries: keep the lease ahead of them, so the next execution does not take
    // over a roll-forward that is alive (harmless, but double work and a false CheckpointFailed).
    const now = this.clock.now();
    await this.store.renewLease(input.checkpointId, input.attempt, 'COMMITTING', this.leaseUntil(now), now);
    const plan = await this.readVotedPlan(record, input.shard);
    // Every object is checked against the layout before any is written: a plan with one forged object writes none.
    for (const object of plan.objects) assertPlannedObject(this.settings.pipelineId, object);
    const from = { checkpointId: input.checkpointId, attempt: input.attempt };
    // Two objects at once; each staged member is read and decoded once for the whole shard (promoter.ts).
    const files = await this.promoter.promoteShard(plan.objects, from, plan.encoding, 2);
    await this.plans.writePromotion({
      checkpointId: input.checkpointId,
      attempt: input.attempt,
      shard: input.shard,
      files,
    });
    return { shard: input.shard, count: files.length };
  }

  // ── commit ────────────────────────────────────────────────────────────────────────────────────────────────

  async commit(input: CheckpointRef): Promise<CommitOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTING', 'COMMITTED']);
    const manifest = record.status === 'COMMITTING' ? await this.buildManifest(record) : undefined;
    let committedAt = record.committedAt;
    if (manifest) {
      await this.manifests.write(manifest);
      // Before COMMITTED: a commit rolled forward after a crash here notes them again (idempotent), and the next
      // begin, which waits for COMMITTED, never offers a switch this manifest made.
      for (const generation of record.generationSwitches ?? []) {
        await this.replays.markSwitched(generation, record.checkpointId);
      }
      committedAt = await this.markCommitted(record);
    }
    const files = manifest?.files ?? (await this.manifests.read(record.checkpointId))?.files ?? [];
    return {
      checkpointId: record.checkpointId,
      begunAt: record.begunAt,
      files: files.length,
      records: files.reduce((sum, file) => sum + file.recordCount, 0),
      ...(await this.commitLatency(record, committedAt)),
    };
  }

  /** For the `CommitLatency` metric only: a failed read is logged and leaves it out, never fails the commit. */
  private async commitLatency(
    record: CheckpointRecord,
    committedAt: number | undefined,
  ): Promise<{ oldestStagedAt?: number; commitLatencyMs?: number }> {
    if (committedAt === undefined) return {};
    try {
      const cut = await this.store.readCut(record);
      const oldestStagedAt = await oldestCoveredStagedAt(this.ledger, cut, this.concurrency);
      if (oldestStagedAt === undefined) return {};
      return { oldestStagedAt, commitLatencyMs: commitLatencyMs(committedAt, oldestStagedAt) };
    } catch (error) {
      this.log.error('commit latency: could not read the covered entries', {
        checkpointId: record.checkpointId,
        error: error instanceof Error ? error.message : String(error),
      });
      return {};
    }
  }

  private async buildManifest(record: CheckpointRecord): Promise<Manifest> {
    const promotions = await Promise.all(
      shardList(record.shardCount).map(async (shard) => {
        const [plan, promotion] = await Promise.all([
          this.readVotedPlan(record, shard),
          this.plans.readPromotion(record.checkpointId, record.attempt, shard),
        ]);
        return matchPromotion(plan, promotion);
      }),
    );
    const cut: Record<string, number> = {};
    const previousCut: Record<string, number> = {};
    for (const entry of await this.store.readCut(record)) {
      cut[entry.partition] = entry.cut;
      if (entry.previous >= 0) previousCut[entry.partition] = entry.previous;
    }
    return {
      version: 1,
      pipeline: this.settings.pipelineId,
      checkpointId: record.checkpointId,
      previousCheckpointId: record.previousCheckpointId,
      // encodeManifest sorts both cuts: the bytes do not depend on the order the pages came back in.
      cut,
      previousCut,
      // The decision time, not "now": a retried commit must write the same bytes.
      committedAt: new Date(record.decidedAt ?? record.begunAt).toISOString(),
      files: sortManifestFiles(promotions.flatMap((promotion) => promotion.files)),
      ...(await this.switchesOf(record)),
    };
  }

  /**
   * The manifest's `generations`: each switched plan's ranges (plans never change once written). A plan that is
   * gone or malformed by now (only an operator's hand can do that) is left out, loudly: the decided checkpoint must
   * commit, and without the switch readers keep the earlier generation, which loses nothing.
   */
  private async switchesOf(record: CheckpointRecord): Promise<{ generations?: GenerationSwitch[] }> {
    const found = await Promise.all(
      (record.generationSwitches ?? []).map(async (generation) => {
        try {
          const plan = await this.replays.read(generation);
          if (plan !== undefined) return [{ generation, ranges: plan.ranges }];
          this.log.error('a switched replay plan is gone: the checkpoint commits without its switch', {
            checkpointId: record.checkpointId,
            generation,
          });
        } catch (error) {
          if (!(error instanceof MalformedReplayPlanError)) throw error;
          this.log.error('a switched replay plan is malformed: the checkpoint commits without its switch', {
            checkpointId: record.checkpointId,
            generation,
            error: error.message,
          });
        }
        return [];
      }),
    );
    const generations = found.flat();
    return generations.length === 0 ? {} : { generations };
  }

  /**
   * The plan shard `shard` voted for: the plan named by the digest recorded with the vote (plans are
   * content-addressed, review R3-1), used only if its bytes hash to that digest.
   *
   * The vote is a plain `SET planDigests.#shard`, so of two overlapping prepare runs of one shard (a Step Functions
   * retry while the first invocation still runs) the last vote wins. That is sound because each run writes its own
   * plan under its own digest before its vote, and a plan votes only for SHA-256s its run checked on the copies
   * promote reads (a copy key is a function of the attempt and staged key, and copies are write-once: every run of
   * the attempt verifies the first copy made there, `staged-copy.ts`). So any recorded digest names a plan that can
   * roll forward. "First vote wins" would need a condition on the vote and a
   * second way for a losing run to learn the winner's digest; content addressing needs neither.
   *
   * If that plan is missing or does not hash to its digest (only a coordinator role, an operator or a defect can
   * cause this: the prefix is closed to processors), it is derived again from the ledger, the same pure planning
   * prepare did, and used only if its digest is the voted one, so nothing unvoted is ever promoted; a changed
   * ledger just leaves the original error standing (loud, never wrong). The derived plan is not written back: the
   * key is write-once, and a repair there is the operator's (the error is logged each time).
   */
  private async readVotedPlan(record: CheckpointRecord, shard: number): Promise<ShardPlan> {
    const digest = record.planDigests?.[String(shard)];
    try {
      return await this.plans.readPlan(record.checkpointId, record.attempt, shard, digest);
    } catch (error) {
      if (!(error instanceof PlanDigestMismatchError || error instanceof WorkObjectMissingError)) throw error;
      if (digest === undefined) throw error;
      let derived: ShardPlan;
      try {
        derived = await this.planShard(record, shard, false);
      } catch {
        // The ledger no longer yields a plan at all (an entry the processor rewrote): the plan's error is the cause.
        throw error;
      }
      if (planDigest(derived) !== digest) throw error;
      this.log.error('a coordinator plan did not match its vote: derived it again from the ledger', {
        checkpointId: record.checkpointId,
        attempt: record.attempt,
        shard,
        cause: error.message,
      });
      return derived;
    }
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

  // ── cleanup ───────────────────────────────────────────────────────────────────────────────────────────────

  async cleanup(input: ShardInput): Promise<ShardOutput> {
    const record = await this.requireRecord(input.checkpointId, input.attempt, ['COMMITTED']);
    // First, and before this checkpoint deletes the previous cut's pages: earlier checkpoints whose cleanup never
    // completed (review R2-5) are cleaned up now, from their own cut pages.
    if (input.shard === 0) await this.catchUpCleanups(record);
    let removed = 0;
    for (const cut of await this.store.readCut(record, input.shard))
      removed += await this.cleanPartition(cut);
    if (input.shard === 0) {
      await this.plans.deleteCheckpoint(record.checkpointId);
      // Late writes of zombie steps of earlier checkpoints (plans, verified copies) go too: nothing reads them.
      await this.plans.deleteCheckpointsBelow(record.checkpointId, this.orphanSweepLimit);
      // The previous committed cut is superseded by this one (begin reads only the last committed cut).
      await this.store.deleteCut(record.previousCutId);
      // A healthy pipeline never aborts: orphans (crashed attempts, fenced-out zombies) are swept here too (P3).
      await this.sweepOrphans();
      await this.sweepPendingCuts();
    }
    if (await this.store.markShardCleaned(record.checkpointId, record.attempt, input.shard)) {
      // Every shard is done: the mark moves here only from the checkpoint before (else the catch-up moves it).
      await this.store.writeCleanedMark(record.checkpointId - 1, record.checkpointId, this.clock.now());
    }
    return { shard: input.shard, count: removed };
  }

  /**
   * Everything at or below a partition's committed cut is promoted: its staged objects and entries go (leftovers of
   * earlier cleanups too). Only a key that is the staged key of exactly its entry is deleted (review R2-9): an
   * entry naming anything else (a manifest, a final object, another partition's object) is processor-written and
   * untrusted, so only its ledger item is deleted, with a log line.
   */
  private async cleanPartition(cut: CutEntry): Promise<number> {
    const { topic, partition } = parsePartitionId(cut.partition);
    const targets: DeleteTarget[] = [];
    const objects: string[] = [];
    for await (const item of this.ledger.items(topic, partition, { above: -1, upTo: cut.cut })) {
      if (item.kind === 'rejected') {
        // Malformed, or a copy at another entry's key (review R2b-3..5): only the item itself goes, where it lies;
        // the object it names, if any, is not this item's to delete.
        this.log.error(
          'cleanup: a ledger item is not a staged entry at its own key; deleting only the item',
          {
            partition: cut.partition,
            sk: item.at.sk,
            reason: item.reason,
          },
        );
        targets.push({ at: item.at });
        continue;
      }
      const { entry } = item;
      targets.push({ at: item.at, key: entry.key });
      try {
        assertStagedEntry(this.settings.pipelineId, entry, { topic, partition });
        objects.push(entry.key);
      } catch (error) {
        if (!(error instanceof StagedEntryRejectedError)) throw error;
        this.log.error('cleanup: a staged entry names no staged object of its own; deleting only the entry', {
          partition: cut.partition,
          lastOffset: entry.lastOffset,
          stream: entry.stream,
          key: entry.key,
        });
      }
    }
    await deleteKeys(this.clients.s3, this.settings.bucket, objects);
    return this.ledger.deleteEntries(targets, this.settings.maxTransactionItems);
  }

  /**
   * Cleans up the committed checkpoints between the cleaned-up mark and `record` whose cleanup never completed (an
   * execution cut off after COMMITTED, or a failed cleanup, which the definition routes to Committed): their
   * partitions up to their cuts, their working objects and the cut pages they superseded. At most
   * {@link CATCH_UP_LIMIT} per cleanup; the mark moves after each, so the next cleanup continues from there.
   */
  private async catchUpCleanups(record: CheckpointRecord): Promise<void> {
    const found = await this.store.readCleanedMarkIfAny();
    if (found === undefined) {
      // A pipeline from the release before the mark (review R2b-7): that release cleaned up every checkpoint in
      // its own cleanup and recorded none, so the earlier ones count as cleaned; the mark starts below this one.
      this.log.info('starting the cleaned-up mark of a pipeline from before it', {
        upTo: record.checkpointId - 1,
      });
      await this.store.writeCleanedMark(0, record.checkpointId - 1, this.clock.now());
      return;
    }
    let mark = found;
    const last = Math.min(record.checkpointId - 1, mark + CATCH_UP_LIMIT);
    for (let id = mark + 1; id <= last; id++) {
      const earlier = await this.store.readRecord(id);
      if (earlier?.status !== 'COMMITTED') return;
      if ((earlier.cleanedShards?.size ?? 0) < earlier.shardCount) {
        this.log.error('catching up on the cleanup of an earlier checkpoint that never completed', {
          checkpointId: id,
          by: record.checkpointId,
        });
        try {
          await this.catchUpOne(earlier);
        } catch (error) {
          // A transient failure is retried with this cleanup. Anything else would fail the same way on every
          // later cleanup and pin the mark (review R2b-4): it is logged and this checkpoint is passed over.
          if (isTransient(error)) throw error;
          this.log.error('passing over a catch-up cleanup that cannot complete', {
            checkpointId: id,
            error: error instanceof Error ? error.message : String(error),
          });
        }
      }
      if (!(await this.store.writeCleanedMark(mark, id, this.clock.now()))) return;
      mark = id;
    }
  }

  /** One earlier checkpoint's cleanup, from its own cut pages (see {@link catchUpCleanups}). */
  private async catchUpOne(earlier: CheckpointRecord): Promise<void> {
    // A record from before cut pages (an inline cut) has nothing to walk here.
    const paged = (earlier as Partial<CheckpointRecord>).cutPages !== undefined;
    if (paged && typeof earlier.cutId === 'string' && earlier.cutId !== '') {
      try {
        for (const shard of shardList(earlier.shardCount))
          for (const cut of await this.store.readCut(earlier, shard)) await this.cleanPartition(cut);
      } catch (error) {
        // Its pages are gone (a pipeline older than the mark): nothing to walk; later cuts cover its partitions
        // whenever they move again.
        if (!(error instanceof CutPagesError)) throw error;
      }
    }
    await this.plans.deleteCheckpoint(earlier.checkpointId);
    await this.store.deleteCut(earlier.previousCutId);
  }

  /**
   * Deletes the pages of cuts whose begin crashed between writing them and the allocation (their pending-cut note
   * is older than any begin can run, and the record of their checkpoint id does not name them); drops the notes
   * of cuts a record does name. A page set is deleted only when no record names it, so no live cut is touched.
   */
  private async sweepPendingCuts(): Promise<number> {
    const graceMs = Math.max(this.settings.checkpointLeaseSeconds, MAX_STEP_SECONDS) * 1000;
    let deleted = 0;
    for (const cutId of await this.store.pendingCuts(this.clock.now() - graceMs, PENDING_CUT_SWEEP_LIMIT)) {
      const checkpointId = Number(cutId.slice(0, cutId.indexOf('#')));
      const record = Number.isSafeInteger(checkpointId)
        ? await this.store.readRecord(checkpointId)
        : undefined;
      if (record?.cutId !== cutId) {
        this.log.info('deleting the cut pages of a begin that never allocated', { cutId });
        deleted += await this.store.deleteCut(cutId);
      }
      await this.store.clearPendingCut(cutId);
    }
    return deleted;
  }

  /** Deletes staged objects no ledger entry references, older than the grace period (P3). */
  private async sweepOrphans(): Promise<number> {
    const orphans = await sweepOrphans({
      s3: this.clients.s3,
      bucket: this.settings.bucket,
      pipeline: this.settings.pipelineId,
      ledger: this.ledger,
      now: this.clock.now(),
      graceMs: this.settings.orphanGraceSeconds * 1000,
      limit: this.orphanSweepLimit,
      mark: {
        read: () => this.store.readSweepMark(),
        write: (expected, after) => this.store.writeSweepMark(expected, after, this.clock.now()),
      },
    });
    if (orphans.length > 0) this.log.info('deleted orphan staged objects', { count: orphans.length });
    return orphans.length;
  }

  // ── abort ─────────────────────────────────────────────────────────────────────────────────────────────────

  async abort(raw: AbortInput): Promise<AbortOutput> {
    const input = abortInputSchema.parse(raw);
    const cause = describeCaughtError(input.error);
    const head = await this.store.readHead();
    let { checkpointId, attempt } = input;
    if (checkpointId === 0) {
      // Begin failed without handing back an id: abort only a checkpoint this execution allocated.
      if (!head || head.owner !== input.execution || !BEFORE_DECISION_STATUSES.includes(head.status)) {
        return { outcome: 'nothing', reason: `no checkpoint begun: ${cause}`, orphansDeleted: 0 };
      }
      ({ checkpointId, attempt } = head);
    }
    const reason = `checkpoint ${checkpointId} attempt ${attempt} aborted: ${cause}`;
    const current = await this.store.readRecord(checkpointId);
    if (current?.attempt === attempt && (current.status === 'COMMITTING' || current.status === 'COMMITTED')) {
      this.log.error('abort refused: the checkpoint is past its decision and rolls forward', {
        checkpointId,
        attempt,
        cause,
      });
      return {
        outcome: 'decided',
        reason: `checkpoint ${checkpointId} is ${current.status}; rolling forward (${cause})`,
        orphansDeleted: 0,
      };
    }
    if (
      head &&
      head.checkpointId === checkpointId &&
      head.attempt === attempt &&
      BEFORE_DECISION_STATUSES.includes(head.status)
    ) {
      try {
        await this.markAborted(head, reason, this.clock.now());
      } catch (error) {
        if (!(error instanceof CheckpointConflictError)) throw error;
        return this.abort(raw);
      }
    }
    await this.plans.deleteAttempt(checkpointId, attempt);
    // Again here (idempotent): a retried abort whose first run marked the attempt ABORTED but died before
    // markAborted deleted the pages finds the head already ABORTED and would otherwise leave them behind.
    const aborted = await this.store.readRecord(checkpointId);
    if (aborted?.attempt === attempt && aborted.status === 'ABORTED')
      await this.store.deleteCut(aborted.cutId);
    const orphansDeleted = await this.sweepOrphans();
    return { outcome: 'aborted', reason, orphansDeleted };
  }

  // ── shared ────────────────────────────────────────────────────────────────────────────────────────────────

  private async requireRecord(
    checkpointId: number,
    attempt: number,
    statuses: readonly CheckpointStatus[],
  ): Promise<CheckpointRecord> {
    const record = await this.store.readRecord(checkpointId);
    if (!record || record.attempt !== attempt || !statuses.includes(record.status)) {
      const found = record ? `attempt ${record.attempt} ${record.status}` : 'absent';
      throw new CheckpointStateError(checkpointId, attempt, found, statuses.join('|'));
    }
    return record;
  }
}

/**
 * Commit's check of one shard's promotion record against its digest-checked plan: the same objects, in order, each
 * with the planned key, range and record count. Only the SHA-256 and size come from promote (computed from the
 * bytes it wrote); everything that decides what a manifest may list comes from the voted plan.
 */
function matchPromotion(plan: ShardPlan, promotion: ShardPromotion): ShardPromotion {
  const where = `checkpoint ${plan.checkpointId} attempt ${plan.attempt} shard ${plan.shard}`;
  if (
    promotion.checkpointId !== plan.checkpointId ||
    promotion.attempt !== plan.attempt ||
    promotion.shard !== plan.shard ||
    promotion.files.length !== plan.objects.length
  ) {
    throw new PromotionRecordError(`${where}: the promotion record does not match the voted plan`);
  }
  plan.objects.forEach((object, index) => {
    const file = promotion.files[index]!;
    const same =
      file.key === object.finalKey &&
      file.stream === object.stream &&
      file.topic === object.topic &&
      file.partition === object.partition &&
      file.firstOffset === object.firstOffset &&
      file.lastOffset === object.lastOffset &&
      file.recordCount === object.recordCount &&
      (file.format ?? 'ndjson') === (object.format ?? 'ndjson');
    if (!same)
      throw new PromotionRecordError(`${where}: promoted ${file.key}, the voted plan has ${object.finalKey}`);
  });
  return promotion;
}
