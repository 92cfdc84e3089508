/**
 * Field decoders by format, every format ready: `decoders.ts` with the Avro and Protobuf codecs imported
 * statically and installed. What tests, tools, `eos local` and a user module's processor import; the stock
 * processor imports `decoders.ts` and loads the codecs only when its transform needs them (see there).
 */
import { installSchemaCodecs } from './decoders.ts';
import { avroCodec, protobufCodec } from './schema-codecs.ts';

installSchemaCodecs({ avroCodec, protobufCodec });

export * from './decoders.ts';
