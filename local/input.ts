/**
 * Input for `eos local --input FILE.jsonl`: one record per line,
 * `{"partition": int, "key": string|null, "value": string|null, "headers"?: {name: string|[byte, …]}}`, appended
 * to the topic in file order. `"value": null` is a tombstone; a header is text (sent as UTF-8) or its exact bytes
 * as an array of byte values (-128..255, as the MSK event carries them) (a record's offset is its position within its partition). Everything is checked before anything
 * runs; an error names the file and the line.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { InputFileError } from './errors.ts';
import type { HeaderValue } from './kafka-log.ts';

/** A record to append to the topic. */
export interface InputRecord {
  readonly partition: number;
  readonly key: string | null;
  /** null: a tombstone. */
  readonly value: string | null;
  readonly headers: Readonly<Record<string, HeaderValue>>;
}

const lineSchema = z
  .object({
    partition: z.number().int().nonnegative(),
    key: z.string().nullable(),
    value: z.string().nullable(),
    headers: z
      .record(z.string(), z.union([z.string(), z.array(z.number().int().min(-128).max(255))]))
      .optional(),
  })
  .strict();

function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0]!;
  const field = issue.path.length > 0 ? `"${issue.path.join('.')}"` : 'the line';
  if (issue.code === 'unrecognized_keys')
    return `unknown field(s) ${issue.keys.map((k) => `"${k}"`).join(', ')}`;
  return `${field}: ${issue.message}`;
}

/** Parses JSON-lines text; blank lines are skipped. `partitions` bounds the partition numbers. */
export function parseInputText(file: string, text: string, partitions: number): InputRecord[] {
  const records: InputRecord[] = [];
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '') return;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (error) {
      throw new InputFileError(file, index + 1, `not valid JSON (${(error as Error).message})`);
    }
    const parsed = lineSchema.safeParse(json);
    if (!parsed.success) throw new InputFileError(file, index + 1, describeIssue(parsed.error));
    const { partition, key, value, headers } = parsed.data;
    if (partition >= partitions) {
      throw new InputFileError(
        file,
        index + 1,
        `partition ${partition} is out of range (--partitions ${partitions}: 0..${partitions - 1})`,
      );
    }
    records.push({ partition, key, value, headers: headers ?? {} });
  });
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
