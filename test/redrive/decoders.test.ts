/**
 * A redrive judges each dead letter with the records decoded as the processor decodes them (registry schemas
 * looked up first), whatever the transform's decoder: run twice without a fix it writes nothing (the committed
 * dead letters stay exactly the original ones, end-to-end property 5), and with the fix it releases exactly the
 * fixed records, once. Dead letters the ledger made (a key conflict, an add to a text field) are left as they are.
 * Each run uses a fresh transform instance, as a new `eos redrive` process would. Real DynamoDB Local and S3
 * server, the real processor and coordinator; the Confluent registry is a loopback HTTP server.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../shared/config/settings.ts';
import { type RedriveResult, redrive } from '../../shared/redrive/redrive.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { startRegistry, type TestRegistry } from '../fixtures/decode/registry-server.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import {
  AVRO_SCHEMA,
  CONFLUENT_SCHEMA_ID,
  decoderKinds,
  paymentsTransform,
  stageEvents,
} from './payments.ts';

let res: TestResources;
let registry: TestRegistry;
beforeAll(async () => {
  res = await freshResources('rdd');
  registry = await startRegistry({ [CONFLUENT_SCHEMA_ID]: { schema: AVRO_SCHEMA } });
});
afterAll(() => registry.close());

/** Committed rows of `stream` through the committed reader, as `lane#partition@offset` (and the reason). */
async function committed(settings: Settings, stream: 'output' | 'deadletter'): Promise<string[]> {
  const rows: string[] = [];
  for await (const { file, row } of readCommitted({
    s3: res.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    stream,
  })) {
    const at = `${file.topic}#${file.partition}@${(row.source as { offset: number }).offset}`;
    rows.push(stream === 'deadletter' ? `${at}: ${String(row.error)}` : at);
  }
  return rows.sort();
}

const ORIGINAL_DEAD_LETTERS = [
  'payments#0@0: amountCents -500 is negative',
  'payments#0@3: amountCents -700 is negative',
  'payments#0@6: state field "label" of "labels" is not a number (it was set), and this record adds to it: a state field is either set or added to, never both',
  'payments#0@7: idempotency key "pay-1" is already claimed by payments#0#1 with a different payload',
];

function summary(result: RedriveResult) {
  return result.partitions.map((p) => ({
    at: `${p.lane}#${p.partition}`,
    outcome: p.outcome,
    sent: p.sent,
    unchanged: p.unchanged,
  }));
}

describe('a redrive judges records decoded as the processor decodes them', () => {
  for (const kind of decoderKinds('http://registry.invalid')) {
    const kindNow = () => decoderKinds(registry.url).find((k) => k.name === kind.name)!;

    it(`${kind.name}: run twice without a fix, it writes nothing and the dead letters stay the original ones`, async () => {
      const settings = settingsIn(res, 'rdd');
      await stageEvents(res.clients, settings, kindNow());
      await checkpoint(res, settings);
      expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
      for (let run = 0; run < 2; run++) {
        const transform = paymentsTransform(kindNow(), { rejectNegative: true });
        const result = await redrive({ settings, clients: res.clients, transform });
        expect(summary(result)).toEqual([{ at: 'payments#0', outcome: 'nothing', sent: 0, unchanged: 4 }]);
        await checkpoint(res, settings);
        expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
      }
      expect(await committed(settings, 'output')).toEqual([
        'payments#0@1',
        'payments#0@2',
        'payments#0@4',
        'payments#0@5',
      ]);
    });

    it(`${kind.name}: with the fix, exactly the fixed records are released, once`, async () => {
      const settings = settingsIn(res, 'rdd');
      await stageEvents(res.clients, settings, kindNow());
      await checkpoint(res, settings);
      const fixed = () => paymentsTransform(kindNow(), { rejectNegative: false });
      const first = await redrive({ settings, clients: res.clients, transform: fixed() });
      expect(summary(first)).toEqual([{ at: 'payments#0', outcome: 'redriven', sent: 2, unchanged: 2 }]);
      expect(first.partitions[0]!.staged).toEqual({ output: 2, deadLettered: 0 });
      await checkpoint(res, settings);
      const again = await redrive({ settings, clients: res.clients, transform: fixed() });
      expect(summary(again)).toEqual([{ at: 'payments#0', outcome: 'nothing', sent: 0, unchanged: 2 }]);
      await checkpoint(res, settings);
      expect(await committed(settings, 'output')).toEqual([
        'payments#0@1',
        'payments#0@2',
        'payments#0@4',
        'payments#0@5',
        'payments~r1#0@0',
        'payments~r1#0@3',
      ]);
      expect(await committed(settings, 'deadletter')).toEqual(ORIGINAL_DEAD_LETTERS);
      const verified = await verifySink({
        s3: res.clients.s3,
        bucket: settings.bucket,
        pipeline: settings.pipelineId,
      });
      expect(verified.problems).toEqual([]);
    });
  }
});
