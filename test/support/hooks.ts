/** Test hooks shared by the processor tests: crash injection at a step, and a gate one invocation waits on. */
import { InjectedCrashError } from '../../shared/errors.ts';
import type { ProcessorStep } from '../../shared/processor/processor.ts';

/** Crashes the first time `step` is reached for the `nth` time (1-based). */
export function crashAt(step: ProcessorStep, nth = 1) {
  let seen = 0;
  let fired = false;
  return {
    onStep(reached: ProcessorStep) {
      if (reached !== step || fired) return;
      seen += 1;
      if (seen === nth) {
        fired = true;
        throw new InjectedCrashError(step);
      }
    },
  };
}

/** A promise opened from outside: one invocation waits on `opened` until the test calls `open()`. */
export function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { open, opened };
}
