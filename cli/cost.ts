/**
 * `eos cost`: the monthly bill of this pipeline at a steady rate, exactly-once and at-least-once, line by line,
 * beside Firehose and a Managed Flink estimate. Everything it multiplies comes from `cli/cost-counts.json`: the
 * calls per batch and per checkpoint the benchmark counted on the local parts, the stack's defaults and the list
 * prices with their date (cli/cost-model.ts says how they combine). Nothing is called: it works offline, installed.
 *
 * `cli/eos.ts` registers it. Exit codes: 0 printed; 2 bad input (one line).
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import type { Bill, CostCounts, CostInput, MonthlyCost } from './cost-model.ts';
import { integer } from './options.ts';

export interface CostDependencies {
  /** The counts to price with; default the shipped `cli/cost-counts.json`. */
  readonly counts?: CostCounts;
  readonly write?: (text: string) => void;
}

/** A finite number above 0 (records/s may be a fraction: one record every ten seconds is 0.1). */
function positive(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0)
    throw new InvalidArgumentError('expected a number above 0');
  return n;
}

async function shippedCounts(): Promise<CostCounts> {
  const module = await import('./cost-counts.json', { with: { type: 'json' } });
  return module.default as unknown as CostCounts;
}

const usd = (n: number) => n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });
const count = (n: number) => Math.round(n).toLocaleString('en-US');

function billLines(title: string, bill: Bill): string[] {
  return [
    title,
    ...bill.lines.map(
      (l) =>
        `  ${l.item.padEnd(44)} ${`${count(l.quantity)} ${l.unit}`.padStart(30)} ${usd(l.usd).padStart(12)}`,
    ),
    `  ${'total'.padEnd(44)} ${''.padStart(30)} ${usd(bill.total).padStart(12)}`,
  ];
}

export function formatCost(cost: MonthlyCost): string {
  const { input, traffic } = cost;
  const cp = traffic.checkpoint;
  const options = [
    ['this pipeline, exactly-once', cost.exactlyOnce.total],
    ['this pipeline, at-least-once', cost.atLeastOnce.total],
    ['Firehose', cost.firehose.total],
    ['Managed Flink', cost.managedFlink.total],
  ] as const;
  const cheapest = [...options].sort((a, b) => a[1] - b[1])[0]!;
  return `${[
    `${input.recordsPerSecond} records/s of ${input.recordBytes} B over ${input.partitions} partitions; batching ` +
      `window ${input.batchingWindowSeconds} s, batch size ${input.batchSize}, a checkpoint every ` +
      `${input.checkpointIntervalMinutes} min on the ${input.coordinatorWorkflow ?? 'standard'} workflow, ${input.stateKeys} state keys at most per batch`,
    `traffic: ${traffic.batchesPerSecond.toFixed(2)} batches/s of ${traffic.recordsPerBatch.toFixed(1)} records ` +
      `(one staged file each); each checkpoint covers ${count(cp.partitions)} partitions, ` +
      `${count(cp.stagedFiles)} staged files, ${count(cp.finalObjects)} final objects`,
    `calls counted by the benchmark ${cost.countsMeasuredAt}; list prices as of ${cost.pricesAsOf}; USD per 30-day month`,
    '',
    ...billLines('exactly-once', cost.exactlyOnce),
    ...billLines('at-least-once', cost.atLeastOnce),
    ...billLines('Firehose to S3 (at-least-once, no keyed state)', cost.firehose),
    ...billLines(
      'Managed Flink (an estimate: KPUs from an assumed throughput each; --flink-kpus sets them)',
      cost.managedFlink,
    ),
    '',
    'Not included, the same for every option: the MSK cluster and S3 storage.',
    '',
    `cheapest: ${cheapest[0]} (${usd(cheapest[1])} USD/month); exactly-once / at-least-once: ` +
      `${(cost.exactlyOnce.total / cost.atLeastOnce.total).toFixed(2)}`,
  ].join('\n')}\n`;
}

interface RawOptions {
  recordsPerSecond: number;
  recordBytes: number;
  partitions: number;
  checkpointIntervalMinutes?: number;
  batchingWindowSeconds?: number;
  batchSize?: number;
  stateKeys?: number;
  flinkKpus?: number;
  finalObjects?: 'merged' | 'partition';
  coordinatorWorkflow?: 'express' | 'standard';
  json: boolean;
}

export function costInput(raw: RawOptions, counts: CostCounts): CostInput {
  const d = counts.defaults;
  return {
    recordsPerSecond: raw.recordsPerSecond,
    recordBytes: raw.recordBytes,
    partitions: raw.partitions,
    checkpointIntervalMinutes: raw.checkpointIntervalMinutes ?? d.checkpointIntervalMinutes,
    batchingWindowSeconds: raw.batchingWindowSeconds ?? d.maxBatchingWindowSeconds,
    batchSize: raw.batchSize ?? d.batchSize,
    stateKeys: raw.stateKeys ?? 0,
    ...(raw.flinkKpus === undefined ? {} : { flinkKpus: raw.flinkKpus }),
    ...(raw.finalObjects === undefined ? {} : { finalObjects: raw.finalObjects }),
    coordinatorWorkflow: raw.coordinatorWorkflow ?? d.coordinatorWorkflow ?? 'standard',
  };
}

export function registerCostCommand(program: Command, deps: CostDependencies = {}): Command {
  return program
    .command('cost')
    .description(
      'the monthly bill at a steady rate: this pipeline exactly-once and at-least-once line by line, Firehose and Managed Flink, from the calls the benchmark counted',
    )
    .addOption(
      new Option('--records-per-second <n>', 'the steady input rate')
        .argParser(positive)
        .makeOptionMandatory(),
    )
    .addOption(
      new Option('--partitions <n>', 'partitions of the topic').argParser(integer(1)).makeOptionMandatory(),
    )
    .option('--record-bytes <n>', 'bytes per record', integer(1), 1024)
    .option(
      '--checkpoint-interval-minutes <n>',
      'minutes between checkpoints (default: the stack’s)',
      integer(1, 1440),
    )
    .option(
      '--batching-window-seconds <n>',
      'the event source mapping’s batching window (default: the stack’s)',
      integer(0, 300),
    )
    .option('--batch-size <n>', 'records per batch at most (default: the stack’s)', integer(1, 10_000))
    .option(
      '--state-keys <n>',
      'distinct keyed-state items a batch touches, if the transform keeps keyed state (Firehose and Flink keep none)',
      integer(0),
      0,
    )
    .option(
      '--flink-kpus <n>',
      'Managed Flink KPUs (default: from the assumed throughput per KPU)',
      integer(1),
    )
    .addOption(
      new Option(
        '--final-objects <layout>',
        'NDJSON final objects: merged (a few a checkpoint shard) or partition (one a partition); default merged, the stack’s',
      ).choices(['merged', 'partition']),
    )
    .addOption(
      new Option(
        '--coordinator-workflow <workflow>',
        'the Step Functions workflow of each checkpoint: express (a request and its duration) or standard (each transition); default the stack’s',
      ).choices(['express', 'standard']),
    )
    .option('--json', 'print JSON instead of text', false)
    .action(async (raw: RawOptions) => {
      const counts = deps.counts ?? (await shippedCounts());
      const { monthlyCost } = await import('./cost-model.ts');
      const cost = monthlyCost(counts, costInput(raw, counts));
      const write = deps.write ?? ((text: string) => process.stdout.write(text));
      write(raw.json ? `${JSON.stringify(cost, null, 2)}\n` : formatCost(cost));
    });
}
