/**
 * `eos read`: prints the committed output of a pipeline as NDJSON on stdout — the records of every committed
 * checkpoint, in manifest order (per partition in offset order), each exactly once. It reads only what the
 * manifests list (`shared/sink/reader.ts`); a gap in the manifest log or a file that does not match its
 * manifest fails loudly instead of printing a partial or doubled result.
 *
 * ```
 * eos read --bucket <bucket> [--pipeline orders] [--stream output|deadletter] > out.ndjson
 * ```
 */
import type { Writable } from 'node:stream';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { createAwsClients } from '../shared/aws/clients.ts';
import { STREAMS, type Stream } from '../shared/ledger/layout.ts';
import { readCommitted } from '../shared/sink/reader.ts';

export interface ReadOptions {
  readonly bucket: string;
  readonly pipeline: string;
  readonly stream: Stream;
}

export interface ReadDependencies {
  /** Where the NDJSON goes; default stdout. */
  readonly out?: Writable;
  readonly env?: NodeJS.ProcessEnv;
}

/** Writes every committed record as one JSON line; resolves to the number of records written. */
export async function runRead(options: ReadOptions, deps: ReadDependencies = {}): Promise<number> {
  const out = deps.out ?? process.stdout;
  const clients = createAwsClients(deps.env);
  let count = 0;
  try {
    for await (const record of readCommitted({ s3: clients.s3, ...options })) {
      const line = `${JSON.stringify(record.row)}\n`;
      if (!out.write(line)) await new Promise((resume) => out.once('drain', resume));
      count++;
    }
  } finally {
    clients.s3.destroy();
    clients.dynamodb.destroy();
  }
  return count;
}

export function registerReadCommand(program: Command, deps: ReadDependencies = {}): Command {
  return program
    .command('read')
    .description('print the committed output (all committed checkpoints, in manifest order) as NDJSON')
    .option('--bucket <name>', 'the sink bucket (default: $EOS_BUCKET)', process.env.EOS_BUCKET)
    .option('--pipeline <id>', 'the pipeline id', process.env.EOS_PIPELINE_ID ?? 'orders')
    .addOption(new Option('--stream <stream>', 'which stream').choices([...STREAMS]).default('output'))
    .action(async (raw: { bucket?: string; pipeline: string; stream: Stream }) => {
      if (!raw.bucket) throw new InvalidArgumentError('--bucket is required (or set EOS_BUCKET)');
      await runRead({ bucket: raw.bucket, pipeline: raw.pipeline, stream: raw.stream }, deps);
    });
}
