/**
 * Attempt-scoped claims: a release removes only its own attempt from a claim's holders
 * and frees the key only when no attempt holds it, by UpdateItem alone. Against DynamoDB Local and the S3 server;
 * the only injected fault is the deterministic refusal of one staging transaction (middleware on the client).
 */
import { ListObjectsV2Command } from '@aws-sdk/client-s3';
import { beforeAll, describe, expect, it } from 'vitest';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { parseSettings, type Settings } from '../../shared/config/settings.ts';
import { InjectedCrashError } from '../../shared/errors.ts';
import { createProcessor, type ProcessorStep } from '../../shared/processor/processor.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources, uniqueName } from '../support/aws.ts';
import { gate } from '../support/hooks.ts';
import { ledgerView, scanPipeline } from '../support/ledger.ts';
import { mskEvent, order, type RecordSpec } from '../support/msk.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('claims');
});

function settingsFor(): Settings {
  return settingsIn(res, 'claims');
}

const keyed = (partition: number, offset: number, key: string): RecordSpec => ({
  partition,
  offset,
  key,
  value: order(key),
  headers: { 'idempotency-key': key },
});

/** Clients whose first staging transaction is refused with a deterministic (non-transient) error. */
function refusingFirstTransaction() {
  const clients = createAwsClients();
  let transactions = 0;
  clients.dynamodb.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'TransactWriteItemsCommand' && transactions++ === 0) {
        throw Object.assign(new Error('refused for good'), { name: 'ValidationException' });
      }
      return next(args);
    },
    { step: 'initialize', name: 'refuseFirstTransaction' },
  );
  return clients;
}

async function claimItem(settings: Settings, key: string): Promise<Record<string, unknown> | undefined> {
  const items = await scanPipeline(res.clients, res.table, settings.pipelineId);
  return items.find((item) => String(item.pk).includes('#CLAIM#') && item.idempotencyKey === key);
}

describe('attempt-scoped claim release', () => {
  it('an attempt failing for good does not free claims its concurrent retry confirmed and commits without: a duplicate elsewhere is still dropped', async () => {
    const settings = settingsFor();
    const batch = mskEvent([keyed(0, 0, 'K1'), keyed(0, 1, 'K2')]);
    const aClaimed = gate();
    const bClaimed = gate();
    const aDone = gate();
    const zombie = createProcessor({
      settings,
      clients: refusingFirstTransaction(),
      hooks: {
        async onStep(step: ProcessorStep) {
          if (step !== 'after-claims') return;
          aClaimed.open();
          await bClaimed.opened;
        },
      },
    });
    const retry = createProcessor({
      settings,
      clients: res.clients,
      hooks: {
        async onStep(step: ProcessorStep) {
          if (step !== 'after-claims') return;
          bClaimed.open();
          await aDone.opened;
        },
      },
    });
    const a = zombie.processEvent(batch).then(
      () => undefined,
      (error: unknown) => error,
    );
    await aClaimed.opened;
    const b = retry.processEvent(batch);
    expect(await a).toMatchObject({ name: 'ValidationException' }); // deterministic: A released what it could
    aDone.open();
    expect((await b).partitions[0]).toMatchObject({ stagedRows: 2, stagedOffset: 1 });
    // A left the holders; B is still there, so the claims stay live.
    const k1 = await claimItem(settings, 'K1');
    expect(k1).toMatchObject({ claimant: 'orders#0#0' });
    expect(k1?.holders).toEqual(new Set([expect.any(String)]));
    expect(k1?.expiresAt).toBeGreaterThan(Date.now() / 1000);
    const elsewhere = await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([keyed(1, 0, 'K1'), keyed(1, 1, 'K2')]),
    );
    expect(elsewhere.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 2 });
  });

  it('a claim left by a crashed attempt is reused by the retry and seen as a duplicate by others', async () => {
    const settings = settingsFor();
    const x = keyed(0, 0, 'X');
    await expect(
      createProcessor({
        settings,
        clients: res.clients,
        hooks: {
          onStep(step: ProcessorStep) {
            if (step === 'after-claims') throw new InjectedCrashError(step);
          },
        },
      }).processEvent(mskEvent([x])),
    ).rejects.toThrow(InjectedCrashError);
    // Another partition's same-bytes record meanwhile: a duplicate of the crashed attempt's claim.
    const other = await createProcessor({ settings, clients: res.clients }).processEvent(
      mskEvent([keyed(1, 0, 'X')]),
    );
    expect(other.partitions[0]).toMatchObject({ stagedRows: 0, duplicatesByKey: 1 });
    const retry = await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent([x]));
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 0, keyConflicts: 0 });
    expect((await ledgerView(res.clients, res.table, settings.pipelineId)).claims).toEqual({
      X: 'orders#0#0',
    });
  });

  it('a released claim is confirmed again by its own record: a later retry of the failed batch stages it', async () => {
    const settings = settingsFor();
    const batch = mskEvent([keyed(0, 0, 'R')]);
    await expect(
      createProcessor({ settings, clients: refusingFirstTransaction() }).processEvent(batch),
    ).rejects.toThrow('refused for good');
    expect(await claimItem(settings, 'R')).toMatchObject({ claimant: 'orders#0#0', expiresAt: 0 });
    const retry = await createProcessor({ settings, clients: res.clients }).processEvent(batch);
    expect(retry.partitions[0]).toMatchObject({ stagedRows: 1, duplicatesByKey: 0, keyConflicts: 0 });
    const claim = await claimItem(settings, 'R');
    expect(claim?.expiresAt).toBeGreaterThan(Date.now() / 1000);
  });
});

describe('claims ahead before the first staged write', () => {
  it('a batch holding a key another partition claimed writes no staged object for that record', async () => {
    const settings = settingsFor();
    const processor = createProcessor({ settings, clients: res.clients });
    await processor.processEvent(mskEvent([keyed(1, 0, 'K')]));
    const report = await processor.processEvent(mskEvent([keyed(0, 0, 'K'), keyed(0, 1, 'K2')]));
    expect(report.partitions[0]).toMatchObject({
      stagedOffset: 1,
      duplicatesByKey: 1,
      stagedRows: 1,
      chunks: 1,
    });
    const listed = await res.clients.s3.send(
      new ListObjectsV2Command({ Bucket: res.bucket, Prefix: `${settings.pipelineId}/_inprogress/` }),
    );
    const partition0 = (listed.Contents ?? [])
      .map((o) => o.Key ?? '')
      .filter((key) => key.includes('/partition=0/'));
    // One object for the chunk planned after the claims: none written before them and then left behind.
    expect(partition0).toHaveLength(1);
    expect(partition0[0]).toMatch(/partition=0\/0+-0+1\./);
  });
});

describe('an add meeting a field stored as text', () => {
  it('dead-letters only the record adding to the text field, not a record of the same chunk adding to a numeric one', async () => {
    const settings = parseSettings({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: uniqueName('types'),
      idempotencyKey: 'none',
    });
    const transform: Transform = {
      name: 'typed',
      apply(record) {
        const state =
          record.value === 'set'
            ? [{ key: 'c', fields: { label: 'gold' }, add: { count: 1 } }]
            : record.value === 'bad'
              ? [{ key: 'c', fields: {}, add: { label: 5 } }]
              : [{ key: 'c', fields: {}, add: { count: 2 } }];
        return { kind: 'ok', rows: [{ offset: record.offset }], state };
      },
    };
    const processor = createProcessor({ settings, clients: res.clients, transform });
    await processor.processEvent(mskEvent([{ partition: 0, offset: 0, value: 'set' }]));
    const report = await processor.processEvent(
      mskEvent([
        { partition: 0, offset: 1, value: 'good' },
        { partition: 0, offset: 2, value: 'bad' },
        { partition: 0, offset: 3, value: 'good' },
      ]),
    );
    expect(report.partitions[0]).toMatchObject({ stagedRows: 2, deadLettered: 1, stagedOffset: 3 });
    const state = (await ledgerView(res.clients, res.table, settings.pipelineId)).state.c;
    expect(state).toMatchObject({ label: 'gold', count: 5 });
  });
});
