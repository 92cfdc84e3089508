/**
 * `eos local …` run in process as a user types it, on the shared local parts (the vitest global setup's DynamoDB
 * Local and S3 server), each run on a table, bucket and pipeline id of its own unless `env` names them.
 */
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Command, CommanderError } from 'commander';
import { buildProgram } from '../../cli/eos.ts';
import { classifyFailure } from '../../cli/failures.ts';
import type { RunReport } from '../../local/runner.ts';
import { createAwsClients } from '../../shared/aws/clients.ts';
import { type FinalRow, readFinalRows } from '../../shared/sink/verify.ts';
import { uniqueName } from '../support/aws.ts';

export interface LocalRun {
  readonly code: number | undefined;
  /** stdout: the endpoints line and the report. */
  readonly text: string;
  /** stderr: the one line of a failure. */
  readonly errors: string;
  readonly report: RunReport | undefined;
  /** Every row under the pipeline's final prefix, read back from the S3 server. */
  readonly rows: readonly FinalRow[];
  readonly env: Readonly<Record<string, string | undefined>>;
}

export interface LocalRunOptions {
  /** `EOS_*` (and `AWS_*`) variables of the run, over fresh table, bucket and pipeline names. */
  readonly env?: Record<string, string | undefined>;
  /**
   * Let the command decide where its parts are (flags and `AWS_ENDPOINT_URL*` of `env`), as a user's shell does;
   * default: the global setup's parts, as if the command had started them.
   */
  readonly ownEndpoints?: boolean;
}

/** A file of `lines` (JSON objects) for `--input`. */
export function inputFile(lines: readonly object[]): string {
  const file = join(mkdtempSync(join(tmpdir(), 'eos-local-in-')), 'input.jsonl');
  writeFileSync(file, `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
  return file;
}

export async function eosLocal(args: readonly string[], options: LocalRunOptions = {}): Promise<LocalRun> {
  const id = uniqueName('loc');
  const env = {
    ...process.env,
    EOS_LEDGER_TABLE: `eos-${id}`,
    EOS_BUCKET: `eos-${id}`,
    EOS_PIPELINE_ID: id,
    ...options.env,
  };
  const reportFile = join(mkdtempSync(join(tmpdir(), 'eos-local-')), 'report.json');
  const out: string[] = [];
  const errors: string[] = [];
  const root = buildProgram({
    local: {
      ...(options.ownEndpoints ? {} : { startParts: async () => ({ env: {}, stop: async () => {} }) }),
      write: (t) => out.push(t),
      writeError: (t) => errors.push(t),
      progress: false,
      env,
    },
  });
  const quiet = (command: Command) =>
    command.exitOverride().configureOutput({ writeErr: (t) => errors.push(t), writeOut: () => {} });
  quiet(root);
  root.commands.forEach(quiet);
  process.exitCode = undefined;
  let thrownCode: number | undefined;
  try {
    await root.parseAsync(['node', 'eos', 'local', ...args, '--report', reportFile]);
  } catch (error) {
    // A bad flag: commander has written its one line and, its exit overridden, throws; `eos` exits as classified.
    if (error instanceof CommanderError) thrownCode = classifyFailure(error).code;
    else errors.push(`thrown: ${String(error)}`);
  }
  const code = thrownCode ?? (typeof process.exitCode === 'number' ? process.exitCode : undefined);
  process.exitCode = 0;
  const report = existsSync(reportFile)
    ? (JSON.parse(readFileSync(reportFile, 'utf8')) as RunReport)
    : undefined;
  const rows = report
    ? await readFinalRows({ s3: createAwsClients().s3, bucket: env.EOS_BUCKET!, pipeline: report.pipeline })
    : [];
  return { code, text: out.join(''), errors: errors.join(''), report, rows, env };
}
