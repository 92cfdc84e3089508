/**
 * Position deletes of a final object of several Parquet row groups (promote writes 100,000 rows a group): a
 * replay switch whose range straddles the boundary between a live file's first and second row groups deletes the
 * rows at their positions in the whole file, so the table read by icebird shows exactly the committed reader's
 * rows. Staged directly (the live lane and the generation's lane `orders~g1`), the plan and its switch written
 * through the replay store; committed by the local state machine against DynamoDB Local and the local S3 server.
 */
import { parquetMetadata } from 'hyparquet';
import { icebergRead } from 'icebird';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { publishCheckpoint } from '../../shared/coordinator/publish/publish.ts';
import { ReplayStore } from '../../shared/replay/store.ts';
import { getBytes } from '../../shared/sink/objects.ts';
import { PARQUET_ROW_GROUP_ROWS } from '../../shared/sink/parquet.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { localS3Fetch } from '../iceberg/icebird-s3.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { type PublishSetup, publishSetup } from '../support/publish.ts';
import { stageFiles } from '../support/staging.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('pubrg');
  vi.stubGlobal('fetch', localS3Fetch(res.clients.s3));
});
afterAll(() => {
  vi.unstubAllGlobals();
});

const ROWS = PARQUET_ROW_GROUP_ROWS + 20_000;
const [FROM, TO] = [PARQUET_ROW_GROUP_ROWS - 10, PARQUET_ROW_GROUP_ROWS + 9];
const AT = Date.UTC(2026, 2, 14, 7);

/** Rows of `topic` partition 0 at offsets `from`..`to`, `n` the offset plus `base`. */
function rows(topic: string, from: number, to: number, base: number): Record<string, unknown>[] {
  return Array.from({ length: to - from + 1 }, (_, i) => ({
    n: base + from + i,
    at: AT,
    source: { topic, partition: 0, offset: from + i },
  }));
}

const rowId = (row: Record<string, unknown>) => {
  const source = row.source as { offset: number | bigint };
  return `${Number(source.offset)}:${Number(row.n)}`;
};

async function committed(s: PublishSetup): Promise<string[]> {
  const out: string[] = [];
  for await (const { row } of readCommitted({
    s3: res.clients.s3,
    bucket: s.settings.bucket,
    pipeline: s.settings.pipelineId,
  })) {
    out.push(rowId(row));
  }
  return out.sort();
}

describe('position deletes across Parquet row groups', { timeout: 300_000 }, () => {
  it('a range straddling the boundary of a live file’s row groups hides exactly its rows', async () => {
    const s = publishSetup(res, 'pubrg');
    await stageFiles(res.clients, s.settings, [
      { partition: 0, firstOffset: 0, lastOffset: ROWS - 1, rows: rows('orders', 0, ROWS - 1, 0) },
    ]);
    await checkpoint(res, s.settings);
    expect((await publishCheckpoint(s.parts, 1)).publishedUpTo).toBe(1);
    const live = (await s.parts.manifests.read(1))?.files.find((file) => file.stream === 'output');
    if (!live) throw new Error('checkpoint 1 has no output file');
    const body = await getBytes(res.clients.s3, res.bucket, live.key);
    const groups = parquetMetadata((body as Buffer).buffer.slice(0) as ArrayBuffer).row_groups;
    expect(groups.map((group) => Number(group.num_rows))).toEqual([PARQUET_ROW_GROUP_ROWS, 20_000]);

    const replays = new ReplayStore(res.clients.dynamodb, res.table, s.settings.pipelineId);
    expect(await replays.create(1, [{ lane: 'orders', partition: 0, from: FROM, to: TO }], Date.now())).toBe(
      true,
    );
    await stageFiles(
      res.clients,
      s.settings,
      [
        {
          topic: 'orders~g1',
          partition: 0,
          firstOffset: FROM,
          lastOffset: TO,
          rows: rows('orders', FROM, TO, 1e7),
        },
      ],
      'g1',
    );
    expect(await replays.requestSwitch(1, Date.now())).toBe('requested');
    await checkpoint(res, s.settings);
    expect((await s.parts.manifests.read(2))?.generations).toHaveLength(1);
    expect((await publishCheckpoint(s.parts, 2)).publishedUpTo).toBe(2);

    const table = (await icebergRead({ tableUrl: s.catalog.location })).map((row) =>
      rowId(row as Record<string, unknown>),
    );
    const expected = await committed(s);
    expect(expected).toHaveLength(ROWS);
    expect(expected.filter((id) => Number(id.split(':')[1]) >= 1e7)).toHaveLength(TO - FROM + 1);
    expect(table.sort()).toEqual(expected);
  });
});
