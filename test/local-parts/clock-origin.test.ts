/**
 * DynamoDB Local deletes an item once its TTL attribute is below the real time (on a quiet machine within about a
 * second; under load whenever its reaper reaches the table), as DynamoDB may at any moment after it. The processor
 * writes claims' `expiresAt` from its injected clock, so the clocks that move only when told (`ManualClock`, the
 * runner's virtual clock) must start close enough to real time that a claim live on their clock is live on the
 * table's too: a clock fixed at a date in the past let claims vanish a week after that date, and a duplicate
 * record created its key's claim again.
 */
import { describe, expect, it } from 'vitest';
import { RunClock } from '../../local/run-clock.ts';
import { clockOrigin, ManualClock } from '../../shared/clock.ts';
import { MIN_IDEMPOTENCY_TTL_SECONDS } from '../../shared/config/settings.ts';

const HOUR_MS = 3_600_000;
/**
 * The origin is fixed at its first use in this process, when it was at most two hours behind real time: by now it
 * is behind by that and at most the process's age (a test worker lives for the whole suite, across an hour's turn).
 */
const slack = () => process.uptime() * 1000 + 60_000;

describe('the ledger TTL against the clocks tests run on', () => {
  it('starts every clock that moves only when told within two hours before real time, never after it', () => {
    for (const start of [clockOrigin(), new ManualClock().now(), new RunClock('virtual').now()]) {
      expect(start).toBeLessThanOrEqual(Date.now());
      expect(Date.now() - start).toBeLessThan(2 * HOUR_MS + slack());
    }
  });

  it('gives a claim written on such a clock with the shortest TTL an expiry the table sees as hours away', () => {
    const expiresAtMs = (Math.floor(new ManualClock().now() / 1000) + MIN_IDEMPOTENCY_TTL_SECONDS) * 1000;
    expect(expiresAtMs - Date.now()).toBeGreaterThan(
      MIN_IDEMPOTENCY_TTL_SECONDS * 1000 - 2 * HOUR_MS - slack(),
    );
  });
});
