/**
 * `eos redrive`: sends committed dead letters back through the exactly-once path with the current transform
 * (shared/redrive/redrive.ts). Each redriven record lands in the output at most once however often this
 * runs or crashes; one that fails again stays dead-lettered (with the new reason, if it changed).
 *
 * It runs the processor's code here, with the processor's settings: the same `EOS_*` variables the processor
 * Lambda has (docs/configuration.md), the flags winning over them, and the transform's decoders reaching what the
 * Lambda's reach (a Glue registry's schema versions through GetSchemaVersion), so a record decodes here as it did
 * there. Exit codes: 0 done (also when nothing was to do); 1 some partition waits for its previous round to be
 * committed (run again after the next checkpoint); 2 bad usage or settings; 3 AWS cannot be used, or the
 * transform's schema registry does not answer or refuses the credentials (nothing sent).
 */
import { type Command, InvalidArgumentError } from 'commander';
import type { AwsClients } from '../shared/aws/clients.ts';
import type { PartitionRedrive, RedriveResult } from '../shared/redrive/redrive.ts';
import { operatorEnvironment } from './environment.ts';
import { AwsUnavailableError, ViolationFoundError } from './failures.ts';
import { ENDPOINT_HELP, endpointUrl, integer } from './options.ts';

export interface RedriveDependencies {
  readonly clients?: AwsClients;
  readonly write?: (text: string) => void;
  readonly env?: NodeJS.ProcessEnv;
}

export interface RedriveCommandOptions {
  readonly table?: string;
  readonly bucket?: string;
  readonly pipeline?: string;
  readonly transform?: string;
  readonly checkpoint?: number;
  readonly all: boolean;
  readonly json: boolean;
  readonly endpoint?: string;
}

function redriveLine(p: PartitionRedrive): string {
  const name = `${p.lane}-${p.partition}`;
  const unreadable =
    p.unreadable > 0
      ? `\n${name}: ${p.unreadable} dead-letter rows are not a dead letter redrive can read: left as they are`
      : '';
  return outcomeLine(p, name) + unreadable;
}

function outcomeLine(p: PartitionRedrive, name: string): string {
  const left = p.unchanged > 0 ? `${p.unchanged} fail again for the same reason: left dead-lettered` : '';
  if (p.outcome === 'nothing') return `${name}: nothing to redrive${left ? ` (${left})` : ''}`;
  if (p.outcome === 'waiting') {
    return `${name}: round ${p.round} is not committed yet: run again after the next checkpoint`;
  }
  return (
    `${name}: round ${p.round}: ${p.sent} sent, ${p.staged.output} output rows and ${p.staged.deadLettered} dead ` +
    `letters staged${left ? `; ${left}` : ''}; committed by the next checkpoint`
  );
}

export function formatRedrive(result: RedriveResult): string {
  if (result.partitions.length === 0) return 'no dead letters are committed: nothing to redrive\n';
  return `${result.partitions.map(redriveLine).join('\n')}\n`;
}

export async function runRedrive(
  options: RedriveCommandOptions,
  deps: RedriveDependencies = {},
): Promise<RedriveResult> {
  const environment = operatorEnvironment(deps.env);
  const endpoint = environment.endpoint(options.endpoint);
  const [
    { createAwsClients },
    { settingsFromEnv },
    { loadTransform, secretsFor, usesGlue },
    { toTransform },
    { glueSchemaVersionLookup },
    { redrive, RedriveRegistryUnavailableError, RedriveRoundClosedError },
  ] = await Promise.all([
    import('../shared/aws/clients.ts'),
    import('../shared/config/settings.ts'),
    import('../shared/transforms/load.ts'),
    import('../shared/transforms/adapter.ts'),
    import('../shared/decode/glue-schemas.ts'),
    import('../shared/redrive/redrive.ts'),
  ]);
  const settings = settingsFromEnv(environment.withSettingFlags(options));
  const loaded = await loadTransform(settings.transform);
  // As the processor Lambda decodes (infra/transform-entry.ts): Glue's schema versions from GetSchemaVersion.
  const transform = usesGlue(loaded.definition)
    ? toTransform(loaded.definition, {
        ...secretsFor(loaded.definition),
        glueGetSchemaVersion: glueSchemaVersionLookup(),
      })
    : loaded.transform;
  const owned = deps.clients
    ? undefined
    : createAwsClients(environment.variables, endpoint === undefined ? {} : { endpoint });
  const clients = deps.clients ?? owned!;
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  try {
    const result = await redrive({
      settings,
      clients,
      transform,
      ...(options.checkpoint === undefined ? {} : { checkpoint: options.checkpoint }),
    });
    write(options.json ? `${JSON.stringify(result, null, 2)}\n` : formatRedrive(result));
    if (result.partitions.some((p) => p.outcome === 'waiting')) process.exitCode = 1;
    return result;
  } catch (error) {
    // A registry that does not answer, or refuses these credentials, is a service that cannot be used (exit 3),
    // never a reason to re-send.
    if (error instanceof RedriveRegistryUnavailableError) {
      throw new AwsUnavailableError(error.message, { cause: error });
    }
    // Like a round that waits for its checkpoint: nothing wrong with the input, the run did not finish (exit 1).
    if (error instanceof RedriveRoundClosedError)
      throw new ViolationFoundError(error.message, { cause: error });
    throw error;
  } finally {
    owned?.dynamodb.destroy();
    owned?.s3.destroy();
  }
}

export function registerRedriveCommand(program: Command, deps: RedriveDependencies = {}): Command {
  return program
    .command('redrive')
    .description(
      'send committed dead letters back through the exactly-once path with the current transform (each at most once)',
    )
    .option('--checkpoint <n>', 'only the dead letters checkpoint N committed', integer(1))
    .option('--all', 'every committed dead letter (the default)', false)
    .option('--table <name>', 'the ledger table (default $EOS_LEDGER_TABLE)')
    .option('--bucket <name>', 'the bucket (default $EOS_BUCKET)')
    .option('--pipeline <id>', 'the pipeline id (default $EOS_PIPELINE_ID, else orders)')
    .option(
      '--transform <ref>',
      "the fixed transform: a built-in's name or <path>[#<export>] (default $EOS_TRANSFORM)",
    )
    .option('--endpoint <url>', ENDPOINT_HELP, endpointUrl)
    .option('--json', 'print JSON instead of text', false)
    .addHelpText(
      'after',
      `
Every other processor setting comes from its EOS_* variable, as the processor Lambda reads it: run it with the
Lambda's settings. Exit codes: 0 done (or nothing to do); 1 a partition waits for its previous round's checkpoint;
2 bad usage or settings; 3 AWS cannot be reached or used, or the transform's schema registry does not answer or
refuses the credentials.`,
    )
    .action(async (raw: RedriveCommandOptions) => {
      if (raw.all && raw.checkpoint !== undefined) {
        throw new InvalidArgumentError('--all and --checkpoint exclude each other');
      }
      const environment = operatorEnvironment(deps.env);
      environment.requiredTable(raw.table || undefined);
      environment.requiredBucket(raw.bucket || undefined);
      await runRedrive(raw, deps);
    });
}
