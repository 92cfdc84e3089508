import { beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../shared/clock.ts';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { OffsetsWentBackwardsError } from '../../shared/errors.ts';
import type { DecodedRecord } from '../../shared/kafka/record.ts';
import { EpochLedger } from '../../shared/ledger/epoch-switch.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { currentRowsQuery, epochLaneOf, generationOf } from '../../shared/replay/current-view.ts';
import { planReplay, requestSwitch } from '../../shared/replay/replay.ts';
import type { GenerationSwitch } from '../../shared/sink/generation-switch.ts';
import { parseFinalKey } from '../../shared/sink/layout.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import { defineTransform } from '../../shared/transforms/api.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { builtinTransform } from '../../shared/transforms/registry.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { eos } from '../support/eos.ts';
import { listedObjects, switchesOf } from '../support/listing.ts';
import { mskEvent, orderRecords, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rvcv');
});

const orders = builtinTransform('orders');

/** Rejects every order whose offset ends in 7 (a transform bug); `orders` is the fix. */
const buggy: Transform = {
  name: 'orders-buggy',
  apply(record: DecodedRecord) {
    if (record.offset % 10 === 7) return { kind: 'poison', error: 'bug: offsets ending in 7 rejected' };
    return orders.apply(record);
  },
};

function parquetSettings(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rvcv', {
    outputFormat: 'parquet',
    outputColumns: [...orderDefinition.columns],
    ...overrides,
  });
}

/** `lane:p@offset` of every row the committed reader shows. */
async function readerRows(settings: Settings): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    rows.push(`${file.topic}:${file.partition}@${(row.source as { offset: number }).offset}`);
  }
  return rows.sort();
}

async function duckdb(sql: string): Promise<Record<string, unknown>[]> {
  const { DuckDBInstance } = await import('@duckdb/node-api');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    return (await connection.runAndReadAll(sql)).getRowObjectsJS() as Record<string, unknown>[];
  } finally {
    connection.closeSync();
  }
}

/** `lane:p@offset` of the rows the view's SQL keeps over the listed objects, the lane parsed from the key. */
async function viewRows(settings: Settings, switches: readonly GenerationSwitch[]): Promise<string[]> {
  const dir = await listedObjects(res.clients, settings);
  const source = `read_parquet('${dir}/**/*.parquet', filename = true, hive_partitioning = false)`;
  const rows = await duckdb(
    `SELECT filename AS f, source."partition" AS p, source."offset" AS o FROM (${currentRowsQuery(source, 'filename', switches)})`,
  );
  return rows
    .map((row) => {
      const key = String(row.f).slice(dir.length + 1);
      const parts = parseFinalKey(settings.pipelineId, key);
      if (parts === undefined) throw new Error(`${key} is no final key`);
      return `${parts.topic}:${row.p}@${row.o}`;
    })
    .sort();
}

async function expectViewEqualsReader(settings: Settings): Promise<string[]> {
  const shown = await readerRows(settings);
  expect(await viewRows(settings, await switchesOf(res.clients, settings))).toEqual(shown);
  return shown;
}

async function replay(
  settings: Settings,
  input: readonly RecordSpec[],
  from: number,
  to: number,
  partitions: number[],
  transform: Transform = orders,
): Promise<number> {
  const { plan } = await planReplay({
    clients: res.clients,
    table: settings.ledgerTable,
    pipeline: settings.pipelineId,
    topic: 'orders',
    fromOffset: from,
    toOffset: to,
    partitions,
    clock: systemClock,
  });
  await createProcessor({
    settings: { ...settings, replayGeneration: plan.generation },
    clients: res.clients,
    transform,
  }).processEvent(mskEvent(input));
  await checkpoint(res, settings);
  return plan.generation;
}

async function switchTo(settings: Settings, generation: number): Promise<void> {
  await requestSwitch(
    { clients: res.clients, table: settings.ledgerTable, pipeline: settings.pipelineId },
    generation,
    systemClock,
  );
  await checkpoint(res, settings);
}

const lanesOf = (rows: readonly string[]) => new Set(rows.map((row) => row.split(':')[0]));

describe('the Athena view against the committed reader', () => {
  it('hour folders, partition 12 and 13-digit offsets, two overlapping switches: the view equals the reader', async () => {
    const settings = parquetSettings({ timePartitioning: 'hour' });
    const base = 1_234_567_890_120;
    const input = [...orderRecords(0, base, 30), ...orderRecords(12, base, 30)];
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(input.slice(0, 40)));
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(input.slice(40)));
    await checkpoint(res, settings);
    const first = await replay(settings, input, base + 7, base + 22, [0, 12]);
    await expectViewEqualsReader(settings);
    await switchTo(settings, first);
    const afterFirst = await expectViewEqualsReader(settings);
    expect(afterFirst.filter((row) => row.startsWith('orders~g1:12@'))).toHaveLength(16);
    const second = await replay(settings, input, base + 15, base + 27, [12]);
    await switchTo(settings, second);
    const shown = await expectViewEqualsReader(settings);
    expect(shown).toHaveLength(60);
    expect(shown.filter((row) => row.startsWith('orders~g2:12@'))).toHaveLength(13);
    expect(shown.filter((row) => row.startsWith('orders~g1:12@'))).toHaveLength(8);
    expect(shown.filter((row) => row.startsWith('orders~g1:0@'))).toHaveLength(16);
  });

  it('an epoch lane (orders~1) and its replay (orders~1~g1) over offsets epoch 0 used too: only epoch 1 is replaced', async () => {
    const settings = parquetSettings({ timePartitioning: 'day', idempotencyKey: 'none' });
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent(orderRecords(0, 0, 10)));
    await checkpoint(res, settings);
    const epoch1 = orderRecords(0, 0, 10, 'e1');
    await expect(processor.processEvent(mskEvent(epoch1))).rejects.toThrow();
    // The mapping retries the refused batch in another invocation, which confirms the stop.
    await expect(
      createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(epoch1)),
    ).rejects.toBeInstanceOf(OffsetsWentBackwardsError);
    const epochs = new EpochLedger(
      res.clients.dynamodb,
      res.table,
      settings.pipelineId,
      new ManualClock(Date.now()),
    );
    expect((await epochs.startNew('orders', 0)).kind).toBe('opened');
    await processor.processEvent(mskEvent(epoch1));
    await checkpoint(res, settings);
    const generation = await replay(settings, epoch1, 2, 6, [0]);
    await switchTo(settings, generation);
    expect((await switchesOf(res.clients, settings))[0]!.ranges[0]!.lane).toBe('orders~1');
    const shown = await expectViewEqualsReader(settings);
    expect(lanesOf(shown)).toEqual(new Set(['orders', 'orders~1', 'orders~1~g1']));
    expect(shown.filter((row) => row.startsWith('orders:'))).toHaveLength(10);
    expect(shown.filter((row) => row.startsWith('orders~1~g1:'))).toHaveLength(5);
  });

  it('redrive lanes of the live output (orders~r1) and of a generation (orders~g1~r1) follow the switch in the view as in the reader', async () => {
    const settings = parquetSettings();
    const input = orderRecords(0, 0, 30);
    await createProcessor({ settings, clients: res.clients, transform: buggy }).processEvent(mskEvent(input));
    await checkpoint(res, settings);
    await redrive({ settings, clients: res.clients, transform: orders });
    await checkpoint(res, settings);
    await expectViewEqualsReader(settings);
    // Generation 1 over 5..25, with the bug again: its own dead letters at 7 and 17 hide orders~r1's rows there.
    const generation = await replay(settings, input, 5, 25, [0], buggy);
    await switchTo(settings, generation);
    const switched = await expectViewEqualsReader(settings);
    expect(switched.filter((row) => row.startsWith('orders~r1:'))).toEqual(['orders~r1:0@27']);
    await redrive({ settings, clients: res.clients, transform: orders });
    await checkpoint(res, settings);
    const shown = await expectViewEqualsReader(settings);
    expect(lanesOf(shown)).toEqual(new Set(['orders', 'orders~r1', 'orders~g1', 'orders~g1~r1']));
    expect(shown).toHaveLength(30);
  });

  it('a generation switched over a range the live output dead-lettered (no live rows there) shows its rows in the view', async () => {
    const settings = parquetSettings({ timePartitioning: 'day' });
    const input = orderRecords(0, 0, 20);
    await createProcessor({ settings, clients: res.clients, transform: buggy }).processEvent(mskEvent(input));
    await checkpoint(res, settings);
    const generation = await replay(settings, input, 7, 7, [0]);
    await switchTo(settings, generation);
    const shown = await expectViewEqualsReader(settings);
    expect(shown.filter((row) => row.startsWith('orders~g1:'))).toEqual(['orders~g1:0@7']);
  });

  /*
   * The view adds no column and filters on the expressions themselves. A view that added its columns with
   * `SELECT *, … AS eos_epoch_lane, … AS eos_generation` and filtered on the name `eos_generation` in the outer
   * query would meet a transform column of that name (only `source` is reserved in the transform's columns):
   * DuckDB renames the view's own column to `eos_generation_1` and filters by the user's value (here always 0), so
   * the view would show an unswitched generation's rows next to the live ones; Trino refuses the statement (an
   * ambiguous column, and a view with two columns of one name).
   */
  it('a transform column named eos_generation is a column like any other: the view shows what readers show', async () => {
    const definition = defineTransform({
      name: 'orders-with-eos-generation',
      value: { format: 'json' },
      schema: { orderId: 'string', eos_generation: 'long' },
      transform({ value }) {
        return { rows: [{ orderId: String((value as { orderId: string }).orderId), eos_generation: 0 }] };
      },
    });
    const transform = toTransform(definition);
    const settings = parquetSettings({ outputColumns: [...definition.columns] });
    const input = orderRecords(0, 0, 10);
    await createProcessor({ settings, clients: res.clients, transform }).processEvent(mskEvent(input));
    await checkpoint(res, settings);
    // Generation 1 committed, not switched: readers show the live rows only.
    await replay(settings, input, 2, 5, [0], transform);
    expect(await readerRows(settings)).toHaveLength(10);
    await expectViewEqualsReader(settings);
  });

  it('the lane regex takes the lane from the last two segments, whatever the pipeline id, bucket or topic spell', async () => {
    const offsets = '00000000001234567890-00000000001234567899';
    const paths: Array<[string, string, number]> = [
      [`s3://b-topic/topic-1-2/final/output/topic=orders/partition=12/${offsets}.parquet`, 'orders', 0],
      [
        `s3://b/topic/final/output/topic=my.orders-v2_x~3~g4~r5/partition=1234567890/${offsets}.parquet`,
        'my.orders-v2_x~3',
        4,
      ],
      [`s3://b/p-1-2/final/output/dt=2026-12-01/hour=07/orders~1~g12+12+${offsets}.parquet`, 'orders~1', 12],
      [`s3://b/p/final/output/dt=2026-12-01/orders~r3+0+${offsets}.parquet`, 'orders', 0],
      [`s3://b/p/final/output/topic=orders~g2~r1/partition=0/${offsets}.parquet`, 'orders', 2],
    ];
    for (const [path, lane, generation] of paths) {
      const [row] = await duckdb(
        `SELECT ${epochLaneOf('path')} AS eos_epoch_lane, ${generationOf('path')} AS eos_generation FROM (SELECT '${path}' AS path)`,
      );
      expect(row, path).toEqual({ eos_epoch_lane: lane, eos_generation: BigInt(generation) });
    }
  });
});

describe('eos replay --athena-view', () => {
  it('--json prints the statement and the switches; EOS_BUCKET stands for --bucket; an empty log gives generation 0 only', async () => {
    const settings = parquetSettings();
    const printed = await eos(['replay', '--athena-view', '--pipeline', settings.pipelineId, '--json'], {
      env: { EOS_BUCKET: settings.bucket },
    });
    expect(printed.code).toBe(0);
    const result = JSON.parse(printed.out) as { kind: string; statement: string; switches: unknown[] };
    expect(result.kind).toBe('athena-view');
    expect(result.switches).toEqual([]);
    expect(result.statement).toMatch(/ = 0$/);
    expect(result.statement).not.toMatch(/CASE/);
  });

  it('a bucket that does not exist exits 3 (AWS cannot be used); a plan flag with --athena-view exits 2', async () => {
    const missing = await eos([
      'replay',
      '--athena-view',
      '--bucket',
      'rvcv-no-such-bucket-4d0bb04',
      '--pipeline',
      'p',
    ]);
    expect(missing).toMatchObject({ code: 3, out: '' });
    const withPlanFlag = await eos(['replay', '--athena-view', '--bucket', 'b', '--to-offset', '5']);
    expect(withPlanFlag.code).toBe(2);
  });
});
