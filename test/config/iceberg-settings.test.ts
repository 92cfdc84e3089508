import { describe, expect, it } from 'vitest';
import {
  ENV_NAMES,
  parseSettings,
  type SettingsInput,
  settingsFromEnv,
  settingsToEnv,
} from '../../shared/config/settings.ts';
import { InvalidSettingError } from '../../shared/errors.ts';

const PARQUET: SettingsInput = {
  ledgerTable: 'ledger',
  bucket: 'sink-bucket',
  outputFormat: 'parquet',
  outputColumns: [{ name: 'n', type: 'long', nullable: false }],
};

const ARN = 'arn:aws:s3tables:eu-west-1:123456789012:bucket/tables';

function failure(input: Record<string, unknown>, label?: (key: string) => string): InvalidSettingError {
  try {
    parseSettings(input, label);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidSettingError);
    return error as InvalidSettingError;
  }
  throw new Error('the settings were accepted');
}

describe('Iceberg table settings', () => {
  it('are off by default: no catalog, nothing set', () => {
    const settings = parseSettings(PARQUET);
    for (const key of Object.keys(ENV_NAMES).filter((name) => name.startsWith('iceberg'))) {
      expect(settings[key as keyof typeof settings]).toBeUndefined();
    }
  });

  it('take each catalog with its own fields', () => {
    expect(parseSettings({ ...PARQUET, icebergCatalog: 'file' })).toMatchObject({ icebergCatalog: 'file' });
    expect(
      parseSettings({
        ...PARQUET,
        icebergCatalog: 'glue',
        icebergDatabase: 'analytics',
        icebergTable: 'orders',
        icebergTablePrefix: 'orders/iceberg/orders',
        icebergPartitioning: 'none',
      }),
    ).toMatchObject({ icebergDatabase: 'analytics', icebergTable: 'orders', icebergPartitioning: 'none' });
    expect(
      parseSettings({
        ...PARQUET,
        icebergCatalog: 's3tables',
        icebergTableBucketArn: ARN,
        icebergNamespace: 'pipelines',
        icebergTable: 'orders',
      }),
    ).toMatchObject({ icebergTableBucketArn: ARN, icebergNamespace: 'pipelines' });
  });

  it('need Parquet output: one line naming the catalog setting', () => {
    const error = failure({ ledgerTable: 'ledger', bucket: 'sink-bucket', icebergCatalog: 'file' });
    expect(error.setting).toBe('icebergCatalog');
    expect(error.message).toMatch(/needs outputFormat parquet/);
    expect(error.message).not.toContain('\n');
  });

  it('refuse a catalog without its required fields, naming the missing one', () => {
    expect(failure({ ...PARQUET, icebergCatalog: 'glue', icebergTable: 'orders' }).setting).toBe(
      'icebergDatabase',
    );
    expect(failure({ ...PARQUET, icebergCatalog: 'glue', icebergDatabase: 'analytics' }).setting).toBe(
      'icebergTable',
    );
    expect(
      failure({ ...PARQUET, icebergCatalog: 's3tables', icebergNamespace: 'ns', icebergTable: 't' }).setting,
    ).toBe('icebergTableBucketArn');
  });

  it("refuse another catalog's fields, and any field without a catalog", () => {
    const foreign = failure({ ...PARQUET, icebergCatalog: 'file', icebergDatabase: 'analytics' });
    expect(foreign.setting).toBe('icebergDatabase');
    expect(foreign.message).toMatch(/not used with icebergCatalog file/);
    const prefix = failure({
      ...PARQUET,
      icebergCatalog: 's3tables',
      icebergTableBucketArn: ARN,
      icebergNamespace: 'ns',
      icebergTable: 't',
      icebergTablePrefix: 'orders/iceberg/output',
    });
    expect(prefix.setting).toBe('icebergTablePrefix');
    const stray = failure({ ...PARQUET, icebergPartitioning: 'none' });
    expect(stray.setting).toBe('icebergPartitioning');
    expect(stray.message).toMatch(/only used with icebergCatalog/);
  });

  it('refuse malformed values: catalog, names, ARN, prefix', () => {
    expect(failure({ ...PARQUET, icebergCatalog: 'hive' }).setting).toBe('icebergCatalog');
    expect(
      failure({ ...PARQUET, icebergCatalog: 'glue', icebergDatabase: 'Analytics', icebergTable: 't' })
        .setting,
    ).toBe('icebergDatabase');
    expect(
      failure({
        ...PARQUET,
        icebergCatalog: 's3tables',
        icebergTableBucketArn: 'arn:aws:s3:::tables',
        icebergNamespace: 'ns',
        icebergTable: 't',
      }).setting,
    ).toBe('icebergTableBucketArn');
    for (const prefix of ['/orders/iceberg', 'orders/iceberg/', 'orders//iceberg', 'orders/../x', '']) {
      expect(failure({ ...PARQUET, icebergCatalog: 'file', icebergTablePrefix: prefix }).setting).toBe(
        'icebergTablePrefix',
      );
    }
    expect(failure({ ...PARQUET, icebergCatalog: 'file', icebergPartitioning: 'day' }).setting).toBe(
      'icebergPartitioning',
    );
  });

  it('come from EOS_ICEBERG_* variables in Lambda, errors naming the variable', () => {
    const env = settingsToEnv({
      ...PARQUET,
      icebergCatalog: 'glue',
      icebergDatabase: 'analytics',
      icebergTable: 'orders',
    });
    expect(env).toMatchObject({
      EOS_ICEBERG_CATALOG: 'glue',
      EOS_ICEBERG_DATABASE: 'analytics',
      EOS_ICEBERG_TABLE: 'orders',
    });
    expect(settingsFromEnv(env)).toMatchObject({ icebergCatalog: 'glue', icebergTable: 'orders' });
    expect(() => settingsFromEnv({ ...env, EOS_OUTPUT_FORMAT: 'ndjson' })).toThrow(
      /invalid setting EOS_ICEBERG_CATALOG: needs outputFormat parquet/,
    );
    expect(() => settingsFromEnv({ ...env, EOS_ICEBERG_DATABASE: '', EOS_ICEBERG_TABLE: 'orders' })).toThrow(
      /invalid setting EOS_ICEBERG_DATABASE: required with EOS_ICEBERG_CATALOG glue/,
    );
  });
});
