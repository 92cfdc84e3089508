/**
 * Decoding cost per record: why `shared/decode/avro.ts` calls avro-js with a type parsed once per schema instead
 * of Powertools Kafka's Avro deserializer, which parses the schema again for every message. Run:
 * `npx tsx bench/decode.ts [records]`. Prints µs per record for each way, and whether the avro-js package root
 * (what Powertools imports) loads at all.
 */
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import avro from 'avro-js/lib/schemas.js';
import protobuf from 'protobufjs';
import { createFieldDecoder } from '../shared/decode/index.ts';

const records = Number(process.argv[2] ?? 20_000);
const schema = JSON.stringify({
  type: 'record',
  name: 'Payment',
  namespace: 'com.example.payments',
  fields: [
    { name: 'id', type: 'string' },
    { name: 'amountCents', type: 'long' },
    { name: 'currency', type: { type: 'enum', name: 'Currency', symbols: ['EUR', 'USD', 'GBP'] } },
    { name: 'note', type: ['null', 'string'], default: null },
  ],
});
const avroField = avro
  .createType(JSON.parse(schema))
  .toBuffer({ id: 'p-1', amountCents: 1250, currency: 'EUR', note: { string: 'lunch' } })
  .toString('base64');

function time(label: string, run: () => void): number {
  for (let i = 0; i < Math.min(1000, records); i++) run(); // warm-up
  const start = performance.now();
  for (let i = 0; i < records; i++) run();
  const perRecordUs = ((performance.now() - start) * 1000) / records;
  console.log(`${label.padEnd(64)} ${perRecordUs.toFixed(2).padStart(8)} µs/record`);
  return perRecordUs;
}

try {
  createRequire(import.meta.url)('avro-js');
  console.log('avro-js package root: loads');
} catch (error) {
  console.log(
    `avro-js package root (what Powertools Kafka imports): fails: ${(error as Error).message.split('\n')[0]}`,
  );
}

console.log(`\n${records} records each`);
const perMessage = time('Avro, schema parsed per message (as Powertools Kafka does)', () => {
  avro.createType(JSON.parse(schema)).fromBuffer(Buffer.from(avroField, 'base64'));
});
const cachedType = avro.createType(JSON.parse(schema));
const bare = time('Avro, type parsed once, bare avro-js fromBuffer', () => {
  cachedType.fromBuffer(Buffer.from(avroField, 'base64'));
});
const avroDecoder = createFieldDecoder({ format: 'avro', schema });
const ours = time('Avro, createFieldDecoder (type cached, checks, never throws)', () => {
  avroDecoder.decode(avroField);
});
console.log(
  `  per-message parsing costs ${(perMessage / ours).toFixed(1)}x ours; ours is ${(ours / bare).toFixed(2)}x bare`,
);

const proto =
  'syntax = "proto3"; package shop; message Order { string order_id = 1; int64 amount_cents = 2; }';
const type = protobuf.parse(proto, { keepCase: true }).root.lookupType('shop.Order');
const confluentProto = Buffer.concat([
  Buffer.from([0, 0, 0, 0, 21, 0]),
  type.encode(type.fromObject({ order_id: 'o-1', amount_cents: 42 })).finish(),
]).toString('base64');
time('Protobuf, bare protobufjs decode of the unframed bytes', () => {
  type.decode(Buffer.from(confluentProto, 'base64').subarray(6));
});
const protoDecoder = createFieldDecoder({
  format: 'protobuf',
  schema: proto,
  messageType: 'shop.Order',
  framing: 'confluent',
});
time('Protobuf, createFieldDecoder (Confluent framing + toObject)', () => {
  protoDecoder.decode(confluentProto);
});
