/**
 * `eos epoch`: each partition's epochs and why a partition stopped; `--start-new` opens a new epoch for a stopped
 * partition (shared/ledger/epochs.ts and epoch-switch.ts).
 *
 * `cli/eos.ts` registers it. The DynamoDB client is injectable for tests; the default one follows the AWS chain
 * and is loaded only when the command runs. Exit codes: 0 done; 1 some partition was not switched (not stopped,
 * its stop not confirmed yet, or it changed meanwhile: the lines say what to do); 2 bad usage; 3 AWS cannot be
 * used.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { type Command, InvalidArgumentError } from 'commander';
import type { Clock } from '../shared/clock.ts';
import type { PartitionEpochs, PartitionSwitch } from '../shared/ledger/epoch-switch.ts';
import { stopSightings } from '../shared/ledger/epochs.ts';
import { operatorEnvironment } from './environment.ts';
import { ENDPOINT_HELP, endpointUrl, integer } from './options.ts';

export interface EpochDependencies {
  readonly dynamodb?: DynamoDBClient;
  readonly clock?: Clock;
  readonly write?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
}

export interface EpochOptions {
  readonly table: string;
  readonly pipeline: string;
  readonly topic?: string;
  readonly partition?: number;
  readonly startNew: boolean;
  readonly force: boolean;
  readonly json: boolean;
  readonly endpoint?: string;
}

export interface EpochResult {
  readonly partitions: readonly PartitionEpochs[];
  /** With `--start-new`: what happened to each partition. */
  readonly switched?: readonly PartitionSwitch[];
}

const iso = (ms: number) => new Date(ms).toISOString();

export function formatEpochs(partitions: readonly PartitionEpochs[]): string {
  if (partitions.length === 0) return 'no partition has staged anything yet\n';
  const lines: string[] = [];
  for (const p of partitions) {
    const current = p.epochs[p.epochs.length - 1]!;
    const stopped = current.stop !== undefined && current.stop.fence === current.stagedOffset;
    lines.push(
      `${p.topic}-${p.partition}: epoch ${p.epoch} (${current.lane}), fence ${current.stagedOffset}, ${stopped ? 'STOPPED' : 'running'}`,
    );
    if (stopped) {
      const stop = current.stop!;
      const seen = stopSightings(stop);
      lines.push(
        `  stopped ${iso(stop.at)}: batch ${stop.firstOffset}..${stop.lastOffset} against fence ${stop.fence}: ${stop.reason}`,
        seen >= 2
          ? `  confirmed: seen by ${seen} invocations`
          : '  seen by one invocation only: not confirmed until the mapping retries the batch (eos epoch --start-new waits for it)',
        `  a recreated topic or a migrated cluster: eos epoch --start-new --topic ${p.topic} --partition ${p.partition}`,
        '  a consumer group reset to records already staged: reset the mapping to the fence instead (docs/operations.md)',
      );
    }
    for (const old of p.epochs.slice(0, -1)) {
      const why = old.stop
        ? `: stopped by batch ${old.stop.firstOffset}..${old.stop.lastOffset}: ${old.stop.reason}`
        : '';
      lines.push(
        `  epoch ${old.epoch} (${old.lane}): fence ${old.stagedOffset}, closed ${old.closedAt === undefined ? '?' : iso(old.closedAt)}${why}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

function switchLine({ topic, partition, outcome }: PartitionSwitch): string {
  const name = `${topic}-${partition}`;
  switch (outcome.kind) {
    case 'opened':
      return `${name}: epoch ${outcome.epoch} opened; epoch ${outcome.epoch - 1} closed at fence ${outcome.closedFence} (its staged data is committed by the next checkpoint)`;
    case 'fresh':
      return `${name}: epoch ${outcome.epoch} has staged nothing yet: left as it is`;
    case 'not-stopped':
      return `${name}: NOT switched: epoch ${outcome.epoch} is not stopped (fence ${outcome.stagedOffset}); --force switches it anyway (a redelivery in flight would then be staged again in the new epoch)`;
    case 'unconfirmed':
      return `${name}: NOT switched: its stop (batch ${outcome.stop.firstOffset}..${outcome.stop.lastOffset} against fence ${outcome.stagedOffset}) was seen by one invocation only; the mapping retries a batch whose offsets truly went backwards, which confirms the stop: run the command again after that retry (eos epoch shows it confirmed), or --force if you know the offsets went backwards (a false stop from a stale invocation is never retried)`;
    case 'changed':
      return `${name}: NOT switched: its fence changed while this ran; run the command again`;
  }
}

export function formatSwitches(switched: readonly PartitionSwitch[]): string {
  if (switched.length === 0) return 'no partition of that topic has staged anything: nothing to switch\n';
  return `${switched.map(switchLine).join('\n')}\n`;
}

export async function runEpoch(options: EpochOptions, deps: EpochDependencies = {}): Promise<EpochResult> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, { EpochLedger }, { systemClock }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/ledger/epoch-switch.ts'),
    import('../shared/clock.ts'),
  ]);
  const owned = deps.dynamodb
    ? undefined
    : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const dynamodb = deps.dynamodb ?? owned!.dynamodb;
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  try {
    const ledger = new EpochLedger(dynamodb, options.table, options.pipeline, deps.clock ?? systemClock);
    const selected = (all: readonly PartitionEpochs[]) =>
      all.filter(
        (p) =>
          (options.topic === undefined || p.topic === options.topic) &&
          (options.partition === undefined || p.partition === options.partition),
      );
    let switched: PartitionSwitch[] | undefined;
    if (options.startNew) {
      const targets =
        options.partition === undefined
          ? selected(await ledger.partitions()).map((p) => p.partition)
          : [options.partition];
      switched = [];
      // One partition at a time: each switch is its own conditional write, so a crash leaves every partition
      // switched or not, and running the command again finishes the rest (module doc of epoch-switch.ts).
      for (const partition of targets) {
        const outcome = await ledger.startNew(options.topic!, partition, { force: options.force });
        switched.push({ topic: options.topic!, partition, outcome });
      }
      const refused = new Set(['not-stopped', 'unconfirmed', 'changed']);
      if (switched.some((s) => refused.has(s.outcome.kind))) {
        process.exitCode = 1;
      }
    }
    const partitions = selected(await ledger.partitions());
    if (options.json) {
      write(`${JSON.stringify({ partitions, ...(switched ? { switched } : {}) }, null, 2)}\n`);
    } else {
      write(switched ? formatSwitches(switched) : formatEpochs(partitions));
    }
    return { partitions, ...(switched ? { switched } : {}) };
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
  }
}

export function registerEpochCommand(program: Command, deps: EpochDependencies = {}): Command {
  return program
    .command('epoch')
    .description(
      "each partition's epochs and why it stopped; --start-new opens a new epoch for a stopped partition (a recreated topic, a migrated cluster)",
    )
    .option(
      '--table <name>',
      'the ledger table (default: $EOS_LEDGER_TABLE; the stack prints it as an output)',
    )
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--topic <name>', 'only this topic (required with --start-new)')
    .option('--partition <n>', 'only this partition', integer(0, 2_147_483_647))
    .option(
      '--start-new',
      'open a new epoch from the current source position (stopped partitions only)',
      false,
    )
    .option('--force', 'with --start-new: switch partitions that are not stopped too', false)
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .action(
      async (raw: {
        table?: string;
        pipeline?: string;
        topic?: string;
        partition?: number;
        startNew: boolean;
        force: boolean;
        json: boolean;
        endpoint?: string;
      }) => {
        const environment = operatorEnvironment(deps.env);
        const table = environment.requiredTable(raw.table);
        if (raw.startNew && raw.topic === undefined) {
          throw new InvalidArgumentError('--start-new needs --topic (and optionally --partition)');
        }
        if (raw.force && !raw.startNew) throw new InvalidArgumentError('--force only goes with --start-new');
        // The processor's own rule (loaded here, not at --help: it brings the event schema).
        const { isValidTopicName } = await import('../shared/kafka/event.ts');
        if (raw.topic !== undefined && !isValidTopicName(raw.topic)) {
          throw new InvalidArgumentError(`--topic ${JSON.stringify(raw.topic)} is not a Kafka topic name`);
        }
        const pipeline = environment.pipelineId(raw.pipeline);
        await runEpoch({ ...raw, table, pipeline }, deps);
      },
    );
}
