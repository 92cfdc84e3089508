/**
 * Runs checkpoints for the local runner through the coordinator engineer's local runner (the deployable state
 * machine in aws-local-stepfunctions), with coordinator crashes injected by the fault schedule, and counts the
 * outcomes.
 *
 * A coordinator crash is planned per checkpoint: a step, before its effects or after them (result lost), once
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
import type { FaultLog, FaultPlanner } from './faults.ts';
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
  readonly clients: AwsClients;
  readonly clock: RunClock;
  readonly planner: FaultPlanner;
  readonly random: Random;
  readonly faults: FaultLog;
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

  constructor(private readonly options: CheckpointerOptions) {
    this.local = createLocalCoordinator({
      settings: options.settings,
      clients: options.clients,
      clock: options.clock,
      hooks: {
        beforeStep: (step) => this.maybeCrash(step, 'before'),
        afterStep: (step) => this.maybeCrash(step, 'after'),
      },
    });
  }

  /** One checkpoint, possibly under a planned coordinator crash. */
  async run(allowFaults = true): Promise<CheckpointOutcome> {
    const step = allowFaults ? this.options.planner.planCheckpoint(COORDINATOR_STEPS) : undefined;
    const when = this.options.random.chance(0.5) ? 'before' : 'after';
    const persistent = this.options.random.chance(0.5);
    this.crash = step ? { step, when, persistent } : undefined;
    this.crashedOnce = false;
    try {
      const outcome = await this.local.runCheckpoint();
      this.counts[outcome.status]++;
      this.outcomes.push(outcome);
      return outcome;
    } finally {
      this.crash = undefined;
    }
  }

  /**
   * Checkpoints until one commits everything staged, without faults: the end of a run. An execution left
   * incomplete or failed holds the lease; the clock jumps past it (instead of waiting) so the next execution
   * recovers it.
   */
  async final(maxExecutions = 6): Promise<CheckpointOutcome> {
    let last: CheckpointOutcome | undefined;
    for (let i = 0; i < maxExecutions; i++) {
      last = await this.run(false);
      if (last.status === 'empty') return last;
      if (last.status === 'committed') continue; // another round: an empty one proves nothing is left
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
