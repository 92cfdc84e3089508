import { describe, expect, it } from 'vitest';
import { parseSettings, settingsFromEnv, settingsToEnv } from '../../shared/config/settings.ts';
import { InvalidSettingError } from '../../shared/errors.ts';

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
      missingIdempotencyKey: 'dead-letter',
    });
  });

  it('missingIdempotencyKey: dead-letter or offset-only, from EOS_MISSING_IDEMPOTENCY_KEY in Lambda', () => {
    const env = settingsToEnv({ ledgerTable: 'ledger', bucket: 'b-1', missingIdempotencyKey: 'offset-only' });
    expect(env.EOS_MISSING_IDEMPOTENCY_KEY).toBe('offset-only');
    expect(settingsFromEnv(env).missingIdempotencyKey).toBe('offset-only');
    expect(() =>
      settingsFromEnv({ EOS_BUCKET: 'b-1', EOS_LEDGER_TABLE: 'ledger', EOS_MISSING_IDEMPOTENCY_KEY: 'skip' }),
    ).toThrow(/invalid setting EOS_MISSING_IDEMPOTENCY_KEY/);
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

  it('source checks: topics as a comma list of Kafka topic names, an ARN for the event source, a positive fence-jump bound', () => {
    const base = { ledgerTable: 'ledger', bucket: 'b-1' };
    const env = settingsToEnv({
      ...base,
      topics: 'orders, payments',
      eventSourceArn: 'arn:aws:kafka:eu-west-1:123456789012:cluster/c/1',
      maxFenceJump: 5000,
    });
    expect(env).toMatchObject({ EOS_TOPICS: 'orders, payments', EOS_MAX_FENCE_JUMP: '5000' });
    expect(settingsFromEnv(env)).toMatchObject({ topics: ['orders', 'payments'], maxFenceJump: 5000 });
    const defaults = parseSettings(base);
    expect([defaults.topics, defaults.eventSourceArn, defaults.maxFenceJump]).toEqual([
      undefined,
      undefined,
      1_000_000,
    ]);
    expect(() => parseSettings({ ...base, topics: ' , ' })).toThrow(
      /invalid setting topics: at least one topic/,
    );
    expect(() => parseSettings({ ...base, topics: 'orders,a/b#c' })).toThrow(
      /invalid setting topics: "a\/b#c" is not a Kafka topic name/,
    );
    expect(() => parseSettings({ ...base, topics: '..' })).toThrow(/invalid setting topics/);
    expect(() =>
      settingsFromEnv({ EOS_LEDGER_TABLE: 'ledger', EOS_BUCKET: 'b-1', EOS_EVENT_SOURCE_ARN: 'my-cluster' }),
    ).toThrow(/invalid setting EOS_EVENT_SOURCE_ARN: an ARN/);
    expect(() => parseSettings({ ...base, maxFenceJump: 0 })).toThrow(/invalid setting maxFenceJump/);
  });
});
