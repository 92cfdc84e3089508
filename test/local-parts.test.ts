import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { LEDGER_TABLE_LAYOUT } from '../shared/ledger/layout.ts';
import { freshResources } from './support/aws.ts';

describe('local parts', () => {
  it('creates the ledger table from the shared layout, with TTL on the claims attribute', async () => {
    const { clients, table } = await freshResources('parts');
    const described = await clients.dynamodb.send(new DescribeTableCommand({ TableName: table }));
    expect(described.Table?.KeySchema).toEqual([
      { AttributeName: LEDGER_TABLE_LAYOUT.partitionKey, KeyType: 'HASH' },
      { AttributeName: LEDGER_TABLE_LAYOUT.sortKey, KeyType: 'RANGE' },
    ]);
    const ttl = await clients.dynamodb.send(new DescribeTimeToLiveCommand({ TableName: table }));
    expect(ttl.TimeToLiveDescription?.AttributeName).toBe(LEDGER_TABLE_LAYOUT.timeToLiveAttribute);
  });

  it('stores objects byte for byte and pages listings on the S3 server', async () => {
    const { clients, bucket } = await freshResources('parts');
    const body = Buffer.from('{"a":1}\n{"b":2}\n');
    for (let i = 0; i < 5; i++) {
      await clients.s3.send(new PutObjectCommand({ Bucket: bucket, Key: `p/${i}.ndjson`, Body: body }));
    }
    const got = await clients.s3.send(new GetObjectCommand({ Bucket: bucket, Key: 'p/3.ndjson' }));
    expect(Buffer.from(await got.Body!.transformToByteArray())).toEqual(body);
    const page = await clients.s3.send(
      new ListObjectsV2Command({ Bucket: bucket, Prefix: 'p/', MaxKeys: 2 }),
    );
    expect(page.KeyCount).toBe(2);
    const next = await clients.s3.send(
      new ListObjectsV2Command({
        Bucket: bucket,
        Prefix: 'p/',
        MaxKeys: 10,
        ContinuationToken: page.NextContinuationToken,
      }),
    );
    expect(next.Contents?.map((o) => o.Key)).toEqual(['p/2.ndjson', 'p/3.ndjson', 'p/4.ndjson']);
  });
});
