/**
 * The table a deployed pipeline publishes to, from its `iceberg*` settings: the catalog client of the configured
 * kind and the table (`publishedTable`) at the location that catalog keeps it.
 *
 * - `file`: the table's metadata under `<icebergTablePrefix>/metadata/` of the sink bucket, found by its version
 *   files and hint (`iceberg/file-catalog.ts`).
 * - `glue`: a Glue table (`icebergDatabase`.`icebergTable`) naming the current metadata, the metadata under the
 *   same prefix of the sink bucket (`iceberg/glue-catalog.ts`).
 * - `s3tables`: a table in a table bucket, whose metadata must be in the table's own warehouse location, which only
 *   the service knows: it is asked once, here (`iceberg/s3-tables-catalog.ts`; the table is created if missing).
 *
 * The data files are the committed Parquet objects where they are, in the sink bucket, whatever the catalog.
 * The Glue and S3 Tables catalogs and clients are loaded only for their kind (dynamic imports: chunks a cold start
 * of another kind never reads).
 */
import type { GlueClient } from '@aws-sdk/client-glue';
import type { S3Client } from '@aws-sdk/client-s3';
import type { S3TablesClient } from '@aws-sdk/client-s3tables';
import { regionFromEnv } from '../../aws/clients.ts';
import type { Settings } from '../../config/settings.ts';
import { InvalidSettingError } from '../../errors.ts';
import type { Catalog } from '../../iceberg/catalog.ts';
import { FileCatalog } from '../../iceberg/file-catalog.ts';
import { type PublishTarget, publishedTable } from './target.ts';

/** The clients of the catalogs; a missing one is made from the standard AWS environment when its catalog is used. */
export interface CatalogClients {
  readonly s3: S3Client;
  readonly glue?: GlueClient;
  readonly s3tables?: S3TablesClient;
}

/** The table's key prefix in the sink bucket (`glue`, `file`): the setting, else `<pipelineId>/iceberg/output`. */
export function icebergTablePrefixOf(settings: Pick<Settings, 'pipelineId' | 'icebergTablePrefix'>): string {
  return settings.icebergTablePrefix ?? `${settings.pipelineId}/iceberg/output`;
}

/** A setting the catalog needs; the settings' own check has made sure it is there. */
function required<K extends keyof Settings>(settings: Settings, key: K): NonNullable<Settings[K]> {
  const value = settings[key];
  if (value === undefined || value === null) {
    throw new InvalidSettingError(key, `required with icebergCatalog ${settings.icebergCatalog}`);
  }
  return value as NonNullable<Settings[K]>;
}

async function glueClient(clients: CatalogClients): Promise<GlueClient> {
  if (clients.glue) return clients.glue;
  const { GlueClient } = await import('@aws-sdk/client-glue');
  const region = regionFromEnv();
  return new GlueClient({ ...(region === undefined ? {} : { region }), maxAttempts: 3 });
}

async function s3TablesClient(clients: CatalogClients): Promise<S3TablesClient> {
  if (clients.s3tables) return clients.s3tables;
  const { S3TablesClient } = await import('@aws-sdk/client-s3tables');
  const region = regionFromEnv();
  return new S3TablesClient({ ...(region === undefined ? {} : { region }), maxAttempts: 3 });
}

/** The catalog of the settings' kind and the location of the table in it. */
async function catalogOf(
  settings: Settings,
  clients: CatalogClients,
): Promise<{ catalog: Catalog; location: string }> {
  const sinkLocation = `s3://${settings.bucket}/${icebergTablePrefixOf(settings)}`;
  switch (settings.icebergCatalog) {
    case 'file': {
      const catalog = new FileCatalog(clients.s3, settings.bucket, icebergTablePrefixOf(settings));
      return { catalog, location: catalog.location };
    }
    case 'glue': {
      const table = {
        databaseName: required(settings, 'icebergDatabase'),
        tableName: required(settings, 'icebergTable'),
      };
      const { GlueCatalog } = await import('../../iceberg/glue-catalog.ts');
      return {
        catalog: new GlueCatalog(await glueClient(clients), clients.s3, table),
        location: sinkLocation,
      };
    }
    case 's3tables': {
      const { S3TablesCatalog } = await import('../../iceberg/s3-tables-catalog.ts');
      const catalog = new S3TablesCatalog(await s3TablesClient(clients), clients.s3, {
        tableBucketARN: required(settings, 'icebergTableBucketArn'),
        namespace: required(settings, 'icebergNamespace'),
        name: required(settings, 'icebergTable'),
      });
      return { catalog, location: (await catalog.warehouseLocation()).replace(/\/+$/, '') };
    }
    default:
      throw new InvalidSettingError('icebergCatalog', 'required to publish to an Iceberg table');
  }
}

/**
 * The publish target of `settings`; undefined without `icebergCatalog` (no table: the coordinator has no publish
 * step to run).
 */
export async function publishTargetFromSettings(
  settings: Settings,
  clients: CatalogClients,
): Promise<PublishTarget | undefined> {
  if (settings.icebergCatalog === undefined) return undefined;
  const { catalog, location } = await catalogOf(settings, clients);
  const table = publishedTable({
    location,
    columns: required(settings, 'outputColumns'),
    timePartitioning: settings.timePartitioning,
    partitioning: settings.icebergPartitioning ?? 'time-folders',
  });
  return { catalog, table };
}
