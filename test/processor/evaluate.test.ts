/**
 * Record-level rules (L1, P6): what an evaluated record carries, and how a problem with one record becomes one
 * dead-letter row. Pure evaluation here; the processor tests below run on DynamoDB Local and the S3 server.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSettings, type Settings, type SettingsInput } from '../../shared/config/settings.ts';
import { decodeRecord } from '../../shared/kafka/event.ts';
import { deadLetterOf, evaluateRecord, recordDigest } from '../../shared/processor/evaluate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { ordersTransform } from '../../shared/transforms/orders.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { ledgerView, stagedRows } from '../support/ledger.ts';
import { mskEvent, mskRecord, order, type RecordSpec } from '../support/msk.ts';

const headerKey = { kind: 'header', name: 'idempotency-key' } as const;

function evaluate(spec: RecordSpec) {
  return evaluateRecord(ordersTransform, headerKey, decodeRecord(mskRecord(spec)));
}

describe('record digest', () => {
  const digestOf = (key: string | null, value: string | null) =>
    recordDigest({
      rawKey: key === null ? null : Buffer.from(key).toString('base64'),
      rawValue: value === null ? null : Buffer.from(value).toString('base64'),
    });

  it('tells a same-key record with another payload from a redelivery of the same bytes', () => {
    expect(digestOf('k', order('a'))).toBe(digestOf('k', order('a')));
    expect(digestOf('k', order('a'))).not.toBe(digestOf('k', order('b')));
  });

  it('keeps null apart from empty and cannot be fooled by moving bytes between key and value', () => {
    const digests = [
      digestOf(null, null),
      digestOf('', null),
      digestOf(null, ''),
      digestOf('', ''),
      digestOf('ab', 'c'),
      digestOf('a', 'bc'),
    ];
    expect(new Set(digests).size).toBe(digests.length);
    for (const digest of digests) expect(digest).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });

  it('ignores headers and timestamp (delivery metadata, not content)', () => {
    const a = evaluate({ partition: 0, offset: 1, value: order('a'), headers: { h: '1' } });
    const b = evaluate({ partition: 0, offset: 2, value: order('a'), key: 'k-1', headers: { h: '2' } });
    expect(a.digest).toBe(b.digest);
  });
});

describe('dead letters', () => {
  it('a poison record carries no idempotency key, so it cannot suppress the real record with that key', () => {
    const poison = evaluate({
      partition: 0,
      offset: 7,
      value: 'garbage',
      headers: { 'idempotency-key': 'order-42' },
    });
    expect(poison.idempotencyKey).toBeUndefined();
    expect(poison.deadLetter?.error).toMatch(/^undecodable value: .*not valid JSON/);
    expect(poison.output).toEqual([]);
  });

  it('deadLetterOf turns an evaluated record into a dead letter that keeps the raw record and claims nothing', () => {
    const good = evaluate({
      partition: 3,
      offset: 9,
      value: order('o-9'),
      headers: { 'idempotency-key': 'o-9' },
    });
    expect(good.idempotencyKey).toBe('o-9');
    const dead = deadLetterOf(good, 'key conflict');
    expect(dead).toEqual({
      offset: 9,
      // The Kafka timestamp travels with the record: a dead letter is filed in its record's time folder too.
      timestamp: good.timestamp,
      source: good.source,
      raw: good.raw,
      digest: good.digest,
      idempotencyKey: undefined,
      output: [],
      state: [],
      deadLetter: {
        source: { topic: 'orders', partition: 3, offset: 9 },
        error: 'key conflict',
        raw: good.raw,
      },
    });
    expect(dead.raw.value).toBe(Buffer.from(order('o-9')).toString('base64'));
  });
});

describe('poison records on the local parts', () => {
  let res: TestResources;
  beforeAll(async () => {
    res = await freshResources('recs');
  });
  const settingsFor = (overrides: Partial<SettingsInput> = {}): Settings =>
    parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId: uniqueName('p'), ...overrides });

  for (const claimWrite of ['in-transaction', 'ahead'] as const) {
    it(`a garbage record with the header of order-42 does not make the real order-42 vanish (claims ${claimWrite})`, async () => {
      const settings = settingsFor({ claimWrite });
      const processor = createProcessor({ settings, clients: res.clients });
      const header = { 'idempotency-key': 'order-42' };
      await processor.processEvent(
        mskEvent([{ partition: 0, offset: 0, value: 'garbage', headers: header }]),
      );
      await processor.processEvent(
        mskEvent([{ partition: 1, offset: 0, value: order('order-42'), headers: header }]),
      );
      const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
      expect(rows.map((r) => [r.stream, r.row.source])).toEqual([
        ['deadletter', { topic: 'orders', partition: 0, offset: 0 }],
        ['output', { topic: 'orders', partition: 1, offset: 0 }],
      ]);
      const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
      expect(ledger.claims).toEqual({ 'order-42': 'orders#1#0' });
    });
  }

  it('a tombstone and an unkeyed record: the tombstone becomes one dead-letter row and the partition moves on', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    const event = mskEvent([
      { partition: 0, offset: 0, key: null, value: null, headers: { 'idempotency-key': 'o-1' } },
      { partition: 0, offset: 1, key: null, value: order('o-1'), headers: { 'idempotency-key': 'o-1' } },
    ]);
    const report = await processor.processEvent(event);
    expect(report.partitions[0]).toMatchObject({ stagedOffset: 1, deadLettered: 1 });
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => [r.stream, r.row.source, r.row.error])).toEqual([
      ['deadletter', { topic: 'orders', partition: 0, offset: 0 }, expect.stringMatching(/^tombstone: /)],
      ['output', { topic: 'orders', partition: 0, offset: 1 }, undefined],
    ]);
    expect((rows[0]!.row.raw as { value: unknown }).value).toBeNull();
  });

  it('header keys 6b ff and 6b fe are two records, both staged (keys are the exact bytes)', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(
      mskEvent([
        { partition: 0, offset: 0, value: order('a'), headers: { 'idempotency-key': [0x6b, -1] } },
        { partition: 0, offset: 1, value: order('b'), headers: { 'idempotency-key': [0x6b, -2] } },
        { partition: 0, offset: 2, value: order('c'), headers: { 'idempotency-key': [0x6b, -1] } },
      ]),
    );
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    // The third repeats the first's key bytes: a producer duplicate (or, with digests, a key conflict).
    expect(rows.filter((r) => r.stream === 'output').map((r) => r.row.orderId)).toEqual(['a', 'b']);
  });

  it('a transform that throws mid-batch makes one dead-letter row and the rest is staged', async () => {
    const settings = settingsFor({ idempotencyKey: 'none' });
    const throwing: Transform = {
      name: 'orders',
      apply: (record) => {
        if (record.offset === 1) throw new RangeError('transform bug');
        return ordersTransform.apply(record);
      },
    };
    const processor = createProcessor({ settings, clients: res.clients, transform: throwing });
    await processor.processEvent(
      mskEvent([0, 1, 2].map((offset) => ({ partition: 0, offset, value: order(`o-${offset}`) }))),
    );
    const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
    expect(rows.map((r) => [r.stream, (r.row.source as { offset: number }).offset, r.row.error])).toEqual([
      ['deadletter', 1, 'transform orders threw RangeError: transform bug'],
      ['output', 0, undefined],
      ['output', 2, undefined],
    ]);
  });
});
