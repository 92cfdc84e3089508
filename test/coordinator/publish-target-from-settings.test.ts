/**
 * The publish target a deployed pipeline builds from its settings: each catalog kind gives its own catalog over the
 * configured table, and the table's location, columns and partitioning follow the settings.
 */
import { GlueClient } from '@aws-sdk/client-glue';
import { S3Client } from '@aws-sdk/client-s3';
import { GetTableMetadataLocationCommand, S3TablesClient } from '@aws-sdk/client-s3tables';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { parseSettings, type SettingsInput } from '../../shared/config/settings.ts';
import {
  icebergTablePrefixOf,
  publishTargetFromSettings,
} from '../../shared/coordinator/publish/target-from-settings.ts';
import { FileCatalog } from '../../shared/iceberg/file-catalog.ts';
import { GlueCatalog } from '../../shared/iceberg/glue-catalog.ts';
import { S3TablesCatalog } from '../../shared/iceberg/s3-tables-catalog.ts';
import type { ColumnDefinition } from '../../shared/transforms/api.ts';

const COLUMNS: ColumnDefinition[] = [
  { name: 'n', type: 'long', nullable: false },
  { name: 'at', type: 'timestamp', nullable: false },
];
const CREDENTIALS = { accessKeyId: 'a', secretAccessKey: 's' };
const s3 = new S3Client({ region: 'eu-west-1', credentials: CREDENTIALS });

function settings(input: Partial<SettingsInput>) {
  return parseSettings({
    ledgerTable: 'ledger',
    bucket: 'sink-bucket',
    pipelineId: 'orders',
    outputFormat: 'parquet',
    timePartitioning: 'hour',
    outputColumns: COLUMNS,
    ...input,
  });
}

describe('the publish target from settings', () => {
  it('is none without a catalog: the coordinator then has no table to publish to', async () => {
    expect(await publishTargetFromSettings(settings({}), { s3 })).toBeUndefined();
  });

  it('file: a file catalog at the table prefix in the sink bucket, by default <pipeline>/iceberg/output', async () => {
    const target = await publishTargetFromSettings(settings({ icebergCatalog: 'file' }), { s3 });
    expect(target?.catalog).toBeInstanceOf(FileCatalog);
    const catalog = target?.catalog as FileCatalog;
    expect([catalog.bucket, catalog.root]).toEqual(['sink-bucket', 'orders/iceberg/output']);
    expect(target?.table).toEqual({
      location: 's3://sink-bucket/orders/iceberg/output',
      columns: COLUMNS,
      partitioning: { timePartitioning: 'hour' },
    });
    const moved = await publishTargetFromSettings(
      settings({ icebergCatalog: 'file', icebergTablePrefix: 'shared/tables/orders' }),
      { s3 },
    );
    expect((moved!.catalog as FileCatalog).root).toBe('shared/tables/orders');
    expect(moved?.table.location).toBe('s3://sink-bucket/shared/tables/orders');
  });

  it('glue: a Glue catalog of database.table, the metadata under the table prefix of the sink bucket', async () => {
    const glue = new GlueClient({ region: 'eu-west-1', credentials: CREDENTIALS });
    const api = mockClient(glue);
    const target = await publishTargetFromSettings(
      settings({ icebergCatalog: 'glue', icebergDatabase: 'analytics', icebergTable: 'orders' }),
      { s3, glue },
    );
    expect(target?.catalog).toBeInstanceOf(GlueCatalog);
    expect((target!.catalog as GlueCatalog).table).toEqual({
      databaseName: 'analytics',
      tableName: 'orders',
    });
    expect(target?.table.location).toBe('s3://sink-bucket/orders/iceberg/output');
    // Building the target calls nothing: the first load does.
    expect(api.calls()).toHaveLength(0);
  });

  it("s3tables: an S3 Tables catalog of the table, located at the table's warehouse location", async () => {
    const s3tables = new S3TablesClient({ region: 'eu-west-1', credentials: CREDENTIALS });
    const api = mockClient(s3tables);
    api.on(GetTableMetadataLocationCommand).resolves({
      versionToken: 'token-1',
      warehouseLocation: 's3://63a8e430-6e0b--table-s3/',
    });
    const arn = 'arn:aws:s3tables:eu-west-1:123456789012:bucket/tables';
    const target = await publishTargetFromSettings(
      settings({
        icebergCatalog: 's3tables',
        icebergTableBucketArn: arn,
        icebergNamespace: 'pipelines',
        icebergTable: 'orders',
      }),
      { s3, s3tables },
    );
    expect(target?.catalog).toBeInstanceOf(S3TablesCatalog);
    expect((target!.catalog as S3TablesCatalog).table).toEqual({
      tableBucketARN: arn,
      namespace: 'pipelines',
      name: 'orders',
    });
    expect(target?.table.location).toBe('s3://63a8e430-6e0b--table-s3');
    expect(api.commandCalls(GetTableMetadataLocationCommand)[0]?.args[0].input).toEqual({
      tableBucketARN: arn,
      namespace: 'pipelines',
      name: 'orders',
    });
  });

  it('partitioning none: an unpartitioned table whatever the time folders', async () => {
    const target = await publishTargetFromSettings(
      settings({ icebergCatalog: 'file', icebergPartitioning: 'none' }),
      { s3 },
    );
    expect(target?.table.partitioning).toEqual({ timePartitioning: 'none' });
  });

  it('the table prefix: the setting, else the pipeline default', () => {
    expect(icebergTablePrefixOf({ pipelineId: 'clicks', icebergTablePrefix: undefined })).toBe(
      'clicks/iceberg/output',
    );
    expect(icebergTablePrefixOf({ pipelineId: 'clicks', icebergTablePrefix: 'x/y' })).toBe('x/y');
  });
});
