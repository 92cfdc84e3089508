/**
 * `eos query "<SQL>"`: runs DuckDB over exactly the files the committed manifests list, for one stream, exposed
 * as a view named after it (`output`, or `deadletter` with `--stream deadletter`). The files come from a bucket
 * (`--bucket`, the AWS chain and `--endpoint` as every command) or from an `eos local --export DIR` directory
 * (`--export-dir`); each is checked against its manifest before DuckDB sees it (shared/query/).
 *
 * ```
 * eos query "SELECT count(*) FROM output" --bucket <bucket> [--pipeline orders] [--format table|csv|json]
 * eos query "SELECT * FROM deadletter" --export-dir ./run --stream deadletter --format json
 * ```
 *
 * Exit codes (cli/failures.ts): 1 when a listed file is missing or does not match its manifest, or the manifest
 * log has a gap; 2 for bad usage or SQL DuckDB refuses; 3 when AWS cannot be used or DuckDB is not installed.
 */
import { type Command, InvalidArgumentError, Option } from 'commander';
import { STREAMS, type Stream } from '../shared/ledger/layout.ts';
import type { DuckDbLoader } from '../shared/query/engine.ts';
import type { QuerySummary } from '../shared/query/query.ts';
import { type OperatorEnvironment, operatorEnvironment } from './environment.ts';
import { ViolationFoundError } from './failures.ts';
import { ENDPOINT_HELP, endpointUrl } from './options.ts';

// Restated, not imported from shared/query/format.ts: registering the command must load no implementation.
const FORMATS = ['table', 'csv', 'json'] as const;
type Format = (typeof FORMATS)[number];

export interface QueryDependencies {
  readonly env?: NodeJS.ProcessEnv;
  /** Where the result goes; default stdout. */
  readonly write?: (text: string) => void;
  /** How DuckDB is loaded; tests pass one that fails. */
  readonly loadDuckDb?: DuckDbLoader;
}

export interface QueryCommandOptions {
  readonly sql: string;
  readonly format: Format;
  readonly stream: Stream;
  readonly pipeline: string;
  /** Exactly one of `bucket` and `exportDir`. */
  readonly bucket?: string;
  readonly exportDir?: string;
  readonly endpoint?: string;
}

export async function runQueryCommand(
  options: QueryCommandOptions,
  deps: QueryDependencies = {},
): Promise<QuerySummary> {
  const environment = operatorEnvironment(deps.env);
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  const [{ queryCommitted }, sources, { CommittedFileError }, { ManifestLogError }] = await Promise.all([
    import('../shared/query/query.ts'),
    import('../shared/query/sources.ts'),
    import('../shared/sink/reader.ts'),
    import('../shared/sink/manifest-store.ts'),
  ]);
  let release = () => {};
  try {
    let source: import('../shared/query/sources.ts').CommittedSource;
    if (options.exportDir !== undefined) {
      source = sources.exportDirectorySource(options.exportDir, options.pipeline);
    } else {
      const endpoint = environment.endpoint(options.endpoint);
      const { createAwsClients } = await import('../shared/aws/clients.ts');
      const clients = createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
      release = () => {
        clients.s3.destroy();
        clients.dynamodb.destroy();
      };
      source = sources.bucketSource(clients.s3, options.bucket ?? '', options.pipeline);
    }
    return await queryCommitted({
      source,
      pipeline: options.pipeline,
      stream: options.stream,
      sql: options.sql,
      format: options.format,
      write,
      ...(deps.loadDuckDb ? { loadDuckDb: deps.loadDuckDb } : {}),
    });
  } catch (error) {
    // A listed file missing or altered, or a gap in the log: what was committed cannot be read as committed.
    if (error instanceof CommittedFileError || error instanceof ManifestLogError) {
      throw new ViolationFoundError(error.message, { cause: error });
    }
    throw error;
  } finally {
    release();
  }
}

interface RawOptions {
  readonly format: Format;
  readonly stream: Stream;
  readonly pipeline?: string;
  readonly bucket?: string;
  readonly exportDir?: string;
  readonly endpoint?: string;
}

/** Where to read from: `--export-dir`, else `--bucket` (or `$EOS_BUCKET`); both at once is a usage error. */
function location(
  raw: RawOptions,
  environment: OperatorEnvironment,
): { bucket: string } | { exportDir: string } {
  if (raw.exportDir !== undefined) {
    if (raw.bucket !== undefined)
      throw new InvalidArgumentError('--bucket and --export-dir cannot be combined');
    if (raw.endpoint !== undefined) {
      throw new InvalidArgumentError('--endpoint and --export-dir cannot be combined');
    }
    return { exportDir: raw.exportDir };
  }
  return { bucket: environment.requiredBucket(raw.bucket, '--export-dir') };
}

export function registerQueryCommand(program: Command, deps: QueryDependencies = {}): Command {
  return program
    .command('query')
    .description(
      'run SQL (DuckDB) over exactly the committed files the manifests list; the table is `output` (or `deadletter`)',
    )
    .argument('<sql>', 'one SQL statement, e.g. "SELECT count(*) FROM output"')
    .addOption(
      new Option('--format <format>', 'how to print the result').choices([...FORMATS]).default('table'),
    )
    .option('--bucket <name>', 'the sink bucket (default: $EOS_BUCKET)')
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option('--export-dir <dir>', 'read an `eos local --export` directory instead of a bucket')
    .addOption(
      new Option('--stream <stream>', 'which stream; the table takes its name')
        .choices([...STREAMS])
        .default('output'),
    )
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .action(async (sql: string, raw: RawOptions) => {
      const environment = operatorEnvironment(deps.env);
      if (sql.trim() === '') throw new InvalidArgumentError('the SQL is empty');
      await runQueryCommand(
        {
          sql,
          format: raw.format,
          stream: raw.stream,
          pipeline: environment.pipelineId(raw.pipeline),
          ...location(raw, environment),
          ...(raw.endpoint ? { endpoint: raw.endpoint } : {}),
        },
        deps,
      );
    });
}
