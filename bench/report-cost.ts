/** The benchmark page's monthly cost section: the model's bill at a few rates, and the counts it multiplies. */
import {
  type Bill,
  type CheckpointTerms,
  type CostCounts,
  filesPerPartition,
  type MonthlyCost,
  monthlyCost,
} from '../cli/cost-model.ts';
import type { CostFigures } from './cost.ts';
import type { MeasuredBatches, MeasuredCheckpoint } from './counts.ts';
import { calls } from './report-format.ts';
import type { Spread } from './stats.ts';

export interface CostResults {
  cost: CostFigures;
  /** The counts `eos cost` ships (cli/cost-counts.json), as this run measured and fitted them. */
  cost_counts: CostCounts;
  /** The measurements behind the fit. */
  cost_measurements: { batches: MeasuredBatches[]; checkpoints: MeasuredCheckpoint[] };
  /** Monthly USD, exactly-once, 10,000 records/s of 1 KB over 100 partitions, the stack's defaults otherwise. */
  cost_month_eo_10k_100p: number;
  /** The same month exactly-once ÷ at-least-once. */
  cost_ratio_eo_alo: number;
  /** End to end (bench/e2e.ts): AWS calls of the processors and the coordinator per batch, median of the runs. */
  calls_per_batch_e2e_eo?: number;
  calls_per_batch_e2e_alo?: number;
  /** Per round, exactly-once's calls per batch ÷ at-least-once's, median. */
  calls_per_batch_e2e_ratio?: number;
}

const usd = (n: number) => n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });

function billRows(eo: Bill, alo: Bill): string[] {
  return [
    '| line | exactly-once: quantity | USD | at-least-once: quantity | USD |',
    '|---|---|---|---|---|',
    ...eo.lines.map((line, i) => {
      const other = alo.lines[i]!;
      const q = (l: typeof line) => `${Math.round(l.quantity).toLocaleString('en-US')} ${l.unit}`;
      return `| ${line.item} | ${q(line)} | ${usd(line.usd)} | ${q(other)} | ${usd(other.usd)} |`;
    }),
    `| **total** | | **${usd(eo.total)}** | | **${usd(alo.total)}** |`,
  ];
}

function terms(t: CheckpointTerms): string {
  const parts = [
    t.fixed ? `${t.fixed}` : '',
    t.perShard ? `${t.perShard}·shards` : '',
    t.perPartition ? `${t.perPartition}·partitions` : '',
    t.perStagedFile ? `${t.perStagedFile}·files` : '',
    t.perFinalObject ? `${t.perFinalObject}·objects` : '',
  ].filter(Boolean);
  return parts.join(' + ') || '0';
}

function countsRows(c: CostCounts): string[] {
  const cp = c.checkpoint;
  return [
    '| counted | exactly-once | at-least-once |',
    '|---|---|---|',
    ...(['calls per batch of n records', 'transaction items per batch', 'ms per batch (local)'] as const).map(
      (what) => {
        const of = (mode: 'exactly-once' | 'at-least-once') => {
          const p = c.processor[mode];
          if (what === 'transaction items per batch')
            return `${p.transactionItems.fixed} + ${p.transactionItems.perStateKey}·state keys`;
          if (what === 'ms per batch (local)') return `${p.ms.fixed} + ${p.ms.perRecord}·n`;
          return Object.entries(p.calls)
            .map(([op, t]) => `${op} ${t.fixed}${t.perRecord ? ` + ${t.perRecord}·n` : ''}`)
            .join(', ');
        };
        return `| ${what} | ${of('exactly-once')} | ${of('at-least-once')} |`;
      },
    ),
    ...Object.entries(cp.calls).map(([op, t]) => `| checkpoint: ${op} | ${terms(t)} | — |`),
    `| checkpoint: transaction items | ${terms(cp.transactionItems)} | — |`,
    `| checkpoint: PartiQL batch writes | ${terms(cp.statementWrites)} | — |`,
    `| checkpoint: Lambda invocations | ${terms(cp.lambdaInvocations)} (${cp.msPerInvocation} ms each, local) | — |`,
    `| checkpoint: Step Functions transitions | ${terms(cp.transitions)} | — |`,
    `| checkpoint: Step Functions executions | ${terms(cp.executions)} | — |`,
    `| monitor run, each interval | ${calls(c.monitor)} | ${calls(c.monitor)} |`,
  ];
}

function e2eCallsLine(r: CostResults, ratio?: Spread): string[] {
  if (r.calls_per_batch_e2e_eo === undefined) return [];
  return [
    `End to end (bench/e2e.ts, the pipeline as it runs), the processors and the coordinator together make`,
    `**${r.calls_per_batch_e2e_eo}** AWS calls per batch exactly-once (\`calls_per_batch_e2e_eo\`) against`,
    `${r.calls_per_batch_e2e_alo} at-least-once: **${r.calls_per_batch_e2e_ratio}×**`,
    `(\`calls_per_batch_e2e_ratio\`${ratio ? `, ${ratio.min}–${ratio.max} over the rounds` : ''}). Its batches`,
    'are small (a backlog drained at the batch size of the run over few partitions, checkpoints every 500 ms), so',
    "the coordinator's calls per checkpoint weigh more per batch there than at the rates below.",
    '',
  ];
}

/** Which option is cheapest where, from the rows (so the sentence follows the figures). */
function whereCheapest(c: CostFigures): string[] {
  const byOption = new Map<string, string[]>();
  for (const row of c.rows) {
    const at = `${row.recordsPerSecond.toLocaleString('en-US')}/s over ${row.partitions}`;
    byOption.set(row.cheapest, [...(byOption.get(row.cheapest) ?? []), at]);
  }
  const parts = [...byOption].map(([option, rows]) => `${option} at ${rows.join(', ')}`);
  const eoNever = !byOption.has('exactly-once');
  return [
    `USD a month. Cheapest: ${parts.join('; ')}.${eoNever ? ' Exactly-once is cheapest in no row here:' : ''}`,
    ...(eoNever
      ? [
          'its bill follows its batches (a write of the fence and its staged entry, and a PUT), and a batch per partition',
          'per window makes them many and small until they fill; each checkpoint adds its fixed and per-shard calls.',
          'What it buys over the others is exactly-once output, with keyed state if wanted.',
        ]
      : []),
  ];
}

/** The headline again with keyed state, which only this pipeline keeps: what it costs in each mode. */
function withStateLines(c: CostFigures): string[] {
  const k = c.headlineWithState;
  const eo = k.exactlyOnce.total;
  const alo = k.atLeastOnce.total;
  return [
    `With keyed state (the benchmark workload's ${k.input.stateKeys} state items per batch, \`eos cost --state-keys\`), the`,
    `same traffic costs ${usd(eo)} USD exactly-once and ${usd(alo)} at-least-once (${(eo / alo).toFixed(2)}×): each state item`,
    'is a DynamoDB write per batch (2 write units in the exactly-once transaction, 1 at-least-once), which Firehose',
    'and Flink (whose state lives in the job) do not bill. The table below gives both for each rate.',
  ];
}

/**
 * The measured units of a stateless exactly-once batch by its position after a cleanup, run-length encoded, and
 * what they make at the headline's interval.
 */
function cycleLines(counts: CostCounts, headline: MonthlyCost): string[] {
  const units = counts.processor['exactly-once'].stateless.writeUnitsAfterCleanup;
  const runs: string[] = [];
  for (let i = 0; i < units.length; ) {
    let j = i;
    while (j < units.length && units[j] === units[i]) j++;
    runs.push(j - i > 1 ? `${units[i]}×${j - i}` : `${units[i]}`);
    i = j;
  }
  const n = Number(filesPerPartition(headline.traffic).toFixed(1));
  const atInterval = (minutes: number) => {
    const cost = monthlyCost(counts, { ...headline.input, checkpointIntervalMinutes: minutes });
    return `${usd(cost.exactlyOnce.total)} at ${minutes} min (${Number((cost.exactlyOnce.total / cost.atLeastOnce.total).toFixed(2))}×)`;
  };
  return [
    `  \`writeUnitsAfterCleanup\` [${runs.join(', ')}]; a batch is priced at their mean over the n batches a partition`,
    `  stages in a checkpoint interval (${n} at the headline). The last is the chunk past the inline budget: it moves`,
    `  the fence's entries into items, in one transaction (${units.at(-1)} units), and the positions after it repeat the`,
    `  measured ones. The headline exactly-once costs ${atInterval(2)}, ${atInterval(5)}.`,
  ];
}

export function costSection(r: CostResults, e2eRatio?: Spread): string[] {
  const c = r.cost;
  const h = c.headline;
  return [
    '## Monthly cost (`eos cost`)',
    '',
    `List prices of ${h.input.recordsPerSecond.toLocaleString('en-US')} records/s of ${h.input.recordBytes} B over`,
    `${h.input.partitions} partitions, every other input at the stack's defaults (batching window`,
    `${h.input.batchingWindowSeconds} s, batch size ${h.input.batchSize}, a checkpoint every ${h.input.checkpointIntervalMinutes} min), no keyed`,
    `state (what Firehose and Flink can run too): **${usd(r.cost_month_eo_10k_100p)} USD a month exactly-once**`,
    `(\`cost_month_eo_10k_100p\`), **${r.cost_ratio_eo_alo}×** at-least-once's (\`cost_ratio_eo_alo\`), against`,
    `${usd(h.firehose.total)} for Firehose. Prices as of ${c.pricesAsOf} (\`bench/prices.json\`, with their sources);`,
    `counts measured ${c.countsMeasuredAt}.`,
    '',
    ...billRows(h.exactlyOnce, h.atLeastOnce),
    '',
    ...withStateLines(c),
    '',
    ...e2eCallsLine(r, e2eRatio),
    'How the bill is made (cli/cost-model.ts, `eos cost` prints the same for any input):',
    '',
    '- **Batches.** MSK delivers each partition on its own: at R records/s over P partitions and a batching window',
    '  W, each partition makes a batch every window of R·W/P records, capped by the batch size (then R ÷ batch',
    '  size batches a second); below one record per partition per window every record is a batch. A batch is one',
    '  processor invocation and, exactly-once, one staged file — so more partitions mean more, smaller batches.',
    '- **Calls per batch** and **per checkpoint** are the counts below, measured by `bench/counts.ts` on the local',
    '  parts with a call-counting middleware and fitted exactly: per batch from batches of 20 and 500 records, per',
    '  checkpoint from five checkpoints whose shapes tell apart a fixed part and the parts per shard (one shard per',
    '  64 partitions that moved, at most 16), per partition, per staged file and per final object. test/bench/cost-model.test.ts',
    '  checks the fit predicts the counts of checkpoints and batches it never saw, that a call added per staged',
    '  file moves it, and that the shipped counts are what the code makes now (`npm run bench:counts` refreshes',
    '  `cli/cost-counts.json` after a change to the processor or the coordinator).',
    '- **Pricing.** A transactional write item is 2 write units (items under 1 KB), a write statement of a PartiQL',
    "  batch 1, a single write (PutItem, UpdateItem, DeleteItem) the units DynamoDB reported for it, by the item's",
    '  size; a read 1 read unit. A transform without keyed state is priced from batches measured with one',
    '  (`passthrough`), whose chunks write their fence alone, the staged entry inline. Exactly-once, such a write',
    "  costs the fence item's size, which grows with each inline entry until a checkpoint's cleanup empties it: the",
    '  units of each batch after a cleanup are measured by position,',
    ...cycleLines(r.cost_counts, h),
    '  Checkpoints are measured on such a pipeline too (entries inline in the fences); with keyed state the entries',
    '  are items, and cleanup deletes each (one write unit a staged file, not in the figures with state keys); S3',
    '  PUT/COPY/LIST and GET/HEAD classes; Lambda billed for the locally measured time per batch and per coordinator',
    "  invocation at the stack's memory (DynamoDB Local and s3rver are not AWS: an approximation); Step Functions",
    "  as the stack's workflow bills it: the default Express workflow each execution and its duration (its",
    "  invocations' measured time end to end, an upper bound since a Map's shards overlap, rounded up to 100 ms, at",
    '  one 64 MB chunk); a Standard one (`--coordinator-workflow standard`) each transition, counted as the',
    "  interpreter enters and retries states (inside Map iterations too; an inline Map's iterations themselves are",
    "  not billed); the stack's alarms, dashboard and metrics.",
    '- **Firehose** bills an MSK source per GB, without the 5 KB rounding per record of other sources; it is',
    '  at-least-once and keeps no keyed state. **Managed Flink** bills KPU-hours, one KPU more for orchestration;',
    '  the KPUs a job needs are assumed from a throughput per KPU (`bench/prices.json`: an assumption, `eos cost',
    '  --flink-kpus` sets them). Neither counts the MSK cluster, which all four share, nor S3 storage.',
    '',
    `| records/s | partitions | records per batch | exactly-once | at-least-once | Firehose | Managed Flink | cheapest | exactly-once, ${c.headlineWithState.input.stateKeys} state keys | at-least-once, ${c.headlineWithState.input.stateKeys} state keys |`,
    '|---|---|---|---|---|---|---|---|---|---|',
    ...c.rows.map(
      (row) =>
        `| ${row.recordsPerSecond.toLocaleString('en-US')} | ${row.partitions} | ${row.recordsPerBatch} | ${usd(row.exactlyOnce)} | ${usd(row.atLeastOnce)} | ${usd(row.firehose)} | ${usd(row.managedFlink)} | ${row.cheapest} | ${usd(row.exactlyOnceWithState)} | ${usd(row.atLeastOnceWithState)} |`,
    ),
    '',
    ...whereCheapest(c),
    '',
    `The counts (n: records in the batch; shards: one per ${r.cost_counts.partitionsPerShard} partitions that moved, at most ${r.cost_counts.maxShards}):`,
    '',
    ...countsRows(r.cost_counts),
    '',
  ];
}
