/**
 * The processor Lambda for the built-in transforms (`orders`, `passthrough`): the one `EOS_TRANSFORM` names. A
 * user's transform module is bundled through a generated entry over `createProcessorHandler` instead (see
 * `processor-handler.ts`).
 */
import { settingsFromEnv } from '../shared/config/settings.ts';
import { builtinDefinition } from '../shared/transforms/registry.ts';
import { createProcessorHandler } from './processor-handler.ts';

const settings = settingsFromEnv();

export const handler = createProcessorHandler({
  transform: builtinDefinition(settings.transform),
  settings,
});
