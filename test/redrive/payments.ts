/**
 * The redrive tests' scenario, for every way a transform decodes values: a `payments` transform that rejects a
 * negative `amountCents`, run by the real processor over real encoded bytes (JSON, Avro and Protobuf with a local
 * schema, Avro through a Confluent registry served over loopback HTTP, Avro through Glue by the decoder's
 * injectable `GetSchemaVersion`), committed by a real checkpoint.
 *
 * The input (partition 0 of `payments`), two events:
 * - offsets 0–5: offsets 0 and 3 are negative (the transform's dead letters); offset 2 sets the text state field
 *   `label` of `labels`;
 * - offsets 6–7: offset 6 adds to `label` (the ledger's dead letter: a state field set as text), offset 7 reuses
 *   offset 1's idempotency key with another payload (the ledger's dead letter: a key conflict).
 */
import type { AwsClients } from '../../shared/aws/clients.ts';
import type { Settings } from '../../shared/config/settings.ts';
// Installs the Avro and Protobuf codecs, as a user module's processor has them.
import '../../shared/decode/index.ts';
import type { FieldFormat } from '../../shared/decode/index.ts';
import type { MskRecord } from '../../shared/kafka/event.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import type { RedriveResult } from '../../shared/redrive/redrive.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { type AdapterDependencies, toTransform } from '../../shared/transforms/adapter.ts';
import { defineTransform, RejectRecord, type StateDelta } from '../../shared/transforms/api.ts';
import type { Transform } from '../../shared/transforms/types.ts';
import {
  avroBytes,
  fixture,
  glue,
  protoBytes,
  confluent as withConfluentFraming,
} from '../fixtures/decode/wire.ts';
import type { TestResources } from '../support/aws.ts';
import { mskEventOf, type RecordSpec, signedBytes } from '../support/msk.ts';

export const TOPIC = 'payments';
export const AVRO_SCHEMA = fixture('payment.avsc');
const PROTO = fixture('orders.proto');
export const CONFLUENT_SCHEMA_ID = 1;
export const GLUE_VERSION_ID = '6f1d7a64-5b43-4f2a-9a53-2d9b1c0e4a11';

export interface Payment {
  readonly id: string;
  readonly amountCents: number;
  /** `set` sets the text state field `label`; `add` adds to it. */
  readonly note: string | null;
}

/** How one decoder kind writes a payment's bytes and reads the decoded value back as a payment. */
export interface DecoderKind {
  readonly name: string;
  readonly value: FieldFormat;
  /** What the decoders reach outside through (the Glue lookup). */
  readonly deps?: AdapterDependencies;
  encode(payment: Payment): Buffer;
  read(value: unknown): Payment;
}

const avroPayment = (p: Payment) => ({
  id: p.id,
  amountCents: p.amountCents,
  currency: 'USD',
  note: p.note === null ? null : { string: p.note },
});

function readAvro(value: unknown): Payment {
  const v = value as { id: string; amountCents: number; note: { string: string } | string | null };
  const note = typeof v.note === 'object' && v.note !== null ? v.note.string : v.note;
  return { id: v.id, amountCents: Number(v.amountCents), note };
}

/** Every decoder kind; the Confluent one reads the registry at `registryUrl`. */
export function decoderKinds(registryUrl: string): DecoderKind[] {
  return [
    {
      name: 'JSON',
      value: { format: 'json' },
      encode: (p) => Buffer.from(JSON.stringify(p)),
      read: (value) => value as Payment,
    },
    {
      name: 'Avro with a local schema',
      value: { format: 'avro', schema: AVRO_SCHEMA },
      encode: (p) => avroBytes(AVRO_SCHEMA, avroPayment(p)),
      read: readAvro,
    },
    {
      name: 'Protobuf with a local schema',
      value: { format: 'protobuf', schema: PROTO, messageType: 'shop.v1.Order' },
      encode: (p) =>
        protoBytes(PROTO, 'shop.v1.Order', {
          order_id: p.id,
          amount_cents: p.amountCents,
          items: p.note === null ? [] : [{ sku: p.note, quantity: 1 }],
        }),
      read: (value) => {
        const v = value as { order_id: string; amount_cents: string; items: { sku: string }[] };
        return { id: v.order_id, amountCents: Number(v.amount_cents), note: v.items[0]?.sku ?? null };
      },
    },
    {
      name: 'Avro with a Confluent registry',
      value: { format: 'avro', registry: { kind: 'confluent', url: registryUrl, timeoutMs: 2_000 } },
      encode: (p) => withConfluentFraming(CONFLUENT_SCHEMA_ID, avroBytes(AVRO_SCHEMA, avroPayment(p))),
      read: readAvro,
    },
    {
      name: 'Avro with Glue',
      value: { format: 'avro', registry: { kind: 'glue', registryName: 'payments' } },
      deps: {
        glueGetSchemaVersion: async (id) =>
          id === GLUE_VERSION_ID ? { schemaDefinition: AVRO_SCHEMA, dataFormat: 'AVRO' } : undefined,
      },
      encode: (p) => glue(GLUE_VERSION_ID, avroBytes(AVRO_SCHEMA, avroPayment(p))),
      read: readAvro,
    },
  ];
}

export interface Rules {
  /** Reject negative amounts (the strict transform); false: the fixed one accepts them. */
  readonly rejectNegative: boolean;
  /** Add to the text field `label` for a note `add` (true: what makes the ledger's dead letter). */
  readonly addToLabel?: boolean;
  /** The idempotency key the transform returns (for the `transform` key source); none by default. */
  readonly keyOf?: (payment: Payment) => string;
}

/** The payments transform's definition for `kind`, as a user's module would export it. */
export function paymentsDefinition(kind: Pick<DecoderKind, 'value' | 'read'>, rules: Rules) {
  return defineTransform<unknown>({
    name: 'payments',
    value: kind.value,
    schema: { id: 'string', amountCents: 'long' },
    transform({ value }) {
      const payment = kind.read(value);
      if (rules.rejectNegative && payment.amountCents < 0) {
        throw new RejectRecord(`amountCents ${payment.amountCents} is negative`);
      }
      const state: StateDelta[] = [];
      if (payment.note === 'set') state.push({ key: 'labels', fields: { label: 'text' }, add: {} });
      if (payment.note === 'add') {
        state.push(
          (rules.addToLabel ?? true)
            ? { key: 'labels', fields: {}, add: { label: 1 } }
            : { key: 'labels', fields: {}, add: { adds: 1 } },
        );
      }
      const rows = [{ id: payment.id, amountCents: payment.amountCents }];
      return rules.keyOf === undefined
        ? { rows, state }
        : { rows, state, idempotencyKey: rules.keyOf(payment) };
    },
  });
}

/**
 * A fresh instance of the payments transform for `kind`, as a new process would load it: nothing prepared, no
 * registry schema cached.
 */
export function paymentsTransform(kind: DecoderKind, rules: Rules): Transform {
  return toTransform(paymentsDefinition(kind, rules), kind.deps);
}

interface Sent {
  readonly offset: number;
  readonly key: string;
  readonly payment: Payment;
}

export const FIRST_EVENT: readonly Sent[] = [
  { offset: 0, key: 'pay-0', payment: { id: 'p0', amountCents: -500, note: null } },
  { offset: 1, key: 'pay-1', payment: { id: 'p1', amountCents: 1000, note: null } },
  { offset: 2, key: 'pay-2', payment: { id: 'p2', amountCents: 2000, note: 'set' } },
  { offset: 3, key: 'pay-3', payment: { id: 'p3', amountCents: -700, note: null } },
  { offset: 4, key: 'pay-4', payment: { id: 'p4', amountCents: 4000, note: null } },
  { offset: 5, key: 'pay-5', payment: { id: 'p5', amountCents: 5000, note: null } },
];

export const SECOND_EVENT: readonly Sent[] = [
  { offset: 6, key: 'pay-6', payment: { id: 'p6', amountCents: 6000, note: 'add' } },
  { offset: 7, key: 'pay-1', payment: { id: 'p7', amountCents: 7000, note: null } },
];

function mskRecordOf(kind: DecoderKind, sent: Sent): MskRecord {
  return {
    topic: TOPIC,
    partition: 0,
    offset: sent.offset,
    timestamp: 1764374400000 + sent.offset,
    timestampType: 'CREATE_TIME',
    key: Buffer.from(`k-${sent.offset}`).toString('base64'),
    value: kind.encode(sent.payment).toString('base64'),
    headers: [{ 'idempotency-key': signedBytes(Buffer.from(sent.key)) }],
  };
}

/** Stages `events` with the strict transform through the real processor (one processor, as one container). */
export async function stageEvents(
  clients: AwsClients,
  settings: Settings,
  kind: DecoderKind,
  rules: Rules = { rejectNegative: true },
): Promise<void> {
  const transform = paymentsTransform(kind, rules);
  const processor = createProcessor({ settings, clients, transform });
  for (const event of [FIRST_EVENT, SECOND_EVENT]) {
    await processor.processEvent(
      mskEventOf({ [`${TOPIC}-0`]: event.map((sent) => mskRecordOf(kind, sent)) }),
    );
  }
}

/** The payments in JSON: no registry, no schema. */
export const jsonKind: DecoderKind = decoderKinds('http://registry.invalid').find(
  (kind) => kind.name === 'JSON',
)!;

/** A payment of the `payments` topic, with `key` as its idempotency-key header (none: no header). */
export function payment(offset: number, p: Payment, key?: string, partition = 0): RecordSpec {
  return {
    topic: TOPIC,
    partition,
    offset,
    value: JSON.stringify(p),
    ...(key === undefined ? {} : { headers: { 'idempotency-key': key } }),
  };
}

/** Committed rows of `stream` as `lane#partition@offset` (dead letters with the start of their reason). */
export async function committed(
  res: TestResources,
  settings: Settings,
  stream: 'output' | 'deadletter',
): Promise<string[]> {
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

/** What a redrive run did per partition: its outcome, what it sent and what it left unchanged. */
export function summary(result: RedriveResult) {
  return result.partitions.map((p) => ({ outcome: p.outcome, sent: p.sent, unchanged: p.unchanged }));
}
