/** Errors of field decoding: a bad format spec (fails synth and `eos local` early) and an unreachable registry. */
import { InvalidSettingError, TransientAwsError } from '../errors.ts';

/**
 * A field format spec that can never decode anything: a schema that does not parse, an unknown `messageType`, a
 * registry URL that is not http(s), a framing the registry cannot have written. Raised by `createFieldDecoder`,
 * so it surfaces at synth and at the start of `eos local`, never per record.
 */
export class InvalidFieldFormatError extends InvalidSettingError {}

/**
 * The schema registry did not answer about the id (network error, timeout, 5xx, 408, 429, a body that is not a
 * schema). A {@link TransientAwsError}, so the processor lets it escape and the whole batch is retried: the
 * records are not at fault and must not be dead-lettered. `registry` names the lookup (URL without credentials, or Glue id).
 */
export class SchemaRegistryUnavailableError extends TransientAwsError {
  constructor(
    readonly registry: string,
    options?: { cause?: unknown },
  ) {
    super(`schema registry lookup ${registry}`, options);
  }
}

/**
 * An Avro or Protobuf decoder was asked for before the codecs were there: neither `shared/decode/index.ts` was
 * imported nor `loadSchemaCodecs()` awaited. A wiring mistake in the program, never a record's or a setting's.
 */
export class SchemaCodecsNotLoadedError extends Error {
  constructor() {
    super(
      'the Avro and Protobuf codecs are not loaded: import shared/decode/index.ts, or await loadSchemaCodecs() ' +
        '(loadDecoders(definition) for a transform) before creating the decoder',
    );
    this.name = 'SchemaCodecsNotLoadedError';
  }
}
