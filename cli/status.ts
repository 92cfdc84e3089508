/**
 * `eos status`: a deployed (or local) pipeline's checkpoint history, per-partition offsets and uncommitted
 * staged files from the ledger, and the MSK cluster's state and authentication modes.
 *
 * `cli/eos.ts` registers it: `registerStatusCommand(program)`. The AWS clients are injectable for tests.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { KafkaClient } from '@aws-sdk/client-kafka';
import { type Command, InvalidArgumentError } from 'commander';
import { type Clock, systemClock } from '../shared/clock.ts';
import { readClusterStatus } from '../shared/status/cluster-status.ts';
import { formatStatus, type PipelineStatus, statusToJson } from '../shared/status/format.ts';
import { readLedgerStatus } from '../shared/status/ledger-status.ts';

export interface StatusDependencies {
  readonly dynamodb?: DynamoDBClient;
  readonly kafka?: KafkaClient;
  readonly clock?: Clock;
  /** Where the report goes (stdout by default). */
  readonly write?: (text: string) => void;
}

export interface StatusOptions {
  readonly table: string;
  readonly pipeline: string;
  readonly clusterArn?: string;
  readonly history: number;
  readonly json: boolean;
}

/** Reads and prints the status; resolves to the status for callers that want it. */
export async function runStatus(
  options: StatusOptions,
  deps: StatusDependencies = {},
): Promise<PipelineStatus> {
  const region = process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1';
  const dynamodb = deps.dynamodb ?? new DynamoDBClient({ region });
  const [ledger, cluster] = await Promise.all([
    readLedgerStatus({
      dynamodb,
      table: options.table,
      pipeline: options.pipeline,
      clock: deps.clock ?? systemClock,
      historyLimit: options.history,
    }),
    options.clusterArn
      ? readClusterStatus(
          deps.kafka ?? new KafkaClient({ region: regionOf(options.clusterArn) ?? region }),
          options.clusterArn,
        )
      : Promise.resolve(undefined),
  ]);
  const status: PipelineStatus = { ledger, cluster };
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  write(options.json ? `${JSON.stringify(statusToJson(status), null, 2)}\n` : formatStatus(status));
  return status;
}

export function registerStatusCommand(program: Command, deps: StatusDependencies = {}): Command {
  return program
    .command('status')
    .description(
      'checkpoint history, offsets per partition, uncommitted staged files and the MSK cluster state',
    )
    .option(
      '--table <name>',
      'the ledger table (default: $EOS_LEDGER_TABLE; the stack prints it as an output)',
      process.env.EOS_LEDGER_TABLE,
    )
    .option('--pipeline <id>', 'the pipeline id', process.env.EOS_PIPELINE_ID ?? 'orders')
    .option('--cluster-arn <arn>', 'the MSK cluster to describe (DescribeClusterV2)')
    .option('--history <n>', 'how many of the newest checkpoints to list', positiveInt, 10)
    .option('--json', 'print JSON instead of text', false)
    .action(
      async (raw: {
        table?: string;
        pipeline: string;
        clusterArn?: string;
        history: number;
        json: boolean;
      }) => {
        if (!raw.table) throw new InvalidArgumentError('--table is required (or set EOS_LEDGER_TABLE)');
        await runStatus({ ...raw, table: raw.table }, deps);
      },
    );
}

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0)
    throw new InvalidArgumentError(`expected a positive integer, got "${value}"`);
  return n;
}

/** The cluster's own region, so that `eos status` works whatever the shell's default region is. */
function regionOf(arn: string): string | undefined {
  return /^arn:[^:]+:kafka:([^:]+):/.exec(arn)?.[1];
}
