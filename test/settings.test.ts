import { describe, expect, it } from 'vitest';
import { parseSettings, settingsFromEnv, settingsToEnv } from '../shared/config/settings.ts';
import { InvalidSettingError } from '../shared/errors.ts';

describe('settings', () => {
  it('applies documented defaults', () => {
    const settings = parseSettings({ ledgerTable: 'ledger', bucket: 'my-bucket' });
    expect(settings).toMatchObject({
      pipelineId: 'orders',
      deliveryGuarantee: 'exactly-once',
      idempotencyKey: { kind: 'header', name: 'idempotency-key' },
      idempotencyTtlSeconds: 604800,
      gzip: true,
      maxTransactionItems: 100,
    });
  });

  it('reads EOS_* variables and round-trips through settingsToEnv', () => {
    const env = settingsToEnv({
      ledgerTable: 'ledger',
      bucket: 'b-1',
      idempotencyKey: 'json:orderId',
      gzip: false,
    });
    expect(settingsFromEnv(env)).toMatchObject({
      idempotencyKey: { kind: 'json', field: 'orderId' },
      gzip: false,
    });
  });

  it('names the bad setting: env var names in Lambda, keys elsewhere', () => {
    expect(() => settingsFromEnv({ EOS_BUCKET: 'b-1' })).toThrow(InvalidSettingError);
    expect(() => settingsFromEnv({ EOS_BUCKET: 'b-1' })).toThrow(/^invalid setting EOS_LEDGER_TABLE: /);
    expect(() =>
      settingsFromEnv({ EOS_BUCKET: 'b-1', EOS_LEDGER_TABLE: 'ledger', EOS_DELIVERY_GUARANTE: 'none' }),
    ).toThrow(/EOS_DELIVERY_GUARANTE: unknown setting/);
    expect(() => parseSettings({ ledgerTable: 'ledger', bucket: 'b-1', deliveryGuarantee: 'twice' })).toThrow(
      /invalid setting deliveryGuarantee/,
    );
    expect(() => parseSettings({ ledgerTable: 'ledger', bucket: 'b-1', idempotencyKey: 'cookie:x' })).toThrow(
      /invalid setting idempotencyKey: expected "header:<name>"/,
    );
    expect(() => parseSettings({ ledgerTable: 'ledger', bucket: 'b-1', maxTransactionItems: 101 })).toThrow(
      /invalid setting maxTransactionItems/,
    );
    // A claim written ahead must not expire before its transaction: TTLs shorter than a day are refused.
    expect(() => parseSettings({ ledgerTable: 'ledger', bucket: 'b-1', idempotencyTtlSeconds: 60 })).toThrow(
      /invalid setting idempotencyTtlSeconds: at least one day/,
    );
    expect(() => parseSettings({ ledgerTable: 'ledger', bucket: 'b-1', colour: 'red' })).toThrow(
      /invalid setting colour/,
    );
  });
});
