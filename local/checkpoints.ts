/**
 * Runs checkpoints for the local runner through the coordinator engineer's local runner (the deployable state
 * machine in aws-local-stepfunctions), with coordinator crashes injected by the fault schedule, and counts the
 * outcomes.
 *
 * The coordinator's clients are instrumented like the processor's: a checkpoint may meet one transient SDK error
 * (throttling, a 5xx, a `TransactionConflict`), anywhere in a step. A coordinator crash is planned per checkpoint: a step, before its effects or after them (result lost), once
 * (the state machine's Retry absorbs it) or on every invocation of the step in that execution (retries run out:
 * before the decision the checkpoint aborts, after it the execution ends incomplete and the next one rolls it
 * forward once the lease has expired).
 *
 * With an Iceberg table ({@link CheckpointerOptions.iceberg}) every checkpoint is also published to it (the
 * `Publish` step, and `CatchUpPublish` when an execution finds nothing to commit and the table behind), and the
 * publish step is among those a crash may hit: before it, after it, or right after the catalog accepted the
 * table's swap and before the ledger recorded it (the unknown commit state).
 */

import type { S3Client } from '@aws-sdk/client-s3';
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import {
  COORDINATOR_STEPS,
  type CoordinatorStep,
  type CoordinatorTask,
  PUBLISH_STEP,
} from '../shared/coordinator/definition.ts';
import { type PublishTarget, publishedTable } from '../shared/coordinator/publish/target.ts';
import { InjectedCrashError } from '../shared/errors.ts';
import type { Catalog } from '../shared/iceberg/catalog.ts';
import { FileCatalog } from '../shared/iceberg/file-catalog.ts';
import {
  type CheckpointOutcome,
  type CheckpointOutcomeStatus,
  createLocalCoordinator,
  type LocalCoordinator,
} from './coordinator-runner.ts';
import {
  AttemptSlot,
  attemptContext,
  type FaultLog,
  type FaultPlanner,
  type InvocationPlan,
} from './faults.ts';
import type { Random } from './prng.ts';
import type { RunClock } from './run-clock.ts';

export interface CoordinatorCrashPlan {
  readonly step: CoordinatorTask;
  /** `swap`: the publish step only, right after the catalog accepted the table's new metadata. */
  readonly when: 'before' | 'after' | 'swap';
  readonly persistent: boolean;
}

/** The table a run publishes to: a file catalog in the run's bucket. */
export interface CheckpointerTable {
  /** The table's key prefix in the bucket (`<pipeline>/iceberg/output`). */
  readonly root: string;
}

/** Checkpoint runs by outcome, and how many of them an Express execution handed to the Standard workflow. */
export type CheckpointCounts = Record<CheckpointOutcomeStatus, number> & { handedOff: number };

export interface CheckpointerOptions {
  readonly settings: Settings;
  /** The coordinator's own clients; the checkpointer adds its fault middleware to them. */
  readonly clients: AwsClients;
  readonly clock: RunClock;
  readonly planner: FaultPlanner;
  readonly random: Random;
  readonly faults: FaultLog;
  /** Optional probe: a checkpoint's commit step returned (its manifest written, COMMITTED), by checkpoint id. */
  readonly onCommitted?: (checkpointId: number) => void;
  /** Optional probe: a step (one Lambda invocation of the state machine) starts, or returns. */
  readonly onStep?: (step: CoordinatorStep, phase: 'before' | 'after') => void;
  /** The coordinator's changed partitions per shard; default its own. */
  readonly partitionsPerShard?: number;
  /** Publish every committed checkpoint to this Iceberg table (the settings' output must be Parquet). */
  readonly iceberg?: CheckpointerTable;
}

export class Checkpointer {
  readonly counts: CheckpointCounts = {
    committed: 0,
    aborted: 0,
    busy: 0,
    empty: 0,
    incomplete: 0,
    failed: 0,
    handedOff: 0,
  };
  readonly outcomes: CheckpointOutcome[] = [];
  private readonly local: LocalCoordinator;
  private crash: CoordinatorCrashPlan | undefined;
  private crashedOnce = false;
  /** Transient SDK errors for the coordinator's calls (its clients are instrumented). */
  private readonly slot: AttemptSlot;

  constructor(private readonly options: CheckpointerOptions) {
    this.slot = new AttemptSlot(options.faults);
    const clients = this.slot.instrument(options.clients);
    const target = options.iceberg && this.publishTarget(clients.s3, options.iceberg);
    this.local = createLocalCoordinator({
      settings: options.settings,
      clients,
      clock: options.clock,
      ...(options.partitionsPerShard ? { partitionsPerShard: options.partitionsPerShard } : {}),
      ...(target ? { publishTarget: target } : {}),
      hooks: {
        beforePublish: () => this.maybeCrash(PUBLISH_STEP, 'before'),
        afterPublish: () => this.maybeCrash(PUBLISH_STEP, 'after'),
        beforeStep: (step) => {
          options.onStep?.(step, 'before');
          this.maybeCrash(step, 'before');
        },
        afterStep: (step, _payload, result) => {
          options.onStep?.(step, 'after');
          // Before a crash after the step is injected: the step's effects (the manifest) are there all the same.
          if (step === 'commit') options.onCommitted?.((result as { checkpointId: number }).checkpointId);
          this.maybeCrash(step, 'after');
        },
      },
    });
  }

  /**
   * One checkpoint, under the faults drawn from the schedule (a crash and a transient SDK error), or under the
   * crash and transient error given (tests), or under none.
   */
  async run(
    crash: CoordinatorCrashPlan | 'planned' | 'none' = 'planned',
    transientError?: InvocationPlan['transient'],
  ): Promise<CheckpointOutcome> {
    this.crash = crash === 'planned' ? this.planCrash() : crash === 'none' ? undefined : crash;
    this.crashedOnce = false;
    const transient: InvocationPlan['transient'] =
      crash === 'planned' ? this.options.planner.planCheckpointTransient() : transientError;
    try {
      const context = attemptContext(transient ? { transient, loseCommit: false } : { loseCommit: false });
      const outcome = await this.slot.run(context, () => this.local.runCheckpoint());
      this.counts[outcome.status]++;
      if (outcome.executions.length > 1) this.counts.handedOff++;
      this.outcomes.push(outcome);
      return outcome;
    } finally {
      this.crash = undefined;
    }
  }

  private planCrash(): CoordinatorCrashPlan | undefined {
    const { planner, random, iceberg } = this.options;
    const step: CoordinatorTask | undefined = iceberg
      ? planner.planCheckpoint([...COORDINATOR_STEPS, PUBLISH_STEP])
      : planner.planCheckpoint(COORDINATOR_STEPS);
    let when: CoordinatorCrashPlan['when'] = random.chance(0.5) ? 'before' : 'after';
    // Drawn only for the publish step: a run without a table draws what it always drew.
    if (step === PUBLISH_STEP && random.chance(0.5)) when = 'swap';
    const persistent = random.chance(0.5);
    return step ? { step, when, persistent } : undefined;
  }

  /** The run's table, its catalog's commits open to a crash right after the swap. */
  private publishTarget(s3: S3Client, table: CheckpointerTable): PublishTarget {
    const { settings } = this.options;
    if (settings.outputFormat !== 'parquet' || settings.outputColumns === undefined) {
      throw new RangeError('an Iceberg table needs Parquet output (outputFormat parquet, outputColumns)');
    }
    const files = new FileCatalog(s3, settings.bucket, table.root);
    const catalog: Catalog = {
      load: () => files.load(),
      commit: async (expected, next) => {
        const committed = await files.commit(expected, next);
        if (committed !== 'conflict') this.maybeCrash(PUBLISH_STEP, 'swap');
        return committed;
      },
    };
    return {
      catalog,
      table: publishedTable({
        location: files.location,
        columns: settings.outputColumns,
        timePartitioning: settings.timePartitioning,
      }),
    };
  }

  /**
   * The end of a run: checkpoints until one finds nothing left to commit and nothing to publish (with a table, an
   * execution that finds nothing to commit publishes a committed checkpoint the table lacks, as on an idle
   * pipeline). The first may still suffer a planned crash (the last checkpoint of a run is as exposed as any); the
   * ones after it run clean. An execution left incomplete or failed holds the lease: the clock jumps past it
   * (instead of waiting) so the next recovers it.
   */
  async final(maxExecutions = 8): Promise<CheckpointOutcome> {
    let last: CheckpointOutcome | undefined;
    for (let i = 0; i < maxExecutions; i++) {
      last = await this.run(i === 0 ? 'planned' : 'none');
      const published = last.invocations.some((invocation) => invocation.step === PUBLISH_STEP);
      if (last.status === 'empty' && !published) return last;
      if (last.status === 'committed' || last.status === 'aborted' || last.status === 'empty') continue;
      this.options.clock.advance((this.options.settings.checkpointLeaseSeconds + 1) * 1000);
    }
    return last!;
  }

  private maybeCrash(step: CoordinatorTask, when: CoordinatorCrashPlan['when']): void {
    const crash = this.crash;
    if (!crash || crash.step !== step || crash.when !== when) return;
    if (!crash.persistent && this.crashedOnce) return;
    this.crashedOnce = true;
    this.options.faults.record('coordinator-crash');
    throw new InjectedCrashError(`coordinator ${step} (${when})`);
  }
}
