/**
 * A record in which the configured idempotency key source finds nothing never passes silently (P4): by default
 * (`missingIdempotencyKey: dead-letter`) it is dead-lettered with a reason naming the source; with `offset-only`
 * it is processed with offset dedupe only, as a record without a key source. Either way it is counted in the
 * batch report (`missingKeys`) and in the processor's metrics (`IdempotencyKeysMissing`). JSON and Avro values,
 * real DynamoDB Local and S3 server, the deployed handler for the metric.
 */
import type { Context } from 'aws-lambda';
import { afterEach, beforeAll, describe, expect, it, type MockInstance, vi } from 'vitest';
import { createProcessorHandler } from '../../functions/processor-factory.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { loadSchemaCodecs } from '../../shared/decode/decoders.ts';
import { METRIC } from '../../shared/observability/names.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import { defineTransform } from '../../shared/transforms/api.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { avroBytes, fixture } from '../fixtures/decode/wire.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { lambdaContext } from '../support/lambda-context.ts';
import { stagedRows } from '../support/ledger.ts';
import { mskEvent, mskEventOf, mskRecord, order, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('mik');
  await loadSchemaCodecs();
});

/** Device readings as JSON: the field is `deviceId`, so `json:deviceid` finds nothing in any of them. */
const readings = defineTransform<{ deviceId: string; reading: number }>({
  name: 'readings',
  schema: { deviceId: 'string', reading: 'long' },
  transform: ({ value }) => ({
    rows: value === null ? [] : [{ deviceId: value.deviceId, reading: value.reading }],
  }),
});

const reading = (offset: number, deviceId: string, value = offset): RecordSpec => ({
  partition: 0,
  offset,
  value: JSON.stringify({ deviceId, reading: value }),
});

const schema = fixture('payment.avsc');
/** Payments as Avro: the transform returns the optional `note` as the key, absent when the payment has none. */
const payments = defineTransform<{ id: string; amountCents: number; note: { string: string } | null }>({
  name: 'payments',
  value: { format: 'avro', schema },
  schema: { id: 'string', amountCents: 'long' },
  transform: ({ value }) => ({
    rows: value === null ? [] : [{ id: value.id, amountCents: value.amountCents }],
    ...(value?.note ? { idempotencyKey: value.note.string } : {}),
  }),
});

function payment(offset: number, note: string | null): RecordSpec {
  const bytes = avroBytes(schema, {
    id: `p-${offset}`,
    amountCents: 100 + offset,
    currency: 'EUR',
    note: note === null ? null : { string: note },
  });
  return { partition: 0, offset, value: bytes.toString('latin1') };
}

/** mskEvent sends values as UTF-8 text: Avro bytes are re-encoded here so they arrive exactly. */
function avroEvent(specs: readonly RecordSpec[]) {
  const records = specs.map((spec) => ({
    ...mskRecord(spec),
    value: Buffer.from(spec.value!, 'latin1').toString('base64'),
  }));
  return mskEventOf({ 'orders-0': records });
}

function settingsFor(overrides: Partial<SettingsInput>): Settings {
  return settingsIn(res, 'mik', overrides);
}

function run(settings: Settings, transform: Transform) {
  return createProcessor({ settings, clients: res.clients, transform });
}

async function deadLetters(settings: Settings) {
  return (await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId))
    .filter((r) => r.stream === 'deadletter')
    .map((r) => ({ offset: (r.row.source as { offset: number }).offset, error: r.row.error }));
}

describe('a record in which the configured key source finds nothing', () => {
  it('JSON, by default: dead-lettered naming the key source, and counted; a keyed record is processed as before', async () => {
    const settings = settingsFor({ idempotencyKey: 'json:deviceid' });
    const transform = toTransform(readings);
    const keyed = {
      partition: 0,
      offset: 3,
      value: JSON.stringify({ deviceId: 'd-9', deviceid: 'd-9', reading: 1 }),
    };
    const report = await run(settings, transform).processEvent(
      mskEvent([reading(0, 'd-1'), reading(1, 'd-2'), reading(2, 'd-1', 0), keyed]),
    );
    expect(report.partitions[0]).toMatchObject({ missingKeys: 3, deadLettered: 3, stagedRows: 1 });
    expect(await deadLetters(settings)).toEqual([
      { offset: 0, error: 'no idempotency key: json:deviceid found nothing' },
      { offset: 1, error: 'no idempotency key: json:deviceid found nothing' },
      { offset: 2, error: 'no idempotency key: json:deviceid found nothing' },
    ]);
  });

  it('JSON, offset-only: processed with offset dedupe as before, and still counted', async () => {
    const settings = settingsFor({
      idempotencyKey: 'json:deviceid',
      missingIdempotencyKey: 'offset-only',
    });
    const transform = toTransform(readings);
    // The same reading twice (a producer's resend): without a key only offsets dedupe, so both are output.
    const batch = [reading(0, 'd-1'), reading(1, 'd-2'), reading(2, 'd-1', 0)];
    const report = await run(settings, transform).processEvent(mskEvent(batch));
    expect(report.partitions[0]).toMatchObject({ missingKeys: 3, deadLettered: 0, stagedRows: 3 });
    const again = await run(settings, transform).processEvent(mskEvent(batch));
    expect(again.partitions[0]).toMatchObject({ missingKeys: 0, duplicatesByOffset: 3, stagedRows: 0 });
  });

  it('a header source: a record without the header is dead-lettered by default', async () => {
    const settings = settingsFor({});
    const report = await run(settings, builtinTransform('orders')).processEvent(
      mskEvent([
        { partition: 0, offset: 0, value: order('o-0'), headers: { 'idempotency-key': 'o-0' } },
        { partition: 0, offset: 1, value: order('o-1') },
      ]),
    );
    expect(report.partitions[0]).toMatchObject({ missingKeys: 1, deadLettered: 1, stagedRows: 1 });
    expect(await deadLetters(settings)).toEqual([
      { offset: 1, error: 'no idempotency key: header:idempotency-key found nothing' },
    ]);
  });

  it('Avro with the transform as key source: a record for which the transform returns no key is dead-lettered by default, processed under offset-only; counted both ways', async () => {
    const batch = [payment(0, 'n-0'), payment(1, null), payment(2, 'n-2'), payment(3, null)];
    const transform = toTransform(payments);
    const strict = settingsFor({ idempotencyKey: 'transform' });
    const report = await run(strict, transform).processEvent(avroEvent(batch));
    expect(report.partitions[0]).toMatchObject({ missingKeys: 2, deadLettered: 2, stagedRows: 2 });
    expect(await deadLetters(strict)).toEqual([
      {
        offset: 1,
        error: 'no idempotency key: transform found nothing (payments returned no idempotencyKey)',
      },
      {
        offset: 3,
        error: 'no idempotency key: transform found nothing (payments returned no idempotencyKey)',
      },
    ]);
    const lenient = settingsFor({ idempotencyKey: 'transform', missingIdempotencyKey: 'offset-only' });
    const processed = await run(lenient, transform).processEvent(avroEvent(batch));
    expect(processed.partitions[0]).toMatchObject({ missingKeys: 2, deadLettered: 0, stagedRows: 4 });
  });
});

describe('the metric', () => {
  let stdout: MockInstance<typeof process.stdout.write>;
  let stderr: MockInstance<typeof process.stderr.write>;
  afterEach(() => {
    stdout?.mockRestore();
    stderr?.mockRestore();
  });

  it('IdempotencyKeysMissing counts them per batch, as the other counts (zero included)', async () => {
    const settings = settingsFor({ idempotencyKey: 'json:deviceid' });
    const handler = createProcessorHandler({ transform: readings, settings }) as unknown as (
      event: unknown,
      context: Context,
    ) => Promise<unknown>;
    stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    stderr = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    await handler(mskEvent([reading(0, 'd-1'), reading(1, 'd-2')]), lambdaContext('processor', 'r1'));
    await handler(mskEvent([reading(0, 'd-1'), reading(1, 'd-2')]), lambdaContext('processor', 'r2'));
    const blobs = stdout.mock.calls
      .flatMap(([chunk]) => String(chunk).split('\n'))
      .filter((line) => line.startsWith('{') && line.includes('"_aws"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(blobs.map((blob) => blob[METRIC.missingKeys])).toEqual([2, 0]);
    // And a warning naming the key source, once (the redelivery staged nothing).
    const warnings = [...stdout.mock.calls, ...stderr.mock.calls]
      .flatMap(([chunk]) => String(chunk).split('\n'))
      .filter((line) => line.includes('records without an idempotency key'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(warnings).toEqual([
      expect.objectContaining({
        missingKeys: 2,
        idempotencyKey: 'json:deviceid',
        missingIdempotencyKey: 'dead-letter',
      }),
    ]);
  });
});
