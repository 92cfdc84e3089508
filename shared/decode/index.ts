/** Field decoders by format (see `formats.ts`). */
import { InvalidSettingError } from '../errors.ts';
import type { DecodeResult, FieldDecoder, FieldFormat } from './formats.ts';

export type { DecodeResult, FieldDecoder, FieldFormat, Framing, RegistrySpec } from './formats.ts';

const utf8 = new TextDecoder('utf-8');

function syncDecoder(decode: (bytes: Buffer) => DecodeResult): FieldDecoder {
  return {
    prepare: async () => {},
    decode: (field) => (field === null ? { ok: true, value: null } : decode(Buffer.from(field, 'base64'))),
  };
}

export function createFieldDecoder(format: FieldFormat): FieldDecoder {
  switch (format.format) {
    case 'string':
      return syncDecoder((bytes) => ({ ok: true, value: utf8.decode(bytes) }));
    case 'bytes':
      return syncDecoder((bytes) => ({ ok: true, value: new Uint8Array(bytes) }));
    case 'json':
      return syncDecoder((bytes) => {
        try {
          return { ok: true, value: JSON.parse(utf8.decode(bytes)) as unknown };
        } catch (error) {
          return { ok: false, error: `value is not valid JSON: ${(error as Error).message}` };
        }
      });
    default:
      throw new InvalidSettingError('format', `format "${format.format}" is not supported yet`);
  }
}
