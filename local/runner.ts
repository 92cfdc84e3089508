/**
 * The local runner behind `eos local` and the chaos tests: the MSK event-source emulator, the processor and the
 * checkpoint coordinator, run together on the local parts under a seeded fault schedule.
 *
 * ```
 *  input ─▶ log (P partitions) ─▶ pollers (one per partition) ─▶ processor attempts ─▶ commit / release offsets
 *                                        │ faults: crash, zombie, transient SDK errors, lost commit
 *                                        └─ every checkpoint interval ─▶ coordinator (state machine) ─▶ S3 final/
 *  drained ─▶ final checkpoint(s) ─▶ read back (final objects, aggregates) ─▶ compare with the input ─▶ verify
 * ```
 * The run in progress is local/run.ts; how it is judged, local/judge.ts.
 */
import { formatIdempotencyKeySource } from '../shared/config/settings.ts';
import { checkKeySource } from '../shared/processor/evaluate.ts';
import { effectLimits } from '../shared/processor/processor.ts';
import { loadTransform } from '../shared/transforms/load.ts';
import type { Transform } from '../shared/transforms/types.ts';
import { type Aggregate, type Expectation, expectOutcome } from './expectation.ts';
import { formatFaultRates } from './faults.ts';
import { judge, redriveViolations, violationsOf } from './judge.ts';
import { redriveAfter } from './redrive-scenario.ts';
import { replayAfter, replayedTransform } from './replay-scenario.ts';
import { Run } from './run.ts';
import type { RunOptions } from './run-options.ts';
import type { RunReport } from './run-report.ts';
import { judgeTable } from './table-check.ts';

export type { ClientRole, Progress, RunObserver, RunOptions } from './run-options.ts';
export type { RedriveReport, RunReport } from './run-report.ts';

export interface RunResult {
  readonly report: RunReport;
  readonly aggregates: ReadonlyMap<string, Aggregate>;
}

export async function runLocal(options: RunOptions): Promise<RunResult> {
  const transform = options.transform ?? (await loadTransform(options.settings.transform)).transform;
  // Before any part starts: a key source the transform cannot feed is a bad setting, not a batch failure.
  checkKeySource(transform, options.settings.idempotencyKey);
  const started = Date.now();
  const run = new Run(options, transform);
  try {
    return await runAndJudge(run, options, started);
  } finally {
    run.dispose();
  }
}

/** The expectation for every record of the run's log under `oracle`, prepared as the processor prepares a batch. */
async function expectationUnder(run: Run, options: RunOptions, oracle: Transform): Promise<Expectation> {
  const records = [...run.records()];
  await oracle.prepare?.(records);
  const { settings } = options;
  // The processor's own bounds and rules (missingIdempotencyKey among them), as it evaluates each record.
  return expectOutcome(records, oracle, {
    keySource: settings.idempotencyKey,
    limits: effectLimits(settings),
    scope: settings.idempotencyScope,
  });
}

async function runAndJudge(run: Run, options: RunOptions, started: number): Promise<RunResult> {
  // The oracle evaluates with the processor's own transform. Paced input is in the log only once it has drained.
  const expect = async (): Promise<Expectation> => {
    // With a redrive the verdict is the fixed transform's: every record by its latest outcome.
    const expectation = await expectationUnder(run, options, options.redriveWith ?? run.transform);
    if (options.faults.poison > 0) run.faultLog.record('poison', expectation.poison);
    return expectation;
  };
  // Paced input, and a recreated topic's second generation, are in the log only once it has drained.
  const late = options.paceRecordsPerSecond !== undefined || options.recreateTopicWith !== undefined;
  let expectation = late ? undefined : await expect();
  let stateOf: Expectation | undefined;
  await run.drain();
  const drained = Date.now();
  if (run.checkpoints) await run.checkpointer.final();
  const redriven = options.redriveWith ? await redriveAfter(run, options, options.redriveWith) : undefined;
  const replayed = options.replayWith
    ? await replayAfter({
        settings: options.settings,
        clients: run.clients,
        clock: run.clock,
        checkpointer: run.checkpointer,
        emulator: run.replayEmulator(),
        topic: options.topic ?? 'orders',
        lengths: run.logLengths(),
        transform: options.replayWith,
        seed: options.seed,
        faults: options.faults.crash > 0,
      })
    : undefined;
  const durationMs = Date.now() - started;
  expectation ??= await expect();
  if (replayed && options.replayWith) {
    // Readers show the changed transform's outcome in the range and the run's elsewhere; keyed state is the run's.
    const view = replayedTransform(run.transform, options.replayWith, replayed.from, replayed.to);
    stateOf = expectation;
    expectation = await expectationUnder(run, options, view);
  }
  const judged = await judge(run.clients, options, expectation, stateOf);
  const table = options.iceberg ? await judgeTable(run.clients, options.settings) : undefined;
  const phasesMs = {
    drain: drained - started,
    finalCheckpoint: started + durationMs - drained,
    judge: Date.now() - started - durationMs,
  };
  const report = runReport(run, options, {
    expectation,
    judged,
    durationMs,
    phasesMs,
    redriven,
    replayed,
    table,
  });
  return { report, aggregates: judged.aggregates };
}

/** What the run did and its verdict, from the run's counts and what the judgement read back. */
function runReport(
  run: Run,
  options: RunOptions,
  done: {
    readonly expectation: Expectation;
    readonly judged: Awaited<ReturnType<typeof judge>>;
    readonly durationMs: number;
    readonly phasesMs: RunReport['phasesMs'];
    readonly redriven: RunReport['redrive'];
    readonly replayed: RunReport['replay'];
    readonly table: Awaited<ReturnType<typeof judgeTable>> | undefined;
  },
): RunReport {
  const { expectation, durationMs, phasesMs, redriven, replayed, table } = done;
  const { rows, outcome, verify, resolved } = done.judged;
  const violations = [
    ...violationsOf(outcome, verify),
    ...redriveViolations(redriven),
    ...(replayed?.violations ?? []),
    ...(table?.violations ?? []),
  ];
  const report: RunReport = {
    pipeline: options.settings.pipelineId,
    guarantee: options.settings.deliveryGuarantee,
    seed: options.seed,
    partitions: options.partitions,
    faultSpec: formatFaultRates(options.faults),
    records: {
      in: options.input.length + (options.recreateTopicWith?.length ?? 0),
      committed: rows.filter((row) => row.stream === 'output').length,
      deadLettered: rows.filter((row) => row.stream === 'deadletter').length,
      expected: resolved.identities.size,
      duplicatesDroppedByOffset: run.totals.duplicatesByOffset,
      duplicatesDroppedByKey: run.totals.duplicatesByKey,
      keyConflicts: resolved.conflicts,
      missingKeys: {
        count: expectation.missingKeys,
        source: formatIdempotencyKeySource(options.settings.idempotencyKey),
        handling: expectation.missingKeyChoice,
      },
    },
    faults: run.faultLog.snapshot(),
    invocations: {
      total: run.totals.invocations,
      failed: run.totals.failed,
      lostCommits: run.totals.lostCommits,
    },
    checkpoints: { ...run.checkpointer.counts },
    durationMs,
    phasesMs,
    recordsPerSecond: Math.round((options.input.length * 1000) / Math.max(1, durationMs)),
    outcome,
    verify,
    verdict: violations.length === 0 ? 'exactly-once' : 'not exactly-once',
    violations,
    ...(options.recreateTopicWith ? { epochsOpened: run.epochsOpened } : {}),
    ...(redriven ? { redrive: redriven } : {}),
    ...(replayed ? { replay: replayed } : {}),
    ...(table ? { table: table.report } : {}),
  };
  return report;
}
