/**
 * Adversarial cases of `eos redrive`'s judgement (end-to-end property 5): a redrive run without a fix writes
 * nothing, a dead letter the ledger made is left alone only while the ledger would make it again, a registry that
 * refuses the redriver is never a reason to send, and records without an idempotency key follow the key setting.
 * Real DynamoDB Local and S3 server, the real processor, redriver and coordinator; a Confluent registry is a loopback
 * HTTP server. Each test says the interleaving it guards against and what would go wrong.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import type { Settings, SettingsInput } from '../../shared/config/settings.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import {
  RedriveRegistryUnavailableError,
  type RedriveResult,
  redrive,
} from '../../shared/redrive/redrive.ts';
import { toTransform } from '../../shared/transforms/adapter.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { checkpoint } from '../support/checkpoint-steps.ts';
import { mskEvent, type RecordSpec } from '../support/msk.ts';
import {
  AVRO_SCHEMA,
  CONFLUENT_SCHEMA_ID,
  committed,
  type DecoderKind,
  decoderKinds,
  jsonKind,
  type Payment,
  payment,
  paymentsDefinition,
  paymentsTransform,
  stageEvents,
  summary,
} from './payments.ts';

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('rdadv');
});

const strict = () => paymentsTransform(jsonKind, { rejectNegative: true });
const fixed = () => paymentsTransform(jsonKind, { rejectNegative: false });

function settingsFor(overrides: Partial<SettingsInput> = {}): Settings {
  return settingsIn(res, 'rdadv', overrides);
}

async function stage(settings: Settings, transform: Transform, events: RecordSpec[][]): Promise<void> {
  const processor = createProcessor({ settings, clients: res.clients, transform });
  for (const event of events) await processor.processEvent(mskEvent(event));
}

/**
 * `grow`: 99 text fields of 1 KB named after the record on the state key `customer`, and one add to `n` (about
 * 100 KB more each time); four fill the item to just under 400 KB, a fifth is the state-size dead letter. `small`:
 * the fixed transform of a growth: only the add.
 */
function growing(fixedGrowth: boolean): Transform {
  return {
    name: 'growing',
    apply(record) {
      const fields: Record<string, string> = {};
      if (!fixedGrowth) for (let i = 0; i < 99; i++) fields[`r${record.offset}f${i}`] = 'v'.repeat(1000);
      return {
        kind: 'ok',
        rows: [{ offset: record.offset }],
        state: [{ key: 'customer', fields, add: { n: 1 } }],
      };
    },
  };
}

const grow = (offset: number): RecordSpec => ({
  partition: 0,
  offset,
  value: 'grow',
  headers: { 'idempotency-key': `k-${offset}` },
});

describe('a state-size dead letter', () => {
  async function withStateSizeDeadLetter(): Promise<Settings> {
    const settings = settingsFor();
    await stage(settings, growing(false), [[0, 1, 2, 3].map(grow), [grow(4)]]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'orders#0@4: state item "customer" would grow past Dy',
    ]);
    return settings;
  }

  // Run without a fix, the transform accepts the record; were it sent, the processor would meet the same full item
  // in the redrive lane and dead-letter it again, in a new round on every run: each run without a fix would commit
  // one more dead letter. The redriver judges it against the item as stored, which never shrinks.
  it('a redrive run twice without a fix writes nothing', async () => {
    const settings = await withStateSizeDeadLetter();
    const runs: RedriveResult[] = [];
    for (let run = 0; run < 2; run++) {
      runs.push(await redrive({ settings, clients: res.clients, transform: growing(false) }));
      await checkpoint(res, settings);
    }
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'orders#0@4: state item "customer" would grow past Dy',
    ]);
    expect(runs.flatMap(summary)).toEqual([
      { outcome: 'nothing', sent: 0, unchanged: 1 },
      { outcome: 'nothing', sent: 0, unchanged: 1 },
    ]);
  });

  it('a transform that no longer grows the item outputs the record once, and a second run sends nothing', async () => {
    const settings = await withStateSizeDeadLetter();
    const first = await redrive({ settings, clients: res.clients, transform: growing(true) });
    expect(first.partitions.map((p) => [p.outcome, p.sent, p.staged.output])).toEqual([['redriven', 1, 1]]);
    await checkpoint(res, settings);
    const again = await redrive({ settings, clients: res.clients, transform: growing(true) });
    expect(summary(again)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 0 }]);
    await checkpoint(res, settings);
    expect((await committed(res, settings, 'output')).filter((at) => at.startsWith('orders~r'))).toEqual([
      'orders~r1#0@4',
    ]);
  });
});

describe('a key-conflict dead letter', () => {
  // Offset 1 (key K) is output; offset 2 (key K, another payload) is its conflict. Once K's claim has expired (the
  // idempotency TTL), nothing holds K and the processor would stage offset 2: judged from the reason's text ("the
  // same key again") rather than from K's claim, no redrive would ever output the record.
  it('whose key no live claim holds any more (expired) is output by a redrive', async () => {
    const settings = settingsFor();
    await stage(settings, strict(), [
      [
        payment(1, { id: 'p1', amountCents: 200, note: null }, 'K'),
        payment(2, { id: 'p2', amountCents: 300, note: null }, 'K'),
      ],
    ]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@2: idempotency key "K" is already claimed b',
    ]);
    const sameTime = await redrive({ settings, clients: res.clients, transform: strict() });
    expect(summary(sameTime)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
    // A day past the TTL: K's claim has expired.
    const later = { now: () => Date.now() + (settings.idempotencyTtlSeconds + 86_400) * 1000 };
    const result = await redrive({ settings, clients: res.clients, transform: strict(), clock: later });
    await checkpoint(res, settings);
    expect(summary(result)).toEqual([{ outcome: 'redriven', sent: 1, unchanged: 0 }]);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@1', 'payments~r1#0@2']);
  });

  it('whose claimant was output stays as it is under the same transform, twice', async () => {
    const settings = settingsFor();
    await stage(settings, strict(), [
      [
        payment(0, { id: 'p0', amountCents: 100, note: null }, 'K'),
        payment(1, { id: 'p1', amountCents: 200, note: null }, 'K'),
      ],
    ]);
    await checkpoint(res, settings);
    for (let run = 0; run < 2; run++) {
      const result = await redrive({ settings, clients: res.clients, transform: fixed() });
      expect(summary(result)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
      await checkpoint(res, settings);
    }
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@0']);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@1: idempotency key "K" is already claimed b',
    ]);
  });
});

describe('a key-conflict dead letter with a long key', () => {
  /** Keys of 992 characters: the conflict's reason is cut at 1,000 characters, inside the key. */
  const long = 'x'.repeat(990);
  const buggyKey = (p: Payment) => `${long}-${Number(p.id.slice(1)) % 6}`;
  const fixedKey = (p: Payment) => `${long}-${p.id.slice(1)}`;

  // A reason over 1,000 characters is kept cut (ending in "…"): taken as a prefix, the cut text would match a fixed
  // key that differs from the old one only past the kept part. Offset 7 (whose buggy key reused offset 1's) now has
  // its own key, held by no record: it must be sent and output, not left as "fails again for the same reason".
  it('whose key the fix changed past the kept part of the reason is sent and output once', async () => {
    const settings = settingsFor({ idempotencyKey: 'transform' });
    const keyed = (keyOf: (p: Payment) => string) =>
      paymentsTransform(jsonKind, { rejectNegative: true, keyOf });
    await stage(settings, keyed(buggyKey), [
      [
        payment(1, { id: 'p1', amountCents: 100, note: null }),
        payment(7, { id: 'p7', amountCents: 700, note: null }),
      ],
    ]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      `payments#0@7: idempotency key "${long.slice(0, 23)}`,
    ]);
    const result = await redrive({ settings, clients: res.clients, transform: keyed(fixedKey) });
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@1', 'payments~r1#0@7']);
    expect(summary(result)).toEqual([{ outcome: 'redriven', sent: 1, unchanged: 0 }]);
  });
});

describe('a fixed record whose key an earlier record holds with another payload', () => {
  /** Offset 0 (key K) is output; offset 1 (key K, another payload) is rejected by the strict transform. */
  async function withRejectedSameKey(overrides: Partial<SettingsInput>): Promise<Settings> {
    const settings = settingsFor(overrides);
    await stage(settings, strict(), [
      [
        payment(0, { id: 'p0', amountCents: 100, note: null }, 'K'),
        payment(1, { id: 'p1', amountCents: -5, note: null }, 'K'),
      ],
    ]);
    await checkpoint(res, settings);
    return settings;
  }

  it('global scope: it becomes one key-conflict dead letter in the round, and a second run sends nothing', async () => {
    const settings = await withRejectedSameKey({});
    const first = await redrive({ settings, clients: res.clients, transform: fixed() });
    expect(first.partitions.map((p) => [p.sent, p.staged.output, p.staged.deadLettered])).toEqual([
      [1, 0, 1],
    ]);
    await checkpoint(res, settings);
    const again = await redrive({ settings, clients: res.clients, transform: fixed() });
    expect(summary(again)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@0']);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@1: amountCents -5 is negative',
      'payments~r1#0@1: idempotency key "K" is already claimed b',
    ]);
  });

  // With partition scope a record the fixed transform accepts, whose key an earlier record holds with ANOTHER payload
  // (the digest the window keeps tells), gets its new reason as under global scope: a key-conflict dead letter in
  // the round, not "fails again for the same reason" with a reason the current transform no longer gives. Sending
  // it as it is would be worse: the round lane's own window is empty, so it would be output next to offset 0.
  it('partition scope: it becomes one key-conflict dead letter in the round, as under global scope', async () => {
    const settings = await withRejectedSameKey({ idempotencyScope: 'partition' });
    const first = await redrive({ settings, clients: res.clients, transform: fixed() });
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@0']);
    expect(first.partitions.map((p) => [p.sent, p.unchanged])).toEqual([[1, 0]]);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@1: amountCents -5 is negative',
      'payments~r1#0@1: idempotency key "K" is already claimed b',
    ]);
  });
});

describe('a registry that refuses the redriver', () => {
  const ORIGINAL = [
    'payments#0@0: amountCents -500 is negative',
    'payments#0@3: amountCents -700 is negative',
    'payments#0@6: state field "label" of "labels" is not a',
    'payments#0@7: idempotency key "pay-1" is already claim',
  ];

  /** Runs a redrive with `transform`, which must stop (as `eos redrive` exits 3), and reports what is committed. */
  async function redriveWith(settings: Settings, transform: Transform): Promise<string[]> {
    await expect(redrive({ settings, clients: res.clients, transform })).rejects.toThrow(
      RedriveRegistryUnavailableError,
    );
    await checkpoint(res, settings);
    return committed(res, settings, 'deadletter');
  }

  // The operator's credentials lack glue:GetSchemaVersion (the Lambda's role has it). Glue answers
  // AccessDeniedException, which the decoder takes as a refusal about the schema id: each registry-decoded record
  // would be judged "Glue answered AccessDeniedException", a reason none of the dead letters has. Sent, every one
  // would be dead-lettered again in round 1 with rows naming the operator's permissions, and a run with the right
  // credentials would send them all again: two rounds of new dead letters for a run that fixed nothing.
  it('Glue refusing the redriver (AccessDenied) sends nothing and commits no dead letter', async () => {
    const glue = decoderKinds('http://registry.invalid').find((kind) => kind.name === 'Avro with Glue')!;
    const settings = settingsFor();
    await stageEvents(res.clients, settings, glue);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'deadletter')).toEqual(ORIGINAL);
    const denied = toTransform(paymentsDefinition(glue, { rejectNegative: true }), {
      glueGetSchemaVersion: async () => {
        throw Object.assign(new Error('User is not authorized to perform glue:GetSchemaVersion'), {
          name: 'AccessDeniedException',
        });
      },
    });
    expect(await redriveWith(settings, denied)).toEqual(ORIGINAL);
  });

  // The same with a Confluent registry that answers 401 to the redriver (its credentials are not the Lambda's): any
  // 4xx but 404, 408 and 429 is a refusal, never a reason to send.
  it('a Confluent registry answering 401 to the redriver sends nothing and commits no dead letter', async () => {
    let refusing = false;
    const server = createServer((request, response) => {
      const body = refusing
        ? { status: 401, json: { error_code: 40101, message: 'Unauthorized' } }
        : request.url === `/schemas/ids/${CONFLUENT_SCHEMA_ID}`
          ? { status: 200, json: { schema: AVRO_SCHEMA } }
          : { status: 404, json: { error_code: 40403, message: 'Schema not found' } };
      response.writeHead(body.status, { 'content-type': 'application/json' }).end(JSON.stringify(body.json));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const confluent: DecoderKind = decoderKinds(url).find(
        (kind) => kind.name === 'Avro with a Confluent registry',
      )!;
      const settings = settingsFor();
      await stageEvents(res.clients, settings, confluent);
      await checkpoint(res, settings);
      expect(await committed(res, settings, 'deadletter')).toEqual(ORIGINAL);
      refusing = true;
      expect(await redriveWith(settings, paymentsTransform(confluent, { rejectNegative: true }))).toEqual(
        ORIGINAL,
      );
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('a record without an idempotency key', () => {
  /** Offset 0 has no idempotency-key header (dead-lettered by default); offset 1 has one. */
  async function withMissingKey(): Promise<Settings> {
    const settings = settingsFor();
    await stage(settings, strict(), [
      [
        payment(0, { id: 'p0', amountCents: 100, note: null }),
        payment(1, { id: 'p1', amountCents: 1, note: null }, 'k1'),
      ],
    ]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@0: no idempotency key: header:idempotency-k',
    ]);
    return settings;
  }

  it('stays as it is while the key setting is unchanged, however often redrive runs', async () => {
    const settings = await withMissingKey();
    for (let run = 0; run < 2; run++) {
      const result = await redrive({ settings, clients: res.clients, transform: fixed() });
      expect(summary(result)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 1 }]);
      await checkpoint(res, settings);
    }
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@0: no idempotency key: header:idempotency-k',
    ]);
  });

  it('is output once when redriven with missingIdempotencyKey offset-only, and a second run sends nothing', async () => {
    const settings = await withMissingKey();
    const offsetOnly: Settings = { ...settings, missingIdempotencyKey: 'offset-only' };
    const first = await redrive({ settings: offsetOnly, clients: res.clients, transform: fixed() });
    expect(first.partitions.map((p) => [p.sent, p.staged.output])).toEqual([[1, 1]]);
    await checkpoint(res, settings);
    const again = await redrive({ settings: offsetOnly, clients: res.clients, transform: fixed() });
    expect(summary(again)).toEqual([{ outcome: 'nothing', sent: 0, unchanged: 0 }]);
    await checkpoint(res, settings);
    expect(await committed(res, settings, 'output')).toEqual(['payments#0@1', 'payments~r1#0@0']);
  });

  it('under another key source that also finds nothing, gets one dead letter with the new reason, once', async () => {
    const settings = await withMissingKey();
    const otherSource: Settings = { ...settings, idempotencyKey: { kind: 'header', name: 'request-id' } };
    for (let run = 0; run < 2; run++) {
      await redrive({ settings: otherSource, clients: res.clients, transform: fixed() });
      await checkpoint(res, settings);
    }
    expect(await committed(res, settings, 'deadletter')).toEqual([
      'payments#0@0: no idempotency key: header:idempotency-k',
      'payments~r1#0@0: no idempotency key: header:request-id fo',
    ]);
  });
});
