/**
 * The Parquet encoder (`shared/sink/parquet.ts`) read back by an independent reader: DuckDB (`@duckdb/node-api`,
 * reading the files offline from a temporary directory). Every column type's values and reader types, nulls, the
 * lineage struct, timestamps, longs past 2^31, unicode, empty files, row-group bounds and byte-for-byte
 * determinism (the sink's checksums and idempotent promote rely on it). Pure files: no DynamoDB or S3 here.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type DuckDBConnection, DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  encodeParquet,
  PARQUET_CREATED_BY,
  PARQUET_ROW_GROUP_ROWS,
  ParquetEncodeError,
} from '../../shared/sink/parquet.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';
import type { OutputRow } from '../../shared/transforms/types.ts';

let dir: string;
let instance: DuckDBInstance;
let db: DuckDBConnection;
let fileCount = 0;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'parquet-encode-'));
  instance = await DuckDBInstance.create(':memory:');
  db = await instance.connect();
});

afterAll(() => {
  db?.closeSync();
  instance?.closeSync();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** Writes the bytes where DuckDB can read them; returns the path quoted as a SQL string literal. */
function written(bytes: Uint8Array): string {
  fileCount += 1;
  const path = join(dir, `file-${fileCount}.parquet`);
  writeFileSync(path, bytes);
  return `'${path.replaceAll("'", "''")}'`;
}

async function query(sql: string): Promise<Record<string, unknown>[]> {
  const reader = await db.runAndReadAll(sql);
  return reader.getRowObjectsJS() as Record<string, unknown>[];
}

async function columnTypes(file: string): Promise<Record<string, string>> {
  const rows = await query(`DESCRIBE SELECT * FROM ${file}`);
  return Object.fromEntries(rows.map((row) => [String(row.column_name), String(row.column_type)]));
}

const column = (name: string, type: ColumnDefinition['type'], nullable = false): ColumnDefinition => ({
  name,
  type,
  nullable,
});

const ORDERS: readonly ColumnDefinition[] = [
  column('orderId', 'string'),
  column('quantity', 'int'),
  column('amountCents', 'long'),
  column('price', 'double'),
  column('paid', 'boolean'),
  column('placedAt', 'timestamp'),
  column('attributes', 'json'),
  column('coupon', 'string', true),
];

function order(offset: number, overrides: Record<string, unknown> = {}): OutputRow {
  return {
    orderId: `o-${offset}`,
    quantity: offset % 7,
    amountCents: 1_000 * offset,
    price: offset / 8,
    paid: offset % 2 === 0,
    placedAt: 1_764_547_200_000 + offset,
    attributes: { channel: 'web', tags: ['a', offset] },
    coupon: offset % 3 === 0 ? null : `c${offset}`,
    ...overrides,
    source: { topic: 'orders', partition: 2, offset },
  };
}

describe('encodeParquet read back by DuckDB', () => {
  it('gives each declared type its reader type, in declaration order with the source struct last', async () => {
    const file = written(encodeParquet(ORDERS, [order(1)]));
    expect(await columnTypes(file)).toEqual({
      orderId: 'VARCHAR',
      quantity: 'INTEGER',
      amountCents: 'BIGINT',
      price: 'DOUBLE',
      paid: 'BOOLEAN',
      placedAt: 'TIMESTAMP WITH TIME ZONE',
      attributes: 'JSON',
      coupon: 'VARCHAR',
      source: 'STRUCT(topic VARCHAR, "partition" INTEGER, "offset" BIGINT)',
    });
    expect(Object.keys(await columnTypes(file))).toEqual([...ORDERS.map((c) => c.name), 'source']);
  });

  it('marks nullable columns OPTIONAL and all others (lineage included) REQUIRED, with the documented annotations', async () => {
    const file = written(encodeParquet(ORDERS, [order(1)]));
    const schema = await query(
      `SELECT name, type, repetition_type, converted_type, logical_type FROM parquet_schema(${file})`,
    );
    const byName = Object.fromEntries(schema.map((row) => [String(row.name), row]));
    expect(byName.coupon?.repetition_type).toBe('OPTIONAL');
    for (const name of ['orderId', 'quantity', 'amountCents', 'price', 'paid', 'placedAt', 'attributes']) {
      expect(byName[name]?.repetition_type, name).toBe('REQUIRED');
    }
    for (const name of ['source', 'topic', 'partition', 'offset']) {
      expect(byName[name]?.repetition_type, name).toBe('REQUIRED');
    }
    expect(byName.placedAt).toMatchObject({ type: 'INT64', converted_type: 'TIMESTAMP_MILLIS' });
    expect(String(byName.placedAt?.logical_type)).toMatch(
      /TimestampType\(isAdjustedToUTC=1, unit=TimeUnit\(MILLIS/,
    );
    expect(byName.attributes).toMatchObject({ type: 'BYTE_ARRAY', converted_type: 'JSON' });
    expect(byName.orderId).toMatchObject({ type: 'BYTE_ARRAY', converted_type: 'UTF8' });
    expect(byName.quantity?.type).toBe('INT32');
    expect(byName.amountCents?.type).toBe('INT64');
    expect(byName.offset?.type).toBe('INT64');
  });

  it('reads back every value of every column, row for row', async () => {
    const rows = [order(0), order(1), order(2), order(3)];
    const file = written(encodeParquet(ORDERS, rows));
    const read = await query(
      `SELECT orderId, quantity, amountCents, price, paid, epoch_ms(placedAt) AS placedAt, attributes, coupon,
              source FROM ${file}`,
    );
    expect(read).toEqual(
      rows.map((row) => ({
        orderId: row.orderId,
        quantity: row.quantity,
        amountCents: BigInt(row.amountCents as number),
        price: row.price,
        paid: row.paid,
        placedAt: BigInt(row.placedAt as number),
        attributes: JSON.stringify(row.attributes),
        coupon: row.coupon,
        source: { topic: 'orders', partition: 2, offset: BigInt(row.source.offset) },
      })),
    );
  });

  it('writes null and absent nullable values as SQL NULL, a json null included (never the text "null")', async () => {
    const columns = [column('id', 'int'), column('note', 'string', true), column('extra', 'json', true)];
    const rows: OutputRow[] = [
      { id: 1, note: null, extra: null, source: { topic: 't', partition: 0, offset: 0 } },
      { id: 2, source: { topic: 't', partition: 0, offset: 1 } },
      { id: 3, note: '', extra: [], source: { topic: 't', partition: 0, offset: 2 } },
      { id: 4, note: 'x', extra: { a: null }, source: { topic: 't', partition: 0, offset: 3 } },
    ];
    const file = written(encodeParquet(columns, rows));
    expect(await query(`SELECT id, note, extra, extra IS NULL AS missing FROM ${file} ORDER BY id`)).toEqual([
      { id: 1, note: null, extra: null, missing: true },
      { id: 2, note: null, extra: null, missing: true },
      { id: 3, note: '', extra: '[]', missing: false },
      { id: 4, note: 'x', extra: '{"a":null}', missing: false },
    ]);
  });

  it('keeps longs and offsets beyond 2^31 exact, up to ±(2^53 − 1)', async () => {
    const columns = [column('n', 'long'), column('i', 'int')];
    const longs = [2 ** 31, -(2 ** 31) - 1, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 0];
    const ints = [2 ** 31 - 1, -(2 ** 31), 0, 1, -1, 42];
    const rows = longs.map(
      (n, index): OutputRow => ({
        n,
        i: ints[index],
        source: { topic: 'big', partition: 2 ** 31 - 1, offset: Number.MAX_SAFE_INTEGER - index },
      }),
    );
    const file = written(encodeParquet(columns, rows));
    const read = await query(`SELECT n, i, source."partition" AS p, source."offset" AS o FROM ${file}`);
    expect(read).toEqual(
      longs.map((n, index) => ({
        n: BigInt(n),
        i: ints[index],
        p: 2 ** 31 - 1,
        o: BigInt(Number.MAX_SAFE_INTEGER - index),
      })),
    );
  });

  it('reads timestamps as UTC instants at millisecond precision, before 1970 included', async () => {
    const columns = [column('placed', 'timestamp'), column('maybe', 'timestamp', true)];
    const instants = [0, 1, -1, 1_764_547_200_123, -86_400_000 * 365, 4_102_444_800_999];
    const rows = instants.map(
      (at, offset): OutputRow => ({
        placed: at,
        maybe: offset === 0 ? null : at,
        source: { topic: 't', partition: 0, offset },
      }),
    );
    const file = written(encodeParquet(columns, rows));
    const read = await query(
      `SELECT epoch_ms(placed) AS ms, strftime(placed AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%g') AS utc,
              epoch_ms(maybe) AS maybe FROM ${file}`,
    );
    expect(read).toEqual(
      instants.map((at, offset) => ({
        ms: BigInt(at),
        utc: new Date(at).toISOString().slice(0, -1),
        maybe: offset === 0 ? null : BigInt(at),
      })),
    );
  });

  it('round-trips unicode strings and json text byte for byte (accents, CJK, astral emoji, quotes, newlines)', async () => {
    const texts = [
      'héllo',
      '東京',
      '𝄞 🎉 👩‍👩‍👧',
      'tab\tquote" back\\slash\nnewline',
      '\u200b zero-width',
      '',
    ];
    const columns = [column('text', 'string'), column('doc', 'json')];
    const rows = texts.map(
      (text, offset): OutputRow => ({
        text,
        doc: { text, n: offset },
        source: { topic: 'tópico-ü', partition: 0, offset },
      }),
    );
    const file = written(encodeParquet(columns, rows));
    const read = await query(
      `SELECT text, doc, doc->>'$.text' AS inner, strlen(text) AS bytes, source.topic AS topic FROM ${file}`,
    );
    expect(read).toEqual(
      texts.map((text, offset) => ({
        text,
        doc: JSON.stringify({ text, n: offset }),
        inner: text,
        bytes: BigInt(Buffer.byteLength(text, 'utf8')),
        topic: 'tópico-ü',
      })),
    );
  });

  it('writes lone surrogates as U+FFFD in strings and json (keys too), so DuckDB can read the file', async () => {
    const columns = [column('text', 'string'), column('doc', 'json')];
    const rows: OutputRow[] = [
      {
        text: 'a\ud800b\udc00',
        doc: { 'k\udbff': ['x\udfff', '\ud83c\udf89 pair kept', 'back\\ud800slash'], n: 1 },
        source: { topic: 't', partition: 0, offset: 0 },
      },
      { text: 'fine', doc: 'a\ud800b', source: { topic: 't', partition: 0, offset: 1 } },
    ];
    const file = written(encodeParquet(columns, rows));
    expect(await query(`SELECT text, doc FROM ${file}`)).toEqual([
      {
        text: 'a\ufffdb\ufffd',
        doc: JSON.stringify({ 'k\ufffd': ['x\ufffd', '\ud83c\udf89 pair kept', 'back\\ud800slash'], n: 1 }),
      },
      { text: 'fine', doc: '"a\ufffdb"' },
    ]);
  });

  it('writes min/max statistics for every column but json', async () => {
    const file = written(encodeParquet(ORDERS, [order(1), order(2)]));
    const stats = await query(
      `SELECT path_in_schema AS path, stats_min_value AS min, stats_max_value AS max
         FROM parquet_metadata(${file}) WHERE row_group_id = 0`,
    );
    const byPath = Object.fromEntries(stats.map((row) => [String(row.path), row]));
    expect(byPath.attributes).toMatchObject({ min: null, max: null });
    expect(byPath.amountCents).toMatchObject({ min: '1000', max: '2000' });
    expect(byPath.orderId).toMatchObject({ min: 'o-1', max: 'o-2' });
    expect(byPath['source, offset']).toMatchObject({ min: '1', max: '2' });
  });

  it('writes an empty row set as a valid file with the full schema and no rows', async () => {
    const file = written(encodeParquet(ORDERS, []));
    expect(await query(`SELECT count(*) AS n FROM ${file}`)).toEqual([{ n: 0n }]);
    expect(Object.keys(await columnTypes(file))).toEqual([...ORDERS.map((c) => c.name), 'source']);
    expect((await columnTypes(file)).source).toBe(
      'STRUCT(topic VARCHAR, "partition" INTEGER, "offset" BIGINT)',
    );
  });

  it(`cuts row groups at ${PARQUET_ROW_GROUP_ROWS} rows and names the constant writer in the footer`, async () => {
    const total = 2 * PARQUET_ROW_GROUP_ROWS + 17;
    const rows = Array.from({ length: total }, (_, offset) => order(offset));
    const file = written(encodeParquet(ORDERS, rows));
    const groups = await query(
      `SELECT DISTINCT row_group_id, row_group_num_rows AS n FROM parquet_metadata(${file}) ORDER BY row_group_id`,
    );
    expect(groups.map((group) => group.n)).toEqual([
      BigInt(PARQUET_ROW_GROUP_ROWS),
      BigInt(PARQUET_ROW_GROUP_ROWS),
      17n,
    ]);
    expect(
      await query(
        `SELECT count(*) AS n, count(DISTINCT source."offset") AS offsets, sum(amountCents) AS total FROM ${file}`,
      ),
    ).toEqual([
      { n: BigInt(total), offsets: BigInt(total), total: BigInt((1_000 * total * (total - 1)) / 2) },
    ]);
    const [footer] = await query(`SELECT created_by FROM parquet_file_metadata(${file})`);
    expect(footer?.created_by).toBe(PARQUET_CREATED_BY);
  });
});

describe('encodeParquet determinism', () => {
  it('gives identical bytes for two encodes of equal rows (fresh copies, several row groups)', () => {
    const make = () => Array.from({ length: PARQUET_ROW_GROUP_ROWS + 500 }, (_, offset) => order(offset));
    const first = encodeParquet(ORDERS, make());
    const second = encodeParquet(ORDERS, make());
    expect(first.length).toBeGreaterThan(0);
    expect(Buffer.from(first).equals(Buffer.from(second))).toBe(true);
  });

  it('gives different bytes when one value changes (the checksum tells files apart)', () => {
    const rows = [order(1), order(2)];
    const changed = [order(1), order(2, { price: 0.5 })];
    expect(Buffer.from(encodeParquet(ORDERS, rows)).equals(Buffer.from(encodeParquet(ORDERS, changed)))).toBe(
      false,
    );
  });
});

describe('encodeParquet refuses rows that do not match the columns', () => {
  const cases: [string, OutputRow, RegExp][] = [
    ['a long past 2^53', order(1, { amountCents: 2 ** 53 }), /amountCents.*within ±\(2\^53 - 1\)/],
    ['an int past 2^31', order(1, { quantity: 2 ** 31 }), /quantity.*32-bit/],
    ['a null in a required column', order(1, { orderId: null }), /orderId.*not nullable/],
    ['an undeclared column', order(1, { surprise: 1 }), /surprise.*not declared/],
    ['a string where a timestamp is declared', order(1, { placedAt: '2026-01-01' }), /placedAt/],
  ];
  it.each(cases)('throws ParquetEncodeError for %s', (_name, row, message) => {
    const encode = () => encodeParquet(ORDERS, [order(0), row]);
    expect(encode).toThrow(ParquetEncodeError);
    expect(encode).toThrow(/row 1/);
    expect(encode).toThrow(message);
  });

  it('throws ParquetEncodeError for a row whose source is not {topic, partition, offset}', () => {
    const row = { ...order(1), source: { topic: 'orders', partition: 1.5, offset: 3 } };
    expect(() => encodeParquet(ORDERS, [row])).toThrow(ParquetEncodeError);
  });
});
