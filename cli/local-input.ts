/** What an `eos local` run reads and writes besides the pipeline: its input records and its output paths. */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type { Command } from 'commander';
import { OptionError } from '../local/errors.ts';
import type { InputRecord } from '../local/input.ts';
import { LOCAL_DEFAULTS } from './local-defaults.ts';
import type { LocalCommandOptions } from './local-options.ts';
import type { LocalSettings } from './local-settings.ts';

/** Whether `--partitions` was left at its default with an `--input` file: the file's partitions decide the count. */
export function partitionsFromInput(
  raw: { readonly input?: string | undefined },
  command: Pick<Command, 'getOptionValueSource'>,
): boolean {
  return raw.input !== undefined && command.getOptionValueSource('partitions') === 'default';
}

/**
 * The records of an `--input` file, and the partitions of the run: `partitions` as given, or (`fromInput`) at
 * least as many as the file names.
 */
export async function readInput(
  file: string,
  partitions: number,
  fromInput: boolean | undefined,
): Promise<{ records: InputRecord[]; partitions: number }> {
  const { MAX_PARTITIONS, partitionsOf, readInputFile } = await import('../local/input.ts');
  if (!fromInput) return { records: readInputFile(file, partitions), partitions };
  const records = readInputFile(file, MAX_PARTITIONS);
  return { records, partitions: partitionsOf(records, partitions) };
}

/**
 * The input to run, the file's records or the seeded generator's, and the run's partitions. Throws before anything
 * runs.
 */
export async function inputFor(
  options: LocalCommandOptions,
  local: LocalSettings,
): Promise<{ records: InputRecord[]; partitions: number }> {
  if (options.input !== undefined && options.records !== undefined) {
    throw new OptionError('--records', 'cannot be combined with --input (the file decides the records)');
  }
  if (options.input !== undefined) {
    return readInput(options.input, options.partitions, options.partitionsFromInput);
  }
  const transform = local.settings.transform;
  if (transform !== LOCAL_DEFAULTS.transform) {
    // Generated input is orders: another transform would dead-letter all of it.
    throw new OptionError(
      '--input',
      `is needed with ${local.origin('transform')} ${transform} (without --input the records are generated orders, for the orders transform)`,
    );
  }
  const { generateOrders } = await import('../local/generator.ts');
  const records = generateOrders({
    seed: options.seed,
    records: options.records ?? LOCAL_DEFAULTS.records,
    partitions: options.partitions,
    poisonRate: options.faults.poison,
  });
  return { records, partitions: options.partitions };
}

/** `--report` and `--export` must be writable before the run starts: a run of minutes must not end in ENOENT. */
export function checkOutputPaths(options: Pick<LocalCommandOptions, 'report' | 'export'>): void {
  const writable = (flag: string, dir: string, what: string) => {
    if (!existsSync(dir) || !statSync(dir).isDirectory())
      throw new OptionError(flag, `${what} ${dir} does not exist or is not a folder`);
    try {
      accessSync(dir, constants.W_OK);
    } catch {
      throw new OptionError(flag, `${what} ${dir} is not writable`);
    }
  };
  if (options.report !== undefined) {
    const file = resolve(options.report);
    if (existsSync(file) && statSync(file).isDirectory())
      throw new OptionError('--report', `${options.report} is a folder; name a file`);
    writable('--report', dirname(file), 'the folder');
  }
  if (options.export !== undefined) {
    // The export makes its folders (`.eos-local/run` in a fresh clone); the nearest one that exists must be writable.
    let dir = resolve(options.export);
    while (!existsSync(dir) && dirname(dir) !== dir) dir = dirname(dir);
    writable('--export', dir, 'the folder');
  }
}
