/**
 * `eos local --missing-idempotency-key dead-letter|offset-only`: a record in which the key source finds nothing is
 * dead-lettered (the default) or processed with offset dedupe only, as the processor's setting says; the oracle
 * expects exactly that under each choice, with and without faults, and the report says how many records had no
 * key, so a key source naming the wrong field (`json:orderid` for `orderId`) cannot pass unseen. A bad value is
 * one line and exit code 2 before anything starts.
 */
import { describe, expect, it } from 'vitest';
import { MISSING_KEY_CHOICES } from '../../cli/local-defaults.ts';
import { MISSING_IDEMPOTENCY_KEY } from '../../shared/config/settings.ts';
import { eosLocal } from './eos-local.ts';

const WRONG_FIELD = ['--idempotency-key', 'json:orderid'];
const quiet = ['--records', '40', '--faults', 'none', '--checkpoint-interval', '300'];

describe('eos local with records the idempotency-key source finds nothing in', () => {
  it('dead-letters them by default, expects exactly that, and says so in the report', async () => {
    const run = await eosLocal([...quiet, ...WRONG_FIELD]);
    expect(run.errors).toBe('');
    expect(run.code).toBe(0);
    expect(run.report).toMatchObject({ verdict: 'exactly-once' });
    expect(run.report!.records).toMatchObject({
      committed: 0,
      deadLettered: 40,
      missingKeys: { count: 40, source: 'json:orderid', handling: 'dead-letter' },
    });
    expect(
      run.rows.every((row) => String(row.row.error).startsWith('no idempotency key: json:orderid')),
    ).toBe(true);
    expect(run.text).toMatch(
      /no idempotency key +40 records had no idempotency key \(json:orderid\): dead-lettered/,
    );
    expect(run.text).toMatch(
      /verdict .*EXACTLY-ONCE — but .*40 records had no idempotency key \(json:orderid\)/,
    );
  }, 120_000);

  it('--missing-idempotency-key offset-only outputs them, expects exactly that, and counts them', async () => {
    const run = await eosLocal([...quiet, ...WRONG_FIELD, '--missing-idempotency-key', 'offset-only']);
    expect(run.errors).toBe('');
    expect(run.code).toBe(0);
    expect(run.report!.records).toMatchObject({
      committed: 40,
      deadLettered: 0,
      missingKeys: { count: 40, handling: 'offset-only' },
    });
    expect(run.text).toContain(
      '40 records had no idempotency key (json:orderid): processed with offset dedupe only',
    );
  }, 120_000);

  it('EOS_MISSING_IDEMPOTENCY_KEY is honoured and the flag wins over it', async () => {
    const fromEnv = await eosLocal([...quiet, ...WRONG_FIELD], {
      env: { EOS_MISSING_IDEMPOTENCY_KEY: 'offset-only' },
    });
    expect(fromEnv.report!.records.missingKeys.handling).toBe('offset-only');
    const flagWins = await eosLocal([...quiet, ...WRONG_FIELD, '--missing-idempotency-key', 'dead-letter'], {
      env: { EOS_MISSING_IDEMPOTENCY_KEY: 'offset-only' },
    });
    expect(flagWins.report!.records).toMatchObject({
      deadLettered: 40,
      missingKeys: { handling: 'dead-letter' },
    });
  }, 120_000);

  it('holds exactly-once under the fault schedule with either choice', async () => {
    for (const choice of MISSING_KEY_CHOICES) {
      const run = await eosLocal([
        '--records',
        '300',
        '--seed',
        '2',
        '--faults',
        'all,crash=0.2',
        '--batch-size',
        '5',
        '--checkpoint-interval',
        '300',
        ...WRONG_FIELD,
        '--missing-idempotency-key',
        choice,
      ]);
      expect(run.errors).toBe('');
      expect(run.report!.violations).toEqual([]);
      expect(run.code).toBe(0);
      expect(run.report!.invocations.failed).toBeGreaterThan(0);
      // Every record the transform accepts has no key: under faults, poison records are dead letters anyway.
      expect(run.report!.records.missingKeys.count).toBeGreaterThan(250);
    }
  }, 300_000);

  it('a key source that finds every key counts none and prints no line', async () => {
    const run = await eosLocal(quiet);
    expect(run.report!.records.missingKeys.count).toBe(0);
    expect(run.text).not.toContain('no idempotency key');
  }, 120_000);

  it('a bad value is one line naming the flag, exit 2, nothing run', async () => {
    const run = await eosLocal([...quiet, '--missing-idempotency-key', 'drop']);
    expect(run.code).toBe(2);
    expect(run.report).toBeUndefined();
    expect(run.errors.trim().split('\n')).toHaveLength(1);
    expect(run.errors).toMatch(/--missing-idempotency-key.*'drop'.*dead-letter, offset-only/);
  });

  it("the flag's choices are the setting's", () => {
    expect([...MISSING_KEY_CHOICES]).toEqual([...MISSING_IDEMPOTENCY_KEY]);
  });
});
