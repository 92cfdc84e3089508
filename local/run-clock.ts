/**
 * The local runner's clock. Two modes, both able to jump forward without sleeping:
 * - `real`: wall time plus a skew. Jumping forward stands in for waiting (say, for a dead checkpoint's lease to
 *   expire) so `eos local` never sleeps;
 * - `virtual`: starts at a whole hour (`clockOrigin`: close enough to real time that the ledger's TTLs hold) and moves
 *   only when told (each invocation advances it a fixed step), so a chaos schedule's checkpoints fall at the same
 *   points on every machine.
 */
import { type Clock, clockOrigin } from '../shared/clock.ts';

export type ClockMode = 'real' | 'virtual';

export class RunClock implements Clock {
  private skew = 0;
  private virtualNow: number;

  constructor(
    readonly mode: ClockMode,
    start = clockOrigin(),
  ) {
    this.virtualNow = start;
  }

  now(): number {
    return this.mode === 'virtual' ? this.virtualNow : Date.now() + this.skew;
  }

  /** Moves time forward by `ms` (both modes). */
  advance(ms: number): void {
    if (this.mode === 'virtual') this.virtualNow += ms;
    else this.skew += ms;
  }

  /** Virtual mode only: the passage of simulated work (real time passes by itself). */
  tick(ms: number): void {
    if (this.mode === 'virtual') this.virtualNow += ms;
  }
}
