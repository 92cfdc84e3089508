/**
 * `eos status`: a deployed (or local) pipeline's checkpoint history, per-partition offsets and uncommitted
 * staged files from the ledger, and the MSK cluster's state and authentication modes.
 *
 * `cli/eos.ts` registers it: `registerStatusCommand(program)`. The AWS clients are injectable for tests; the
 * default ones follow the AWS chain (region, credentials, `--endpoint`/`AWS_ENDPOINT_URL`) and are loaded only
 * when the command runs.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { KafkaClient } from '@aws-sdk/client-kafka';
import type { Command } from 'commander';
import type { Clock } from '../shared/clock.ts';
import type { PipelineStatus } from '../shared/status/format.ts';
import { operatorEnvironment } from './environment.ts';
import { ENDPOINT_HELP, endpointUrl, integer } from './options.ts';

export interface StatusDependencies {
  readonly dynamodb?: DynamoDBClient;
  readonly kafka?: KafkaClient;
  readonly clock?: Clock;
  /** Where the report goes (stdout by default). */
  readonly write?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
}

export interface StatusOptions {
  readonly table: string;
  readonly pipeline: string;
  readonly clusterArn?: string;
  readonly history: number;
  readonly json: boolean;
  readonly endpoint?: string;
}

/** Reads and prints the status; resolves to the status for callers that want it. */
export async function runStatus(
  options: StatusOptions,
  deps: StatusDependencies = {},
): Promise<PipelineStatus> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, { readClusterStatus }, format, { readLedgerStatus }, clock] =
    await Promise.all([
      import('../shared/aws/clients.ts'),
      import('../shared/status/cluster-status.ts'),
      import('../shared/status/format.ts'),
      import('../shared/status/ledger-status.ts'),
      import('../shared/clock.ts'),
    ]);
  const owned = deps.dynamodb
    ? undefined
    : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const dynamodb = deps.dynamodb ?? owned!.dynamodb;
  let kafka = deps.kafka;
  if (options.clusterArn && !kafka) {
    const { KafkaClient } = await import('@aws-sdk/client-kafka');
    // The cluster's own region, so that `eos status` works whatever the shell's default region is.
    const region = environment.region(options.clusterArn);
    kafka = new KafkaClient({
      ...(region === undefined ? {} : { region }),
      ...(endpoint === undefined ? {} : { endpoint }),
    });
  }
  try {
    const [ledger, cluster] = await Promise.all([
      readLedgerStatus({
        dynamodb,
        table: options.table,
        pipeline: options.pipeline,
        clock: deps.clock ?? clock.systemClock,
        historyLimit: options.history,
      }),
      options.clusterArn && kafka ? readClusterStatus(kafka, options.clusterArn) : Promise.resolve(undefined),
    ]);
    const status: PipelineStatus = { ledger, cluster };
    const write = deps.write ?? ((text: string) => process.stdout.write(text));
    write(
      options.json
        ? `${JSON.stringify(format.statusToJson(status), null, 2)}\n`
        : format.formatStatus(status),
    );
    return status;
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
    if (kafka !== deps.kafka) kafka?.destroy();
  }
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
    )
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--cluster-arn <arn>', 'the MSK cluster to describe (DescribeClusterV2)')
    .option('--history <n>', 'how many of the newest checkpoints to list', integer(1), 10)
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .action(
      async (raw: {
        table?: string;
        pipeline?: string;
        clusterArn?: string;
        history: number;
        json: boolean;
        endpoint?: string;
      }) => {
        const environment = operatorEnvironment(deps.env);
        const table = environment.requiredTable(raw.table);
        const pipeline = environment.pipelineId(raw.pipeline);
        await runStatus({ ...raw, table, pipeline }, deps);
      },
    );
}
