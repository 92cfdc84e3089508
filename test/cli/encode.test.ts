/**
 * `eos encode`: JSON lines in, eos local input out, the values encoded as a producer's serializer would send them.
 * Each framing is checked by decoding the output with the processor's own decoders (a Glue registry's local
 * schemas check the schema version id and Protobuf's message index too); bad input is one line and exit 2.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main } from '../../cli/eos.ts';
import type { FieldFormat } from '../../shared/decode/formats.ts';
import { createFieldDecoder } from '../../shared/decode/index.ts';

const dir = mkdtempSync(join(tmpdir(), 'eos-encode-'));
const AVSC = join(dir, 'reading.avsc');
writeFileSync(
  AVSC,
  JSON.stringify({
    type: 'record',
    name: 'Reading',
    fields: [
      { name: 'sensorId', type: 'string' },
      { name: 'celsius', type: 'double' },
    ],
  }),
);
const PROTO_TEXT = `syntax = "proto3";
package iot;
message Envelope { string source = 1; }
message Reading {
  string sensorId = 1;
  double celsius = 2;
  message Note { string text = 1; }
}
`;
const PROTO = join(dir, 'reading.proto');
writeFileSync(PROTO, PROTO_TEXT);
const UUID = '0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0';

const RECORDS = [
  { partition: 0, key: 's-1', value: { sensorId: 's-1', celsius: 21.5 }, headers: { site: 'lab' } },
  { partition: 1, key: 's-2', value: { sensorId: 's-2', celsius: -4 }, timestamp: 1796029260000 },
  { partition: 1, key: 's-2', value: null },
];

async function eos(args: readonly string[], lines: readonly string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const input = (async function* () {
    yield* lines;
  })();
  const code = await main(
    ['node', 'eos', 'encode', ...args],
    { encode: { input, write: (t) => out.push(t) } },
    { writeError: (t) => err.push(t), writeOut: (t) => out.push(t) },
  );
  return { code, out: out.join(''), err: err.join('') };
}

/** Encodes RECORDS with `args`, checks every other field is kept, and decodes each value with `format`. */
async function roundTrip(args: readonly string[], format: FieldFormat): Promise<Buffer[]> {
  const { code, out, err } = await eos(
    args,
    RECORDS.map((r) => JSON.stringify(r)),
  );
  expect(err).toBe('');
  expect(code).toBe(0);
  const lines = out
    .trimEnd()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines).toHaveLength(RECORDS.length);
  const decoder = createFieldDecoder(format);
  const fields = lines.map((l) => l.valueBase64 as string | null);
  await decoder.prepare(fields);
  for (const [i, line] of lines.entries()) {
    const { value, ...rest } = RECORDS[i]!;
    expect(line).toEqual({ ...rest, valueBase64: line.valueBase64 });
    const decoded = decoder.decode(fields[i]!);
    expect(decoded).toEqual({ ok: true, value: value === null ? null : expect.objectContaining(value) });
  }
  expect(fields[2]).toBeNull();
  return fields.slice(0, 2).map((f) => Buffer.from(f!, 'base64'));
}

describe('eos encode', () => {
  it('writes bare Avro the processor decodes with the schema', async () => {
    const avro = readSchema(AVSC);
    const bytes = await roundTrip(['--schema', AVSC], { format: 'avro', schema: avro });
    expect(bytes[0]![0]).not.toBe(0x00);
  });

  it('writes Confluent-framed Avro: 0x00, the schema id, the Avro binary', async () => {
    const avro = readSchema(AVSC);
    const bytes = await roundTrip(['--schema', AVSC, '--framing', 'confluent', '--schema-id', '258'], {
      format: 'avro',
      schema: avro,
      framing: 'confluent',
    });
    expect([...bytes[0]!.subarray(0, 5)]).toEqual([0x00, 0, 0, 1, 2]);
  });

  it('writes Glue-framed Avro the processor resolves by its schema version id', async () => {
    const avro = readSchema(AVSC);
    const bytes = await roundTrip(['--schema', AVSC, '--framing', 'glue', '--schema-version-id', UUID], {
      format: 'avro',
      registry: { kind: 'glue', schemas: { [UUID]: avro } },
    });
    expect(bytes[0]!.subarray(2, 18).toString('hex')).toBe(UUID.replaceAll('-', ''));
  });

  it('writes Protobuf with the message index each registry expects', async () => {
    const message = ['--schema', PROTO, '--message-type', 'iot.Reading'];
    // Glue: the plain varint index among every message of the file sorted by full name (Envelope, Reading,
    // Reading.Note): 1. The registry's local schema makes the decoder check it names iot.Reading.
    const glue = await roundTrip([...message, '--framing', 'glue', '--schema-version-id', UUID], {
      format: 'protobuf',
      messageType: 'iot.Reading',
      registry: { kind: 'glue', schemas: { [UUID]: PROTO_TEXT } },
    });
    expect(glue[0]![18]).toBe(1);
    // Confluent: Reading is the second top-level message: count 1, index 1, zigzag varints.
    const confluent = await roundTrip([...message, '--framing', 'confluent', '--schema-id', '3'], {
      format: 'protobuf',
      messageType: 'iot.Reading',
      schema: PROTO_TEXT,
      framing: 'confluent',
    });
    expect([...confluent[0]!.subarray(0, 7)]).toEqual([0x00, 0, 0, 0, 3, 2, 2]);
    // The file's first message is the single 0x00.
    const first = await eos(
      ['--schema', PROTO, '--message-type', 'iot.Envelope', '--framing', 'confluent', '--schema-id', '3'],
      [JSON.stringify({ partition: 0, key: null, value: { source: 'x' } })],
    );
    const bytes = Buffer.from(JSON.parse(first.out).valueBase64 as string, 'base64');
    expect([...bytes.subarray(0, 6)]).toEqual([0x00, 0, 0, 0, 3, 0x00]);
  });

  it.each([
    [
      ['--schema', AVSC],
      ['{"partition":0,"key":null,"value":{"sensorId":"s"}}'],
      'standard input: line 1: the value does not match the Avro schema',
    ],
    [['--schema', AVSC], ['', 'not json'], 'standard input: line 2: not JSON'],
    [
      ['--schema', AVSC],
      ['{"partition":0}'],
      'standard input: line 1: needs "value", the JSON to encode (null for a tombstone)',
    ],
    [
      ['--schema', AVSC, '--framing', 'confluent'],
      [],
      '--schema: Confluent framing needs --schema-id, an integer from 0 to 4294967295',
    ],
    [
      ['--schema', AVSC, '--framing', 'glue', '--schema-version-id', 'x'],
      [],
      '--schema: Glue framing needs --schema-version-id, a UUID',
    ],
    [['--schema', PROTO], [], '--message-type: required for a .proto schema'],
    [['--schema', PROTO, '--message-type', 'iot.Nope'], [], '--schema: the .proto has no message iot.Nope'],
    [
      ['--schema', join(dir, 'missing.avsc')],
      [],
      `--schema: cannot read ${join(dir, 'missing.avsc')}: ENOENT`,
    ],
  ])('refuses %j with exit 2 and one line', async (args, lines, message) => {
    const { code, err } = await eos(args, lines);
    expect(code).toBe(2);
    expect(err).toBe(`error: ${message}\n`);
  });
});

function readSchema(file: string): string {
  return readFileSync(file, 'utf8');
}
