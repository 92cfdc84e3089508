/**
 * Input for `eos local --input FILE.jsonl`: one record per line, appended to the topic in file order (a record's
 * offset is its position within its partition):
 *
 * ```
 * {"partition": int,
 *  "key": string|null      | "keyBase64": base64|null,     (exactly one of the two)
 *  "value": string|null    | "valueBase64": base64|null,   (exactly one of the two; null is a tombstone)
 *  "headers"?: {name: string | [byte, …]},
 *  "timestamp"?: epoch ms}
 * ```
 * `key`/`value` are text, sent as their UTF-8 bytes; `keyBase64`/`valueBase64` are the exact bytes (an Avro or
 * Protobuf encoding, with its registry framing). A header is text (sent as UTF-8) or its exact bytes as an array
 * of byte values (-128..255, as the MSK event carries them). Without `timestamp` the record gets the log's clock.
 * Everything is checked before anything runs; an error names the file and the line.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { InputFileError } from './errors.ts';
import type { HeaderValue } from './kafka-log.ts';

/** A record to append to the topic. */
export interface InputRecord {
  readonly partition: number;
  /** Text (sent as UTF-8), or the exact bytes of a `keyBase64` field. */
  readonly key: string | Uint8Array | null;
  /** null: a tombstone. Text (sent as UTF-8), or the exact bytes of a `valueBase64` field. */
  readonly value: string | Uint8Array | null;
  readonly headers: Readonly<Record<string, HeaderValue>>;
  /** Epoch ms; absent: the log's clock when appended. */
  readonly timestamp?: number;
}

/** Standard base64 with padding, as `Buffer.toString('base64')` writes it (Buffer.from accepts far more). */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const base64 = z.string().regex(BASE64, 'not standard base64 (A-Z a-z 0-9 + /, padded with =)');

const lineSchema = z
  .object({
    partition: z.number().int().nonnegative(),
    key: z.string().nullable().optional(),
    keyBase64: base64.nullable().optional(),
    value: z.string().nullable().optional(),
    valueBase64: base64.nullable().optional(),
    headers: z
      .record(z.string(), z.union([z.string(), z.array(z.number().int().min(-128).max(255))]))
      .optional(),
    timestamp: z.number().int().nonnegative().optional(),
  })
  .strict();

type Line = z.infer<typeof lineSchema>;

function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0]!;
  const field = issue.path.length > 0 ? `"${issue.path.join('.')}"` : 'the line';
  if (issue.code === 'unrecognized_keys')
    return `unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
  return `${field}: ${issue.message}`;
}

/** One of `text`/`base64` (exclusive), as the log's payload; `undefined` when neither was given. */
function payload(
  line: Line,
  name: 'key' | 'value',
  fail: (message: string) => never,
): string | Uint8Array | null | undefined {
  const text = line[name];
  const encoded = line[`${name}Base64`];
  if (text !== undefined && encoded !== undefined)
    return fail(`"${name}" and "${name}Base64" are exclusive: give one`);
  if (encoded === undefined) return text;
  return encoded === null ? null : new Uint8Array(Buffer.from(encoded, 'base64'));
}

/** One non-blank line as a record; `fail` throws naming the file and this line. */
function parseLine(line: string, partitions: number, fail: (message: string) => never): InputRecord {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch (error) {
    return fail(`not valid JSON (${(error as Error).message})`);
  }
  const parsed = lineSchema.safeParse(json);
  if (!parsed.success) return fail(describeIssue(parsed.error));
  const { partition, headers, timestamp } = parsed.data;
  if (partition >= partitions) {
    fail(`partition ${partition} is out of range (--partitions ${partitions}: 0..${partitions - 1})`);
  }
  const key = payload(parsed.data, 'key', fail);
  const value = payload(parsed.data, 'value', fail);
  if (key === undefined) return fail('needs "key" or "keyBase64" (null for a record without a key)');
  if (value === undefined) return fail('needs "value" or "valueBase64" (null for a tombstone)');
  return { partition, key, value, headers: headers ?? {}, ...(timestamp === undefined ? {} : { timestamp }) };
}

/** Parses JSON-lines text; blank lines are skipped. `partitions` bounds the partition numbers. */
export function parseInputText(file: string, text: string, partitions: number): InputRecord[] {
  const records: InputRecord[] = [];
  const lines = text.split('\n');
  for (const [index, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === '') continue;
    records.push(
      parseLine(line, partitions, (message) => {
        throw new InputFileError(file, index + 1, message);
      }),
    );
  }
  if (records.length === 0) throw new InputFileError(file, undefined, 'holds no records');
  return records;
}

export function readInputFile(file: string, partitions: number): InputRecord[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new InputFileError(
      file,
      undefined,
      `cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
      {
        cause: error,
      },
    );
  }
  return parseInputText(file, text, partitions);
}

/** The most partitions `--partitions` takes: the bound of a file whose partitions decide the count. */
export const MAX_PARTITIONS = 1000;

/**
 * The partitions a run over these records has when `--partitions` is not given: as many as they name (the
 * highest partition + 1), and at least `atLeast` (the default), so a file of a 3-partition topic runs without the
 * flag.
 */
export function partitionsOf(records: readonly InputRecord[], atLeast: number): number {
  return records.reduce((most, record) => Math.max(most, record.partition + 1), atLeast);
}
