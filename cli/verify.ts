/**
 * `eos verify --bucket B [--pipeline P]`: checks a pipeline's committed layout (see `shared/sink/verify.ts`):
 * its manifests under `<P>/_manifests/` and its data under `<P>/final/`. The form `--prefix <P>/final/` also
 * works and names the same pipeline. `--export-dir DIR` checks an `eos local --export DIR` folder instead of a bucket.
 * `--iceberg-table <location>` then checks the pipeline's Iceberg table against the manifest log (`verify-table.ts`).
 * Exit 0 when every invariant holds, 1 when one does not (cli/failures.ts).
 */
import { type Command, InvalidArgumentError } from 'commander';
import type { TableAudit } from '../shared/coordinator/publish/table-audit.ts';
import type { VerifyProgress, VerifyResult } from '../shared/sink/verify.ts';
import { operatorEnvironment } from './environment.ts';
import { EXPORT_DIR_HELP, readLocation } from './export-dir.ts';
import { ENDPOINT_HELP, endpointUrl } from './options.ts';
import { formatTableAudit, parseTableOption, runTableAudit, TABLE_HELP } from './verify-table.ts';

export interface VerifyDependencies {
  readonly env?: NodeJS.ProcessEnv;
  readonly write?: (text: string) => void;
  /** Where progress lines go; default stderr (stdout keeps the result alone, for `--json`). */
  readonly writeError?: (text: string) => void;
  /** At most one progress line per this many ms; default 3,000. */
  readonly progressIntervalMs?: number;
}

export interface VerifyCommandOptions {
  /** The bucket to check; or `exportDir`, an `eos local --export` folder. */
  readonly bucket?: string;
  readonly exportDir?: string;
  readonly pipeline?: string;
  readonly prefix?: string;
  readonly json?: boolean;
  readonly endpoint?: string;
  /** An Iceberg table to check against the manifest log: an S3 location of a file-catalog table, or `default`. */
  readonly icebergTable?: string;
}

/**
 * What verify found: the layout check's result, and with `--iceberg-table` the table audit's under `table`. `ok` is the
 * verdict of both.
 */
export type VerifyCommandResult = VerifyResult & { readonly table?: TableAudit };

/** `<pipeline>/final/` (slashes optional at the ends), as `--prefix` must name it; checked before any call. */
function checkPrefix(prefix: string): void {
  const trimmed = prefix.replace(/^\/+|\/+$/g, '');
  if (!/^.+\/final$/.test(trimmed)) {
    throw new InvalidArgumentError(`--prefix ${prefix} is not a pipeline's final prefix (<pipeline>/final/)`);
  }
}

/** The pipeline a checked `--prefix <pipeline>/final/` names. */
function pipelineOfPrefix(prefix: string): string {
  return prefix.replace(/^\/+|\/+$/g, '').replace(/\/final$/, '');
}

/** The table `--iceberg-table` names and the bucket of the manifests it is checked against; checked before any call. */
function tableRequest(
  options: VerifyCommandOptions,
): { table: ReturnType<typeof parseTableOption>; bucket: string } | undefined {
  if (options.icebergTable === undefined) return undefined;
  if (options.exportDir !== undefined || options.bucket === undefined) {
    throw new InvalidArgumentError(
      '--iceberg-table checks a table against the manifests in a bucket: it needs --bucket, not --export-dir',
    );
  }
  return { table: parseTableOption(options.icebergTable), bucket: options.bucket };
}

export async function runVerifyCommand(
  options: VerifyCommandOptions,
  deps: VerifyDependencies = {},
): Promise<{ result: VerifyCommandResult; exitCode: number }> {
  const environment = operatorEnvironment(deps.env);
  const which =
    options.prefix !== undefined && options.pipeline === undefined
      ? { prefix: options.prefix }
      : { pipeline: environment.pipelineId(options.pipeline) };
  if (which.prefix !== undefined) checkPrefix(which.prefix);
  const table = tableRequest(options);
  const endpoint = environment.endpoint(options.endpoint);
  const [{ createAwsClients }, { formatVerifyResult, verifySink }, { folderObjects }] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/sink/verify.ts'),
    import('../shared/sink/folder-objects.ts'),
  ]);
  const clients = createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  try {
    const where =
      options.exportDir === undefined
        ? { s3: clients.s3, ...(options.bucket === undefined ? {} : { bucket: options.bucket }) }
        : { objects: folderObjects(options.exportDir) };
    const layout = await verifySink({
      ...where,
      ...which,
      onProgress: progressLines(deps),
    });
    const audit =
      table === undefined
        ? undefined
        : await runTableAudit({
            table: table.table,
            s3: clients.s3,
            bucket: table.bucket,
            pipeline: which.pipeline ?? pipelineOfPrefix(which.prefix ?? ''),
          });
    const result: VerifyCommandResult =
      audit === undefined ? layout : { ...layout, ok: layout.ok && audit.ok, table: audit };
    const text = [formatVerifyResult(layout, 200), ...(audit ? [formatTableAudit(audit)] : [])].join('\n');
    const write = deps.write ?? ((text: string) => process.stdout.write(text));
    write(options.json ? `${JSON.stringify(result, null, 2)}\n` : `${text}\n`);
    return { result, exitCode: result.ok ? 0 : 1 };
  } finally {
    clients.s3.destroy();
    clients.dynamodb.destroy();
  }
}

/**
 * One line on stderr every few seconds while a verify runs (terminal or not): a large bucket takes minutes to read,
 * and a silent command looks hung. A short verify prints nothing.
 */
function progressLines(deps: VerifyDependencies): (progress: VerifyProgress) => void {
  const writeError = deps.writeError ?? ((text: string) => process.stderr.write(text));
  const interval = deps.progressIntervalMs ?? 3_000;
  let last = Date.now();
  return ({ phase, done, total }) => {
    if (Date.now() - last < interval) return;
    last = Date.now();
    writeError(
      `progress: ${done}/${total} ${phase === 'manifests' ? 'manifests read' : 'objects checked'}\n`,
    );
  };
}

export function registerVerifyCommand(program: Command, deps: VerifyDependencies = {}): Command {
  return program
    .command('verify')
    .description(
      "check a pipeline's committed output (manifests and final data; with --iceberg-table, its Iceberg table against them): exit 0 when every invariant holds, 1 otherwise",
    )
    .option('--bucket <name>', 'the sink bucket (default: $EOS_BUCKET)')
    .option(
      '--pipeline <id>',
      'the pipeline id, its root prefix in the bucket (default $EOS_PIPELINE_ID, else orders)',
    )
    .option('--prefix <prefix>', "older form: the pipeline's final prefix, <pipeline>/final/")
    .option('--export-dir <dir>', EXPORT_DIR_HELP)
    .option('--iceberg-table <location>', TABLE_HELP)
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print the result as JSON', false)
    .action(async (options: VerifyCommandOptions) => {
      const where = readLocation(options, operatorEnvironment(deps.env));
      process.exitCode = (await runVerifyCommand({ ...options, ...where }, deps)).exitCode;
    });
}
