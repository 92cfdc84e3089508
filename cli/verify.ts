/**
 * `eos verify --bucket B [--pipeline P]`: checks a pipeline's committed layout (see `shared/sink/verify.ts`):
 * its manifests under `<P>/_manifests/` and its data under `<P>/final/`. The older `--prefix <P>/final/` still
 * works and names the same pipeline.
 */
import type { Command } from 'commander';
import { createAwsClients } from '../shared/aws/clients.ts';
import { formatVerifyResult, type VerifyResult, verifySink } from '../shared/sink/verify.ts';

export interface VerifyDependencies {
  readonly env?: NodeJS.ProcessEnv;
  readonly write?: (text: string) => void;
}

export async function runVerifyCommand(
  options: { bucket: string; pipeline?: string; prefix?: string; json?: boolean },
  deps: VerifyDependencies = {},
): Promise<{ result: VerifyResult; exitCode: number }> {
  const { s3 } = createAwsClients(deps.env ?? process.env);
  const which =
    options.prefix !== undefined && options.pipeline === undefined
      ? { prefix: options.prefix }
      : { pipeline: options.pipeline ?? 'orders' };
  const result = await verifySink({ s3, bucket: options.bucket, ...which });
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  write(options.json ? `${JSON.stringify(result, null, 2)}\n` : `${formatVerifyResult(result, 200)}\n`);
  return { result, exitCode: result.ok ? 0 : 1 };
}

export function registerVerifyCommand(program: Command, deps: VerifyDependencies = {}): Command {
  return program
    .command('verify')
    .description(
      "check a pipeline's committed output (manifests and final data): exit 0 when every invariant holds, 1 otherwise",
    )
    .requiredOption('--bucket <name>', 'the sink bucket')
    .option('--pipeline <id>', 'the pipeline id (its root prefix in the bucket); default orders')
    .option('--prefix <prefix>', "older form: the pipeline's final prefix, <pipeline>/final/")
    .option('--json', 'print the result as JSON', false)
    .action(async (options: { bucket: string; pipeline?: string; prefix?: string; json: boolean }) => {
      process.exitCode = (await runVerifyCommand(options, deps)).exitCode;
    });
}
