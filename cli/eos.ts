#!/usr/bin/env node
/**
 * `eos`: the pipeline's command line. `eos local` runs the pipeline on this machine under injected faults,
 * `eos verify` checks a bucket's committed output, `eos read` prints it, `eos status` reads a pipeline's ledger
 * and cluster.
 */
import './preamble.ts';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { type LocalDependencies, registerLocalCommand } from './local.ts';
import { registerReadCommand } from './read.ts';
import { registerStatusCommand } from './status.ts';
import { registerVerifyCommand, type VerifyDependencies } from './verify.ts';

export interface ProgramDependencies {
  readonly local?: LocalDependencies;
  readonly verify?: VerifyDependencies;
}

export function buildProgram(deps: ProgramDependencies = {}): Command {
  const program = new Command('eos')
    .description('exactly-once pipeline from Amazon MSK to S3: local runs, verification and status')
    .showHelpAfterError();
  registerLocalCommand(program, deps.local);
  registerVerifyCommand(program, deps.verify);
  registerReadCommand(program);
  registerStatusCommand(program);
  return program;
}

function isMain(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

/**
 * Runs the program; a usage error commander catches (an unknown option, a bad option value) exits 2 as the
 * commands' own usage errors do, keeping 1 for "ran, and the result is not what it should be".
 */
export async function main(argv: readonly string[]): Promise<void> {
  const program = buildProgram();
  for (const command of [program, ...program.commands]) command.exitOverride();
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    process.exitCode = error.exitCode === 0 ? 0 : 2;
  }
}

if (isMain()) await main(process.argv);
