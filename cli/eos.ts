#!/usr/bin/env node
/**
 * `eos`: the pipeline's command line. `eos local` runs the pipeline on this machine under injected faults,
 * `eos verify` checks a bucket's committed output, `eos read` prints it, `eos status` reads a pipeline's ledger
 * and cluster.
 */
import './preamble.ts';
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
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
  // A usage error commander catches (an unknown option, a bad option value) exits 2, as the commands' own usage
  // errors do: 1 stays "it ran, and the result is not what it should be". Help and --version still exit 0.
  for (const command of [program, ...program.commands]) {
    command.exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2));
  }
  return program;
}

function isMain(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

if (isMain()) await buildProgram().parseAsync(process.argv);
