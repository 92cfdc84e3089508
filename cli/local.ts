/**
 * `eos local`: the whole pipeline on this machine, under injected faults. Starts the local parts (DynamoDB Local,
 * the S3 server), creates the table and bucket, runs the MSK emulator, the processor and the coordinator on the
 * fault schedule, drains the log, runs a final checkpoint and prints the report. Every option is checked (and the
 * input file read) before anything starts.
 */
import { writeFileSync } from 'node:fs';
import { SingleBar } from 'cli-progress';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { OptionError } from '../local/errors.ts';
import { type FaultRates, parseFaultSpec } from '../local/faults.ts';
import { generateOrders } from '../local/generator.ts';
import { type InputRecord, readInputFile } from '../local/input.ts';
import { type LocalParts, startLocalParts } from '../local/parts.ts';
import { createBucket, createLedgerTable } from '../local/provision.ts';
import { formatReport } from '../local/report.ts';
import { exportRun } from '../local/results.ts';
import { type RunReport, runLocal } from '../local/runner.ts';
import { createAwsClients } from '../shared/aws/clients.ts';
import { DELIVERY_GUARANTEES, type DeliveryGuarantee, parseSettings } from '../shared/config/settings.ts';
import { PipelineError } from '../shared/errors.ts';
import { finalPrefix } from '../shared/sink/layout.ts';
import { integer, oneOf } from './options.ts';

export const LOCAL_DEFAULTS = {
  records: 20_000,
  partitions: 4,
  guarantee: 'exactly-once',
  faults: 'all',
  seed: 1,
  checkpointIntervalMs: 2_000,
} as const;

export interface LocalCommandOptions {
  readonly input?: string;
  readonly records?: number;
  readonly partitions: number;
  readonly guarantee: DeliveryGuarantee;
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
}

/** The input to run: the file's records, or the seeded generator's. Throws before anything runs. */
export function inputFor(options: LocalCommandOptions): InputRecord[] {
  if (options.input !== undefined && options.records !== undefined) {
    throw new OptionError('--records', 'cannot be combined with --input (the file decides the records)');
  }
  if (options.input !== undefined) return readInputFile(options.input, options.partitions);
  return generateOrders({
    seed: options.seed,
    records: options.records ?? LOCAL_DEFAULTS.records,
    partitions: options.partitions,
    poisonRate: options.faults.poison,
  });
}

/** 0 when the run delivered the guarantee it asked for; exactly-once also needs a clean verify. */
export function exitCodeFor(report: RunReport): number {
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
  const input = inputFor(options);
  const parts = await (deps.startParts ?? (() => startLocalParts()))();
  try {
    // The SDK reads endpoints and credentials from the environment itself (AWS_ENDPOINT_URL_*, AWS_ACCESS_KEY_ID).
    Object.assign(process.env, parts.env);
    const clients = createAwsClients();
    const settings = parseSettings({
      pipelineId: 'orders',
      ledgerTable: 'eos-local-ledger',
      bucket: 'eos-local',
      deliveryGuarantee: options.guarantee,
      // A dead checkpoint's lease blocks the next one: locally 10 s (the final checkpoint jumps the clock past it).
      checkpointLeaseSeconds: 10,
    });
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
    return exitCodeFor(report);
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

export function registerLocalCommand(program: Command, deps: LocalDependencies = {}): Command {
  return program
    .command('local')
    .description('run the whole pipeline locally under injected faults, then report and verify the result')
    .option(
      '--input <file.jsonl>',
      'records to append: one {"partition", "key", "value", "headers"?} per line',
    )
    .option(
      '--records <n>',
      `generated orders (default ${LOCAL_DEFAULTS.records}; not with --input)`,
      integer(1),
    )
    .option('--partitions <p>', 'partitions of the topic', integer(1, 1000), LOCAL_DEFAULTS.partitions)
    .option(
      '--guarantee <g>',
      DELIVERY_GUARANTEES.join(' | '),
      oneOf(DELIVERY_GUARANTEES),
      LOCAL_DEFAULTS.guarantee,
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
    .option('--export <dir>', 'write the final objects, manifests and keyed aggregates to this directory')
    .option('--report <file.json>', 'also write the report as JSON')
    .action(async (options: LocalCommandOptions) => {
      try {
        process.exitCode = await runLocalCommand(options, deps);
      } catch (error) {
        // Our own errors (bad input file, missing Java, …) say what is wrong: no stack, no help text.
        if (!(error instanceof PipelineError)) throw error;
        (deps.writeError ?? ((text: string) => process.stderr.write(text)))(`error: ${error.message}\n`);
        process.exitCode = 2;
      }
    });
}
