/** NDJSON encoding of a staged or final object: one JSON row per line, optionally gzipped, with checksums. */
import { createHash } from 'node:crypto';
import { Readable } from 'node:stream';
import { createGunzip, gunzipSync, gzipSync } from 'node:zlib';

export interface EncodedObject {
  readonly body: Buffer;
  readonly recordCount: number;
  readonly bytes: number;
  /** Hex SHA-256 of `body`. */
  readonly sha256: string;
  /** Hex MD5 of `body`. */
  readonly md5: string;
}

export function digestsOf(body: Buffer): { sha256: string; md5: string } {
  return {
    sha256: createHash('sha256').update(body).digest('hex'),
    md5: createHash('md5').update(body).digest('hex'),
  };
}

/** Deterministic: the same rows give the same bytes (Node's gzip writes no timestamp). */
export function encodeNdjson(rows: readonly unknown[], gzip: boolean): EncodedObject {
  const text = rows.map((row) => `${JSON.stringify(row)}\n`).join('');
  const plain = Buffer.from(text, 'utf8');
  const body = gzip ? gzipSync(plain) : plain;
  return { body, recordCount: rows.length, bytes: body.length, ...digestsOf(body) };
}

export function decodeNdjson(body: Uint8Array, gzip: boolean): unknown[] {
  const text = (gzip ? gunzipSync(body) : Buffer.from(body)).toString('utf8');
  return text
    .split('\n')
    .filter((line) => line.length > 0)
    .map((line) => JSON.parse(line) as unknown);
}

/**
 * The non-empty lines of an NDJSON object, decoded chunk by chunk: a final object concatenates staged members, so
 * its text can exceed the longest string V8 makes while each row stays small.
 */
export async function* ndjsonLines(body: Uint8Array, gzip: boolean): AsyncGenerator<string> {
  const source = Readable.from([Buffer.from(body)]);
  const chunks: AsyncIterable<Buffer> = gzip ? source.pipe(createGunzip()) : source;
  let rest = Buffer.alloc(0);
  for await (const chunk of chunks) {
    let data = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
    let newline = data.indexOf(10);
    while (newline >= 0) {
      if (newline > 0) yield data.subarray(0, newline).toString('utf8');
      data = data.subarray(newline + 1);
      newline = data.indexOf(10);
    }
    rest = Buffer.from(data);
  }
  if (rest.length > 0) yield rest.toString('utf8');
}
