/**
 * `eos redrive`'s judgement beside the adversarial cases: a key conflict only the redriver sees (partition scope) is
 * dead-lettered once and then left alone; a key a window holds with the same payload is never output beside it; a
 * dead letter whose own reason is the registry's refusal stays while the registry refuses the same way, and is
 * redriven once the registry answers. Real DynamoDB Local and S3 server, the real processor, redriver and
 * coordinator; Glue's lookup is the decoder's injectable `GetSchemaVersion`.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { redrive } from '../../shared/redrive/redrive.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';
import {
  committed,
  type DecoderKind,
  decoderKinds,
  jsonKind,
  payment,
  paymentsDefinition,
  paymentsTransform,
  stageEvents,
  summary,
} from './payments.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rdjudge');
});

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rdjudge', overrides);
}

async function stage(settings: Settings, transform: Transform, records: RecordSpec[]): Promise<void> {
  await createProcessor({ settings, clients: res.clients, transform }).processEvent(mskEvent(records));
  await checkpoint(res, settings);
}

describe('partition scope: a key the lane window holds', () => {
  it('with another payload: one key-conflict dead letter in the round, then left alone by every run', async () => {
    const settings = settingsFor({ idempotencyScope: 'partition' });
    await stage(settings, paymentsTransform(jsonKind, { rejectNegative: true }), [
      payment(0, { id: 'p0', amountCents: 100, note: null }, 'K'),
      payment(1, { id: 'p1', amountCents: -5, note: null }, 'K'),
    ]);
    const fixed = () => paymentsTransform(jsonKind, { rejectNegative: false });
    const first = await redrive({ settings, clients: res.clients, transform: fixed() });
    expect(first.partitions.map((p) => [p.sent, p.staged.output, p.staged.deadLettered])).toEqual([
      [1, 0, 1],
    ]);
    await checkpoint(res, settings);
    for (let run = 0; run < 2; run++) {
      const again = await redrive({ settings, clients: res.clients, transform: fixed() });
      expect(summary(again)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
      await checkpoint(res, settings);
    }
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@0']);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@1: amountCents -5 is negative',
      'payments~r1#0@1: idempotency key "K" is already claimed b',
    ]);
  });

  it('with the same payload: left as it is, never output beside the record that holds it', async () => {
    const settings = settingsFor({ idempotencyScope: 'partition' });
    // Rejects the record at offset 1 whatever it holds: its payload is offset 0's, so no digest tells them apart.
    const payments = paymentsTransform(jsonKind, { rejectNegative: true });
    const flaky: Transform = {
      ...payments,
      apply: (record) =>
        record.offset === 1 ? { kind: 'poison', error: 'flaky rejection' } : payments.apply(record),
    };
    const same = { id: 'p0', amountCents: 100, note: null };
    // The same Kafka key too: the digest covers key and value bytes.
    await stage(settings, flaky, [
      { ...payment(0, same, 'K'), key: 'kafka-key' },
      { ...payment(1, same, 'K'), key: 'kafka-key' },
    ]);
    const result = await redrive({ settings, clients: res.clients, transform: payments });
    expect(summary(result)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@0']);
  });
});

describe("a dead letter whose reason is the registry's refusal", () => {
  const glue = decoderKinds('http://registry.invalid').find((kind) => kind.name === 'Avro with Glue')!;
  const denied: DecoderKind = {
    ...glue,
    deps: {
      glueGetSchemaVersion: async () => {
        throw Object.assign(new Error('User is not authorized to perform glue:GetSchemaVersion'), {
          name: 'AccessDeniedException',
        });
      },
    },
  };

  it('stays while the registry refuses the same way, and is redriven once the registry answers', async () => {
    const settings = settingsFor();
    // The processor's own role could not read the schema: every record is that refusal's dead letter.
    await stageEvents(res.clients, settings, denied);
    await checkpoint(res, settings);
    const refusedRows = await committed(res, settings, 'deadletter');
    expect(refusedRows).toHaveLength(8);
    const again = await redrive({
      settings,
      clients: res.clients,
      transform: toTransform(paymentsDefinition(denied, { rejectNegative: true }), denied.deps),
    });
    expect(summary(again)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 8 }]);
    const answered = await redrive({
      settings,
      clients: res.clients,
      transform: paymentsTransform(glue, { rejectNegative: true }),
    });
    expect(answered.partitions.map((p) => [p.outcome, p.sent])).toEqual([['redriven', 8]]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual([
      'payments~r1#0@1',
      'payments~r1#0@2',
      'payments~r1#0@4',
      'payments~r1#0@5',
    ]);
  });
});
