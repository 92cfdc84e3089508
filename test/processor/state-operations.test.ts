/**
 * `min`, `max` and `latest` through the processor, exactly once under the faults the mapping and Lambda bring: a
 * batch delivered again, a crash at every step followed by the mapping's retry (between staging and the
 * acknowledgement included), a zombie racing its retry, another container writing the same key meanwhile, and a
 * record whose operation meets a field another operation holds (dead-lettered alone, L1). The weaker guarantees
 * apply them exactly too, being idempotent. Real DynamoDB Local and S3 server.
 */
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import { ledgerDocumentClient } from '../../shared/aws/clients.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { forgetStateKnowledge } from '../../shared/ledger/state-knowledge.ts';
import { readStateItem } from '../../shared/ledger/state-read.ts';
import { createProcessor, PROCESSOR_STEPS, type ProcessorHooks } from '../../shared/processor/processor.ts';
import { readFinalRows } from '../../shared/sink/verify.ts';
import { latestOrderKey } from '../../shared/transforms/state-order.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('procops');
});

interface Reading {
  readonly sensor: string;
  readonly c: number;
  readonly at: number;
  /** `add`: the record adds to `high` instead (a field `max` holds): a transform's mistake. */
  readonly wrong?: 'add';
}

/** Per sensor: readings (add), low (min), high (max), last (latest by `at`). */
const readings: Transform = {
  name: 'readings',
  apply(record) {
    const r = JSON.parse(Buffer.from(record.rawValue ?? '', 'base64').toString()) as Reading;
    // Two keys of the record's own besides the sensor's: a partition's batch takes more than one chunk.
    const own = ['a', 'b'].map((k) => ({
      key: `${r.sensor}@${record.partition}#${record.offset}${k}`,
      fields: {},
      add: { n: 1 },
    }));
    const state =
      r.wrong === 'add'
        ? [{ key: r.sensor, fields: {}, add: { high: 1 } }]
        : [
            {
              key: r.sensor,
              fields: {},
              add: { readings: 1 },
              min: { low: r.c },
              max: { high: r.c },
              latest: { last: { value: r.c, at: r.at } },
            },
            ...own,
          ];
    return {
      kind: 'ok',
      rows: [{ offset: record.offset }],
      state,
      body: { id: `${r.sensor}@${record.partition}#${record.offset}` },
    };
  },
};

const reading = (partition: number, offset: number, r: Reading): RecordSpec => ({
  partition,
  offset,
  value: JSON.stringify(r),
});

/** Two sensors over two partitions, times out of order. */
const BATCH: RecordSpec[] = [
  reading(0, 0, { sensor: 's1', c: 20.5, at: 3 }),
  reading(0, 1, { sensor: 's1', c: -4, at: 1 }),
  reading(0, 2, { sensor: 's2', c: 7, at: 9 }),
  reading(1, 0, { sensor: 's1', c: 31.25, at: 2 }),
  reading(1, 1, { sensor: 's2', c: 7.5, at: 9 }),
  reading(1, 2, { sensor: 's1', c: 0.1, at: 3 }),
];

const EXPECTED = {
  s1: { readings: 4, low: -4, high: 31.25, last: 20.5 },
  s2: { readings: 2, low: 7, high: 7.5, last: 7.5 },
};

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  // Keys from the value: claims are written ahead of the transactions, so every processor step is reached.
  return settingsIn(res, 'procops', { idempotencyKey: 'json:id', maxTransactionItems: 8, ...overrides });
}

async function stateOf(settings: Settings): Promise<Record<string, Record<string, unknown>>> {
  const found: Record<string, Record<string, unknown>> = {};
  for (const key of ['s1', 's2']) {
    const item = await readStateItem(
      { doc: ledgerDocumentClient(res.clients.dynamodb), table: res.table },
      settings.pipelineId,
      key,
    );
    if (item) found[key] = item.values;
  }
  return found;
}

async function checkpoint(settings: Settings): Promise<void> {
  expect((await createLocalCoordinator({ settings, clients: res.clients }).runCheckpoint()).status).toBe(
    'committed',
  );
}

const container = (settings: Settings, hooks?: ProcessorHooks) =>
  createProcessor({ settings, clients: res.clients, transform: readings, ...(hooks ? { hooks } : {}) });

describe('exactly once', () => {
  it('a batch delivered again changes nothing', async () => {
    const settings = settingsFor();
    await container(settings).processEvent(mskEvent(BATCH));
    expect(await stateOf(settings)).toEqual(EXPECTED);
    const again = await container(settings).processEvent(mskEvent(BATCH));
    expect(again.partitions.map((p) => p.duplicatesByOffset)).toEqual([3, 3]);
    forgetStateKnowledge();
    await container(settings).processEvent(mskEvent(BATCH));
    expect(await stateOf(settings)).toEqual(EXPECTED);
  });

  it.each(PROCESSOR_STEPS)(
    'a crash at %s, then the mapping’s retry, ends as a run without the crash',
    async (step) => {
      const settings = settingsFor();
      let crashed = 0;
      const chunked =
        step === 'before-stage-write' || step === 'after-stage-write' || step === 'after-transaction';
      const crash: ProcessorHooks = {
        onStep(at, context) {
          if (at !== step || crashed > 0) return;
          // Partition 0's second chunk, so that one chunk of the batch is staged before the crash.
          if (step !== 'before-return' && (context.partition !== 0 || (chunked && context.chunk !== 1)))
            return;
          crashed += 1;
          throw new InjectedCrashError(at);
        },
      };
      await expect(container(settings, crash).processEvent(mskEvent(BATCH))).rejects.toBeInstanceOf(
        InjectedCrashError,
      );
      expect(crashed).toBe(1);
      await container(settings).processEvent(mskEvent(BATCH));
      expect(await stateOf(settings)).toEqual(EXPECTED);
      // Each record once in the output too.
      await checkpoint(settings);
      const rows = await readFinalRows({
        s3: res.clients.s3,
        bucket: res.bucket,
        pipeline: settings.pipelineId,
      });
      const lineages = rows.map(({ row }) => JSON.stringify(row.source)).sort();
      expect(lineages).toEqual(
        BATCH.map((spec) =>
          JSON.stringify({ topic: 'orders', partition: spec.partition, offset: spec.offset }),
        ).sort(),
      );
    },
  );

  it('a zombie racing its retry: both finish, the state is as once', async () => {
    const settings = settingsFor();
    let release: () => void = () => {};
    const held = new Promise<void>((resume) => {
      release = resume;
    });
    const zombie = container(settings, {
      async onStep(at, context) {
        if (at === 'after-stage-write' && context.partition === 1 && context.chunk === 0) await held;
      },
    }).processEvent(mskEvent(BATCH));
    await container(settings).processEvent(mskEvent(BATCH));
    release();
    await zombie;
    expect(await stateOf(settings)).toEqual(EXPECTED);
  });

  it('another container writes a better value between this one’s staged write and its transaction: the join wins', async () => {
    const settings = settingsFor({ maxTransactionItems: 100 });
    let raced = false;
    await container(settings, {
      async onStep(at, context) {
        if (at !== 'after-stage-write' || context.partition !== 1 || raced) return;
        raced = true;
        await ledgerDocumentClient(res.clients.dynamodb).send(
          new UpdateCommand({
            TableName: res.table,
            Key: keys.state(settings.pipelineId, 's1'),
            UpdateExpression: 'SET stateKey = :k, high = :high, #ch = :ch, #l = :l, #cl = :cl',
            ExpressionAttributeNames: { '#ch': '@high', '#l': 'last', '#cl': '@last' },
            ExpressionAttributeValues: {
              ':k': 's1',
              ':high': 99,
              ':ch': { op: 'max' },
              ':l': 'other',
              ':cl': { op: 'latest', at: 50, order: latestOrderKey({ value: 'other', at: 50 }) },
            },
          }),
        );
      },
    }).processEvent(mskEvent(BATCH));
    expect(raced).toBe(true);
    const state = await stateOf(settings);
    expect(state.s1).toMatchObject({ high: 99, last: 'other', low: -4 });
    expect(state.s2).toEqual(EXPECTED.s2);
  });
});

describe('a record whose operation meets a field another operation holds', () => {
  it.each(['exactly-once', 'at-least-once'] as const)(
    '%s: is dead-lettered alone with a one-line reason; the rest is applied and the partition moves on',
    async (deliveryGuarantee) => {
      const settings = settingsFor({ deliveryGuarantee });
      const report = await container(settings).processEvent(
        mskEvent([
          reading(0, 0, { sensor: 's1', c: 1, at: 1 }),
          reading(0, 1, { sensor: 's1', c: 0, at: 0, wrong: 'add' }),
          reading(0, 2, { sensor: 's1', c: 5, at: 2 }),
        ]),
      );
      expect(report.partitions[0]).toMatchObject({ deadLettered: 1 });
      if (deliveryGuarantee === 'exactly-once') await checkpoint(settings);
      const rows = await readFinalRows({
        s3: res.clients.s3,
        bucket: res.bucket,
        pipeline: settings.pipelineId,
      });
      const dead = rows.filter((row) => row.stream === 'deadletter').map((row) => row.row);
      expect(dead).toHaveLength(1);
      expect(dead[0]).toMatchObject({ source: { offset: 1 } });
      expect(String(dead[0]!.error)).toBe(
        'state key "s1": field "high" holds a max, and this record adds to it: a state field keeps one operation',
      );
      expect(await stateOf(settings)).toEqual({ s1: { readings: 2, low: 1, high: 5, last: 5 } });
    },
  );
});

describe('the weaker guarantees', () => {
  it('at-least-once: a redelivered batch adds twice but leaves min, max and latest exact', async () => {
    const settings = settingsFor({ deliveryGuarantee: 'at-least-once' });
    await container(settings).processEvent(mskEvent(BATCH));
    forgetStateKnowledge();
    await container(settings).processEvent(mskEvent(BATCH));
    expect(await stateOf(settings)).toEqual({
      s1: { ...EXPECTED.s1, readings: 8 },
      s2: { ...EXPECTED.s2, readings: 4 },
    });
  });
});
