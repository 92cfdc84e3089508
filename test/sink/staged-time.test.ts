/**
 * The processor's part of time folders: with them on (exactly-once), each staged row carries its record's Kafka
 * timestamp in its lineage, output and dead-letter rows alike; with them off, or under at-least-once (which writes
 * final objects directly, without folders), the staged rows are exactly as before. Real DynamoDB Local and S3
 * server; the MSK event is built in the documented format (MSK itself cannot run here).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSettings, type SettingsInput } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readFinalRows } from '../../shared/sink/verify.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { stagedRows } from '../support/ledger.ts';
import { mskEvent, mskRecord, order } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('stt');
});

const settingsFor = (overrides: Partial<SettingsInput>) =>
  parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId: uniqueName('p'), ...overrides });

const event = () =>
  mskEvent([
    { partition: 0, offset: 0, value: order('o-0'), headers: { 'idempotency-key': 'o-0' } },
    { partition: 0, offset: 1, value: 'garbage', headers: { 'idempotency-key': 'o-1' } },
  ]);
const kafkaTime = (offset: number) => mskRecord({ partition: 0, offset, value: '' }).timestamp;

describe('the record time staged with each row', () => {
  it('time folders on: output and dead-letter rows carry the Kafka timestamp in their lineage', async () => {
    const settings = settingsFor({ timePartitioning: 'hour' });
    await createProcessor({ settings, clients: res.clients }).processEvent(event());
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    const found = rows
      .map((r) => [r.stream, r.row.source])
      .sort((a, b) => String(a[0]).localeCompare(String(b[0])));
    expect(found).toEqual([
      ['deadletter', { topic: 'orders', partition: 0, offset: 1, timestamp: kafkaTime(1) }],
      ['output', { topic: 'orders', partition: 0, offset: 0, timestamp: kafkaTime(0) }],
    ]);
  });

  it('time folders off, or at-least-once: the rows are exactly as before', async () => {
    for (const overrides of [{}, { timePartitioning: 'day', deliveryGuarantee: 'at-least-once' }] as const) {
      const settings = settingsFor(overrides);
      await createProcessor({ settings, clients: res.clients }).processEvent(event());
      const rows =
        overrides.deliveryGuarantee === 'at-least-once'
          ? (
              await readFinalRows({ s3: res.clients.s3, bucket: res.bucket, pipeline: settings.pipelineId })
            ).map((r) => ({ stream: r.stream, row: r.row }))
          : await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
      expect(
        rows
          .map((r) => r.row.source)
          .sort((a, b) => (a as { offset: number }).offset - (b as { offset: number }).offset),
      ).toEqual([
        { topic: 'orders', partition: 0, offset: 0 },
        { topic: 'orders', partition: 0, offset: 1 },
      ]);
    }
  });
});
