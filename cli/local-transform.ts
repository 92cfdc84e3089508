/**
 * The transform of an `eos local` run, loaded before any local part starts so that a bad reference (an unknown
 * built-in, a missing file or export, a module that throws on import) fails fast, naming the flag or variable it
 * came from.
 */
import { OptionError } from '../local/errors.ts';
import { PipelineError } from '../shared/errors.ts';
import { loadTransform } from '../shared/transforms/load.ts';
import type { Transform } from '../shared/transforms/types.ts';

/** `ref`: a built-in's name or `<path>[#<export>]`; `source`: where it came from (`--transform`, `EOS_TRANSFORM`). */
export async function loadLocalTransform(ref: string, source: string): Promise<Transform> {
  try {
    return (await loadTransform(ref)).transform;
  } catch (error) {
    if (error instanceof PipelineError) throw new OptionError(source, error.message);
    // The user's module threw while it was imported (a syntax error, an invalid definition): still a bad setting.
    throw new OptionError(source, `${ref} failed to load: ${(error as Error).message}`, { cause: error });
  }
}
