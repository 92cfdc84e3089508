/**
 * `eos encode`: test input for a transform that reads Avro or Protobuf. It reads JSON lines of records as
 * `eos local --input` takes them, except that `value` is the JSON to encode (an object, or null for a tombstone),
 * and writes the same lines with `valueBase64` instead: the bytes a producer's serializer would send, bare or in
 * a Confluent or Glue registry's framing (`local/encode.ts`). Everything else on a line is kept as it is.
 *
 *   eos encode --schema payment.avsc --framing confluent --schema-id 2 < payments.json > input.jsonl
 */
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { createInterface } from 'node:readline';
import { type Command, Option } from 'commander';
import { createEncoder, EncodeInputError, type EncoderSpec, type FramingSpec } from '../local/encode.ts';
import { OptionError } from '../local/errors.ts';
import { integer } from './options.ts';

export interface EncodeDependencies {
  readonly input?: AsyncIterable<string>;
  readonly write?: (text: string) => void;
}

interface RawOptions {
  schema: string;
  format?: 'avro' | 'protobuf';
  messageType?: string;
  framing: 'none' | 'confluent' | 'glue';
  schemaId?: number;
  schemaVersionId?: string;
  input?: string;
}

function encoderSpec(raw: RawOptions): EncoderSpec {
  const format = raw.format ?? (extname(raw.schema) === '.proto' ? 'protobuf' : 'avro');
  let text: string;
  try {
    text = readFileSync(raw.schema, 'utf8');
  } catch (error) {
    throw new OptionError('--schema', `cannot read ${raw.schema}: ${(error as NodeJS.ErrnoException).code}`);
  }
  if (format === 'avro') return { format, schema: text };
  if (!raw.messageType) throw new OptionError('--message-type', 'required for a .proto schema');
  return { format, schema: text, messageType: raw.messageType };
}

/** One input line encoded: the same record with `valueBase64` for `value`. */
function encodeLine(line: string, encode: (value: unknown) => Buffer): string {
  let record: unknown;
  try {
    record = JSON.parse(line);
  } catch {
    throw new EncodeInputError('not JSON');
  }
  if (record === null || typeof record !== 'object' || Array.isArray(record) || !('value' in record))
    throw new EncodeInputError('needs "value", the JSON to encode (null for a tombstone)');
  const { value, ...rest } = record as { value: unknown };
  return JSON.stringify({ ...rest, valueBase64: value === null ? null : encode(value).toString('base64') });
}

async function* linesOf(file: string | undefined): AsyncIterable<string> {
  const stream = file === undefined ? process.stdin : (await import('node:fs')).createReadStream(file);
  yield* createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY });
}

export function registerEncodeCommand(program: Command, deps: EncodeDependencies = {}): Command {
  return program
    .command('encode')
    .description(
      'turn JSON lines of records (value: the JSON to encode) into eos local input with valueBase64: Avro or Protobuf, bare or in a Confluent or Glue framing',
    )
    .requiredOption('--schema <file>', 'the Avro schema (.avsc, JSON) or the .proto file')
    .addOption(
      new Option(
        '--format <format>',
        'the schema language (default: protobuf for .proto, else avro)',
      ).choices(['avro', 'protobuf']),
    )
    .option('--message-type <name>', 'Protobuf: the fully qualified message to encode')
    .addOption(
      new Option('--framing <framing>', 'none (bare bytes), or as a registry serializer writes them')
        .choices(['none', 'confluent', 'glue'])
        .default('none'),
    )
    .option('--schema-id <n>', 'Confluent framing: the registry schema id', integer(0, 0xffffffff))
    .option('--schema-version-id <uuid>', 'Glue framing: the schema version id')
    .option('--input <file>', 'the JSON lines to encode (default: standard input)')
    .action(async (raw: RawOptions) => {
      const framing: FramingSpec = {
        framing: raw.framing,
        ...(raw.schemaId === undefined ? {} : { schemaId: raw.schemaId }),
        ...(raw.schemaVersionId === undefined ? {} : { schemaVersionId: raw.schemaVersionId }),
      };
      let encode: (value: unknown) => Buffer;
      try {
        encode = createEncoder(encoderSpec(raw), framing);
      } catch (error) {
        if (error instanceof EncodeInputError) throw new OptionError('--schema', error.message);
        throw error;
      }
      const write = deps.write ?? ((text: string) => process.stdout.write(text));
      let number = 0;
      for await (const line of deps.input ?? linesOf(raw.input)) {
        number++;
        if (line.trim() === '') continue;
        try {
          write(`${encodeLine(line, encode)}\n`);
        } catch (error) {
          if (!(error instanceof EncodeInputError)) throw error;
          throw new OptionError(raw.input ?? 'standard input', `line ${number}: ${error.message}`);
        }
      }
    });
}
