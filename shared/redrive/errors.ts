/**
 * The errors a redrive stops with, and the one-line account of a failed registry lookup they carry: the CLI maps
 * each to its exit code (`cli/redrive.ts`).
 */
import { SchemaRegistryUnavailableError } from '../decode/errors.ts';
import { PipelineError } from '../errors.ts';

export class RedriveError extends PipelineError {}

/**
 * What the records need before they can be judged (the transform's `prepare`: registry schemas) could not be had:
 * the registry did not answer, or refused the redriver's credentials. Never taken as a new reason to send a dead
 * letter; the run stops, saying what it did and did not send.
 */
export class RedriveRegistryUnavailableError extends RedriveError {}

/**
 * Another `eos redrive` run closed this run's round while it staged (two runs at once): what either staged is
 * staged once, and the rest waits for the next run after the next checkpoint.
 */
export class RedriveRoundClosedError extends RedriveError {}

/** The failed lookup in one line: the registry's own words (a URL without credentials, or a Glue id). */
export function lookupFailure(error: unknown): string {
  if (error instanceof SchemaRegistryUnavailableError) {
    const cause = error.cause instanceof Error ? ` (${error.cause.message})` : '';
    return `schema registry lookup ${error.registry} failed${cause}`;
  }
  return `the transform could not prepare the records to judge (${(error as Error)?.message ?? String(error)})`;
}
