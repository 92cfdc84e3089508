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
