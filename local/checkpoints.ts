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
 */

import type { AwsClients } from '../shared/aws/clients.ts';
import type { Settings } from '../shared/config/settings.ts';
import { COORDINATOR_STEPS, type CoordinatorStep } from '../shared/coordinator/definition.ts';
import { InjectedCrashError } from '../shared/errors.ts';
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
  readonly step: CoordinatorStep;
  readonly when: 'before' | 'after';
  readonly persistent: boolean;
}

export type CheckpointCounts = Record<CheckpointOutcomeStatus, number>;

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
}

export class Checkpointer {
  readonly counts: CheckpointCounts = {
    committed: 0,
    aborted: 0,
    busy: 0,
    empty: 0,
    incomplete: 0,
    failed: 0,
  };
  readonly outcomes: CheckpointOutcome[] = [];
  private readonly local: LocalCoordinator;
  private crash: CoordinatorCrashPlan | undefined;
  private crashedOnce = false;
  /** Transient SDK errors for the coordinator's calls (its clients are instrumented). */
  private readonly slot: AttemptSlot;

  constructor(private readonly options: CheckpointerOptions) {
    this.slot = new AttemptSlot(options.faults);
    this.local = createLocalCoordinator({
      settings: options.settings,
      clients: this.slot.instrument(options.clients),
      clock: options.clock,
      ...(options.partitionsPerShard ? { partitionsPerShard: options.partitionsPerShard } : {}),
      hooks: {
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
      this.outcomes.push(outcome);
      return outcome;
    } finally {
      this.crash = undefined;
    }
  }

  private planCrash(): CoordinatorCrashPlan | undefined {
    const step = this.options.planner.planCheckpoint(COORDINATOR_STEPS);
    const when = this.options.random.chance(0.5) ? 'before' : 'after';
    const persistent = this.options.random.chance(0.5);
    return step ? { step, when, persistent } : undefined;
  }

  /**
   * The end of a run: checkpoints until one finds nothing left to commit. The first may still suffer a planned
   * crash (the last checkpoint of a run is as exposed as any); the ones after it run clean. An execution left
   * incomplete or failed holds the lease: the clock jumps past it (instead of waiting) so the next recovers it.
   */
  async final(maxExecutions = 8): Promise<CheckpointOutcome> {
    let last: CheckpointOutcome | undefined;
    for (let i = 0; i < maxExecutions; i++) {
      last = await this.run(i === 0 ? 'planned' : 'none');
      if (last.status === 'empty') return last;
      if (last.status === 'committed' || last.status === 'aborted') continue;
      this.options.clock.advance((this.options.settings.checkpointLeaseSeconds + 1) * 1000);
    }
    return last!;
  }

  private maybeCrash(step: CoordinatorStep, when: 'before' | 'after'): void {
    const crash = this.crash;
    if (!crash || crash.step !== step || crash.when !== when) return;
    if (!crash.persistent && this.crashedOnce) return;
    this.crashedOnce = true;
    this.options.faults.record('coordinator-crash');
    throw new InjectedCrashError(`coordinator ${step} (${when})`);
  }
}
