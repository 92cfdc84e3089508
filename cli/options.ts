/** Option parsers for the `eos` commands: each rejects bad input with a message commander prefixes with the option. */
import { InvalidArgumentError } from 'commander';

export function integer(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(
        `expected an integer in ${min}..${max === Number.MAX_SAFE_INTEGER ? '' : max}`,
      );
    }
    return n;
  };
}

export function oneOf<T extends string>(choices: readonly T[]) {
  return (value: string): T => {
    if (!(choices as readonly string[]).includes(value)) {
      throw new InvalidArgumentError(`expected one of ${choices.join(', ')}`);
    }
    return value as T;
  };
}

/** `--table`, else `$EOS_LEDGER_TABLE` (an empty variable is unset); a usage error when neither is given. */
export function requiredTable(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  const table = flag ?? (env.EOS_LEDGER_TABLE || undefined);
  if (!table) throw new InvalidArgumentError('--table is required (or set EOS_LEDGER_TABLE)');
  return table;
}

/** `--pipeline`, else `$EOS_PIPELINE_ID` (an empty variable is unset), else `orders`. */
export function pipelineIdOf(flag: string | undefined, env: NodeJS.ProcessEnv): string {
  return flag ?? (env.EOS_PIPELINE_ID || 'orders');
}

/** `--endpoint` and its kin: an absolute http(s) URL (LocalStack's `http://localhost:4566`, say). */
export function endpointUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('expected an http(s) URL, like http://localhost:4566');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidArgumentError(`expected an http(s) URL, got the scheme ${url.protocol}`);
  }
  return value;
}

/** The one `--endpoint` help text, the same on every command. */
export const ENDPOINT_HELP =
  'an AWS-compatible endpoint for every service (LocalStack, say); default $AWS_ENDPOINT_URL';

/**
 * The endpoint a command uses: the flag, else `AWS_ENDPOINT_URL` (validated the same way, so a typo in the
 * variable is a usage error, not an unreachable host). `undefined`: AWS, or the SDK's per-service variables.
 */
export function resolveEndpoint(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (flag !== undefined) return flag;
  const fromEnv = env.AWS_ENDPOINT_URL;
  if (fromEnv === undefined || fromEnv === '') return undefined;
  try {
    return endpointUrl(fromEnv);
  } catch (error) {
    throw new InvalidArgumentError(`AWS_ENDPOINT_URL: ${(error as Error).message}`);
  }
}

/** An MSK cluster's region, from its ARN. */
export function regionOf(arn: string): string | undefined {
  return /^arn:[^:]+:kafka:([^:]+):/.exec(arn)?.[1];
}
