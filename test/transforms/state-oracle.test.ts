/**
 * The local oracle judges keyed state with `min`, `max` and `latest`: a whole local run under injected faults
 * (crashes, redelivery, zombies, transient errors, coordinator crashes, producer duplicates) ends with each of them
 * equal to the fold of the deduplicated input, and the oracle notices a value that is not. Real local parts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { compareOutcome, expectOutcome, resolveExpectation } from '../../local/expectation.ts';
import { DEFAULT_FAULT_RATES } from '../../local/faults.ts';
import { generateOrders } from '../../local/generator.ts';
import { runLocal } from '../../local/runner.ts';
import { parseSettings } from '../../shared/config/settings.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskRecord, order } from '../support/msk.ts';
import { orderedOrdersTransform } from './ordered-orders.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('stateoracle');
});

describe('the oracle and min, max, latest', () => {
  it('a run under every fault ends with min, max and latest equal to the fold of the deduplicated input', async () => {
    const settings = parseSettings({
      pipelineId: uniqueName('oracle'),
      ledgerTable: res.table,
      bucket: res.bucket,
      maxTransactionItems: 8,
    });
    const input = generateOrders({ seed: 7, records: 60, partitions: 3, duplicateRate: 0.2, customers: 3 });
    const { report, aggregates } = await runLocal({
      settings,
      input,
      partitions: 3,
      faults: { ...DEFAULT_FAULT_RATES, crash: 0.2, redeliver: 0.2, zombie: 0.1, conflict: 0.1 },
      seed: 7,
      checkpointIntervalMs: 300,
      clock: 'virtual',
      batchSize: 5,
      transform: orderedOrdersTransform,
    });
    expect(report.violations).toEqual([]);
    expect(report.verdict).toBe('exactly-once');
    expect(report.faults.crash + report.faults.redeliver + report.faults.zombie).toBeGreaterThan(0);
    expect(aggregates.size).toBeGreaterThan(0);
    for (const aggregate of aggregates.values()) {
      expect(Object.keys(aggregate).sort()).toEqual(
        [
          'count',
          'currency',
          'customerId',
          'largestMinor',
          'lastOrder',
          'smallestMinor',
          'totalMinor',
        ].sort(),
      );
      expect(aggregate.smallestMinor).toBeLessThanOrEqual(Number(aggregate.largestMinor));
    }
  }, 120_000);

  it('notices a min, max or latest that is not the fold of the input, and accepts the fold in any order of the records', () => {
    const specs = [
      { partition: 0, offset: 0, value: order('o-1', 'c', '5.00') },
      { partition: 1, offset: 0, value: order('o-2', 'c', '1.50') },
      { partition: 0, offset: 1, value: order('o-3', 'c', '9.25') },
    ];
    const judge = (records: typeof specs, actual: Record<string, string | number>) => {
      const expectation = expectOutcome(
        records.map((spec) => decodeRecord(mskRecord(spec))),
        orderedOrdersTransform,
        { keySource: { kind: 'none' } },
      );
      const resolved = resolveExpectation(expectation, []);
      return compareOutcome(resolved, [], new Map([['c#USD', actual]]));
    };
    // All three orders share one time (order() writes one ts): the tie goes to the greatest order id.
    const right = {
      customerId: 'c',
      currency: 'USD',
      count: 3,
      totalMinor: 1575,
      smallestMinor: 150,
      largestMinor: 925,
      lastOrder: 'o-3',
    };
    expect(judge(specs, right).aggregatesMatch).toBe(true);
    expect(judge([...specs].reverse(), right).aggregatesMatch).toBe(true);
    for (const wrong of [{ smallestMinor: 500 }, { largestMinor: 500 }, { lastOrder: 'o-1' }]) {
      const outcome = judge(specs, { ...right, ...wrong });
      expect(outcome.aggregatesMatch).toBe(false);
      expect(outcome.differences.join('\n')).toContain(Object.keys(wrong)[0]);
    }
  });
});
