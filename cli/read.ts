/**
 * `eos read`: prints the committed output of a pipeline as NDJSON on stdout — the records of every committed
 * checkpoint, in manifest order (per partition in offset order), each exactly once. It reads only what the
 * manifests list (`shared/sink/reader.ts`); a gap in the manifest log or a file that does not match its
 * manifest fails loudly (exit 1, cli/failures.ts) instead of printing a partial or doubled result.
 *
 * ```
 * eos read --bucket <bucket> [--pipeline orders] [--stream output|deadletter] [--endpoint URL] > out.ndjson
 * eos read --export-dir <dir written by eos local --export> [--pipeline …] [--stream …]
 * ```
 */
import type { Writable } from 'node:stream';
import { type Command, Option } from 'commander';
import { STREAMS, type Stream } from '../shared/ledger/layout.ts';
import { operatorEnvironment } from './environment.ts';
import { EXPORT_DIR_HELP, exportDirObjects, readLocation } from './export-dir.ts';
import { ViolationFoundError } from './failures.ts';
import { ENDPOINT_HELP, endpointUrl } from './options.ts';

export interface ReadOptions {
  /** The bucket to read; or `exportDir`, an `eos local --export` folder. */
  readonly bucket?: string;
  readonly exportDir?: string;
  readonly pipeline: string;
  readonly stream: Stream;
  readonly endpoint?: string;
}

export interface ReadDependencies {
  /** Where the NDJSON goes; default stdout. */
  readonly out?: Writable;
  readonly env?: NodeJS.ProcessEnv;
}

/** Writes every committed record as one JSON line; resolves to the number of records written. */
export async function runRead(options: ReadOptions, deps: ReadDependencies = {}): Promise<number> {
  const out = deps.out ?? process.stdout;
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, { CommittedFileError, readCommitted }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/sink/reader.ts'),
  ]);
  const clients = createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  let count = 0;
  try {
    const { bucket, exportDir, pipeline, stream } = options;
    const where =
      exportDir === undefined
        ? { s3: clients.s3, ...(bucket === undefined ? {} : { bucket }) }
        : { objects: await exportDirObjects(exportDir, pipeline) };
    for await (const record of readCommitted({ ...where, pipeline, stream })) {
      const line = `${JSON.stringify(record.row)}\n`;
      if (!out.write(line)) await new Promise((resume) => out.once('drain', resume));
      count++;
    }
  } catch (error) {
    // A gap in the manifest log or a file that does not match its manifest: the check's violation, exit 1.
    if (error instanceof CommittedFileError) throw new ViolationFoundError(error.message, { cause: error });
    throw error;
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
    .option('--bucket <name>', 'the sink bucket (default: $EOS_BUCKET)')
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .addOption(new Option('--stream <stream>', 'which stream').choices([...STREAMS]).default('output'))
    .option('--export-dir <dir>', EXPORT_DIR_HELP)
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .action(
      async (raw: {
        bucket?: string;
        exportDir?: string;
        pipeline?: string;
        stream: Stream;
        endpoint?: string;
      }) => {
        const environment = operatorEnvironment(deps.env);
        const where = readLocation(raw, environment);
        const pipeline = environment.pipelineId(raw.pipeline);
        await runRead(
          { ...where, pipeline, stream: raw.stream, ...(raw.endpoint ? { endpoint: raw.endpoint } : {}) },
          deps,
        );
      },
    );
}
