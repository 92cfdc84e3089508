/**
 * `eos deliver --input FILE`: the records of an input file delivered to the processor as the stack's event source
 * mapping delivers them (`local/input-delivery.ts`), against the table and bucket named (AWS, or endpoints of
 * one's own); with `--generation G`, as generation G's replay mapping does (the processor in replay mode stages
 * the plan's ranges into the generation's lanes and acknowledges the rest unstaged). It runs no checkpoint:
 * `eos checkpoint` commits what it staged. The file is the topic, laid out as `eos local --input` lays it out.
 *
 * It runs the processor's code here, with the processor's settings: the same `EOS_*` variables the processor Lambda
 * has (docs/configuration.md), the flags winning over them. Exit codes: 0 every record delivered; 1 a partition
 * stopped (its offsets went backwards: `eos epoch`); 2 bad usage, settings or input file, or a batch the processor
 * refuses for good (a generation without a plan, say); 3 AWS cannot be used.
 */
import { statSync } from 'node:fs';
import { type Command, InvalidArgumentError } from 'commander';
import type { InputDelivery, PartitionDelivery } from '../local/input-delivery.ts';
import type { AwsClients } from '../shared/aws/clients.ts';
import { operatorEnvironment } from './environment.ts';
import { EXIT } from './failures.ts';
import { LOCAL_DEFAULT_TOPIC, LOCAL_DEFAULTS } from './local-defaults.ts';
import { ENDPOINT_HELP, endpointUrl, integer } from './options.ts';

export interface DeliverDependencies {
  readonly clients?: AwsClients;
  readonly write?: (text: string) => void;
  readonly writeError?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
}

export interface DeliverCommandOptions {
  readonly input: string;
  readonly generation?: number;
  readonly topic?: string;
  readonly partitions: number;
  /** `--partitions` left at its default: the file's partitions decide the count. */
  readonly partitionsFromInput?: boolean;
  readonly batchSize: number;
  readonly table?: string;
  readonly bucket?: string;
  readonly pipeline?: string;
  readonly transform?: string;
  readonly endpoint?: string;
  readonly json: boolean;
}

/** The mapping's batch size when `--batch-size` is not given: the emulator's, the stack's default. */
const DEFAULT_BATCH_SIZE = 100;
const PROGRESS_EVERY_MS = 3_000;

const plural = (n: number, word: string, many = `${word}s`) => `${n} ${n === 1 ? word : many}`;

function partitionLines(topic: string, p: PartitionDelivery): string[] {
  const name = `${topic}-${p.partition}`;
  const lines: string[] = [];
  if (p.records > 0 || p.stopped === undefined) {
    const staged =
      p.stagedRows + p.deadLettered > 0
        ? `${plural(p.stagedRows, 'output row')} and ${plural(p.deadLettered, 'dead letter')} staged`
        : 'nothing staged';
    const notes = [
      ...(p.duplicatesByOffset > 0 ? [`${p.duplicatesByOffset} redelivered`] : []),
      ...(p.duplicatesByKey > 0 ? [`${plural(p.duplicatesByKey, 'duplicate')} by key`] : []),
      ...p.lanes.filter((lane) => lane !== topic).map((lane) => `lane ${lane}`),
    ];
    lines.push(
      `${name}: offsets ${p.firstOffset}..${p.stopped ? p.stopped.firstOffset - 1 : p.lastOffset}: ` +
        `${plural(p.records, 'record')} in ${plural(p.batches, 'batch', 'batches')}: ${staged}` +
        (notes.length > 0 ? ` (${notes.join(', ')})` : ''),
    );
  }
  if (p.stopped !== undefined) {
    lines.push(
      `${name}: STOPPED at offsets ${p.stopped.firstOffset}..${p.stopped.lastOffset}: ${p.stopped.reason}; ` +
        'eos epoch shows the stop (docs/operations.md#offsets-went-backwards)',
    );
  }
  return lines;
}

export function formatDelivery(delivery: InputDelivery): string {
  const lines = delivery.partitions.flatMap((p) => partitionLines(delivery.topic, p));
  const staged = delivery.partitions.some((p) => p.stagedRows + p.deadLettered > 0);
  lines.push(staged ? 'next: eos checkpoint commits what was staged' : 'nothing new staged');
  return `${lines.join('\n')}\n`;
}

/** The file's modification time: the timestamp of its records without one, the same on every run of an unchanged file. */
function fileTime(file: string): number {
  try {
    return Math.floor(statSync(file).mtimeMs);
  } catch {
    return 0; // unreadable: reading the file says why, with its name
  }
}

/** The settings, the transform as the processor Lambda loads it, and the input records: all checked before any call. */
async function prepare(options: DeliverCommandOptions, env: NodeJS.ProcessEnv) {
  const environment = operatorEnvironment(env);
  const [{ settingsFromEnv }, { loadTransform, secretsFor, usesGlue }, adapter, glue, { readInput }] =
    await Promise.all([
      import('../shared/config/settings.ts'),
      import('../shared/transforms/load.ts'),
      import('../shared/transforms/adapter.ts'),
      import('../shared/decode/glue-schemas.ts'),
      import('./local-input.ts'),
    ]);
  const variables = environment.withSettingFlags(options);
  const parsed = settingsFromEnv(
    options.generation === undefined
      ? variables
      : { ...variables, EOS_REPLAY_GENERATION: String(options.generation) },
  );
  const topic = options.topic ?? parsed.topics?.[0] ?? LOCAL_DEFAULT_TOPIC;
  if (parsed.topics !== undefined && !parsed.topics.includes(topic)) {
    throw new InvalidArgumentError(
      `--topic ${topic} is not one of EOS_TOPICS (${parsed.topics.join(', ')}): the processor would refuse it`,
    );
  }
  const loaded = await loadTransform(parsed.transform);
  // As the processor Lambda decodes (infra/transform-entry.ts): Glue's schema versions from GetSchemaVersion.
  const transform = usesGlue(loaded.definition)
    ? adapter.toTransform(loaded.definition, {
        ...secretsFor(loaded.definition),
        glueGetSchemaVersion: glue.glueSchemaVersionLookup(),
      })
    : loaded.transform;
  const { records, partitions } = await readInput(
    options.input,
    options.partitions,
    options.partitionsFromInput,
  );
  return { settings: parsed, transform, records, partitions, topic, timestamp: fileTime(options.input) };
}

/** Progress on stderr every few seconds while records are delivered. */
function progressLine(writeError: (text: string) => void) {
  let last = Date.now();
  return (delivered: number, total: number) => {
    if (Date.now() - last < PROGRESS_EVERY_MS) return;
    last = Date.now();
    writeError(`progress: ${delivered}/${total} records delivered\n`);
  };
}

export async function runDeliver(
  options: DeliverCommandOptions,
  deps: DeliverDependencies = {},
): Promise<InputDelivery> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const { settings, transform, records, partitions, topic, timestamp } = await prepare(
    options,
    environment.variables,
  );
  const [{ createAwsClients }, { createProcessor }, { deliverInput }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/processor/processor.ts'),
    import('../local/input-delivery.ts'),
  ]);
  const owned = deps.clients
    ? undefined
    : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const clients = deps.clients ?? owned!;
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const writeError = deps.writeError ?? ((text: string) => process.stderr.write(text));
  try {
    const delivery = await deliverInput({
      processor: createProcessor({ settings, clients, transform }),
      records,
      topic,
      partitions,
      batchSize: options.batchSize,
      timestamp,
      ...(settings.eventSourceArn === undefined ? {} : { eventSourceArn: settings.eventSourceArn }),
      ...(settings.bootstrapServers === undefined ? {} : { bootstrapServers: settings.bootstrapServers }),
      onProgress: progressLine(writeError),
    });
    write(options.json ? `${JSON.stringify(delivery, null, 2)}\n` : formatDelivery(delivery));
    if (delivery.partitions.some((p) => p.stopped !== undefined)) process.exitCode = EXIT.violation;
    return delivery;
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
  }
}

export function registerDeliverCommand(program: Command, deps: DeliverDependencies = {}): Command {
  return program
    .command('deliver')
    .description(
      "deliver an input file's records to the processor as the event source mapping does (with --generation, a replay mapping); eos checkpoint commits them",
    )
    .requiredOption(
      '--input <file.jsonl>',
      'the records, as eos local --input takes them: the topic, each partition in file order (docs/local.md)',
    )
    .option(
      '--generation <g>',
      "as generation G's replay mapping: stage the plan's ranges into the generation (eos replay plans it)",
      integer(1, 999_999_999),
    )
    .option('--topic <name>', `the topic (default the first of $EOS_TOPICS, else ${LOCAL_DEFAULT_TOPIC})`)
    .option(
      '--partitions <p>',
      "the topic's partitions (as eos local's; at least as many as the --input file names)",
      integer(1, 1000),
      LOCAL_DEFAULTS.partitions,
    )
    .option(
      '--batch-size <n>',
      "records per partition per invocation, as the mapping's batch size",
      integer(1, 10_000),
      DEFAULT_BATCH_SIZE,
    )
    .option('--table <name>', 'the ledger table (default $EOS_LEDGER_TABLE)')
    .option('--bucket <name>', 'the bucket (default $EOS_BUCKET)')
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option(
      '--transform <ref>',
      "the transform: a built-in's name or <path>[#<export>] (default $EOS_TRANSFORM)",
    )
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .addHelpText(
      'after',
      `
Every other processor setting comes from its EOS_* variable, as the processor Lambda reads it. A record's offset
is its position within its partition in the file; records without a timestamp get the file's modification time,
so running it again with the same file is a redelivery (dropped), not a new topic. It runs no checkpoint: eos
checkpoint commits what it staged. Exit codes: 0 every record delivered; 1 a partition stopped (its offsets went
backwards: eos epoch); 2 bad usage, settings or input, or a batch the processor refuses; 3 AWS cannot be used.`,
    )
    .action(async (raw: DeliverCommandOptions, command: Command) => {
      const environment = operatorEnvironment(deps.env);
      environment.requiredTable(raw.table || undefined);
      environment.requiredBucket(raw.bucket || undefined);
      if (raw.topic !== undefined) {
        const { isValidTopicName } = await import('../shared/kafka/event.ts');
        if (!isValidTopicName(raw.topic)) {
          throw new InvalidArgumentError(`--topic ${JSON.stringify(raw.topic)} is not a Kafka topic name`);
        }
      }
      const output = command.configureOutput();
      const { partitionsFromInput } = await import('./local-input.ts');
      await runDeliver(
        { ...raw, partitionsFromInput: partitionsFromInput(raw, command) },
        {
          ...deps,
          write:
            deps.write ?? ((text) => (output.writeOut ?? process.stdout.write.bind(process.stdout))(text)),
          writeError:
            deps.writeError ??
            ((text) => (output.writeErr ?? process.stderr.write.bind(process.stderr))(text)),
        },
      );
    });
}
