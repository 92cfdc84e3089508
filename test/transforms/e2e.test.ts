/**
 * User transforms and the built-in `passthrough` end to end on the local parts (DynamoDB Local, the S3 server):
 * a module loaded by path runs through the processor (rows with lineage, keyed state, its rejections and an
 * undecodable value as one dead letter each, producer duplicates dropped by the key it returns), `prepare` runs
 * once per batch before evaluation, the Lambda handler factory takes a definition, and the local runner with
 * the oracle stays exactly-once under faults with the same module.
 */
import { fileURLToPath } from 'node:url';
import type { Context } from 'aws-lambda';
import { afterEach, beforeAll, beforeEach, describe, expect, it, type MockInstance, vi } from 'vitest';
import { createProcessorHandler } from '../../functions/processor-handler.ts';
import { parseFaultSpec } from '../../local/faults.ts';
import type { InputRecord } from '../../local/input.ts';
import { runLocal } from '../../local/runner.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InvalidBundledTransformError, InvalidSettingError, TransientAwsError } from '../../shared/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { loadTransform } from '../../shared/transforms/load.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import clicks from '../fixtures/transforms/clicks.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { lambdaContext } from '../support/lambda-context.ts';
import { ledgerView, stagedRows } from '../support/ledger.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

const CLICKS = fileURLToPath(new URL('../fixtures/transforms/clicks.ts', import.meta.url));
const AT = 1764374400000; // 2025-11-29T00:00:00Z
const DAY = '2025-11-29';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('xform');
});

const settingsFor = (overrides: Partial<SettingsInput> = {}): Settings => settingsIn(res, 'x', overrides);

const click = (viewId: string, userId: string | undefined, page = '/home') =>
  JSON.stringify({ viewId, ...(userId === undefined ? {} : { userId }), page, at: AT });

/** Page views: two by u1 (one with a referrer), v1 resent by its producer, a view without user, bad JSON, a tombstone. */
const clickSpecs: RecordSpec[] = [
  { partition: 0, offset: 0, key: 'u1', value: click('v1', 'u1') },
  { partition: 0, offset: 1, key: 'u1', value: click('v2', 'u1', '/news'), headers: { referrer: 'search' } },
  { partition: 0, offset: 2, key: 'u1', value: click('v1', 'u1') },
  { partition: 0, offset: 3, key: 'u3', value: click('v3', undefined) },
  { partition: 0, offset: 4, key: 'u4', value: '{"viewId":' },
  { partition: 0, offset: 5, key: 'u5', value: null },
  { partition: 1, offset: 10, key: 'u2', value: click('v4', 'u2') },
];

function expectClickResults(rows: Awaited<ReturnType<typeof stagedRows>>) {
  expect(rows.filter((r) => r.stream === 'output').map((r) => r.row)).toEqual([
    {
      userId: 'u1',
      page: '/home',
      at: AT,
      day: DAY,
      referrer: null,
      source: { topic: 'orders', partition: 0, offset: 0 },
    },
    {
      userId: 'u1',
      page: '/news',
      at: AT,
      day: DAY,
      referrer: 'search',
      source: { topic: 'orders', partition: 0, offset: 1 },
    },
    {
      userId: 'u2',
      page: '/home',
      at: AT,
      day: DAY,
      referrer: null,
      source: { topic: 'orders', partition: 1, offset: 10 },
    },
  ]);
  expect(rows.filter((r) => r.stream === 'deadletter').map((r) => [r.row.source, r.row.error])).toEqual([
    [{ topic: 'orders', partition: 0, offset: 3 }, 'page view without a userId'],
    [
      { topic: 'orders', partition: 0, offset: 4 },
      expect.stringMatching(/^undecodable value: .*not valid JSON/),
    ],
    [{ topic: 'orders', partition: 0, offset: 5 }, 'tombstone: a page view cannot be deleted'],
  ]);
}

describe('a user transform module through the processor', () => {
  it('stages its rows with lineage and its state, dead-letters its rejections, dedupes by the key it returns', async () => {
    const settings = settingsFor({ idempotencyKey: 'transform' });
    const { transform } = await loadTransform(CLICKS);
    const report = await createProcessor({ settings, clients: res.clients, transform }).processEvent(
      mskEvent(clickSpecs),
    );
    expect(
      report.partitions.map((p) => [p.partition, p.stagedRows, p.deadLettered, p.duplicatesByKey]),
    ).toEqual([
      [0, 2, 3, 1],
      [1, 1, 0, 0],
    ]);
    expectClickResults(await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId));
    const ledger = await ledgerView(res.clients, res.table, settings.pipelineId);
    expect(ledger.state[`u1#${DAY}`]).toMatchObject({ userId: 'u1', day: DAY, views: 2 });
    expect(ledger.state[`u2#${DAY}`]).toMatchObject({ userId: 'u2', day: DAY, views: 1 });
    expect(Object.keys(ledger.claims).sort()).toEqual(['v1', 'v2', 'v4']);
  });

  it('refuses json:<field> with a transform whose values are not JSON, before any batch', async () => {
    const { transform } = await loadTransform('passthrough');
    expect(() =>
      createProcessor({
        settings: settingsFor({ idempotencyKey: 'json:id' }),
        clients: res.clients,
        transform,
      }),
    ).toThrow(InvalidSettingError);
  });
});

describe('prepare', () => {
  /** The clicks transform, with `prepare` recording what it was given and failing while `failing` is set. */
  async function observed(failing: { now: boolean }) {
    const { transform: inner } = await loadTransform(CLICKS);
    const prepared: string[][] = [];
    let appliedBeforePrepare = 0;
    const transform: Transform = {
      name: inner.name,
      valueFormat: inner.valueFormat,
      async prepare(records: readonly DecodedRecord[]) {
        if (failing.now) throw new TransientAwsError('GetSchema (test registry)');
        prepared.push(records.map((r) => `${r.partition}:${r.offset}`));
        await inner.prepare?.(records);
      },
      apply(record) {
        if (prepared.length === 0) appliedBeforePrepare++;
        return inner.apply(record);
      },
    };
    return { transform, prepared, appliedBeforePrepare: () => appliedBeforePrepare };
  }

  it('runs once per batch with every record of the event, before any record is evaluated', async () => {
    const settings = settingsFor({ idempotencyKey: 'transform' });
    const { transform, prepared, appliedBeforePrepare } = await observed({ now: false });
    await createProcessor({ settings, clients: res.clients, transform }).processEvent(mskEvent(clickSpecs));
    expect(prepared).toEqual([['0:0', '0:1', '0:2', '0:3', '0:4', '0:5', '1:10']]);
    expect(appliedBeforePrepare()).toBe(0);
  });

  it('a transient failure in prepare fails the invocation with nothing staged; the retry stages the batch', async () => {
    const settings = settingsFor({ idempotencyKey: 'transform' });
    const failing = { now: true };
    const { transform } = await observed(failing);
    const processor = createProcessor({ settings, clients: res.clients, transform });
    await expect(processor.processEvent(mskEvent(clickSpecs))).rejects.toThrow(TransientAwsError);
    expect(await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId)).toEqual([]);
    failing.now = false;
    await processor.processEvent(mskEvent(clickSpecs));
    expectClickResults(await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId));
  });
});

describe('the passthrough transform', () => {
  it('writes key, value, headers and timestamp as a row: text when UTF-8, else base64, and says which', async () => {
    // Records without an idempotency key among them: deduplicated by offset (the test is about the rows).
    const settings = settingsFor({ transform: 'passthrough', idempotencyKey: 'none' });
    const event = mskEvent([
      { partition: 0, offset: 0, key: 'k', value: 'héllo', headers: { h: 'v', 'idempotency-key': 'id-0' } },
      { partition: 0, offset: 1, key: null, value: 'binary' },
      { partition: 0, offset: 2, key: 'gone', value: null },
    ]);
    const binary = event.records['orders-0']![1]!;
    (binary as { value: string | null }).value = Buffer.from([0xff, 0x00, 0x41]).toString('base64');
    // The default processor path: the built-in named by the `transform` setting.
    const report = await createProcessor({ settings, clients: res.clients }).processEvent(event);
    expect(report.partitions[0]).toMatchObject({ stagedRows: 3, deadLettered: 0 });
    const rows = (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId)).map(
      (r) => r.row,
    );
    expect(rows).toEqual([
      {
        key: 'k',
        keyEncoding: 'utf8',
        value: 'héllo',
        valueEncoding: 'utf8',
        headers: { h: 'v', 'idempotency-key': 'id-0' },
        timestamp: 1764374400000,
        source: { topic: 'orders', partition: 0, offset: 0 },
      },
      {
        key: null,
        keyEncoding: null,
        value: '/wBB',
        valueEncoding: 'base64',
        headers: {},
        timestamp: 1764374400001,
        source: { topic: 'orders', partition: 0, offset: 1 },
      },
      {
        key: 'gone',
        keyEncoding: 'utf8',
        value: null,
        valueEncoding: null,
        headers: {},
        timestamp: 1764374400002,
        source: { topic: 'orders', partition: 0, offset: 2 },
      },
    ]);
  });
});

describe('the processor handler factory (what the construct bundles for a user module)', () => {
  let stdout: MockInstance<typeof process.stdout.write>;
  beforeEach(() => {
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  });
  afterEach(() => stdout.mockRestore());

  it("runs the module's definition as the Lambda handler", async () => {
    const settings = settingsFor({ idempotencyKey: 'transform' });
    const handler = createProcessorHandler({ transform: clicks, settings });
    const report = await handler(mskEvent(clickSpecs), lambdaContext('processor', 'req-1') as Context);
    expect(report.partitions.map((p) => p.stagedRows)).toEqual([2, 1]);
    expectClickResults(await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId));
  });

  it('refuses, at module load, an export that is not a definition', () => {
    expect(() =>
      createProcessorHandler({ transform: { transform: () => ({}) }, settings: settingsFor() }),
    ).toThrow(InvalidBundledTransformError);
  });
});

describe('the local runner with a user module', () => {
  it('is exactly-once under faults, the oracle evaluating with the same module', async () => {
    const settings = settingsFor({ transform: CLICKS, idempotencyKey: 'transform' });
    const input: InputRecord[] = [];
    for (let i = 0; i < 120; i++) {
      const user = `u${i % 7}`;
      const value = click(`v${i}`, user, `/p${i % 4}`);
      input.push({ partition: i % 3, key: user, value, headers: {} });
      // Every tenth view resent by its producer: same bytes, a later offset.
      if (i % 10 === 0) input.push({ partition: i % 3, key: user, value, headers: {} });
    }
    input.push({ partition: 1, key: 'x', value: click('v-bad', undefined), headers: {} });
    input.push({ partition: 2, key: 'x', value: null, headers: {} });
    const { report, aggregates } = await runLocal({
      settings,
      input,
      partitions: 3,
      faults: parseFaultSpec('crash=0.2,redeliver=0.1,zombie=0.1,throttle=0.1,coordinator-crash=0.3'),
      seed: 11,
      checkpointIntervalMs: 500,
      clock: 'virtual',
      batchSize: 15,
    });
    expect(report.violations).toEqual([]);
    expect(report.verdict).toBe('exactly-once');
    expect(report.records).toMatchObject({ in: 134, committed: 120, deadLettered: 2, expected: 122 });
    expect(report.records.duplicatesDroppedByKey).toBeGreaterThan(0);
    expect(report.invocations.failed).toBeGreaterThan(0);
    // 120 distinct views over 7 users, all on one day: u0 has views 0, 7, …, 119 → 18; the others 17.
    expect(aggregates.get(`u0#${DAY}`)).toMatchObject({ userId: 'u0', day: DAY, views: 18 });
    expect(aggregates.get(`u6#${DAY}`)).toMatchObject({ views: 17 });
  });
});
