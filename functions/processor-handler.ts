/**
 * The processor's handler factory for a user's transform module: the construct's generated entry imports the
 * module statically and calls {@link createProcessorHandler} at once, before its formats could be looked at, so
 * every decoder format comes ready here: `shared/decode/index.ts` installs the Avro and Protobuf codecs (the stock
 * processor, `processor.ts`, loads them only when its transform needs them). See `processor-factory.ts`.
 */
import '../shared/decode/index.ts';

export {
  createProcessorHandler,
  type ProcessorHandler,
  type ProcessorHandlerOptions,
} from './processor-factory.ts';
