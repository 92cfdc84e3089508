/**
 * A keyed-state item that a record would grow past DynamoDB's 400 KB item limit (L1, L3): that record is
 * dead-lettered with the reason, the partition goes on, and exactly-once holds across a crash and redelivery at
 * that point. Real DynamoDB Local (which enforces the limit) and S3 server; checkpoints by the real coordinator steps.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { RELEASED } from '../../shared/ledger/staging-ledger.ts';
import { createProcessor, type ProcessorStep } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { crashAt } from '../support/hooks.ts';
import { ledgerView, scanPipeline, stagedRows } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';
import { expectExactlyOnce } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('sil');
});

/**
 * `grow`: 99 descriptive fields of 1 KB with names of the record's own on the state key the value names after the
 * colon (about 100 KB more each time); `add`: one more to the key's counter only (the item does not grow).
 */
const growing: Transform = {
  name: 'growing',
  apply(record) {
    const [kind = '', key = 'customer'] = Buffer.from(record.rawValue ?? '', 'base64')
      .toString()
      .split(':');
    const fields: Record<string, string> = {};
    if (kind === 'grow') for (let i = 0; i < 99; i++) fields[`r${record.offset}f${i}`] = 'v'.repeat(1000);
    return { kind: 'ok', rows: [{ offset: record.offset }], state: [{ key, fields, add: { n: 1 } }] };
  },
};

const spec = (offset: number, value: string): RecordSpec => ({
  partition: 0,
  offset,
  value,
  headers: { 'idempotency-key': `k-${offset}` },
});

/** Four records fill `customer` to just under 400 KB (each its own chunk: at most 100 fields per item). */
const filling = [0, 1, 2, 3].map((offset) => spec(offset, 'grow:customer'));
/** One more growth of `customer` (over the limit), an add to it, a growth of another key, a growth again. */
const next = [spec(4, 'grow:customer'), spec(5, 'add:customer'), spec(6, 'grow:other')];

function settingsFor(): Settings {
  return settingsIn(res, 'sil');
}

function processorFor(settings: Settings, step?: ProcessorStep, nth = 1) {
  return createProcessor({
    settings,
    clients: res.clients,
    transform: growing,
    ...(step ? { hooks: crashAt(step, nth) } : {}),
  });
}

async function checkpoint(settings: Settings): Promise<void> {
  const outcome = await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint();
  expect(outcome.status).toBe('committed');
}

describe('a state item a record would grow past 400 KB', () => {
  it('dead-letters that record with the reason; the partition goes on and the records after it are staged', async () => {
    const settings = settingsFor();
    const processor = processorFor(settings);
    await processor.processEvent(mskEvent(filling));
    const report = await processor.processEvent(mskEvent(next));
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 6, deadLettered: 1, stagedRows: 2 });
    const deadLetters = (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId)).filter(
      (r) => r.stream === 'deadletter',
    );
    expect(deadLetters).toHaveLength(1);
    expect(deadLetters[0]?.row).toMatchObject({
      source: { topic: 'orders', partition: 0, offset: 4 },
      error: expect.stringMatching(/state item "customer" .*400 KB/),
    });
    const { state } = await ledgerView(res.clients, res.table, settings.pipelineId);
    // Record 4's fields are not there; record 5's add is.
    expect(state.customer?.n).toBe(5);
    expect(state.customer).not.toHaveProperty('r4f0');
    expect(state.other).toMatchObject({ n: 1, r6f0: 'v'.repeat(1000) });
    // The dead letter holds no claim: the one written ahead is released, so a corrected resend takes the key.
    const claims = (await scanPipeline(res.clients, res.table, settings.pipelineId)).filter((item) =>
      String(item.pk).includes('#CLAIM#'),
    );
    expect(claims.find((claim) => claim.idempotencyKey === 'k-4')).toMatchObject({ expiresAt: RELEASED });
    expect(claims.find((claim) => claim.idempotencyKey === 'k-5')?.expiresAt).toBeGreaterThan(RELEASED);
    const later = await processor.processEvent(mskEvent([spec(7, 'add:customer')]));
    expect(later.partitions[0]).toMatchObject({ stagedOffset: 7, stagedRows: 1, deadLettered: 0 });
  });

  const crashes: Array<[ProcessorStep, number]> = [
    ['after-stage-write', 2], // the re-planned chunk is written, its transaction never runs
    ['after-transaction', 1], // the chunk holding the dead letter committed
    ['before-return', 1],
  ];
  for (const [step, nth] of crashes) {
    it(`exactly-once across a crash at ${step} (#${nth}) and the redelivery: one dead letter, each other record once`, async () => {
      const settings = settingsFor();
      await processorFor(settings).processEvent(mskEvent(filling));
      await checkpoint(settings);
      await expect(processorFor(settings, step, nth).processEvent(mskEvent(next))).rejects.toBeInstanceOf(
        InjectedCrashError,
      );
      await processorFor(settings).processEvent(mskEvent(next));
      await processorFor(settings).processEvent(mskEvent(next));
      await checkpoint(settings);
      await expectExactlyOnce(res.clients, settings, { 'orders#0': [0, 1, 2, 3, 5, 6] });
      await expectExactlyOnce(res.clients, settings, { 'orders#0': [4] }, 'deadletter');
      const { state } = await ledgerView(res.clients, res.table, settings.pipelineId);
      expect(state.customer?.n).toBe(5);
      expect(state.other?.n).toBe(1);
    });
  }
});
