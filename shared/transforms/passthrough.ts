/**
 * The `passthrough` transform, written with the public transform API: every record becomes one row holding its
 * key, value, headers and timestamp, as Firehose delivers them (the processor adds `source`: topic, partition,
 * offset). Key and value are read as bytes and written as UTF-8 text when they are well-formed UTF-8, else as
 * base64; `keyEncoding` and `valueEncoding` say which (`utf8` or `base64`; null with a null key or a tombstone's
 * null value). It rejects nothing, keeps no state and returns no idempotency key.
 */
import { defineTransform } from './api.ts';

export type Encoding = 'utf8' | 'base64';

const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes as text when they are well-formed UTF-8 (exactly what was sent), else as base64. */
function encoded(bytes: Uint8Array | null): { text: string | null; encoding: Encoding | null } {
  if (bytes === null) return { text: null, encoding: null };
  try {
    return { text: STRICT_UTF8.decode(bytes), encoding: 'utf8' };
  } catch {
    return { text: Buffer.from(bytes).toString('base64'), encoding: 'base64' };
  }
}

const passthrough = defineTransform<Uint8Array, Uint8Array>({
  name: 'passthrough',
  key: { format: 'bytes' },
  value: { format: 'bytes' },
  schema: {
    key: { type: 'string', nullable: true },
    keyEncoding: { type: 'string', nullable: true },
    value: { type: 'string', nullable: true },
    valueEncoding: { type: 'string', nullable: true },
    headers: 'json',
    timestamp: 'timestamp',
  },
  transform(record) {
    const key = encoded(record.key);
    const value = encoded(record.value);
    return {
      rows: [
        {
          key: key.text,
          keyEncoding: key.encoding,
          value: value.text,
          valueEncoding: value.encoding,
          headers: { ...record.headers },
          timestamp: record.timestamp,
        },
      ],
    };
  },
});
export default passthrough;
