/**
 * `eos local` judges only what it produced: pointed at endpoints (`--dynamodb-endpoint`/`--s3-endpoint`, or the
 * `AWS_ENDPOINT_URL_*` variables) whose table or bucket already holds its pipeline — ledger items under the
 * pipeline id, or objects under its prefix — it refuses with exit code 2 and one line naming what it found and
 * `--reuse`, before any record is appended; with `--reuse` it runs as before.
 */
import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { describe, expect, it } from 'vitest';
import { createBucket, createLedgerTable } from '../../local/provision.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { uniqueName } from '../support/aws.ts';
import { eosLocal } from './eos-local.ts';

const endpoints = () => ({
  dynamodb: process.env.AWS_ENDPOINT_URL_DYNAMODB!,
  s3: process.env.AWS_ENDPOINT_URL_S3!,
});

/** Names of a table, bucket and pipeline of one test, created empty on the shared parts. */
async function freshPipeline() {
  const id = uniqueName('reuse');
  const names = { EOS_LEDGER_TABLE: `eos-${id}`, EOS_BUCKET: `eos-${id}`, EOS_PIPELINE_ID: id };
  const clients = createAwsClients();
  await Promise.all([
    createLedgerTable(clients.dynamodb, names.EOS_LEDGER_TABLE),
    createBucket(clients.s3, names.EOS_BUCKET),
  ]);
  return { names, clients, id };
}

const quick = ['--records', '60', '--faults', 'none', '--checkpoint-interval', '300'];

describe('eos local on a table or bucket that already holds its pipeline', () => {
  it('refuses a second run on the same pipeline (exit 2, one line naming the items and --reuse); --reuse runs', async () => {
    const { names } = await freshPipeline();
    const flags = ['--dynamodb-endpoint', endpoints().dynamodb, '--s3-endpoint', endpoints().s3];
    const first = await eosLocal([...quick, ...flags], { env: names, ownEndpoints: true });
    expect(first.errors).toBe('');
    expect(first.code).toBe(0);

    const second = await eosLocal([...quick, ...flags], { env: names, ownEndpoints: true });
    expect(second.code).toBe(2);
    expect(second.report).toBeUndefined();
    const line = second.errors.trim();
    expect(line.split('\n')).toHaveLength(1);
    expect(line).toMatch(/^error: /);
    expect(line).toContain(names.EOS_LEDGER_TABLE);
    expect(line).toContain(names.EOS_BUCKET);
    expect(line).toContain(`pipeline ${names.EOS_PIPELINE_ID}`);
    expect(line).toContain('--reuse');

    // As before the check: the run goes ahead, and the earlier run's fences stop its records from offset 0.
    const reused = await eosLocal([...quick, ...flags, '--reuse'], { env: names, ownEndpoints: true });
    expect(reused.text).toContain('using DynamoDB at');
    expect(reused.errors).not.toContain('already there');
    expect(reused.errors).toMatch(/offsets of orders-\d went backwards/);
  }, 180_000);

  it('finds a ledger item alone, through the AWS_ENDPOINT_URL_* variables', async () => {
    const { names, clients, id } = await freshPipeline();
    await clients.dynamodb.send(
      new PutItemCommand({
        TableName: names.EOS_LEDGER_TABLE,
        Item: { pk: { S: `${id}#CHECKPOINT` }, sk: { S: 'HEAD' } },
      }),
    );
    const env = {
      ...names,
      AWS_ENDPOINT_URL_DYNAMODB: endpoints().dynamodb,
      AWS_ENDPOINT_URL_S3: endpoints().s3,
    };
    const run = await eosLocal(quick, { env, ownEndpoints: true });
    expect(run.code).toBe(2);
    expect(run.errors).toMatch(new RegExp(`table ${names.EOS_LEDGER_TABLE} .*${id}#CHECKPOINT`));
    expect(run.errors).not.toContain(`bucket ${names.EOS_BUCKET} `);
  }, 120_000);

  it('finds an object alone under the pipeline prefix; another pipeline in the same table and bucket is no obstacle', async () => {
    const { names, clients, id } = await freshPipeline();
    await clients.s3.send(
      new PutObjectCommand({ Bucket: names.EOS_BUCKET, Key: `${id}/final/output/stray.ndjson`, Body: '{}' }),
    );
    const flags = ['--dynamodb-endpoint', endpoints().dynamodb, '--s3-endpoint', endpoints().s3];
    const run = await eosLocal([...quick, ...flags], { env: names, ownEndpoints: true });
    expect(run.code).toBe(2);
    expect(run.errors).toContain(`${id}/final/output/stray.ndjson`);

    const other = await eosLocal([...quick, ...flags], {
      env: { ...names, EOS_PIPELINE_ID: `${id}-other` },
      ownEndpoints: true,
    });
    expect(other.errors).toBe('');
    expect(other.code).toBe(0);
  }, 120_000);
});
