/**
 * `eos replay`: reprocess an offset range with the current transform into a new output generation, and switch
 * readers to it once it is committed (shared/replay/).
 *
 * - `eos replay --topic T --from-offset N [--to-offset N] [--partitions 0,1]` writes the next generation's plan;
 *   the replay mapping (the stack's `replay` prop, docs/deploy.md) then stages the range;
 * - `eos replay --topic T --from-timestamp TIME [--to-timestamp TIME] (--cluster-arn A | --bootstrap-servers S)`
 *   asks the brokers for the offsets at those times (`shared/kafka/kafkajs-offsets.ts`) and plans those;
 * - `eos replay` shows every plan's progress;
 * - `eos replay --switch G` asks the coordinator to switch readers to generation G at the first checkpoint that
 *   covers every range (ask at any time: it waits for the rest).
 *
 * Exit codes: 0 done; 2 bad usage or a plan that cannot be (the line says why); 3 AWS cannot be used.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { S3Client } from '@aws-sdk/client-s3';
import { type Command, InvalidArgumentError } from 'commander';
import type { Clock } from '../shared/clock.ts';
import {
  BrokersUnavailableError,
  KAFKA_AUTHS,
  type KafkaAuth,
  type OffsetsByTime,
} from '../shared/kafka/offsets-by-time.ts';
import type { PlannedReplay, ReplayStatus } from '../shared/replay/replay.ts';
import type { RequestSwitchOutcome } from '../shared/replay/store.ts';
import type { GenerationSwitch } from '../shared/sink/generation-switch.ts';
import { type OperatorEnvironment, operatorEnvironment } from './environment.ts';
import { ENDPOINT_HELP, endpointUrl, integer, oneOf } from './options.ts';
import {
  checkPlanOptions,
  checkViewOptions,
  partitionList,
  partitionOffsets,
  type ReplayFlags,
  timestamp,
} from './replay-flags.ts';
import { formatPlanned, formatStatus, switchText } from './replay-format.ts';

export { formatPlanned, formatStatus, partitionList, partitionOffsets };

export interface ReplayDependencies {
  readonly dynamodb?: DynamoDBClient;
  readonly s3?: S3Client;
  readonly clock?: Clock;
  readonly write?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
  /** Offsets at a time, instead of the brokers (tests and `eos local` pass the emulated log). */
  readonly offsetsByTime?: OffsetsByTime;
}

export interface ReplayOptions {
  readonly table: string;
  readonly pipeline: string;
  readonly topic?: string;
  readonly fromOffset?: number;
  /** Per partition: `--from-offsets 0=120,1=340`. */
  readonly fromOffsets?: ReadonlyMap<number, number>;
  readonly toOffset?: number;
  /** Epoch ms: plan from the offsets at this time (the brokers', or `offsetsByTime`). */
  readonly fromTimestamp?: number;
  readonly toTimestamp?: number;
  readonly bootstrapServers?: readonly string[];
  readonly clusterArn?: string;
  readonly kafkaAuth?: KafkaAuth;
  readonly partitions?: readonly number[];
  readonly switch?: number;
  /** Print the Athena view of the rows readers show (needs the bucket: the switches are in the manifests). */
  readonly athenaView?: boolean;
  readonly bucket?: string;
  readonly database?: string;
  readonly athenaTable?: string;
  readonly view?: string;
  readonly json: boolean;
  readonly endpoint?: string;
}

export type ReplayResult =
  | { readonly kind: 'planned'; readonly planned: PlannedReplay }
  | { readonly kind: 'switch'; readonly generation: number; readonly outcome: RequestSwitchOutcome }
  | { readonly kind: 'status'; readonly replays: readonly ReplayStatus[] }
  | {
      readonly kind: 'athena-view';
      readonly statement: string;
      readonly switches: readonly GenerationSwitch[];
    };

export async function runReplay(
  options: ReplayOptions,
  deps: ReplayDependencies = {},
): Promise<ReplayResult> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, replay, { systemClock }, { ReplayPlanError }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/replay/replay.ts'),
    import('../shared/clock.ts'),
    import('../shared/sink/generation-switch.ts'),
  ]);
  const needsS3 = options.athenaView === true && deps.s3 === undefined;
  const owned =
    deps.dynamodb && !needsS3
      ? undefined
      : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const dynamodb = deps.dynamodb ?? owned!.dynamodb;
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const clock = deps.clock ?? systemClock;
  const target = { clients: { dynamodb }, table: options.table, pipeline: options.pipeline };
  const print = (result: ReplayResult, text: string) => {
    write(options.json ? `${JSON.stringify(result, null, 2)}\n` : text);
    return result;
  };
  try {
    if (options.athenaView === true) {
      const result = await athenaView(options, deps.s3 ?? owned!.s3);
      return print(result, `${result.statement};\n`);
    }
    if (options.switch !== undefined) {
      const outcome = await replay.requestSwitch(target, options.switch, clock);
      if (outcome === 'no-plan') {
        throw new ReplayPlanError(`generation ${options.switch} has no replay plan in ${options.table}`);
      }
      return print(
        { kind: 'switch', generation: options.switch, outcome },
        switchText(options.switch, outcome),
      );
    }
    if (options.topic !== undefined && options.fromTimestamp !== undefined) {
      const planned = await brokersUsable(() =>
        planAtTimes(options, deps, environment, endpoint, (offsetsByTime) =>
          replay.planReplayAtTimes({
            ...target,
            topic: options.topic!,
            offsetsByTime,
            times: {
              from: options.fromTimestamp!,
              ...(options.toTimestamp === undefined ? {} : { to: options.toTimestamp }),
            },
            ...(options.partitions === undefined ? {} : { partitions: options.partitions }),
            clock,
          }),
        ),
      );
      return print({ kind: 'planned', planned }, formatPlanned(planned, options.pipeline));
    }
    if (options.topic !== undefined) {
      const planned = await replay.planReplay({
        ...target,
        topic: options.topic,
        fromOffset: options.fromOffsets ?? options.fromOffset!,
        ...(options.toOffset === undefined ? {} : { toOffset: options.toOffset }),
        ...(options.partitions === undefined ? {} : { partitions: options.partitions }),
        clock,
      });
      return print({ kind: 'planned', planned }, formatPlanned(planned, options.pipeline));
    }
    const replays = await replay.replayStatus(target);
    return print({ kind: 'status', replays }, formatStatus(replays));
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
  }
}

/**
 * The `CREATE OR REPLACE VIEW` of the analytics table's rows readers show (`shared/replay/current-view.ts`), from the
 * switches of the manifest log (read in full, as readers do). Run the statement in Athena after every switch.
 */
async function athenaView(
  options: ReplayOptions,
  s3: S3Client,
): Promise<Extract<ReplayResult, { kind: 'athena-view' }>> {
  const [{ readManifests }, { parseGenerationSwitch }, view] = await Promise.all([
    import('../shared/sink/reader.ts'),
    import('../shared/sink/generation-switch.ts'),
    import('../shared/replay/current-view.ts'),
  ]);
  const switches: GenerationSwitch[] = [];
  for await (const manifest of readManifests({ s3, bucket: options.bucket!, pipeline: options.pipeline })) {
    for (const change of manifest.generations ?? []) switches.push(parseGenerationSwitch(change));
  }
  const statement = view.athenaViewStatement({
    database: options.database ?? view.analyticsDatabaseName(options.pipeline),
    table: options.athenaTable ?? 'output',
    view: options.view ?? 'output_current',
    switches,
  });
  return { kind: 'athena-view', statement, switches };
}

/** Runs `work` with the offsets by time given (tests, `eos local`), else with the brokers', connected for it. */
async function planAtTimes<T>(
  options: ReplayOptions,
  deps: ReplayDependencies,
  environment: OperatorEnvironment,
  endpoint: string | undefined,
  work: (offsetsByTime: OffsetsByTime) => Promise<T>,
): Promise<T> {
  if (deps.offsetsByTime !== undefined) return work(deps.offsetsByTime);
  const brokers = await connectBrokers(options, environment, endpoint);
  try {
    return await work(brokers.offsets);
  } finally {
    // A failed disconnect changes nothing written or to print: it must not turn a plan into exit 1.
    await brokers.close().catch(() => {});
  }
}

/**
 * Brokers that cannot be used (unreachable, refusing the credentials or the topic) are "AWS cannot be reached or
 * used" (exit 3), as an unreachable table is; a wrong topic or time stays bad input (exit 2).
 */
async function brokersUsable<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    if (!(error instanceof BrokersUnavailableError)) throw error;
    const { AwsUnavailableError } = await import('./failures.ts');
    throw new AwsUnavailableError(error.message, { cause: error });
  }
}

/** The brokers' offsets by time, connected as the options say (`--cluster-arn` reads the bootstrap list). */
async function connectBrokers(
  options: ReplayOptions,
  environment: OperatorEnvironment,
  endpoint: string | undefined,
) {
  const kafkajs = await import('../shared/kafka/kafkajs-offsets.ts');
  const auth = options.kafkaAuth ?? 'iam';
  const region = environment.region(options.clusterArn || undefined);
  let bootstrapServers = options.bootstrapServers;
  if (bootstrapServers === undefined) {
    const { KafkaClient } = await import('@aws-sdk/client-kafka');
    const kafka = new KafkaClient({
      ...(region === undefined ? {} : { region }),
      ...(endpoint === undefined ? {} : { endpoint }),
    });
    try {
      bootstrapServers = await kafkajs.clusterBootstrapServers(kafka, options.clusterArn!, auth);
    } finally {
      kafka.destroy();
    }
  }
  return kafkajs.connectOffsetsByTime({
    bootstrapServers,
    auth,
    env: environment.variables,
    ...(region === undefined ? {} : { region }),
  });
}

export function registerReplayCommand(program: Command, deps: ReplayDependencies = {}): Command {
  return program
    .command('replay')
    .description(
      'reprocess an offset range (or the records of a time span) with the current transform into a new output generation; readers switch to it once it is committed',
    )
    .option(
      '--topic <name>',
      'plan a replay of this topic (from --from-offset, --from-offsets or --from-timestamp)',
    )
    .option('--from-offset <n>', 'the first offset replayed, in every partition named', integer(0))
    .option(
      '--from-offsets <list>',
      'the first offset per partition, <partition>=<offset> comma-separated (a point in time: what kafka-get-offsets --time prints)',
      partitionOffsets,
    )
    .option(
      '--from-timestamp <time>',
      'replay the records from this time on: per partition, the earliest offset at or after it, as the brokers give it (ISO 8601 with a zone, a date, or epoch ms)',
      timestamp,
    )
    .option(
      '--to-timestamp <time>',
      'with --from-timestamp: stop before the records at or after this time',
      timestamp,
    )
    .option(
      '--cluster-arn <arn>',
      'with --from-timestamp: the MSK cluster to ask (its bootstrap brokers for --kafka-auth)',
    )
    .option(
      '--bootstrap-servers <list>',
      'with --from-timestamp: the brokers to ask, host:port comma-separated (instead of --cluster-arn)',
      (value: string) => value.split(',').map((server) => server.trim()),
    )
    .option(
      '--kafka-auth <method>',
      "how to connect to the brokers: iam (default; the shell's AWS credentials), scram-sha-512 or scram-sha-256 (EOS_KAFKA_USERNAME, EOS_KAFKA_PASSWORD), tls, plaintext",
      oneOf(KAFKA_AUTHS),
    )
    .option(
      '--to-offset <n>',
      "the last offset replayed (default and at most: each partition's last staged offset)",
      integer(0),
    )
    .option(
      '--partitions <list>',
      'only these partitions, comma-separated (default: every staged one)',
      partitionList,
    )
    .option(
      '--switch <generation>',
      'move readers to that generation once all its ranges are committed',
      integer(1, 999_999_999),
    )
    .option(
      '--athena-view',
      'print the CREATE VIEW statement of the Athena table rows readers show (after each switch; needs --bucket)',
    )
    .option('--bucket <name>', 'with --athena-view: the bucket (default $EOS_BUCKET)')
    .option('--database <name>', 'with --athena-view: the Glue database (default eos_<pipeline>)')
    .option('--athena-table <name>', 'with --athena-view: the table (default output)')
    .option('--view <name>', 'with --athena-view: the view to create (default output_current)')
    .option(
      '--table <name>',
      'the ledger table (default: $EOS_LEDGER_TABLE; the stack prints it as an output)',
    )
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .addHelpText(
      'after',
      `
Without --topic or --switch it shows every replay's progress. A replay stages into its own generation; readers
(eos read, eos query, the committed reader) keep the earlier one until the checkpoint that switches, then show the
new one for exactly the replayed ranges. Keyed state is not replayed. Exit codes: 0 done; 2 bad usage or a plan
that cannot be; 3 AWS cannot be reached or used.`,
    )
    .action(async (raw: ReplayFlags) => {
      const environment = operatorEnvironment(deps.env);
      // The view reads the bucket only.
      const table =
        raw.athenaView === true ? (environment.table(raw.table) ?? '') : environment.requiredTable(raw.table);
      checkViewOptions(raw, environment);
      checkPlanOptions(raw, deps.offsetsByTime !== undefined);
      const { isValidTopicName } = await import('../shared/kafka/event.ts');
      if (raw.topic !== undefined && !isValidTopicName(raw.topic)) {
        throw new InvalidArgumentError(`--topic ${JSON.stringify(raw.topic)} is not a Kafka topic name`);
      }
      const pipeline = environment.pipelineId(raw.pipeline);
      const bucket = environment.bucket(raw.bucket);
      await runReplay({ ...raw, table, pipeline, ...(bucket === undefined ? {} : { bucket }) }, deps);
    });
}
