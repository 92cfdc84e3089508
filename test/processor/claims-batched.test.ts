/**
 * Claims ahead created in batches, seen through the processor (global scope, `claimWrite: ahead`), against
 * DynamoDB Local and the S3 server: a batch whose keys are absent costs one BatchExecuteStatement per 25 keys;
 * a key held already is decided by its own per-key write (a conflict, the record's own claim confirmed, an
 * expired claim taken over in the fenced transaction), whatever the other keys of its call.
 */
import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { beforeAll, describe, expect, it } from 'vitest';
import { CallCounter } from '../../shared/aws/call-counter.ts';
import { createAwsClients, ledgerDocumentClient } from '../../shared/aws/clients.ts';
import { keys } from '../../shared/ledger/layout.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { digestOfSpec, keyedSpec } from '../support/claims.ts';
import { scanPipeline } from '../support/ledger.ts';
import { mskEvent } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claims-batched');
});

async function putClaim(pipeline: string, key: string, claimant: string, digest: string, expiresAt: number) {
  await ledgerDocumentClient(res.clients.dynamodb).send(
    new PutCommand({
      TableName: res.table,
      Item: {
        ...keys.claim(pipeline, key),
        idempotencyKey: key,
        claimant,
        digest,
        expiresAt,
        holders: new Set(['attempt-before']),
      },
    }),
  );
}

describe('claims ahead in batches, through the processor', () => {
  it('stages 60 keyed records with 3 claim calls when no key is held, 3 more per key held', async () => {
    const settings = settingsIn(res, 'cbatch');
    const records = Array.from({ length: 60 }, (_, offset) => keyedSpec(0, offset, `k${offset}`));
    const now = Math.floor(Date.now() / 1000);
    // k10: another record's with another payload (a conflict); k20: this record's own, left by a crashed attempt;
    // k30: another record's, expired (taken over in the transaction).
    await putClaim(settings.pipelineId, 'k10', 'orders#1#7', 'another-digest', now + 86_400);
    await putClaim(settings.pipelineId, 'k20', 'orders#0#20', digestOfSpec(records[20]!), now + 86_400);
    await putClaim(settings.pipelineId, 'k30', 'orders#1#3', digestOfSpec(records[30]!), now - 1);
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);

    const report = await createProcessor({ settings, clients }).processEvent(mskEvent(records));

    expect(report.partitions[0]).toMatchObject({
      stagedRows: 59,
      keyConflicts: 1,
      deadLettered: 1,
      duplicatesByKey: 0,
      stagedOffset: 59,
    });
    const snapshot = calls.snapshot();
    expect(snapshot['dynamodb:BatchExecuteStatement']).toBe(3);
    expect(snapshot['dynamodb:UpdateItem']).toBe(3);
    const claims = Object.fromEntries(
      (await scanPipeline(res.clients, res.table, settings.pipelineId))
        .filter((item) => String(item.pk).includes('#CLAIM#'))
        .map((item) => [item.idempotencyKey, item]),
    );
    expect(Object.keys(claims)).toHaveLength(60);
    expect(claims.k10).toMatchObject({ claimant: 'orders#1#7', digest: 'another-digest' });
    expect(claims.k20).toMatchObject({ claimant: 'orders#0#20' });
    expect(claims.k20?.holders).toEqual(new Set(['attempt-before', expect.any(String)]));
    // Taken over inside the transaction: now this record's, live.
    expect(claims.k30).toMatchObject({ claimant: 'orders#0#30', digest: digestOfSpec(records[30]!) });
    expect(claims.k30?.expiresAt).toBeGreaterThan(now);
    for (const offset of [0, 29, 59]) {
      expect(claims[`k${offset}`]).toMatchObject({
        claimant: `orders#0#${offset}`,
        digest: digestOfSpec(records[offset]!),
      });
      expect(claims[`k${offset}`]?.holders).toEqual(new Set([expect.any(String)]));
    }
  });

  it('costs a 500-record batch of fresh keys 20 claim calls and no per-key write', async () => {
    const settings = settingsIn(res, 'cbatch');
    const records = Array.from({ length: 500 }, (_, offset) => keyedSpec(0, offset, `f${offset}`));
    const clients = createAwsClients();
    const calls = new CallCounter().attach(clients);
    const report = await createProcessor({ settings, clients }).processEvent(mskEvent(records));
    expect(report.partitions[0]).toMatchObject({ stagedRows: 500, stagedOffset: 499 });
    expect(calls.snapshot()['dynamodb:BatchExecuteStatement']).toBe(20);
    // The fence moves inside the transactions (Updates there); no UpdateItem call is made.
    expect(calls.snapshot()['dynamodb:UpdateItem']).toBeUndefined();
  });
});
