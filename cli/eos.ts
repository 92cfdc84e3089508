#!/usr/bin/env node
/**
 * `eos`: the pipeline's command line. `eos local` runs the pipeline on this machine under injected faults,
 * `eos verify` checks a bucket's committed output, `eos read` prints it, `eos status` reads a pipeline's ledger
 * and cluster, `eos epoch` shows and opens epochs,
 * `eos redrive` sends dead letters back through the exactly-once path, `eos replay` reprocesses a range into a new
 * output generation, `eos cost` prints the monthly bill at a steady rate from the benchmark's counted calls.
 *
 * Only the commands' definitions load here; each command loads its implementation (the AWS SDK, the emulator,
 * the local parts) when it runs, so that `--help` and `--version` stay quick and the operator commands never
 * load what only `eos local` needs. Exit codes and failure lines: cli/failures.ts.
 */
import './preamble.ts';
import { readFileSync, realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { registerCheckpointCommand } from './checkpoint.ts';
import { type CostDependencies, registerCostCommand } from './cost.ts';
import { registerDeliverCommand } from './deliver.ts';
import { type EncodeDependencies, registerEncodeCommand } from './encode.ts';
import { type EpochDependencies, registerEpochCommand } from './epoch.ts';
import { reportFailure } from './failures.ts';
import { type LocalDependencies, registerLocalCommand } from './local.ts';
import { type QueryDependencies, registerQueryCommand } from './query.ts';
import { type ReadDependencies, registerReadCommand } from './read.ts';
import { type RedriveDependencies, registerRedriveCommand } from './redrive.ts';
import { type ReplayDependencies, registerReplayCommand } from './replay.ts';
import { addServiceEndpointFlags } from './service-endpoints.ts';
import { registerStateCommand, type StateDependencies } from './state.ts';
import { registerStatusCommand, type StatusDependencies } from './status.ts';
import { registerVerifyCommand, type VerifyDependencies } from './verify.ts';

export interface ProgramDependencies {
  readonly local?: LocalDependencies;
  readonly verify?: VerifyDependencies;
  readonly read?: ReadDependencies;
  readonly query?: QueryDependencies;
  readonly status?: StatusDependencies;
  readonly epoch?: EpochDependencies;
  readonly redrive?: RedriveDependencies;
  readonly replay?: ReplayDependencies;
  readonly cost?: CostDependencies;
  readonly encode?: EncodeDependencies;
  readonly state?: StateDependencies;
}

function packageVersion(): string {
  const file = fileURLToPath(new URL('../package.json', import.meta.url));
  return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
}

export function buildProgram(deps: ProgramDependencies = {}): Command {
  const program = new Command('eos')
    .description('exactly-once pipeline from Amazon MSK to S3: local runs, verification and status')
    .version(packageVersion(), '-V, --version', 'print the version')
    .option('--debug', 'print the stack of a failure too')
    .addHelpText(
      'after',
      `
Exit codes (every command): 0 ok; 1 the check found a violation; 2 bad usage or input;
3 AWS cannot be reached or used (no region or credentials, unknown bucket or table, endpoint down, access denied).`,
    );
  registerLocalCommand(program, deps.local);
  registerVerifyCommand(program, deps.verify);
  registerReadCommand(program, deps.read);
  registerQueryCommand(program, deps.query);
  registerStatusCommand(program, deps.status);
  registerStateCommand(program, deps.state);
  registerEpochCommand(program, deps.epoch);
  registerRedriveCommand(program, deps.redrive);
  registerReplayCommand(program, deps.replay);
  registerCheckpointCommand(program);
  registerDeliverCommand(program);
  registerCostCommand(program, deps.cost);
  registerEncodeCommand(program, deps.encode);
  // Commander's own usage errors (an unknown option, a bad value) throw instead of exiting: main() maps them to
  // 2, as the commands' own usage errors, and help and --version to 0.
  for (const command of [program, ...program.commands]) command.exitOverride();
  for (const command of program.commands) addServiceEndpointFlags(command);
  return program;
}

export interface MainIo {
  /** Where failure lines (commander's too) go; default stderr. */
  readonly writeError?: (text: string) => void;
  /** Where help and --version go; default stdout. */
  readonly writeOut?: (text: string) => void;
}

/**
 * Runs one command line and resolves to its exit code (cli/failures.ts); never throws. A command that sets
 * `process.exitCode` itself (verify's 1, local's verdict) keeps it.
 */
export async function main(
  argv: readonly string[],
  deps: ProgramDependencies = {},
  io: MainIo = {},
): Promise<number> {
  const program = buildProgram(
    io.writeError ? { ...deps, local: { writeError: io.writeError, ...deps.local } } : deps,
  );
  for (const command of [program, ...program.commands]) {
    command.configureOutput({
      ...(io.writeError ? { writeErr: io.writeError } : {}),
      ...(io.writeOut ? { writeOut: io.writeOut } : {}),
    });
  }
  process.exitCode = undefined;
  try {
    await program.parseAsync([...argv]);
    const code = process.exitCode;
    return typeof code === 'number' ? code : 0;
  } catch (error) {
    return reportFailure(error, io.writeError, argv.includes('--debug'));
  } finally {
    process.exitCode = undefined;
  }
}

function isMain(): boolean {
  const entry = process.argv[1];
  return entry !== undefined && realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
}

if (isMain()) process.exitCode = await main(process.argv);
