/**
 * `eos checkpoint`: runs ONE checkpoint, as one execution of the deployed coordinator's state machine would: the
 * deployable definition (`shared/coordinator/definition.ts`) run by the local interpreter exactly as `eos local`
 * runs it (`local/coordinator-runner.ts`), its steps the coordinator's own code, against the table and bucket the
 * flags name (AWS, or endpoints of one's own). On a laptop it is what the stack's schedule does: what `eos redrive`,
 * `eos deliver` or a new epoch staged becomes committed output.
 *
 * It runs with the coordinator's settings: the same `EOS_*` variables the coordinator Lambdas have
 * (docs/configuration.md), the flags winning over them. Exit codes: 0 committed, or nothing to commit; 1 busy
 * (another execution holds a checkpoint), aborted, decided but not committed, or failed (the line says why and
 * what to do); 2 bad usage or settings; 3 AWS cannot be reached or used.
 */
import type { Command } from 'commander';
import type { CheckpointOutcome, CheckpointOutcomeStatus } from '../local/coordinator-runner.ts';
import type { AwsClients } from '../shared/aws/clients.ts';
import type { Clock } from '../shared/clock.ts';
import type { Settings } from '../shared/config/settings.ts';
import type { CommitOutput } from '../shared/coordinator/messages.ts';
import { operatorEnvironment } from './environment.ts';
import { classifyFailure, EXIT } from './failures.ts';
import { ENDPOINT_HELP, endpointUrl } from './options.ts';

export interface CheckpointDependencies {
  readonly clients?: AwsClients;
  readonly clock?: Clock;
  readonly write?: (text: string) => void;
  readonly writeError?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
  /** How often a running checkpoint prints its progress on stderr; default every 3 s. */
  readonly progressEveryMs?: number;
}

export interface CheckpointCommandOptions {
  readonly table?: string;
  readonly bucket?: string;
  readonly pipeline?: string;
  readonly endpoint?: string;
  readonly json: boolean;
}

/** The checkpoint in flight that made this execution `busy`, as the head names it. */
export interface InFlightCheckpoint {
  readonly checkpointId: number;
  readonly status: string;
  readonly owner: string;
  readonly leaseUntil: number;
}

/** What `eos checkpoint` prints (as JSON with `--json`). */
export interface CheckpointReport {
  readonly status: CheckpointOutcomeStatus;
  /** The checkpoint this execution worked on; 0 when it found nothing to do, or was busy. */
  readonly checkpointId: number;
  readonly execution: string;
  /** Committed: an earlier execution had decided the checkpoint, this one rolled it forward. */
  readonly rolledForward: boolean;
  /** Committed: the rows (output and dead letters) and final objects the checkpoint's manifest lists. */
  readonly rows?: number;
  readonly files?: number;
  /** Committed: the replay generations readers moved to at this checkpoint. */
  readonly switchedGenerations: readonly number[];
  /** Busy: the checkpoint that holds the lease. */
  readonly inFlight?: InFlightCheckpoint;
  /** Aborted, incomplete or failed: why (the abort's reason, the Fail state's cause). */
  readonly reason?: string;
  /** Aborted, incomplete or failed: the last error a step of this execution met (the one that ended it). */
  readonly stepError?: string;
  readonly durationMs: number;
}

const PROGRESS_EVERY_MS = 3_000;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;

export function formatCheckpoint(report: CheckpointReport, leaseSeconds: number): string {
  const id = report.checkpointId;
  const step = report.stepError === undefined ? '' : ` (${report.stepError})`;
  switch (report.status) {
    case 'committed': {
      const rolled = report.rolledForward ? ' (rolled forward: an earlier execution had decided it)' : '';
      const switched =
        report.switchedGenerations.length === 0
          ? ''
          : `; readers switched to generation ${report.switchedGenerations.join(', ')}`;
      return `checkpoint ${id} committed${rolled}: ${plural(report.rows ?? 0, 'row')} in ${plural(report.files ?? 0, 'file')}${switched}\n`;
    }
    case 'empty':
      return 'nothing to commit: nothing staged waits for a checkpoint\n';
    case 'busy': {
      const held = report.inFlight;
      if (held === undefined) return 'busy: another checkpoint is in flight; run again once it has ended\n';
      return (
        `busy: checkpoint ${held.checkpointId} is in flight (${held.status}, execution ${held.owner}, lease until ` +
        `${new Date(held.leaseUntil).toISOString()}); run again once it has ended or its lease has run out\n`
      );
    }
    case 'aborted':
      return `checkpoint ${id} aborted: ${report.reason ?? 'no reason given'}; the staged data waits for the next checkpoint\n`;
    case 'incomplete':
      return (
        `checkpoint ${id} is decided but not committed${step}: run eos checkpoint again once its lease has run ` +
        `out (${leaseSeconds} s, EOS_CHECKPOINT_LEASE_SECONDS): it rolls the checkpoint forward\n`
      );
    case 'failed':
      return `checkpoint${id > 0 ? ` ${id}` : ''} failed: ${report.reason ?? 'no reason given'}${step}\n`;
  }
}

/** A step error worth naming: its class and first line. */
function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return `${error.name}: ${error.message.split('\n')[0]}`;
}

/** Prints what the execution is doing every `everyMs` while it runs; returns the stopper and the step hooks. */
function progress(everyMs: number, writeError: (text: string) => void) {
  const started = Date.now();
  let step = 'begin';
  let steps = 0;
  const timer = setInterval(() => {
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    writeError(`progress: ${step} (${plural(steps, 'step')} run, ${seconds} s)\n`);
  }, everyMs);
  timer.unref();
  return {
    started: (name: string) => {
      step = name;
    },
    ended: () => {
      steps++;
    },
    stop: () => clearInterval(timer),
  };
}

/** One execution with what the command needs to say about it: the commit's counts and the last step error. */
async function execute(
  settings: Settings,
  clients: AwsClients,
  deps: CheckpointDependencies,
  writeError: (text: string) => void,
) {
  const [{ createLocalCoordinator }, { randomUUID }] = await Promise.all([
    import('../local/coordinator-runner.ts'),
    import('node:crypto'),
  ]);
  let committed: CommitOutput | undefined;
  let lastError: unknown;
  const shown = progress(deps.progressEveryMs ?? PROGRESS_EVERY_MS, writeError);
  try {
    const local = createLocalCoordinator({
      settings,
      clients,
      ...(deps.clock ? { clock: deps.clock } : {}),
      executionName: () => `eos-checkpoint-${randomUUID()}`,
      // The coordinator logs what an operator must know about (a switched plan gone): one line each.
      log: { info: () => {}, error: (message) => writeError(`warning: ${message}\n`) },
      hooks: {
        beforeStep: (step) => shown.started(step),
        afterStep: (step, _payload, result) => {
          shown.ended();
          if (step === 'commit') committed = result as CommitOutput;
        },
        failedStep: (_step, _payload, error) => {
          shown.ended();
          // The last failure is what ended the execution (its retries ran out); earlier ones were retried past.
          lastError = error;
        },
      },
    });
    const outcome = await local.runCheckpoint();
    return { outcome, committed, lastError };
  } finally {
    shown.stop();
  }
}

/** The report of an execution, with what the ledger and the manifest add (the lease held, the switches made). */
async function reportOf(
  settings: Settings,
  clients: AwsClients,
  run: Awaited<ReturnType<typeof execute>>,
  durationMs: number,
): Promise<CheckpointReport> {
  const { outcome, committed, lastError } = run;
  const action = (outcome.output as { checkpoint?: { action?: string } } | undefined)?.checkpoint?.action;
  const base = {
    status: outcome.status,
    checkpointId: outcome.checkpointId,
    execution: outcome.execution,
    rolledForward: outcome.status === 'committed' && action === 'commit',
    switchedGenerations: [] as number[],
    durationMs,
  };
  if (outcome.status === 'committed') {
    const { ManifestStore } = await import('../shared/sink/manifest-store.ts');
    const manifest = await new ManifestStore(clients.s3, settings.bucket, settings.pipelineId).read(
      outcome.checkpointId,
    );
    return {
      ...base,
      rows: committed?.records ?? 0,
      files: committed?.files ?? 0,
      switchedGenerations: (manifest?.generations ?? []).map((change) => change.generation),
    };
  }
  if (outcome.status === 'busy') return { ...base, ...(await inFlight(settings, clients)) };
  if (outcome.status === 'empty') return base;
  return {
    ...base,
    ...(failureReason(outcome) === undefined ? {} : { reason: failureReason(outcome)! }),
    ...(lastError === undefined ? {} : { stepError: errorText(lastError) }),
  };
}

function failureReason(outcome: CheckpointOutcome): string | undefined {
  if (outcome.status === 'failed' && outcome.error !== undefined) {
    return outcome.cause === undefined ? outcome.error : `${outcome.error}: ${outcome.cause}`;
  }
  return outcome.cause;
}

async function inFlight(settings: Settings, clients: AwsClients): Promise<{ inFlight?: InFlightCheckpoint }> {
  const { CheckpointStore } = await import('../shared/ledger/checkpoints.ts');
  const head = await new CheckpointStore(
    clients.dynamodb,
    settings.ledgerTable,
    settings.pipelineId,
  ).readHead();
  if (head === undefined) return {};
  const { checkpointId, status, owner, leaseUntil } = head;
  return { inFlight: { checkpointId, status, owner, leaseUntil } };
}

export async function runCheckpoint(
  options: CheckpointCommandOptions,
  deps: CheckpointDependencies = {},
): Promise<CheckpointReport> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, { settingsFromEnv }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/config/settings.ts'),
  ]);
  const settings = settingsFromEnv(environment.withSettingFlags(options));
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const writeError = deps.writeError ?? ((text: string) => process.stderr.write(text));
  const owned = deps.clients
    ? undefined
    : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const clients = deps.clients ?? owned!;
  try {
    const started = Date.now();
    const run = await execute(settings, clients, deps, writeError);
    // A table, bucket or endpoint that cannot be used aborts the checkpoint (or fails it) like any error; it is
    // the environment, not the checkpoint, that is wrong: said as every command says it (exit 3).
    if (run.outcome.status !== 'committed' && run.lastError !== undefined) {
      if (classifyFailure(run.lastError).code === EXIT.aws) throw run.lastError;
    }
    const report = await reportOf(settings, clients, run, Date.now() - started);
    write(
      options.json
        ? `${JSON.stringify(report, null, 2)}\n`
        : formatCheckpoint(report, settings.checkpointLeaseSeconds),
    );
    if (report.status !== 'committed' && report.status !== 'empty') process.exitCode = EXIT.violation;
    return report;
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
  }
}

export function registerCheckpointCommand(program: Command, deps: CheckpointDependencies = {}): Command {
  return program
    .command('checkpoint')
    .description(
      "run one checkpoint: one execution of the coordinator's state machine, run here (what the stack's schedule starts)",
    )
    .option('--table <name>', 'the ledger table (default $EOS_LEDGER_TABLE)')
    .option('--bucket <name>', 'the bucket (default $EOS_BUCKET)')
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .addHelpText(
      'after',
      `
Every other coordinator setting comes from its EOS_* variable, as the coordinator Lambdas read it. Prints one
line: committed (rows, files, a replay switch), nothing to commit, busy, aborted or not committed, and why.
Progress goes to stderr every 3 s. Exit codes: 0 committed, or nothing to commit; 1 busy, aborted, decided but
not committed, or failed; 2 bad usage or settings; 3 AWS cannot be reached or used.`,
    )
    .action(async (raw: CheckpointCommandOptions, command: Command) => {
      const environment = operatorEnvironment(deps.env);
      environment.requiredTable(raw.table || undefined);
      environment.requiredBucket(raw.bucket || undefined);
      const output = command.configureOutput();
      await runCheckpoint(raw, {
        ...deps,
        write: deps.write ?? ((text) => (output.writeOut ?? process.stdout.write.bind(process.stdout))(text)),
        writeError:
          deps.writeError ?? ((text) => (output.writeErr ?? process.stderr.write.bind(process.stderr))(text)),
      });
    });
}
