/**
 * Dead letters the ledger made, not the transform (an idempotency key another payload holds, an add to a state
 * field stored as text): a redrive leaves them as they are while the current transform's result meets the same
 * ledger fact again, and sends them once when it no longer does (the transform now returns another key, or no
 * longer adds to that field). Real DynamoDB Local and S3 server, the real processor and coordinator.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { type RedriveResult, redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { decoderKinds, type Payment, paymentsTransform, type Rules, stageEvents } from './payments.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rdl');
});

const json = decoderKinds('http://registry.invalid').find((kind) => kind.name === 'JSON')!;

/** The transform's key, with a bug: the id's number modulo 6, so `p7` takes `p1`'s key `pay-1`. */
const buggyKey = (payment: Payment) => `pay-${Number(payment.id.slice(1)) % 6}`;
const strict: Rules = { rejectNegative: true, keyOf: buggyKey };

async function committed(settings: Settings, stream: 'output' | 'deadletter'): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream,
  })) {
    const at = `${file.topic}#${file.partition}@${(row.source as { offset: number }).offset}`;
    rows.push(stream === 'deadletter' ? `${at}: ${String(row.error).slice(0, 40)}` : at);
  }
  return rows.sort();
}

const ORIGINAL_DEAD_LETTERS = [
  'payments#0@0: amountCents -500 is negative',
  'payments#0@3: amountCents -700 is negative',
  'payments#0@6: state field "label" of "labels" is not a',
  'payments#0@7: idempotency key "pay-1" is already claim',
];

function summary(result: RedriveResult) {
  return result.partitions.map((p) => [
    p.outcome,
    p.sent,
    p.unchanged,
    p.staged.output,
    p.staged.deadLettered,
  ]);
}

async function withDeadLetters(): Promise<Settings> {
  const settings = settingsIn(res, 'rdl', { idempotencyKey: 'transform' });
  await stageEvents(res.clients, settings, json, strict);
  await checkpoint(res, settings);
  expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
  return settings;
}

describe("dead letters the ledger made are redriven only when the transform's result changes their fate", () => {
  it('the same transform meets the same key and the same text field again: nothing is sent, twice', async () => {
    const settings = await withDeadLetters();
    for (let run = 0; run < 2; run++) {
      const result = await redrive({
        settings,
        clients: res.clients,
        transform: paymentsTransform(json, strict),
      });
      expect(summary(result)).toEqual([['nothing', 0, 4, 0, 0]]);
      await checkpoint(res, settings);
    }
    expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
  });

  it('a transform that returns another key and no longer adds to the text field releases both, once', async () => {
    const settings = await withDeadLetters();
    const fixed = () =>
      paymentsTransform(json, { rejectNegative: true, addToLabel: false, keyOf: (p) => `pay-${p.id}` });
    const first = await redrive({ settings, clients: res.clients, transform: fixed() });
    expect(summary(first)).toEqual([['redriven', 2, 2, 2, 0]]);
    await checkpoint(res, settings);
    const again = await redrive({ settings, clients: res.clients, transform: fixed() });
    expect(summary(again)).toEqual([['nothing', 0, 2, 0, 0]]);
    await checkpoint(res, settings);
    expect(await committed(settings, 'output')).toEqual([
      'payments#0@1',
      'payments#0@2',
      'payments#0@4',
      'payments#0@5',
      'payments~r1#0@6',
      'payments~r1#0@7',
    ]);
    expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
  });
});
