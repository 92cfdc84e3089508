/** `eos verify --bucket B [--prefix P]`: checks a bucket's committed layout (see `shared/sink/verify.ts`). */
import type { Command } from 'commander';
import { createAwsClients } from '../shared/aws/clients.ts';
import { finalPrefix } from '../shared/sink/layout.ts';
import { formatVerifyResult, type VerifyResult, verifySink } from '../shared/sink/verify.ts';

export interface VerifyDependencies {
  readonly env?: NodeJS.ProcessEnv;
  readonly write?: (text: string) => void;
}

export async function runVerifyCommand(
  options: { bucket: string; prefix: string; json?: boolean },
  deps: VerifyDependencies = {},
): Promise<{ result: VerifyResult; exitCode: number }> {
  const { s3 } = createAwsClients(deps.env ?? process.env);
  const result = await verifySink({ s3, bucket: options.bucket, prefix: options.prefix });
  const write = deps.write ?? ((text: string) => process.stdout.write(text));
  write(options.json ? `${JSON.stringify(result, null, 2)}\n` : `${formatVerifyResult(result, 200)}\n`);
  return { result, exitCode: result.ok ? 0 : 1 };
}

export function registerVerifyCommand(program: Command, deps: VerifyDependencies = {}): Command {
  return program
    .command('verify')
    .description(
      'check the committed output under a final prefix: exit 0 when every invariant holds, 1 otherwise',
    )
    .requiredOption('--bucket <name>', 'the sink bucket')
    .option('--prefix <prefix>', "the pipeline's final prefix", finalPrefix('orders'))
    .option('--json', 'print the result as JSON', false)
    .action(async (options: { bucket: string; prefix: string; json: boolean }) => {
      process.exitCode = (await runVerifyCommand(options, deps)).exitCode;
    });
}
