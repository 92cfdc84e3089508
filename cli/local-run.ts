/**
 * An `eos local` run once its options are parsed: every setting, the transform and the input checked before
 * anything starts, then the local parts (or existing endpoints), the run, the report and the export.
 */
import { writeFileSync } from 'node:fs';
import { OptionError } from '../local/errors.ts';
import type { LocalParts } from '../local/parts.ts';
import type { RunReport } from '../local/runner.ts';
import { LOCAL_DEFAULTS } from './local-defaults.ts';
import { checkOutputPaths, inputFor } from './local-input.ts';
import type { LocalCommandOptions, LocalDependencies } from './local-options.ts';
import { checkOutputFor, formatFlagFor, tableNotExported } from './local-output.ts';
import { existingPartsEnv, partsPlan } from './local-parts-plan.ts';
import { secondGenerationFor, withGbpBug } from './local-scenarios.ts';

/**
 * 0 when the run delivered the guarantee it asked for (exactly-once also needs a clean verify) and, with
 * `failOnDeadLetter`, dead-lettered nothing; else 1.
 */
export function exitCodeFor(report: RunReport, failOnDeadLetter = false): number {
  if (failOnDeadLetter && report.records.deadLettered > 0) return 1;
  if (report.guarantee === 'exactly-once') return report.verdict === 'exactly-once' ? 0 : 1;
  if (report.guarantee === 'at-least-once') return report.outcome.lost === 0 ? 0 : 1;
  return 0;
}

/**
 * Progress on stderr: a bar on a terminal; otherwise (CI, a pipe) one line every few seconds, so that a long run
 * is seen to move.
 */
async function progressReporter(enabled: boolean, total: number, writeError: (text: string) => void) {
  if (!enabled) return undefined;
  if (process.stderr.isTTY) {
    const { SingleBar } = await import('cli-progress');
    const bar = new SingleBar({
      stream: process.stderr,
      format:
        'records {bar} {percentage}% | {value}/{total} acknowledged | checkpoints committed: {checkpoints}',
      hideCursor: true,
      clearOnComplete: true,
    });
    bar.start(total, 0, { checkpoints: 0 });
    return {
      update: (acknowledged: number, checkpoints: number) => bar.update(acknowledged, { checkpoints }),
      stop: () => bar.stop(),
    };
  }
  let last = Date.now();
  return {
    update: (acknowledged: number, checkpoints: number) => {
      if (Date.now() - last < PROGRESS_LINE_MS) return;
      last = Date.now();
      writeError(
        `progress: ${acknowledged}/${total} records acknowledged, ${checkpoints} checkpoints committed\n`,
      );
    },
    stop: () => {},
  };
}

const PROGRESS_LINE_MS = 5_000;

/**
 * On SIGINT/SIGTERM, stops the parts (those being started too, once their start settles) and exits 130/143, as a
 * shell expects. Hooked before the parts start, so that a signal during DynamoDB Local's start-up does not leave
 * a Java process behind. The returned function unhooks.
 */
function stopOnSignal(
  parts: Promise<Pick<LocalParts, 'stop'>>,
  writeError: (text: string) => void,
): () => void {
  const handlers = (['SIGINT', 'SIGTERM'] as const).map((signal) => {
    const handler = () => {
      writeError(`${signal}: stopping the local parts\n`);
      void parts
        .then((started) => started.stop())
        .catch(() => {})
        .finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
    };
    process.once(signal, handler);
    return [signal, handler] as const;
  });
  return () => {
    for (const [signal, handler] of handlers) process.removeListener(signal, handler);
  };
}

/** What a run checks and loads before anything starts: its settings, transform and input. */
async function prepareRun(options: LocalCommandOptions, env: NodeJS.ProcessEnv) {
  const { localSettingsWithColumns } = await import('./local-settings.ts');
  const format = formatFlagFor(options.output, options.format, env);
  const local = await localSettingsWithColumns({ ...options, format }, env);
  checkOutputFor(options.output, local.settings, local.origin);
  if (options.scenario === 'replay' && local.settings.idempotencyScope === 'partition') {
    // A documented limit, not a verdict to discover: the generation's key window starts empty.
    throw new OptionError(
      '--scenario',
      'replay is judged with the global idempotency scope: with idempotencyScope partition a replay outputs again a key first seen before its range (docs/operations.md#replay-into-a-new-generation)',
    );
  }
  const { loadLocalTransform } = await import('./local-transform.ts');
  const transform = await loadLocalTransform(local);
  const { records: input, partitions } = await inputFor(options, local);
  const recreateTopicWith = await secondGenerationFor(options, input);
  checkOutputPaths(options);
  return { local, transform, input, partitions, recreateTopicWith };
}

type Prepared = Awaited<ReturnType<typeof prepareRun>>;

/** The modules the run itself needs, beyond what its checks loaded. */
function loadRunModules() {
  return Promise.all([
    import('../shared/aws/clients.ts'),
    import('../local/provision.ts'),
    import('../local/in-use.ts'),
    import('../local/runner.ts'),
    import('../local/report.ts'),
  ]);
}

type RunModules = Awaited<ReturnType<typeof loadRunModules>>;

/**
 * Starts the local parts (or names the existing endpoints) and, meanwhile, loads the run's modules. Resolves once
 * both are ready, with the function that unhooks the signal handlers; on a failure nothing is left running.
 */
async function startParts(
  options: LocalCommandOptions,
  deps: LocalDependencies,
  env: NodeJS.ProcessEnv,
  writeError: (text: string) => void,
) {
  const plan = deps.startParts ? undefined : partsPlan(options, env);
  const partsModule = await import('../local/parts.ts');
  const start =
    deps.startParts ??
    (plan?.kind === 'existing'
      ? async () => ({
          env: existingPartsEnv(plan, env, partsModule.LOCAL_CREDENTIALS),
          stop: async () => {},
        })
      : () => partsModule.startLocalParts());
  const starting = start();
  const unhook = stopOnSignal(starting, writeError);
  // The runner's modules (the processor, the SDK's S3 client, the state machine interpreter) load while DynamoDB
  // Local's JVM starts, rather than after it: two seconds of a first run.
  const loading = loadRunModules();
  try {
    const [parts, modules] = await Promise.all([starting, loading]);
    return { parts, modules, unhook, existing: plan?.kind === 'existing' };
  } catch (error) {
    unhook();
    // A module that failed to load must not leave the parts it was waiting beside running.
    await starting.then((started) => started.stop()).catch(() => {});
    throw error;
  }
}

export async function runLocalCommand(
  options: LocalCommandOptions,
  deps: LocalDependencies = {},
): Promise<number> {
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const writeError = deps.writeError ?? ((text: string) => process.stderr.write(text));
  const env = deps.env ?? process.env;
  const prepared = await prepareRun(options, env);
  const { parts, modules, unhook, existing } = await startParts(options, deps, env, writeError);
  // The SDK reads endpoints and credentials from the environment itself (AWS_ENDPOINT_URL_*, AWS_ACCESS_KEY_ID);
  // the previous values come back afterwards, so that an in-process caller's environment is left as it was.
  const previous = Object.fromEntries(Object.keys(parts.env).map((name) => [name, process.env[name]]));
  try {
    Object.assign(process.env, parts.env);
    if (parts.env.AWS_ENDPOINT_URL_DYNAMODB) {
      // On stdout, before the report: stderr is kept for progress and the one line of a failure.
      write(
        `${existing ? 'using' : 'started'} DynamoDB at ${parts.env.AWS_ENDPOINT_URL_DYNAMODB}, S3 at ${parts.env.AWS_ENDPOINT_URL_S3}\n`,
      );
    }
    return await runInParts(options, deps, prepared, modules, { write, writeError });
  } finally {
    unhook();
    for (const [name, value] of Object.entries(previous)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    await parts.stop();
  }
}

/** The run against parts that are up: the table and bucket, the run, its report and export; the exit code. */
async function runInParts(
  options: LocalCommandOptions,
  deps: LocalDependencies,
  { local, transform, input, partitions, recreateTopicWith }: Prepared,
  modules: RunModules,
  io: { readonly write: (text: string) => void; readonly writeError: (text: string) => void },
): Promise<number> {
  const [{ createAwsClients }, provision, { refuseUsedPipeline }, { runLocal }, { formatReport }] = modules;
  const { settings } = local;
  const clients = createAwsClients();
  await Promise.all([
    provision.createLedgerTable(clients.dynamodb, settings.ledgerTable),
    provision.createBucket(clients.s3, settings.bucket),
  ]);
  if (!options.reuse) {
    await refuseUsedPipeline(clients, settings.ledgerTable, settings.bucket, settings.pipelineId);
  }
  const total = input.length + (recreateTopicWith?.length ?? 0);
  const progress = await progressReporter(deps.progress ?? true, total, io.writeError);
  const { report, aggregates } = await runLocal({
    settings,
    input,
    partitions,
    // Poison is a generated record the transform rejects: in a file of the user's, a rejection is the transform's.
    faults: options.input === undefined ? options.faults : { ...options.faults, poison: 0 },
    seed: options.seed,
    checkpointIntervalMs: options.checkpointInterval,
    transform,
    topic: local.topic,
    batchSize: options.batchSize ?? LOCAL_DEFAULTS.batchSize,
    ...(options.output === 'iceberg' ? { iceberg: true } : {}),
    ...(recreateTopicWith ? { recreateTopicWith } : {}),
    ...(options.scenario === 'redrive' ? { transform: withGbpBug(transform), redriveWith: transform } : {}),
    ...(options.scenario === 'replay' ? { transform: withGbpBug(transform), replayWith: transform } : {}),
    onProgress: (p) => progress?.update(p.acknowledged, p.checkpointsCommitted),
  }).finally(() => progress?.stop());
  io.write(formatReport(report));
  if (options.report) writeFileSync(options.report, `${JSON.stringify(report, null, 2)}\n`);
  if (options.export) {
    const [{ exportRun }, { finalPrefix }] = await Promise.all([
      import('../local/results.ts'),
      import('../shared/sink/layout.ts'),
    ]);
    const exportDir = options.export;
    const { objects } = await exportRun(
      clients,
      settings.bucket,
      finalPrefix(settings.pipelineId),
      aggregates,
      exportDir,
    );
    io.write(
      `exported ${objects} objects under ${exportDir}/bucket/ and ${aggregates.size} aggregates to ${exportDir}/aggregates.json\n`,
    );
    if (report.table) io.write(`${tableNotExported(report.table.location)}\n`);
  }
  return exitCodeFor(report, options.failOnDeadLetter);
}
