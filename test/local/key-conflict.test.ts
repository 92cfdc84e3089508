/**
 * `eos local` judges a key conflict by the processor's documented rules (docs/architecture.md, "Record-level and
 * structural problems"; docs/transforms.md, "Idempotency keys"): a record whose idempotency key is already held by
 * a record with other contents is dead-lettered as a conflict, and that dead letter is what the oracle expects,
 * with JSON and with Avro values, without faults and under the fault schedule, within a partition and across
 * partitions (where which record wins depends on processing order, so either may).
 */
import avro from 'avro-js/lib/schemas.js';
import { describe, expect, it } from 'vitest';
import type { FinalRow } from '../../shared/sink/verify.ts';
import { order } from '../support/msk.ts';
import { eosLocal, inputFile, type LocalRun } from './eos-local.ts';
import { PAYMENT_SCHEMA } from './fixtures/payments-avro.ts';

const AVRO_TRANSFORM = 'test/local/fixtures/payments-avro.ts';
const payment = avro.createType(JSON.parse(PAYMENT_SCHEMA));

interface Line {
  readonly partition: number;
  readonly key: string;
  readonly value?: string;
  readonly valueBase64?: string;
  readonly headers?: Record<string, string>;
}

/** `count` orders over two partitions, each with its own idempotency key, then `extra` lines appended. */
function ordersInput(count: number, extra: readonly Line[]): Line[] {
  const lines: Line[] = Array.from({ length: count }, (_, i) => ({
    partition: i % 2,
    key: `cust-${i % 5}`,
    value: order(`o-${i}`, `cust-${i % 5}`, `${10 + i}.00`, 'EUR'),
    headers: { 'idempotency-key': `k-${i}` },
  }));
  return [...lines, ...extra];
}

/** An order line keyed `key` on `partition`. */
const keyed = (partition: number, key: string, id: string, amount: string): Line => ({
  partition,
  key: 'cust-9',
  value: order(id, 'cust-9', amount, 'USD'),
  headers: { 'idempotency-key': key },
});

/** `count` Avro payments over two partitions (their id is the key), then `extra` lines appended. */
function paymentsInput(count: number, extra: readonly Line[]): Line[] {
  const lines = Array.from({ length: count }, (_, i) => avroLine(i % 2, `p-${i}`, 100 + i, 'EUR'));
  return [...lines, ...extra];
}

function avroLine(partition: number, id: string, amountCents: number, currency: string): Line {
  const bytes = payment.toBuffer({ id, amountCents, currency }) as Buffer;
  return { partition, key: id, valueBase64: bytes.toString('base64') };
}

const sourceOf = (row: FinalRow) => row.row.source as { partition: number; offset: number };
const at = (run: LocalRun, stream: string) =>
  run.rows
    .filter((row) => row.stream === stream)
    .map((row) => `${sourceOf(row).partition}@${sourceOf(row).offset}`);

function expectExactlyOnce(run: LocalRun): void {
  expect(run.errors).toBe('');
  expect(run.report?.violations).toEqual([]);
  expect(run.report?.verdict).toBe('exactly-once');
  expect(run.code).toBe(0);
}

const quiet = ['--faults', 'none', '--checkpoint-interval', '300'];

describe('eos local expects a key conflict as a dead letter', () => {
  it('JSON values, one partition, no faults: the later record with other contents is the conflict dead letter', async () => {
    // Partition 0 holds orders 0, 2, …, 18 at offsets 0..9; the two lines below are at offsets 10 and 11.
    const run = await eosLocal([
      '--input',
      inputFile(ordersInput(20, [keyed(0, 'dup', 'o-a', '5.00'), keyed(0, 'dup', 'o-b', '7.00')])),
      ...quiet,
    ]);
    expectExactlyOnce(run);
    expect(at(run, 'deadletter')).toEqual(['0@11']);
    const conflict = run.rows.find((row) => row.stream === 'deadletter')!;
    expect(String(conflict.row.error)).toMatch(
      /^idempotency key "dup" is already claimed by .* with a different payload$/,
    );
    expect(at(run, 'output')).toContain('0@10');
    expect(run.report!.records).toMatchObject({ in: 22, committed: 21, deadLettered: 1, expected: 22 });
  }, 120_000);

  it('Avro values (the transform returns the key), no faults: the conflict is expected, not unexpected', async () => {
    const run = await eosLocal([
      '--input',
      inputFile(paymentsInput(10, [avroLine(1, 'pay-x', 500, 'USD'), avroLine(1, 'pay-x', 900, 'USD')])),
      '--transform',
      AVRO_TRANSFORM,
      '--idempotency-key',
      'transform',
      ...quiet,
    ]);
    expectExactlyOnce(run);
    expect(at(run, 'deadletter')).toEqual(['1@6']);
    expect(run.report!.records).toMatchObject({ committed: 11, deadLettered: 1 });
  }, 120_000);

  it('across partitions in global scope either record may win, and the other is the conflict', async () => {
    const run = await eosLocal([
      '--input',
      inputFile(
        ordersInput(10, [
          keyed(0, 'both', 'o-a', '5.00'),
          keyed(1, 'both', 'o-b', '7.00'),
          keyed(1, 'both', 'o-a', '5.00'),
        ]),
      ),
      ...quiet,
    ]);
    expectExactlyOnce(run);
    const dead = at(run, 'deadletter');
    // 0@5 is o-a; 1@5 is o-b; 1@6 is o-a again: a duplicate of 0@5, or a conflict of 1@5.
    expect([['1@5'], ['0@5', '1@6']]).toContainEqual(dead.sort());
  }, 120_000);

  it('under the fault schedule, with conflicts within and across partitions, JSON and Avro', async () => {
    const conflicts: Line[] = [];
    for (let i = 0; i < 6; i++) {
      conflicts.push(keyed(i % 2, `c-${i}`, `o-${i}-a`, '5.00'), keyed(i % 2, `c-${i}`, `o-${i}-b`, '6.00'));
      conflicts.push(
        keyed((i + 1) % 2, `x-${i}`, `o-${i}-c`, '8.00'),
        keyed(i % 2, `x-${i}`, `o-${i}-d`, '9.00'),
      );
    }
    const json = await eosLocal([
      '--input',
      inputFile(ordersInput(120, conflicts)),
      '--faults',
      'all,coordinator-crash=0.1',
      '--seed',
      '3',
      '--batch-size',
      '4',
      '--checkpoint-interval',
      '300',
    ]);
    expectExactlyOnce(json);
    expect(json.report!.invocations.failed).toBeGreaterThan(0);
    expect(json.report!.records.deadLettered).toBeGreaterThanOrEqual(12);

    const avroConflicts = [0, 1, 2, 3].flatMap((i) => [
      avroLine(i % 2, `pay-${i}`, 100, 'USD'),
      avroLine((i + i) % 2, `pay-${i}`, 200, 'USD'),
    ]);
    const avroRun = await eosLocal([
      '--input',
      inputFile(paymentsInput(80, avroConflicts)),
      '--transform',
      AVRO_TRANSFORM,
      '--idempotency-key',
      'transform',
      '--faults',
      'all,coordinator-crash=0.1',
      '--seed',
      '5',
      '--batch-size',
      '4',
      '--checkpoint-interval',
      '300',
    ]);
    expectExactlyOnce(avroRun);
    expect(avroRun.report!.invocations.failed).toBeGreaterThan(0);
    expect(avroRun.report!.records.deadLettered).toBe(4);
  }, 300_000);

  it('in partition scope the same key on two partitions is two records, each output', async () => {
    const run = await eosLocal(
      [
        '--input',
        inputFile(ordersInput(10, [keyed(0, 'both', 'o-a', '5.00'), keyed(1, 'both', 'o-b', '7.00')])),
        ...quiet,
      ],
      { env: { EOS_IDEMPOTENCY_SCOPE: 'partition' } },
    );
    expectExactlyOnce(run);
    expect(at(run, 'deadletter')).toEqual([]);
    expect(run.report!.records.committed).toBe(12);
  }, 120_000);
});
