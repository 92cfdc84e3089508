import { beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../shared/clock.ts';
import type { Settings } from '../../shared/config/settings.ts';
import { generationOfLane } from '../../shared/ledger/epochs.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import {
  analyticsDatabaseName,
  athenaViewStatement,
  currentRowsQuery,
  MAX_VIEW_STATEMENT_BYTES,
} from '../../shared/replay/current-view.ts';
import { planReplay, requestSwitch } from '../../shared/replay/replay.ts';
import type { GenerationSwitch } from '../../shared/sink/generation-switch.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import orderDefinition from '../../shared/transforms/orders.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { eos } from '../support/eos.ts';
import { listedObjects, switchesOf } from '../support/listing.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('view');
});

/** `p@offset#generation` of every row the committed reader shows (it follows the manifests' switches). */
async function readerRows(settings: Settings): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
  })) {
    const { offset } = row.source as { offset: number };
    rows.push(`${file.partition}@${offset}#${generationOfLane(file.topic)}`);
  }
  return rows.sort();
}

/** `p@offset#generation` of the rows the SQL gives over the listed objects (DuckDB), with or without the view. */
async function listedRows(settings: Settings, switches?: readonly GenerationSwitch[]): Promise<string[]> {
  const dir = await listedObjects(res.clients, settings);
  const source = `read_parquet('${dir}/**/*.parquet', filename = true, hive_partitioning = false)`;
  const rows = switches === undefined ? source : `(${currentRowsQuery(source, 'filename', switches)})`;
  const sql = `SELECT source."partition" AS p, source."offset" AS o, filename AS f FROM ${rows}`;
  const { DuckDBInstance } = await import('@duckdb/node-api');
  const instance = await DuckDBInstance.create(':memory:');
  const connection = await instance.connect();
  try {
    const reader = await connection.runAndReadAll(sql);
    // The generation from the object's key, read here apart from the SQL under test.
    return (reader.getRowObjectsJS() as Array<{ p: number; o: bigint; f: string }>)
      .map((row) => `${row.p}@${row.o}#${/~g(\d+)/.exec(row.f)?.[1] ?? 0}`)
      .sort();
  } finally {
    connection.closeSync();
  }
}

async function replay(settings: Settings, input: Parameters<typeof mskEvent>[0], from: number, to: number) {
  const { plan } = await planReplay({
    clients: res.clients,
    table: settings.ledgerTable,
    pipeline: settings.pipelineId,
    topic: 'orders',
    fromOffset: from,
    toOffset: to,
    partitions: [0],
    clock: systemClock,
  });
  await createProcessor({
    settings: { ...settings, replayGeneration: plan.generation },
    clients: res.clients,
  }).processEvent(mskEvent(input));
  await checkpoint(res, settings);
  return plan.generation;
}

describe('the view of the rows readers show, over the listed objects', () => {
  for (const timePartitioning of ['none', 'day'] as const) {
    it(`equals the committed reader before, between and after two overlapping switches (Parquet, folders ${timePartitioning})`, async () => {
      const settings = settingsIn(res, 'view', {
        outputFormat: 'parquet',
        timePartitioning,
        outputColumns: [...orderDefinition.columns],
      });
      const input = [...orderRecords(0, 0, 30), ...orderRecords(1, 0, 10)];
      // Two live batches: a live object straddles each range's edges.
      await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(input.slice(0, 12)));
      await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(input.slice(12)));
      await checkpoint(res, settings);

      // Generation 1 over 7..22 of partition 0, committed but not switched: the listing holds it twice.
      const first = await replay(settings, input, 7, 22);
      expect(await switchesOf(res.clients, settings)).toEqual([]);
      const raw = await listedRows(settings);
      expect(raw.length).toBe((await readerRows(settings)).length + 16);
      expect(await listedRows(settings, [])).toEqual(await readerRows(settings));

      // Switched: 7..22 from generation 1.
      await requestSwitch(
        { clients: res.clients, table: settings.ledgerTable, pipeline: settings.pipelineId },
        first,
        systemClock,
      );
      await checkpoint(res, settings);
      const afterFirst = await readerRows(settings);
      expect(afterFirst.filter((row) => row.endsWith('#1'))).toHaveLength(16);
      expect(await listedRows(settings, await switchesOf(res.clients, settings))).toEqual(afterFirst);

      // Generation 2 over 15..27, switched later: it wins where they overlap.
      const second = await replay(settings, input, 15, 27);
      await requestSwitch(
        { clients: res.clients, table: settings.ledgerTable, pipeline: settings.pipelineId },
        second,
        systemClock,
      );
      await checkpoint(res, settings);
      const afterSecond = await readerRows(settings);
      expect(afterSecond.filter((row) => row.endsWith('#1')).map((row) => row.split('#')[0])).toEqual(
        Array.from({ length: 8 }, (_, i) => `0@${7 + i}`).sort(),
      );
      expect(afterSecond.filter((row) => row.endsWith('#2'))).toHaveLength(13);
      expect(await listedRows(settings, await switchesOf(res.clients, settings))).toEqual(afterSecond);

      // What an operator runs in Athena: the same query over "$path", from the same switches.
      const printed = await eos([
        'replay',
        '--athena-view',
        '--bucket',
        settings.bucket,
        '--pipeline',
        settings.pipelineId,
      ]);
      expect(printed.code).toBe(0);
      expect(printed.out).toBe(
        `${athenaViewStatement({
          database: analyticsDatabaseName(settings.pipelineId),
          table: 'output',
          view: 'output_current',
          switches: await switchesOf(res.clients, settings),
        })};\n`,
      );
      expect(printed.out).toContain('source."offset" BETWEEN 15 AND 27 THEN 2');
    });
  }

  it('eos replay --athena-view refuses what it cannot use, with the reason (exit 2)', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['--athena-view'], /--bucket is required \(or set EOS_BUCKET\)/],
      [['--athena-view', '--bucket', 'b', '--switch', '1'], /--athena-view does not go with/],
      [['--athena-view', '--bucket', 'b', '--to-offset', '5'], /--athena-view does not go with/],
      [['--athena-view', '--bucket', 'b', '--view', 'no-dash'], /"no-dash" is not a Glue name/],
      [['--view', 'v', '--table', 't'], /go with --athena-view only/],
    ];
    for (const [args, message] of cases) {
      expect(await eos(['replay', ...args]), args.join(' ')).toMatchObject({
        code: 2,
        err: expect.stringMatching(message),
      });
    }
  });

  it('writes the Athena statement over "$path", quoting names, and refuses one Athena would not take', () => {
    const switches: GenerationSwitch[] = [
      { generation: 1, ranges: [{ lane: 'orders', partition: 0, from: 7, to: 22 }] },
      { generation: 2, ranges: [{ lane: "it's~1", partition: 3, from: 0, to: 5 }] },
    ];
    const statement = athenaViewStatement({
      database: 'eos_orders',
      table: 'output',
      view: 'output_current',
      switches,
    });
    expect(statement).toMatch(/^CREATE OR REPLACE VIEW "eos_orders"."output_current" AS\n/);
    expect(statement).toContain('\nSELECT * FROM "eos_orders"."output"\nWHERE ');
    expect(statement).toContain('regexp_extract("$path", ');
    // The later switch first, quotes doubled.
    expect(statement.indexOf("WHEN 'it''s~1' THEN")).toBeGreaterThan(0);
    expect(statement.indexOf("WHEN 'it''s~1' THEN")).toBeLessThan(statement.indexOf("WHEN 'orders' THEN"));
    const many: GenerationSwitch[] = [
      {
        generation: 1,
        ranges: Array.from({ length: 4096 }, (_, partition) => ({
          lane: 'orders',
          partition,
          from: 1_000_000_000,
          to: 2_000_000_000,
        })),
      },
    ];
    expect(() => athenaViewStatement({ database: 'd', table: 't', view: 'v', switches: many })).toThrow(
      new RegExp(`more than Athena's ${MAX_VIEW_STATEMENT_BYTES}`),
    );
  });
});
