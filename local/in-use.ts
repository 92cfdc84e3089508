/**
 * Whether a table and bucket already hold a pipeline: `eos local` judges every row under its pipeline's prefix and
 * every fence, claim and state item under its pipeline id as its own, so a run on leftovers of an earlier one (an
 * endpoint the user started, LocalStack) would print verdicts about rows it did not produce, or fail on fences
 * it did not move. It refuses such a table or bucket unless told to reuse them.
 */
import { type AttributeValue, paginateScan } from '@aws-sdk/client-dynamodb';
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import type { AwsClients } from '../shared/aws/clients.ts';
import { LEDGER_TABLE_LAYOUT } from '../shared/ledger/layout.ts';
import { PipelineInUseError } from './errors.ts';

export interface PipelineTraces {
  /** One ledger item under the pipeline id, as `pk / sk`. */
  readonly ledgerItem?: string;
  /** One object key under the pipeline's prefix. */
  readonly object?: string;
}

const { partitionKey, sortKey } = LEDGER_TABLE_LAYOUT;

/** The first ledger item whose partition key starts with `<pipeline>#` (a Scan: the table has no index on it). */
async function firstLedgerItem(
  dynamodb: AwsClients['dynamodb'],
  table: string,
  pipeline: string,
): Promise<string | undefined> {
  const pages = paginateScan(
    { client: dynamodb, pageSize: 1000 },
    {
      TableName: table,
      FilterExpression: 'begins_with(#pk, :prefix)',
      ProjectionExpression: '#pk, #sk',
      ExpressionAttributeNames: { '#pk': partitionKey, '#sk': sortKey },
      ExpressionAttributeValues: { ':prefix': { S: `${pipeline}#` } },
      ConsistentRead: true,
    },
  );
  for await (const page of pages) {
    const item: Record<string, AttributeValue> | undefined = page.Items?.[0];
    if (item) return `${item[partitionKey]?.S} / ${item[sortKey]?.S}`;
  }
  return undefined;
}

export async function pipelineTraces(
  clients: AwsClients,
  table: string,
  bucket: string,
  pipeline: string,
): Promise<PipelineTraces> {
  const [ledgerItem, listing] = await Promise.all([
    firstLedgerItem(clients.dynamodb, table, pipeline),
    clients.s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${pipeline}/`, MaxKeys: 1 })),
  ]);
  const object = listing.Contents?.[0]?.Key;
  return { ...(ledgerItem ? { ledgerItem } : {}), ...(object ? { object } : {}) };
}

/** Throws {@link PipelineInUseError} when the table or the bucket holds anything of `pipeline`. */
export async function refuseUsedPipeline(
  clients: AwsClients,
  table: string,
  bucket: string,
  pipeline: string,
): Promise<void> {
  const traces = await pipelineTraces(clients, table, bucket, pipeline);
  if (traces.ledgerItem === undefined && traces.object === undefined) return;
  throw new PipelineInUseError(pipeline, [
    ...(traces.ledgerItem ? [`the table ${table} holds ledger items of it (${traces.ledgerItem})`] : []),
    ...(traces.object ? [`the bucket ${bucket} holds objects under ${pipeline}/ (${traces.object})`] : []),
  ]);
}
