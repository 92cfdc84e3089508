/** `eos local --scenario redrive`: once the run's input is committed, an operator redrives its dead letters. */
import { InjectedCrashError } from '../shared/errors.ts';
import { type PartitionRedrive, type RedriveResult, redrive } from '../shared/redrive/redrive.ts';
import type { Transform } from '../shared/transforms/types.ts';
import type { Run } from './run.ts';
import type { RunOptions } from './run-options.ts';
import type { RedriveReport } from './run-report.ts';

/**
 * The redrive scenario's operator: `eos redrive` with the fixed transform (crashed once at a seeded step when the
 * schedule injects crashes, then run again), a checkpoint, then a second redrive that must send nothing.
 */
export async function redriveAfter(
  run: Pick<Run, 'clients' | 'clock' | 'checkpointer'>,
  options: RunOptions,
  fixed: Transform,
): Promise<RedriveReport> {
  const base = { settings: options.settings, clients: run.clients, transform: fixed, clock: run.clock };
  const crashAt =
    options.faults.crash > 0
      ? (['after-read', 'after-batch', 'before-close'] as const)[options.seed % 3]
      : undefined;
  let crashed = false;
  let first: RedriveResult | undefined;
  if (crashAt !== undefined) {
    try {
      first = await redrive({
        ...base,
        batchSize: 5,
        hooks: {
          onStep: (step) => {
            if (step === crashAt) throw new InjectedCrashError(`redrive ${step}`);
          },
        },
      });
    } catch (error) {
      if (!(error instanceof InjectedCrashError)) throw error;
      crashed = true;
    }
  }
  // After a crash the operator runs it again: the round goes on where the crash left it.
  const done = first ?? (await redrive(base));
  await run.checkpointer.final();
  const second = await redrive(base);
  await run.checkpointer.final();
  const sum = (result: RedriveResult, pick: (p: PartitionRedrive) => number) =>
    result.partitions.reduce((total, p) => total + pick(p), 0);
  return {
    sent: sum(done, (p) => p.sent),
    output: sum(done, (p) => p.staged.output),
    deadLettered: sum(done, (p) => p.staged.deadLettered),
    unchanged: sum(done, (p) => p.unchanged),
    crashed,
    secondRunStaged: sum(second, (p) => p.staged.output + p.staged.deadLettered),
  };
}
