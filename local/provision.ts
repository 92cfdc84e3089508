/**
 * Creates the ledger table and the bucket from the layout defined in `shared/` (the CDK stack declares the same
 * layout). Used by the local runner and the tests; idempotent.
 */
import {
  CreateTableCommand,
  type DynamoDBClient,
  ResourceInUseException,
  UpdateTimeToLiveCommand,
} from '@aws-sdk/client-dynamodb';
import { CreateBucketCommand, type S3Client } from '@aws-sdk/client-s3';
import { LEDGER_TABLE_LAYOUT } from '../shared/ledger/layout.ts';

export async function createLedgerTable(dynamodb: DynamoDBClient, tableName: string): Promise<void> {
  try {
    await dynamodb.send(
      new CreateTableCommand({
        TableName: tableName,
        BillingMode: LEDGER_TABLE_LAYOUT.billingMode,
        AttributeDefinitions: [
          { AttributeName: LEDGER_TABLE_LAYOUT.partitionKey, AttributeType: 'S' },
          { AttributeName: LEDGER_TABLE_LAYOUT.sortKey, AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: LEDGER_TABLE_LAYOUT.partitionKey, KeyType: 'HASH' },
          { AttributeName: LEDGER_TABLE_LAYOUT.sortKey, KeyType: 'RANGE' },
        ],
      }),
    );
  } catch (error) {
    if (error instanceof ResourceInUseException) return;
    throw error;
  }
  await dynamodb.send(
    new UpdateTimeToLiveCommand({
      TableName: tableName,
      TimeToLiveSpecification: { AttributeName: LEDGER_TABLE_LAYOUT.timeToLiveAttribute, Enabled: true },
    }),
  );
}

export async function createBucket(s3: S3Client, bucket: string): Promise<void> {
  try {
    await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  } catch (error) {
    const name = (error as { name?: string }).name;
    if (name === 'BucketAlreadyOwnedByYou' || name === 'BucketAlreadyExists') return;
    throw error;
  }
}
