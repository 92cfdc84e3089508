/**
 * The latency bench at the stack's defaults (bench/latency.ts): it takes the defaults a deploy without props gets,
 * and its run applies the batching window it is given (a batch not full waits it out) on the real local parts.
 */
import { describe, expect, it } from 'vitest';
import { E2E_DEFAULTS } from '../../bench/e2e.ts';
import { LATENCY_MARGIN_MS, measureStackDefaultsLatency, stackDefaults } from '../../bench/latency.ts';
import { pipelineConfigSchema } from '../../infra/config.ts';

describe('latency at the stack defaults', { timeout: 120_000 }, () => {
  it('reads the defaults a deploy without props gets', () => {
    const config = pipelineConfigSchema.parse({ topic: 'orders', transform: 'orders' });
    expect(stackDefaults()).toEqual({
      checkpointIntervalMs: config.checkpointIntervalMinutes * 60_000,
      batchingWindowMs: config.maxBatchingWindowSeconds * 1000,
      batchSize: config.batchSize,
    });
  });

  it('measures every record, and a batch that does not fill waits out the window it is given', async () => {
    const result = await measureStackDefaultsLatency(
      {
        intervals: 15,
        paceRecordsPerSecond: 40,
        partitions: 2,
        checkpointIntervalMs: 200,
        batchingWindowMs: 1_500,
      },
      { ...E2E_DEFAULTS, records: 0 },
    );
    expect(result.records).toBe(120);
    expect(result.checkpointsCommitted).toBeGreaterThan(1);
    expect(result.boundMs).toBe(200 + LATENCY_MARGIN_MS);
    // 20 records/s per partition never fill a batch of the stack's size: the first record of each batch waits the
    // whole 1.5 s window before it is staged, then for a checkpoint.
    expect(result.batchSize).toBeGreaterThan(20 * 1.5);
    expect(result.maxMs).toBeGreaterThanOrEqual(1_500);
    expect(result.p50Ms).toBeGreaterThan(0);
    expect(result.p99Ms).toBeGreaterThanOrEqual(result.p50Ms);
    expect(result.maxMs).toBeGreaterThanOrEqual(result.p99Ms);
  });
});
