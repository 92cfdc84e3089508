/**
 * `eos cost`: the bill line by line from the shipped counts, `--json`, the partition count moving the bill, and bad
 * input (exit 2, one line). The model's counts themselves are checked against a real run in
 * test/bench/cost-model.test.ts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { COST_COUNTS_FILE, PRICES_FILE } from '../../bench/counts.ts';
import { type CostCounts, monthlyCost } from '../../cli/cost-model.ts';
import { main } from '../../cli/eos.ts';

const counts = JSON.parse(readFileSync(COST_COUNTS_FILE, 'utf8')) as CostCounts;

async function eos(args: readonly string[], deps: { counts?: CostCounts } = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    ['node', 'eos', 'cost', ...args],
    { cost: { ...deps, write: (t) => out.push(t) } },
    { writeError: (t) => err.push(t), writeOut: (t) => out.push(t) },
  );
  return { code, out: out.join(''), err: err.join('') };
}

const HEADLINE = ['--records-per-second', '10000', '--partitions', '100'];
const headlineInput = {
  recordsPerSecond: 10_000,
  recordBytes: 1024,
  partitions: 100,
  checkpointIntervalMinutes: counts.defaults.checkpointIntervalMinutes,
  batchingWindowSeconds: counts.defaults.maxBatchingWindowSeconds,
  batchSize: counts.defaults.batchSize,
  stateKeys: 0,
  coordinatorWorkflow: counts.defaults.coordinatorWorkflow ?? 'standard',
};

const usd = (n: number) => n.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 });

describe('eos cost', () => {
  it('prints each option line by line with its total, from the shipped counts and prices', async () => {
    const { code, out, err } = await eos(HEADLINE);
    expect(err).toBe('');
    expect(code).toBe(0);
    const cost = monthlyCost(counts, headlineInput);
    const lines = out.split('\n');
    for (const title of ['exactly-once', 'at-least-once']) expect(lines).toContain(title);
    for (const item of [
      'S3 PUT/COPY/LIST requests',
      'S3 GET/HEAD requests',
      'DynamoDB write request units',
      'DynamoDB read request units',
      'Lambda requests',
      'Lambda duration',
      'Step Functions state transitions',
      'Firehose ingestion, MSK source',
    ]) {
      expect(lines.some((l) => l.trimStart().startsWith(item))).toBe(true);
    }
    const totals = lines
      .filter((l) => l.trimStart().startsWith('total'))
      .map((l) => l.trim().split(/\s+/).at(-1));
    expect(totals).toEqual(
      [cost.exactlyOnce, cost.atLeastOnce, cost.firehose, cost.managedFlink].map((b) => usd(b.total)),
    );
    expect(out).toContain(`list prices as of ${counts.prices.asOf}`);
    expect(out).toContain(`counted by the benchmark ${counts.measuredAt}`);
    expect(out).toMatch(/^cheapest: /m);
  });

  it('--json gives the whole bill, the same as the model', async () => {
    const { code, out } = await eos([...HEADLINE, '--json']);
    expect(code).toBe(0);
    expect(JSON.parse(out)).toEqual(JSON.parse(JSON.stringify(monthlyCost(counts, headlineInput))));
  });

  it('takes the partition count into account: more partitions, more and smaller batches, a larger bill', async () => {
    const at = async (partitions: string) =>
      JSON.parse((await eos(['--records-per-second', '10000', '--partitions', partitions, '--json'])).out);
    const few = await at('4');
    const many = await at('1000');
    const window = counts.defaults.maxBatchingWindowSeconds;
    expect(few.traffic.recordsPerBatch).toBe(counts.defaults.batchSize);
    // 10 records/s a partition: a batch each window, of 10 × window records, below the batch size.
    expect(10 * window).toBeLessThan(counts.defaults.batchSize);
    expect(many.traffic.recordsPerBatch).toBe(10 * window);
    expect(many.traffic.batchesPerSecond).toBe(1000 / window);
    expect(many.exactlyOnce.total).toBeGreaterThan(few.exactlyOnce.total);
  });

  it('the flags override the defaults', async () => {
    const { out } = await eos([
      ...HEADLINE,
      '--record-bytes',
      '2048',
      '--checkpoint-interval-minutes',
      '5',
      '--batching-window-seconds',
      '2',
      '--batch-size',
      '100',
      '--state-keys',
      '0',
      '--flink-kpus',
      '3',
      '--coordinator-workflow',
      'standard',
      '--json',
    ]);
    expect(JSON.parse(out).input).toEqual({
      recordsPerSecond: 10_000,
      recordBytes: 2048,
      partitions: 100,
      checkpointIntervalMinutes: 5,
      batchingWindowSeconds: 2,
      batchSize: 100,
      stateKeys: 0,
      flinkKpus: 3,
      coordinatorWorkflow: 'standard',
    });
  });

  it('prices the Express workflow by executions and duration, the Standard one by transitions', async () => {
    const bill = async (workflow: string) =>
      JSON.parse((await eos([...HEADLINE, '--coordinator-workflow', workflow, '--json'])).out);
    const express = await bill('express');
    const standard = await bill('standard');
    const usdOf = (
      b: { exactlyOnce: { lines: { item: string; usd: number; quantity: number }[] } },
      item: string,
    ) => b.exactlyOnce.lines.find((l) => l.item === item)!;
    const checkpoints = express.traffic.checkpointsPerMonth;
    expect(usdOf(express, 'Step Functions state transitions').quantity).toBe(0);
    expect(usdOf(express, 'Step Functions Express requests').quantity).toBe(Math.round(checkpoints));
    expect(usdOf(standard, 'Step Functions Express requests').quantity).toBe(0);
    const transitions = usdOf(standard, 'Step Functions state transitions');
    expect(transitions.quantity).toBeGreaterThanOrEqual(9 * checkpoints);
    // Every other line is the same: only the workflow's own billing differs.
    const others = (b: typeof express) =>
      b.exactlyOnce.lines.filter((l: { item: string }) => !l.item.startsWith('Step Functions'));
    expect(others(express)).toEqual(others(standard));
    expect(standard.exactlyOnce.total - express.exactlyOnce.total).toBeGreaterThan(transitions.usd * 0.9);
  });

  it.each([
    [['--partitions', '100'], /required option '--records-per-second <n>' not specified/],
    [['--records-per-second', '10'], /required option '--partitions <n>' not specified/],
    [
      ['--records-per-second', '-5', '--partitions', '1'],
      /'--records-per-second <n>' argument '-5' is invalid/,
    ],
    [['--records-per-second', 'lots', '--partitions', '1'], /argument 'lots' is invalid/],
    [['--records-per-second', '1', '--partitions', '0'], /'--partitions <n>' argument '0' is invalid/],
    [[...HEADLINE, '--batch-size', '20000'], /'--batch-size <n>' argument '20000' is invalid/],
  ])('rejects %j with exit 2 and one line', async (args, message) => {
    const { code, out, err } = await eos(args);
    expect(code).toBe(2);
    expect(out).toBe('');
    expect(err).toMatch(message);
    expect(err.trimEnd().split('\n')).toHaveLength(1);
  });

  it('ships the prices of bench/prices.json, with their date', () => {
    expect(counts.prices).toEqual(JSON.parse(readFileSync(PRICES_FILE, 'utf8')));
    expect(counts.prices.asOf).toMatch(/^\d{4}-\d{2}-\d{2}$/);
  });
});
