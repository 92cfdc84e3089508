/**
 * `eos local`: the whole pipeline on this machine, under injected faults. Starts the local parts (DynamoDB Local,
 * the S3 server), creates the table and bucket, runs the MSK emulator, the processor and the coordinator on the
 * fault schedule, drains the log, runs a final checkpoint and prints the report. Every option and `EOS_*` variable
 * is checked, the transform loaded and the input file read before anything starts (cli/local-settings.ts).
 *
 * Exit codes: 0 the run delivered its guarantee; 1 it did not, or `--fail-on-dead-letter` and a record was
 * dead-lettered; 2 bad usage or input (nothing ran).
 */
import { writeFileSync } from 'node:fs';
import { SingleBar } from 'cli-progress';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { OptionError } from '../local/errors.ts';
import { type FaultRates, parseFaultSpec } from '../local/faults.ts';
import { generateOrders } from '../local/generator.ts';
import { type InputRecord, readInputFile } from '../local/input.ts';
import { MAX_BATCH_SIZE } from '../local/msk-emulator.ts';
import { type LocalParts, startLocalParts } from '../local/parts.ts';
import { createBucket, createLedgerTable } from '../local/provision.ts';
import { formatReport } from '../local/report.ts';
import { exportRun } from '../local/results.ts';
import { type RunReport, runLocal } from '../local/runner.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { DELIVERY_GUARANTEES, type DeliveryGuarantee } from '../shared/config/settings.ts';
import { PipelineError } from '../shared/errors.ts';
import { finalPrefix } from '../shared/sink/layout.ts';
import {
  checkTopicName,
  LOCAL_DEFAULT_TOPIC,
  LOCAL_SETTING_DEFAULTS,
  type LocalSettings,
  localSettings,
} from './local-settings.ts';
import { loadLocalTransform } from './local-transform.ts';
import { integer, oneOf } from './options.ts';

export const LOCAL_DEFAULTS = {
  records: 20_000,
  partitions: 4,
  guarantee: 'exactly-once',
  faults: 'all',
  seed: 1,
  checkpointIntervalMs: 2_000,
  transform: 'orders',
  batchSize: 100,
} as const;

export interface LocalCommandOptions {
  readonly input?: string;
  readonly records?: number;
  readonly partitions: number;
  /** Flags that set a processor setting: absent, the `EOS_*` variable (or the local default) decides. */
  readonly guarantee?: DeliveryGuarantee;
  readonly transform?: string;
  readonly idempotencyKey?: string;
  readonly topic?: string;
  /** Records per partition per event (the mapping's batch size). */
  readonly batchSize?: number;
  readonly failOnDeadLetter?: boolean;
  readonly faults: FaultRates;
  readonly seed: number;
  readonly checkpointInterval: number;
  readonly export?: string;
  readonly report?: string;
}

/** What `eos local` needs besides its options; tests replace the parts and the output. */
export interface LocalDependencies {
  /** Starts (or reuses) the local parts; default {@link startLocalParts}. */
  readonly startParts?: () => Promise<Pick<LocalParts, 'env' | 'stop'>>;
  readonly write?: (text: string) => void;
  /** Where errors go (stderr by default). */
  readonly writeError?: (text: string) => void;
  readonly progress?: boolean;
  /** Where the `EOS_*` variables come from; default `process.env`. */
  readonly env?: NodeJS.ProcessEnv;
}

/** The input to run: the file's records, or the seeded generator's. Throws before anything runs. */
export function inputFor(options: LocalCommandOptions, local: LocalSettings): InputRecord[] {
  if (options.input !== undefined && options.records !== undefined) {
    throw new OptionError('--records', 'cannot be combined with --input (the file decides the records)');
  }
  if (options.input !== undefined) return readInputFile(options.input, options.partitions);
  const transform = local.settings.transform;
  if (transform !== LOCAL_DEFAULTS.transform) {
    // Generated input is orders: another transform would dead-letter all of it.
    throw new OptionError(
      '--input',
      `is needed with ${local.origin('transform')} ${transform} (without --input the records are generated orders, for the orders transform)`,
    );
  }
  return generateOrders({
    seed: options.seed,
    records: options.records ?? LOCAL_DEFAULTS.records,
    partitions: options.partitions,
    poisonRate: options.faults.poison,
  });
}

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

function progressBar(enabled: boolean) {
  if (!enabled || !process.stderr.isTTY) return undefined;
  return new SingleBar({
    stream: process.stderr,
    format:
      'records {bar} {percentage}% | {value}/{total} acknowledged | checkpoints committed: {checkpoints}',
    hideCursor: true,
    clearOnComplete: true,
  });
}

export async function runLocalCommand(
  options: LocalCommandOptions,
  deps: LocalDependencies = {},
): Promise<number> {
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const local = localSettings(options, deps.env ?? process.env);
  const { settings } = local;
  const transform = await loadLocalTransform(local);
  const input = inputFor(options, local);
  const parts = await (deps.startParts ?? (() => startLocalParts()))();
  try {
    // The SDK reads endpoints and credentials from the environment itself (AWS_ENDPOINT_URL_*, AWS_ACCESS_KEY_ID).
    Object.assign(process.env, parts.env);
    const clients = createAwsClients();
    await Promise.all([
      createLedgerTable(clients.dynamodb, settings.ledgerTable),
      createBucket(clients.s3, settings.bucket),
    ]);
    const bar = progressBar(deps.progress ?? true);
    bar?.start(input.length, 0, { checkpoints: 0 });
    const { report, aggregates } = await runLocal({
      settings,
      input,
      partitions: options.partitions,
      faults: options.faults,
      seed: options.seed,
      checkpointIntervalMs: options.checkpointInterval,
      transform,
      topic: local.topic,
      ...(options.batchSize === undefined ? {} : { batchSize: options.batchSize }),
      onProgress: (p) => bar?.update(p.acknowledged, { checkpoints: p.checkpointsCommitted }),
    }).finally(() => bar?.stop());
    write(formatReport(report));
    if (options.report) writeFileSync(options.report, `${JSON.stringify(report, null, 2)}\n`);
    if (options.export) {
      const { objects } = await exportRun(
        clients,
        settings.bucket,
        finalPrefix(settings.pipelineId),
        aggregates,
        options.export,
      );
      write(
        `exported ${objects} objects under ${options.export}/bucket/ and ${aggregates.size} aggregates to ${options.export}/aggregates.json\n`,
      );
    }
    return exitCodeFor(report, options.failOnDeadLetter);
  } finally {
    await parts.stop();
  }
}

function faults(value: string): FaultRates {
  try {
    return parseFaultSpec(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message.replace(/^--faults: /, ''));
  }
}

function topicName(value: string): string {
  try {
    return checkTopicName(value);
  } catch (error) {
    throw new InvalidArgumentError((error as Error).message);
  }
}

export function registerLocalCommand(program: Command, deps: LocalDependencies = {}): Command {
  return program
    .command('local')
    .description('run the whole pipeline locally under injected faults, then report and verify the result')
    .option(
      '--input <file.jsonl>',
      'records to append: one {"partition", "key"|"keyBase64", "value"|"valueBase64", "headers"?, "timestamp"?} per line (see docs/local.md)',
    )
    .option(
      '--records <n>',
      `generated orders (default ${LOCAL_DEFAULTS.records}; not with --input; only for the orders transform)`,
      integer(1),
    )
    .option(
      '--transform <ref>',
      `a built-in transform's name or <path>[#<export>] of your module (default $EOS_TRANSFORM, else ${LOCAL_DEFAULTS.transform}); another than orders needs --input`,
    )
    .option(
      '--idempotency-key <source>',
      'header:<name> | json:<field> | transform | none (default $EOS_IDEMPOTENCY_KEY, else header:idempotency-key)',
    )
    .option(
      '--topic <name>',
      `the emulated topic's name (default the first of $EOS_TOPICS, else ${LOCAL_DEFAULT_TOPIC})`,
      topicName,
    )
    .option(
      '--batch-size <n>',
      `records per partition per invocation, as the event source mapping's batch size (default ${LOCAL_DEFAULTS.batchSize})`,
      integer(1, MAX_BATCH_SIZE),
    )
    .option('--partitions <p>', 'partitions of the topic', integer(1, 1000), LOCAL_DEFAULTS.partitions)
    .option(
      '--guarantee <g>',
      `${DELIVERY_GUARANTEES.join(' | ')} (default $EOS_DELIVERY_GUARANTEE, else ${LOCAL_DEFAULTS.guarantee})`,
      oneOf(DELIVERY_GUARANTEES),
    )
    .addOption(
      new Option(
        '--faults <spec>',
        'all | none | KIND=RATE,… (kinds: crash, redeliver, zombie, throttle, server-error, conflict, coordinator-crash, poison; see docs/local.md)',
      )
        .argParser(faults)
        .default(parseFaultSpec(LOCAL_DEFAULTS.faults), LOCAL_DEFAULTS.faults),
    )
    .option(
      '--seed <s>',
      'seed of the generator and the fault schedule',
      integer(0, 2 ** 32 - 1),
      LOCAL_DEFAULTS.seed,
    )
    .option(
      '--checkpoint-interval <ms>',
      'time between checkpoints',
      integer(1),
      LOCAL_DEFAULTS.checkpointIntervalMs,
    )
    .option(
      '--fail-on-dead-letter',
      'exit 1 when any record was dead-lettered (even when the run was exactly-once)',
    )
    .option('--export <dir>', 'write the final objects, manifests and keyed aggregates to this directory')
    .option('--report <file.json>', 'also write the report as JSON')
    .addHelpText(
      'after',
      `
Every processor setting is also read from its EOS_* variable, as the Lambda reads it (docs/configuration.md);
a flag wins over its variable. Unset, eos local uses the table ${LOCAL_SETTING_DEFAULTS.ledgerTable}, the bucket ${LOCAL_SETTING_DEFAULTS.bucket} and a
${LOCAL_SETTING_DEFAULTS.checkpointLeaseSeconds} s checkpoint lease; EOS_EVENT_SOURCE_ARN is checked but not applied (the emulated cluster has its own ARN).

Exit codes: 0 the run delivered its guarantee; 1 it did not, or --fail-on-dead-letter and a record was
dead-lettered; 2 bad usage, setting or input (nothing ran).`,
    )
    .action(async (options: LocalCommandOptions) => {
      try {
        process.exitCode = await runLocalCommand(options, deps);
      } catch (error) {
        // Our own errors (bad input file, setting, missing Java, …) say what is wrong: no stack, no help text.
        if (!(error instanceof PipelineError)) throw error;
        (deps.writeError ?? ((text: string) => process.stderr.write(text)))(`error: ${error.message}\n`);
        process.exitCode = 2;
      }
    });
}
