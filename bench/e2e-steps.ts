/** Where exactly-once's checkpoint time goes: each state machine step's span per committed checkpoint. */
import { COORDINATOR_STEPS, type CoordinatorStep } from '../shared/coordinator/definition.ts';
import type { Probe } from './e2e-probe.ts';
import { median } from './stats.ts';

export interface StepTimes {
  /** Median per committed checkpoint of each step's span (first invocation started → last returned), ms. */
  stepMs: Partial<Record<CoordinatorStep, number>>;
  /** Median per committed checkpoint: begin started → last step returned, ms. */
  executionMs: number;
  /** Median of executionMs minus the sum of the step spans: the state machine between its Tasks, ms. */
  betweenStepsMs: number;
}

/** Step spans per committed checkpoint, from the step events (executions run one at a time; each opens with begin). */
export function stepTimes(events: Probe['stepEvents']): StepTimes {
  const executions: Array<typeof events> = [];
  for (const event of events) {
    if (event.step === 'begin' && event.phase === 'before') executions.push([]);
    executions.at(-1)?.push(event);
  }
  const spans = new Map<CoordinatorStep, number[]>();
  const totals: number[] = [];
  const between: number[] = [];
  for (const execution of executions) {
    if (!execution.some((e) => e.step === 'commit' && e.phase === 'after')) continue; // not a committed one
    let sum = 0;
    for (const step of COORDINATOR_STEPS) {
      const mine = execution.filter((e) => e.step === step);
      if (mine.length === 0) continue;
      const span =
        Math.max(...mine.filter((e) => e.phase === 'after').map((e) => e.at)) -
        Math.min(...mine.filter((e) => e.phase === 'before').map((e) => e.at));
      sum += span;
      spans.set(step, [...(spans.get(step) ?? []), span]);
    }
    const total = Math.max(...execution.map((e) => e.at)) - execution[0]!.at;
    totals.push(total);
    between.push(total - sum);
  }
  return {
    stepMs: Object.fromEntries([...spans].map(([step, values]) => [step, Math.round(median(values))])),
    executionMs: totals.length ? Math.round(median(totals)) : 0,
    betweenStepsMs: between.length ? Math.round(median(between)) : 0,
  };
}
