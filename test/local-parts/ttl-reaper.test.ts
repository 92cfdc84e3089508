/**
 * DynamoDB Local deletes an item within about a second once its TTL attribute is below the real time, as DynamoDB
 * may at any moment after it. The processor writes claims' `expiresAt` from its injected clock, so the clocks
 * that move only when told (`ManualClock`, the runner's virtual clock) must start close enough to real time that
 * a claim live on their clock is live on the table's too: a clock fixed at a date in the past let claims vanish
 * a week after that date, and a duplicate record created its key's claim again.
 */
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { RunClock } from '../../local/run-clock.ts';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { clockOrigin, ManualClock } from '../../shared/clock.ts';
import { MIN_IDEMPOTENCY_TTL_SECONDS } from '../../shared/config/settings.ts';
import { freshResources, type TestResources } from '../support/aws.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('ttl');
});

const HOUR_MS = 3_600_000;

describe('the ledger TTL against the clocks tests run on', () => {
  it('starts every clock that moves only when told within two hours before real time, never after it', () => {
    for (const start of [clockOrigin(), new ManualClock().now(), new RunClock('virtual').now()]) {
      expect(start).toBeLessThanOrEqual(Date.now());
      expect(Date.now() - start).toBeLessThan(2 * HOUR_MS + 60_000);
    }
  });

  it('keeps a claim that is live on such a clock for the shortest TTL, while one expired in real time is deleted', async () => {
    const doc = ledgerDocumentClient(res.clients.dynamodb);
    const nowSeconds = Math.floor(new ManualClock().now() / 1000);
    const live = { pk: 'ttl#live', sk: 'CLAIM', expiresAt: nowSeconds + MIN_IDEMPOTENCY_TTL_SECONDS };
    const expired = { pk: 'ttl#expired', sk: 'CLAIM', expiresAt: Math.floor(Date.now() / 1000) - 60 };
    for (const item of [live, expired]) await doc.send(new PutCommand({ TableName: res.table, Item: item }));
    const read = async (pk: string) =>
      (
        await doc.send(
          new GetCommand({ TableName: res.table, Key: { pk, sk: 'CLAIM' }, ConsistentRead: true }),
        )
      ).Item;
    const deadline = Date.now() + 20_000;
    while ((await read(expired.pk)) !== undefined) {
      if (Date.now() > deadline) throw new Error('DynamoDB Local kept an expired item for 20 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await read(live.pk)).toEqual(live);
  }, 30_000);
});
