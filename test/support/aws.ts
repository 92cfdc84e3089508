/**
 * Test helpers: clients on the local parts, a fresh table and bucket per test file, unique pipeline ids.
 */
import { randomUUID } from 'node:crypto';
import { createBucket, createLedgerTable } from '../../local/provision.ts';
import { type AwsClients, createAwsClients } from '../../shared/aws/clients.ts';
import { parseSettings, type Settings, type SettingsInput } from '../../shared/config/settings.ts';

export interface TestResources {
  readonly clients: AwsClients;
  readonly table: string;
  readonly bucket: string;
}

export function uniqueName(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** A table and a bucket of its own for one test file (local parts are shared by the whole run). */
export async function freshResources(prefix = 'eos'): Promise<TestResources> {
  if (!process.env.AWS_ENDPOINT_URL_DYNAMODB || !process.env.AWS_ENDPOINT_URL_S3) {
    throw new Error('local parts are not running: the vitest global setup should have started them');
  }
  const clients = createAwsClients();
  const table = uniqueName(`${prefix}-ledger`);
  const bucket = uniqueName(`${prefix}-bucket`);
  await Promise.all([createLedgerTable(clients.dynamodb, table), createBucket(clients.s3, bucket)]);
  return { clients, table, bucket };
}

/** Settings for a fresh pipeline (its own id) on this file's table and bucket. */
export function settingsIn(
  res: TestResources,
  idPrefix: string,
  overrides: Partial<SettingsInput> = {},
): Settings {
  return parseSettings({
    ledgerTable: res.table,
    bucket: res.bucket,
    pipelineId: uniqueName(idPrefix),
    ...overrides,
  });
}
