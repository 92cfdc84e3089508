/**
 * The processor against arbitrary MSK events: random shapes, nulls, binary keys and values, huge and
 * ill-formed keys, random headers, transforms that throw or return garbage — on DynamoDB Local and the S3
 * server. For every event, either
 * - the processor stages every record exactly once (an output row or a dead-letter row; a record whose key an
 *   earlier record of the event already holds may be dropped as a duplicate, but every key keeps one row), and
 *   delivering the same event again changes nothing; or
 * - it rejects the event with a named error (a {@link PipelineError}) and writes nothing.
 * `EOS_PROPERTY_RUNS` sets the number of events (default 25, about a minute on a busy machine).
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSettings } from '../../shared/config/settings.ts';
import { PipelineError } from '../../shared/errors.ts';
import { decodeRecord, type MskEvent, type MskRecord } from '../../shared/kafka/event.ts';
import { evaluateRecord } from '../../shared/processor/evaluate.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { ordersTransform } from '../../shared/transforms/orders.ts';
import type { Transform, TransformResult } from '../../shared/transforms/types.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { ledgerView, scanPipeline, stagedRows } from '../support/ledger.ts';

const RUNS = Number(process.env.EOS_PROPERTY_RUNS ?? 25);
const KEY_HEADER = 'idempotency-key';

/** `orders`, but a value starting with `!` makes it throw and one starting with `?` makes it return garbage. */
const unrulyTransform: Transform = {
  name: 'unruly',
  apply(record) {
    if (record.value?.startsWith('!')) throw new Error(`unruly record ${record.value.slice(0, 3000)}`);
    if (record.value?.startsWith('?')) return { kind: 'ok', rows: 'nope' } as unknown as TransformResult;
    return ordersTransform.apply(record);
  },
};

const customer = fc.oneof(
  fc.constantFrom('c1', 'c2', 'a#b', '\ud800', '\udbff', 'x\udc00', '', 'ü😀'),
  fc.string({ unit: 'binary', maxLength: 6 }),
  fc.constant('c'.repeat(1100)),
);
const orderValue = fc
  .record({
    orderId: fc.oneof(fc.constantFrom('o1', 'o2', 'o3'), fc.string({ unit: 'binary', maxLength: 4 })),
    customerId: customer,
    amount: fc.constantFrom('1.00', '2.5', '10', '1.234', 'x'),
    currency: fc.constantFrom('USD', 'KRW', 'XYZ'),
    ts: fc.constant(1),
  })
  .map((o) => Buffer.from(JSON.stringify(o)));
const valueBytes = fc.oneof(
  { weight: 5, arbitrary: orderValue },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 20 }).map((b) => Buffer.from(b)) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('!boom', '?garbage', '', '{"orderId":').map((t) => Buffer.from(t)),
  },
);
const headerValue: fc.Arbitrary<number[]> = fc.oneof(
  fc.constantFrom('o1', 'o2', 'k', '~x').map((t): number[] => [...Buffer.from(t)]),
  fc.array(fc.integer({ min: -128, max: 127 }), { maxLength: 4 }),
  fc.constant([...Buffer.from('k'.repeat(1100))]).map((b) => [...b]),
);
const headers = fc.array(
  fc.oneof(
    headerValue.map((bytes) => ({ [KEY_HEADER]: bytes })),
    fc
      .record({ name: fc.constantFrom('constructor', '__proto__', 'h', ''), bytes: headerValue })
      .map(({ name, bytes }) => Object.fromEntries([[name, bytes]]) as Record<string, number[]>),
  ),
  { maxLength: 3 },
);

interface RecordDraw {
  readonly partition: number;
  readonly key: Uint8Array | null | undefined;
  readonly value: Uint8Array | null | undefined;
  readonly headers: readonly Record<string, number[]>[];
}

const recordDraw: fc.Arbitrary<RecordDraw> = fc.record({
  partition: fc.integer({ min: 0, max: 2 }),
  key: fc.oneof(
    fc.constant(null),
    fc.constant(undefined),
    fc.uint8Array({ maxLength: 8 }).map((b) => Buffer.from(b)),
  ),
  value: fc.oneof(
    { weight: 1, arbitrary: fc.constantFrom(null, undefined) },
    { weight: 6, arbitrary: valueBytes },
  ),
  headers,
});

/** Breaks the event's shape: each of these must reject the whole event. */
const breakage = fc.constantFrom(
  'none',
  'none',
  'none',
  'none',
  'bad-topic',
  'bad-base64',
  'offsets-backwards',
  'header-byte',
) as fc.Arbitrary<'none' | 'bad-topic' | 'bad-base64' | 'offsets-backwards' | 'header-byte'>;

function eventOf(draws: readonly RecordDraw[], broken: string): MskEvent {
  const records: Record<string, MskRecord[]> = {};
  const next = [0, 0, 0];
  for (const draw of draws) {
    const offset = next[draw.partition]!;
    next[draw.partition] = offset + 1 + (offset % 3);
    const record: Record<string, unknown> = {
      topic: 'orders',
      partition: draw.partition,
      offset,
      timestamp: 1764374400000 + offset,
      timestampType: 'CREATE_TIME',
      headers: draw.headers,
    };
    if (draw.key !== undefined)
      record.key = draw.key === null ? null : Buffer.from(draw.key).toString('base64');
    if (draw.value !== undefined)
      record.value = draw.value === null ? null : Buffer.from(draw.value).toString('base64');
    const batch = records[`orders-${draw.partition}`] ?? [];
    batch.push(record as unknown as MskRecord);
    records[`orders-${draw.partition}`] = batch;
  }
  const first = Object.values(records)[0]![0] as unknown as Record<string, unknown>;
  if (broken === 'bad-topic') {
    const batch = Object.keys(records)[0]!;
    const moved = records[batch]!.map((r) => ({ ...r, topic: 'a/b#c' }));
    delete records[batch];
    records[`a/b#c-${moved[0]!.partition}`] = moved;
  }
  if (broken === 'bad-base64') first.value = 'not base64!';
  if (broken === 'header-byte') first.headers = [{ h: [256] }];
  if (broken === 'offsets-backwards') {
    const batch = Object.values(records)[0]!;
    batch.push({ ...batch[batch.length - 1]!, offset: 0 });
  }
  return {
    eventSource: 'aws:kafka',
    eventSourceArn:
      'arn:aws:kafka:us-east-1:123456789012:cluster/test/00000000-0000-0000-0000-000000000000-1',
    records,
  };
}

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('prop');
});

async function written(pipeline: string) {
  const items = await scanPipeline(res.clients, res.table, pipeline);
  const objects = await res.clients.s3.send(
    new ListObjectsV2Command({ Bucket: res.bucket, Prefix: `${pipeline}/` }),
  );
  return { items: items.length, objects: objects.KeyCount ?? 0 };
}

async function snapshot(pipeline: string) {
  return {
    ledger: await ledgerView(res.clients, res.table, pipeline),
    rows: await stagedRows(res.clients, res.table, res.bucket, pipeline),
  };
}

describe('processor property: arbitrary MSK events', () => {
  it(`stages every record exactly once or rejects the event whole with a named error, and redelivery changes nothing (${RUNS} events)`, async () => {
    let staged = 0;
    let rejected = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.array(recordDraw, { minLength: 1, maxLength: 12 }),
        breakage,
        fc.constantFrom('ahead', 'in-transaction') as fc.Arbitrary<'ahead' | 'in-transaction'>,
        async (draws, broken, claimWrite) => {
          const settings = parseSettings({
            ledgerTable: res.table,
            bucket: res.bucket,
            pipelineId: uniqueName('prop'),
            idempotencyKey: `header:${KEY_HEADER}`,
            claimWrite,
            maxTransactionItems: 8,
          });
          const event = JSON.parse(JSON.stringify(eventOf(draws, broken))) as MskEvent;
          const processor = createProcessor({ settings, clients: res.clients, transform: unrulyTransform });
          let failure: unknown;
          try {
            await processor.processEvent(event);
          } catch (error) {
            failure = error;
          }
          if (failure !== undefined) {
            rejected += 1;
            expect(failure, String(failure)).toBeInstanceOf(PipelineError);
            expect(broken, `a well-formed event was rejected: ${String(failure)}`).not.toBe('none');
            expect(await written(settings.pipelineId)).toEqual({ items: 0, objects: 0 });
            return;
          }
          staged += 1;
          expect(broken).toBe('none');
          const rows = await stagedRows(res.clients, res.table, res.bucket, settings.pipelineId);
          const rowsOf = new Map<string, string[]>();
          for (const { stream, row } of rows) {
            const s = row.source as { partition: number; offset: number };
            const id = `${s.partition}#${s.offset}`;
            rowsOf.set(id, [...(rowsOf.get(id) ?? []), stream]);
          }
          const keyHolders = new Map<string, string[]>();
          for (const records of Object.values(event.records)) {
            for (const raw of records) {
              const id = `${raw.partition}#${raw.offset}`;
              const streams = rowsOf.get(id) ?? [];
              rowsOf.delete(id);
              expect(streams.length, `record ${id} staged ${streams.length} times`).toBeLessThanOrEqual(1);
              const evaluated = evaluateRecord(unrulyTransform, settings.idempotencyKey, decodeRecord(raw), {
                maxTransactionItems: settings.maxTransactionItems,
              });
              if (evaluated.idempotencyKey === undefined) {
                // No key to share: the record is its own identity, staged once in the stream its evaluation says.
                expect(streams, `record ${id}`).toEqual([evaluated.deadLetter ? 'deadletter' : 'output']);
              } else {
                keyHolders.set(evaluated.idempotencyKey, [
                  ...(keyHolders.get(evaluated.idempotencyKey) ?? []),
                  ...streams,
                ]);
              }
            }
          }
          expect([...rowsOf.keys()], 'rows of records not in the event').toEqual([]);
          for (const [key, streams] of keyHolders) {
            // One output row per key; a same-key record with other bytes may be dead-lettered as a conflict.
            expect(
              streams.filter((s) => s === 'output'),
              `key ${JSON.stringify(key)}`,
            ).toHaveLength(1);
          }
          const before = await snapshot(settings.pipelineId);
          await createProcessor({ settings, clients: res.clients, transform: unrulyTransform }).processEvent(
            event,
          );
          expect(await snapshot(settings.pipelineId)).toEqual(before);
        },
      ),
      { numRuns: RUNS, seed: 20261201, endOnFailure: true },
    );
    // Both outcomes were exercised: a property that only ever rejects (or only stages) proves half of it.
    expect(staged).toBeGreaterThan(0);
    expect(rejected).toBeGreaterThan(0);
  }, 240_000);
});
