/**
 * Final keys with time folders and Parquet (layout.ts), the output settings (settings.ts) and eos
 * local's --format / --partition-by and columns (cli/local-settings.ts). Pure: no local parts needed.
 */
import { describe, expect, it } from 'vitest';
import { localSettings, localSettingsWithColumns } from '../../cli/local-settings.ts';
import { parseSettings, settingsFromEnv, settingsToEnv } from '../../shared/config/settings.ts';
import { InvalidSettingError } from '../../shared/errors.ts';
import {
  finalObjectKey,
  type ObjectRange,
  parseFinalKey,
  parseStagedObjectKey,
  stagedObjectKey,
} from '../../shared/sink/layout.ts';
import orders from '../../shared/transforms/orders.ts';

const PL = 'orders';
const range: ObjectRange = {
  stream: 'output',
  topic: 'orders',
  partition: 3,
  firstOffset: 100,
  lastOffset: 199,
};
const hourly: ObjectRange = { ...range, folder: 'dt=2026-12-01/hour=07' };
const BASE = { ledgerTable: 'ledger', bucket: 'bucket' };

describe('final keys', () => {
  it('keeps the unpartitioned NDJSON keys exactly as before', () => {
    expect(finalObjectKey(PL, range, true)).toBe(
      'orders/final/output/topic=orders/partition=3/00000000000000000100-00000000000000000199.ndjson.gz',
    );
    expect(finalObjectKey(PL, range, false)).toBe(
      'orders/final/output/topic=orders/partition=3/00000000000000000100-00000000000000000199.ndjson',
    );
    expect(finalObjectKey(PL, range, 'ndjson.gz')).toBe(finalObjectKey(PL, range, true));
  });

  it('spells time-partitioned keys with the topic and partition in the file name', () => {
    expect(finalObjectKey(PL, hourly, 'parquet')).toBe(
      'orders/final/output/dt=2026-12-01/hour=07/orders+3+00000000000000000100-00000000000000000199.parquet',
    );
    expect(finalObjectKey(PL, { ...range, stream: 'deadletter', folder: 'dt=2026-12-01' }, true)).toBe(
      'orders/final/deadletter/dt=2026-12-01/orders+3+00000000000000000100-00000000000000000199.ndjson.gz',
    );
  });

  it('round-trips every final key it writes', () => {
    const cases: [ObjectRange, 'ndjson' | 'ndjson.gz' | 'parquet'][] = [
      [range, 'parquet'],
      [range, 'ndjson'],
      [hourly, 'parquet'],
      [hourly, 'ndjson.gz'],
      [{ ...range, folder: 'dt=2026-12-01' }, 'ndjson'],
      [{ ...range, stream: 'deadletter', folder: 'dt=1970-01-01/hour=00' }, 'ndjson.gz'],
    ];
    for (const [r, encoding] of cases) {
      const key = finalObjectKey(PL, r, encoding);
      const parts = parseFinalKey(PL, key);
      expect(parts, key).toMatchObject({ ...r, encoding, gzip: encoding === 'ndjson.gz' });
      expect(parts?.folder).toBe(r.folder);
    }
  });

  it('refuses every other spelling', () => {
    const good = finalObjectKey(PL, hourly, 'parquet');
    for (const bad of [
      good.replace('hour=07', 'hour=7'),
      good.replace('hour=07', 'hour=24'),
      good.replace('dt=2026-12-01', 'dt=2026-12-1'),
      good.replace('dt=2026-12-01', 'date=2026-12-01'),
      good.replace('/hour=07', ''), // a day folder is fine in itself …
      good.replace('orders+3+', 'orders+03+'),
      good.replace('orders+3+', 'topic=orders/partition=3/'),
      good.replace('.parquet', '.parquet.gz'),
      good.replace('/output/', '/deadletter/'), // dead letters are never Parquet
      good.replace('00000000000000000100', '100'),
      good.replace('orders/final/', 'other/final/'),
      `${good}.tmp`,
      good.replace('/dt=', '//dt='),
      finalObjectKey(PL, { ...range, stream: 'deadletter' }, 'parquet'),
    ]) {
      const parsed = parseFinalKey(PL, bad);
      // … so the day-folder spelling parses, as a day folder (its own, different key).
      if (bad === good.replace('/hour=07', '')) expect(parsed?.folder).toBe('dt=2026-12-01');
      else expect(parsed, bad).toBeUndefined();
    }
  });

  it('keeps staged keys NDJSON and folder-free', () => {
    const staged = stagedObjectKey(PL, hourly, 'a1.0', true);
    expect(staged).not.toContain('dt=');
    expect(parseStagedObjectKey(PL, staged)?.folder).toBeUndefined();
    expect(parseStagedObjectKey(PL, staged.replace('.ndjson.gz', '.parquet'))).toBeUndefined();
    expect(parseStagedObjectKey(PL, finalObjectKey(PL, hourly, true))).toBeUndefined();
  });
});

describe('output settings', () => {
  const columns = JSON.stringify(orders.columns);

  it('defaults to NDJSON without folders and parses the columns from JSON', () => {
    const settings = parseSettings(BASE);
    expect(settings).toMatchObject({ outputFormat: 'ndjson', timePartitioning: 'none' });
    expect(settings.outputColumns).toBeUndefined();
    const parquet = settingsFromEnv({
      EOS_LEDGER_TABLE: 'ledger',
      EOS_BUCKET: 'bucket',
      EOS_OUTPUT_FORMAT: 'parquet',
      EOS_TIME_PARTITIONING: 'hour',
      EOS_TIME_FIELD: 'ts',
      EOS_OUTPUT_COLUMNS: columns,
    });
    expect(parquet.outputColumns).toEqual(orders.columns);
    // The environment the stack writes reads back as the same settings.
    const env = settingsToEnv({ ...BASE, outputFormat: 'parquet', outputColumns: [...orders.columns] });
    expect(env.EOS_OUTPUT_COLUMNS).toBe(columns);
    expect(settingsFromEnv(env).outputColumns).toEqual(orders.columns);
  });

  it('refuses combinations that cannot be written, naming the variable', () => {
    const env = { EOS_LEDGER_TABLE: 'ledger', EOS_BUCKET: 'bucket' };
    const refused = (extra: Record<string, string>, name: string, message: RegExp) => {
      let error: unknown;
      try {
        settingsFromEnv({ ...env, ...extra });
      } catch (e) {
        error = e;
      }
      expect(error, JSON.stringify(extra)).toBeInstanceOf(InvalidSettingError);
      expect(String(error)).toContain(name);
      expect(String(error)).toMatch(message);
    };
    refused({ EOS_OUTPUT_FORMAT: 'parquet' }, 'EOS_OUTPUT_COLUMNS', /required with outputFormat parquet/);
    refused({ EOS_OUTPUT_FORMAT: 'orc' }, 'EOS_OUTPUT_FORMAT', /ndjson|parquet/);
    refused({ EOS_TIME_PARTITIONING: 'week' }, 'EOS_TIME_PARTITIONING', /none|day|hour/);
    refused({ EOS_TIME_FIELD: 'ts', EOS_OUTPUT_COLUMNS: columns }, 'EOS_TIME_FIELD', /timePartitioning/);
    refused(
      { EOS_TIME_FIELD: 'currency', EOS_TIME_PARTITIONING: 'day', EOS_OUTPUT_COLUMNS: columns },
      'EOS_TIME_FIELD',
      /timestamp or long/,
    );
    refused({ EOS_OUTPUT_COLUMNS: '[{' }, 'EOS_OUTPUT_COLUMNS', /not JSON/);
    refused(
      { EOS_OUTPUT_COLUMNS: '[{"name":"source","type":"string","nullable":false}]' },
      'EOS_OUTPUT_COLUMNS',
      /reserved/,
    );
    refused(
      { EOS_OUTPUT_COLUMNS: '[{"name":"a","type":"decimal","nullable":false}]' },
      'EOS_OUTPUT_COLUMNS',
      /column 0.type/,
    );
  });

  it('eos local: --format and --partition-by set the settings and win over the variables', () => {
    const env = { EOS_OUTPUT_FORMAT: 'ndjson', EOS_OUTPUT_COLUMNS: columns };
    const local = localSettings({ format: 'parquet', partitionBy: 'hour' }, env);
    expect(local.settings).toMatchObject({ outputFormat: 'parquet', timePartitioning: 'hour' });
    expect(local.origin('outputFormat')).toBe('--format');
    expect(() => localSettings({ partitionBy: 'minute' }, {})).toThrow(/--partition-by/);
  });

  it('eos local: the columns come from the transform; a different EOS_OUTPUT_COLUMNS is refused', async () => {
    const local = await localSettingsWithColumns({ format: 'parquet', partitionBy: 'day' }, {});
    expect(local.settings.outputColumns).toEqual(orders.columns);
    await expect(
      localSettingsWithColumns(
        { format: 'parquet' },
        { EOS_OUTPUT_COLUMNS: '[{"name":"a","type":"string","nullable":false}]' },
      ),
    ).rejects.toThrow(/EOS_OUTPUT_COLUMNS.*differs from the columns of transform orders/);
    expect(() => localSettings({ format: 'parquet' }, {})).toThrow(/required with outputFormat parquet/);
  });
});
