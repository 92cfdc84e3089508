/**
 * The processor Lambda for the built-in transforms (`orders`, `passthrough`): the one `EOS_TRANSFORM` names. A
 * user's transform module is bundled through a generated entry over `createProcessorHandler` instead (see
 * `processor-handler.ts`).
 *
 * Cold start: only what this transform's formats need is loaded. The Avro and Protobuf codecs (avro-js,
 * protobufjs) are a dynamic import, in a chunk of their own, awaited here at init (top-level await) when the
 * transform decodes one of those formats, so neither an invocation nor a JSON processor's init pays for them.
 */
import { settingsFromEnv } from '../shared/config/settings.ts';
import { loadDecoders } from '../shared/transforms/adapter.ts';
import { builtinDefinition } from '../shared/transforms/registry.ts';
import { createProcessorHandler } from './processor-factory.ts';

const settings = settingsFromEnv();
const transform = builtinDefinition(settings.transform);
await loadDecoders(transform);

export const handler = createProcessorHandler({ transform, settings });
