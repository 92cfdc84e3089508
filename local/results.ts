/**
 * Reading a run's results back from the local parts: keyed aggregates from the ledger, and the export of the
 * bucket's final prefix and the aggregates to a directory (`eos local --export DIR`).
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { BatchGetCommand, DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { AwsClients } from '../shared/aws/clients.ts';
import { keys, LEDGER_TABLE_LAYOUT } from '../shared/ledger/layout.ts';
import { FINAL_DIR, manifestsPrefix } from '../shared/sink/layout.ts';
import { listKeys } from '../shared/sink/verify.ts';
import type { Aggregate } from './expectation.ts';

/** Attributes of a state item that are bookkeeping, not part of the aggregate. */
const NOT_AGGREGATE = new Set([LEDGER_TABLE_LAYOUT.partitionKey, LEDGER_TABLE_LAYOUT.sortKey, 'stateKey']);

/** The keyed state entries of `stateKeys` (absent ones are left out). */
export async function readAggregates(
  clients: AwsClients,
  table: string,
  pipeline: string,
  stateKeys: Iterable<string>,
): Promise<Map<string, Aggregate>> {
  const documents = DynamoDBDocumentClient.from(clients.dynamodb);
  const all = [...stateKeys];
  const found = new Map<string, Aggregate>();
  for (let i = 0; i < all.length; i += 100) {
    let request: Record<string, { Keys: Record<string, unknown>[]; ConsistentRead?: boolean }> | undefined = {
      [table]: {
        Keys: all.slice(i, i + 100).map((key) => ({ ...keys.state(pipeline, key) })),
        ConsistentRead: true,
      },
    };
    while (request && Object.keys(request).length > 0) {
      const response = await documents.send(new BatchGetCommand({ RequestItems: request }));
      for (const item of response.Responses?.[table] ?? []) {
        const aggregate: Aggregate = {};
        // Descriptive (string) fields first, then the totals: {customerId, currency, count, totalMinor}.
        const entries = Object.entries(item).sort(
          ([, a], [, b]) => Number(typeof a === 'number') - Number(typeof b === 'number'),
        );
        for (const [name, value] of entries) {
          if (!NOT_AGGREGATE.has(name) && (typeof value === 'string' || typeof value === 'number'))
            aggregate[name] = value;
        }
        found.set(String(item.stateKey), aggregate);
      }
      request = response.UnprocessedKeys as typeof request;
    }
  }
  return found;
}

/**
 * Writes every object under `prefix` to `dir/bucket/<key>` and the aggregates to `dir/aggregates.json`. When
 * `prefix` is a pipeline's final prefix, its manifests (`<pl>/_manifests/`, outside `final/`) are exported too, so
 * the export stays readable as committed output, and an earlier export of that pipeline in `dir` is replaced, not
 * merged: objects of another run that its manifests do not list would make the copy fail `eos verify`.
 */
export async function exportRun(
  clients: AwsClients,
  bucket: string,
  prefix: string,
  aggregates: ReadonlyMap<string, Aggregate>,
  dir: string,
): Promise<{ objects: number }> {
  const objectKeys = await listKeys(clients.s3, bucket, prefix);
  const pipeline = prefix.endsWith(`/${FINAL_DIR}/`) ? prefix.slice(0, -`/${FINAL_DIR}/`.length) : undefined;
  if (pipeline) {
    objectKeys.push(...(await listKeys(clients.s3, bucket, manifestsPrefix(pipeline))));
    rmSync(join(dir, 'bucket', ...pipeline.split('/')), { recursive: true, force: true });
  }
  for (const key of objectKeys) {
    const response = await clients.s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const target = join(dir, 'bucket', ...key.split('/'));
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, Buffer.from(await response.Body!.transformToByteArray()));
  }
  const list = [...aggregates.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([, aggregate]) => aggregate);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'aggregates.json'), `${JSON.stringify(list, null, 2)}\n`);
  return { objects: objectKeys.length };
}
