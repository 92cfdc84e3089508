/**
 * `eos local`: the whole pipeline on this machine, under injected faults. Starts the local parts (DynamoDB Local,
 * the S3 server), creates the table and bucket, runs the MSK emulator, the processor and the coordinator on the
 * fault schedule, drains the log, runs a final checkpoint and prints the report. Every option and `EOS_*` variable
 * is checked, the transform loaded and the input file read before anything starts (cli/local-settings.ts).
 *
 * This module registers the command; the run is cli/local-run.ts.
 *
 * Exit codes: 0 the run delivered its guarantee; 1 it did not, or `--fail-on-dead-letter` and a record was
 * dead-lettered; 2 bad usage or input (nothing ran).
 */
import { type Command, Option } from 'commander';
import type { FaultRates } from '../local/faults.ts';
import { reportFailure } from './failures.ts';
import {
  GUARANTEES,
  LOCAL_DEFAULT_TOPIC,
  LOCAL_DEFAULTS,
  LOCAL_SETTING_DEFAULTS,
  MAX_BATCH_SIZE,
  MISSING_KEY_CHOICES,
} from './local-defaults.ts';
import { partitionsFromInput } from './local-input.ts';
import { LOCAL_SCENARIOS, type LocalCommandOptions, type LocalDependencies } from './local-options.ts';
import { LOCAL_OUTPUTS } from './local-output.ts';
import { runLocalCommand } from './local-run.ts';
import { ENDPOINT_HELP, endpointUrl, integer, oneOf } from './options.ts';

export { checkOutputPaths, inputFor } from './local-input.ts';
export {
  LOCAL_SCENARIOS,
  type LocalCommandOptions,
  type LocalDependencies,
  type LocalScenario,
} from './local-options.ts';
export { existingPartsEnv, type PartsPlan, partsPlan } from './local-parts-plan.ts';
export { exitCodeFor } from './local-run.ts';
export { secondGenerationFor, withGbpBug } from './local-scenarios.ts';
export { LOCAL_DEFAULTS, MAX_BATCH_SIZE, runLocalCommand };

/**
 * `--faults`, parsed when the command runs: the parser lives with the fault schedule, which loads the processor
 * and the AWS SDK, and `--help` must not. The error reads as commander's own for a bad option value.
 */
async function parseFaults(value: string, command: Command): Promise<FaultRates> {
  const { parseFaultSpec } = await import('../local/faults.ts');
  try {
    return parseFaultSpec(value);
  } catch (error) {
    const reason = (error as Error).message.replace(/^--faults: /, '');
    return command.error(`error: option '--faults <spec>' argument '${value}' is invalid. ${reason}`, {
      exitCode: 2,
      code: 'commander.invalidArgument',
    });
  }
}

/** `--topic`, checked when the command runs (the check loads the event schema); reads as commander's error. */
async function checkTopic(value: string | undefined, command: Command): Promise<void> {
  if (value === undefined) return;
  const { checkTopicName } = await import('./local-settings.ts');
  try {
    checkTopicName(value);
  } catch (error) {
    command.error(
      `error: option '--topic <name>' argument '${value}' is invalid. ${(error as Error).message}`,
      { exitCode: 2, code: 'commander.invalidArgument' },
    );
  }
}

/** The options that say what the run processes and how: its input, transform and processor settings. */
function withInputOptions(command: Command): Command {
  return command
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
    .addOption(
      new Option(
        '--missing-idempotency-key <choice>',
        'a record in which the key source finds nothing: dead-letter it, or process it with offset dedupe only; counted either way (default $EOS_MISSING_IDEMPOTENCY_KEY, else dead-letter)',
      ).choices(MISSING_KEY_CHOICES),
    )
    .option(
      '--topic <name>',
      `the emulated topic's name (default the first of $EOS_TOPICS, else ${LOCAL_DEFAULT_TOPIC})`,
    )
    .option(
      '--batch-size <n>',
      `records per partition per invocation, as the event source mapping's batch size (default ${LOCAL_DEFAULTS.batchSize})`,
      integer(1, MAX_BATCH_SIZE),
    )
    .option(
      '--partitions <p>',
      'partitions of the topic (with --input: at least as many as the file names)',
      integer(1, 1000),
      LOCAL_DEFAULTS.partitions,
    )
    .addOption(
      new Option(
        '--format <format>',
        "the committed objects' format (default $EOS_OUTPUT_FORMAT, else ndjson, or parquet with --output iceberg; see docs/output.md)",
      ).choices(['ndjson', 'parquet']),
    )
    .addOption(
      new Option(
        '--partition-by <granularity>',
        'time folders of the committed objects, by record time (default $EOS_TIME_PARTITIONING, else none)',
      ).choices(['none', 'day', 'hour']),
    )
    .option(
      '--time-field <column>',
      "with --partition-by: the output column whose time files a row (default $EOS_TIME_FIELD, else the record's Kafka timestamp)",
    )
    .addOption(
      new Option(
        '--final-objects <layout>',
        'NDJSON final objects: merged (a few a checkpoint, partitions as slices) or partition (one a partition); default $EOS_FINAL_OBJECTS, else merged',
      ).choices(['merged', 'partition']),
    )
    .option(
      '--guarantee <g>',
      `${GUARANTEES.join(' | ')} (default $EOS_DELIVERY_GUARANTEE, else ${LOCAL_DEFAULTS.guarantee})`,
      oneOf(GUARANTEES),
    );
}

/** The options that say how the run goes: its faults, checkpoints, scenario, outputs and endpoints. */
function withRunOptions(command: Command): Command {
  return command
    .addOption(
      new Option(
        '--faults <spec>',
        'all | none | KIND=RATE,… (kinds: crash, redeliver, zombie, throttle, server-error, conflict, coordinator-crash, poison; see docs/local.md)',
      ).default(LOCAL_DEFAULTS.faults, LOCAL_DEFAULTS.faults),
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
    .addOption(
      new Option(
        '--scenario <name>',
        'an operations scenario: recreate-topic (the topic is recreated mid-run; stopped partitions move to a new epoch; verdict per epoch) | redrive (the transform has a bug; after the run its dead letters are redriven with the fix, twice) | replay (the transform has a bug; after the run a range is replayed with the fix into a new generation; readers checked at every checkpoint)',
      ).choices(LOCAL_SCENARIOS),
    )
    .addOption(
      new Option(
        '--output <kind>',
        'files: the committed objects and their manifests (the default) | iceberg: also an Iceberg table of them in the bucket, one snapshot per committed checkpoint, read back by icebird and judged (Parquet, exactly-once; see docs/output.md)',
      ).choices(LOCAL_OUTPUTS),
    )
    .option(
      '--reuse',
      'run even when the table or bucket already holds this pipeline (an earlier run against the same endpoints); the verdict then judges those rows too',
    )
    .option(
      '--export <dir>',
      'write the final objects, manifests and keyed aggregates to this directory (replacing an earlier export of the pipeline)',
    )
    .option('--report <file.json>', 'also write the report as JSON')
    .option(
      '--endpoint <url>',
      `${ENDPOINT_HELP}: run against it (DynamoDB and S3 both) instead of starting DynamoDB Local and the S3 server`,
      endpointUrl,
    )
    .option(
      '--dynamodb-endpoint <url>',
      'an existing DynamoDB endpoint (DynamoDB Local started apart); default $AWS_ENDPOINT_URL_DYNAMODB',
      endpointUrl,
    )
    .option(
      '--s3-endpoint <url>',
      'an existing S3-compatible endpoint; default $AWS_ENDPOINT_URL_S3',
      endpointUrl,
    );
}

export function registerLocalCommand(program: Command, deps: LocalDependencies = {}): Command {
  const command = program
    .command('local')
    .description('run the whole pipeline locally under injected faults, then report and verify the result');
  return withRunOptions(withInputOptions(command))
    .addHelpText(
      'after',
      `
Every processor setting is also read from its EOS_* variable, as the Lambda reads it (docs/configuration.md);
a flag wins over its variable. Unset, eos local uses the table ${LOCAL_SETTING_DEFAULTS.ledgerTable}, the bucket ${LOCAL_SETTING_DEFAULTS.bucket} and a
${LOCAL_SETTING_DEFAULTS.checkpointLeaseSeconds} s checkpoint lease; EOS_EVENT_SOURCE_ARN is checked but not applied (the emulated cluster has its own ARN).

With --endpoint (or AWS_ENDPOINT_URL), or --dynamodb-endpoint and --s3-endpoint, it runs against servers
already started (LocalStack; DynamoDB Local and an S3 server) and starts nothing.

Exit codes: 0 the run delivered its guarantee; 1 it did not, or --fail-on-dead-letter and a record was
dead-lettered; 2 bad usage, setting or input (nothing ran); 3 the endpoints cannot be reached or used.`,
    )
    .action(async (raw: Omit<LocalCommandOptions, 'faults'> & { faults: string }, command: Command) => {
      await checkTopic(raw.topic, command);
      const options: LocalCommandOptions = {
        ...raw,
        faults: await parseFaults(raw.faults, command),
        partitionsFromInput: partitionsFromInput(raw, command),
      };
      try {
        process.exitCode = await runLocalCommand(options, deps);
      } catch (error) {
        // Reported here rather than by the caller so that the in-process callers (tests) see the same line.
        process.exitCode = reportFailure(error, deps.writeError);
      }
    });
}
