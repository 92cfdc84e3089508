/**
 * The transform of an `eos local` run, loaded before any local part starts so that a bad reference (an unknown
 * built-in, a missing file or export, a module that throws on import) or a key source it cannot feed fails fast,
 * naming the flag or variable the value came from.
 */
import { OptionError } from '../local/errors.ts';
import { PipelineError } from '../shared/errors.ts';
import { checkKeySource } from '../shared/processor/evaluate.ts';
import { loadTransform } from '../shared/transforms/load.ts';
import type { Transform } from '../shared/transforms/types.ts';
import type { LocalSettings } from './local-settings.ts';

export async function loadLocalTransform(local: LocalSettings): Promise<Transform> {
  const ref = local.settings.transform;
  let transform: Transform;
  try {
    transform = (await loadTransform(ref)).transform;
  } catch (error) {
    const source = local.origin('transform');
    if (error instanceof PipelineError) throw new OptionError(source, error.message, { cause: error });
    // The user's module threw while it was imported (a syntax error, an invalid definition): still a bad setting.
    throw new OptionError(source, `${ref} failed to load: ${(error as Error).message}`, { cause: error });
  }
  try {
    checkKeySource(transform, local.settings.idempotencyKey);
  } catch (error) {
    if (!(error instanceof PipelineError)) throw error;
    throw new OptionError(local.origin('idempotencyKey'), error.message, { cause: error });
  }
  return transform;
}
