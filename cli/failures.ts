/**
 * How every `eos` command ends: one exit code table and one line on stderr for whatever stopped it.
 *
 * | code | meaning                                                                                   |
 * | ---- | ----------------------------------------------------------------------------------------- |
 * | 0    | ok                                                                                        |
 * | 1    | the check ran and found a violation (verify's problems, a run that missed its guarantee,   |
 * |      | a committed file that does not match its manifest)                                         |
 * | 2    | bad usage or input: an unknown flag, a bad value, a missing required flag; nothing ran     |
 * | 3    | AWS cannot be reached or used: no region, no credentials, an unknown bucket or table, the  |
 * |      | endpoint down, access denied; for `eos local`, DynamoDB Local or the S3 server that cannot |
 * |      | start (no Java, a Java too old)                                                            |
 *
 * AWS SDK errors are told apart by their name, code and HTTP status (`$metadata`), never by `instanceof` on
 * a client's exception classes: a command must not load a client only to classify its errors.
 */
import { CommanderError, InvalidArgumentError } from 'commander';
import { OptionError } from '../local/errors.ts';
import { failedCallTarget } from '../shared/aws/call-target.ts';
import { MissingResourceError, PipelineError } from '../shared/errors.ts';

export const EXIT = { ok: 0, violation: 1, usage: 2, aws: 3 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export interface Failure {
  readonly code: ExitCode;
  /** One line, no stack: what went wrong and, where it helps, what to do. */
  readonly message: string;
}

/** A command's own "cannot use AWS" finding (a region missing before any call is made). */
export class AwsUnavailableError extends PipelineError {}

/**
 * The check found a violation and cannot go on (`eos read` met a committed file that does not match its
 * manifest). Commands wrap their implementation's error in it, so that this module loads no implementation.
 */
export class ViolationFoundError extends PipelineError {}

interface AwsLikeError {
  readonly name?: unknown;
  readonly code?: unknown;
  readonly message?: unknown;
  readonly $metadata?: { readonly httpStatusCode?: unknown };
  readonly errors?: unknown;
}

const NOT_FOUND = new Set(['NoSuchBucket', 'ResourceNotFoundException', 'NotFoundException', 'NotFound']);
const DENIED = new Set([
  'AccessDenied',
  'AccessDeniedException',
  'UnauthorizedOperation',
  'UnrecognizedClientException',
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'InvalidSignatureException',
  'ExpiredToken',
  'ExpiredTokenException',
  'InvalidClientTokenId',
  'AuthFailure',
]);
const CREDENTIALS = new Set(['CredentialsProviderError', 'TokenProviderError']);
const NETWORK = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'EPIPE',
]);

function text(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

/** One line: the first line of a message, whitespace collapsed. */
function oneLine(message: string): string {
  return message.split('\n')[0]!.replace(/\s+/g, ' ').trim();
}

/** The AWS side of an error, if it is one; `undefined` for anything else. */
function awsFailure(error: AwsLikeError): string | undefined {
  const name = text(error.name);
  const code = text(error.code);
  const message = oneLine(text(error.message));
  const status = error.$metadata?.httpStatusCode;
  if (message === 'Region is missing') {
    return 'no AWS region: set AWS_REGION or a region in your profile (~/.aws/config, AWS_PROFILE)';
  }
  if (CREDENTIALS.has(name)) {
    return `no AWS credentials: ${message} (set a profile with AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)`;
  }
  if (NOT_FOUND.has(name) || NOT_FOUND.has(code) || (status === 404 && name !== 'NoSuchKey')) {
    return `not found: ${message || name} (${name}; check the --bucket/--table names, the region and the endpoint)`;
  }
  if (DENIED.has(name) || status === 403) {
    return `access denied: ${message || name} (${name}; check the credentials and their permissions)`;
  }
  if (NETWORK.has(code) || NETWORK.has(name) || name === 'TimeoutError') {
    return `cannot reach AWS: ${message || code} (is the endpoint up and the URL right?)`;
  }
  // Node's happy-eyeballs connect gives an AggregateError of the per-address failures.
  if (Array.isArray(error.errors) && error.errors.length > 0) {
    const first = error.errors[0] as AwsLikeError;
    if (NETWORK.has(text(first.code))) return `cannot reach AWS: ${oneLine(text(first.message))}`;
  }
  return undefined;
}

/**
 * A package the command imports that is not installed, named: from an installed copy of eos (`npm install`),
 * `eos local`, `checkpoint` and `deliver` need the emulator, the local parts or the state machine interpreter,
 * which are development dependencies of the repository.
 */
function missingPackage(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') return undefined;
  const message = text((error as { message?: unknown }).message);
  const name = /Cannot find (?:package|module) '([^']+)'/.exec(message)?.[1] ?? 'a module';
  const shortName = /^(?:@[^/]+\/)?[^/]+/.exec(name.replace(/^.*\/node_modules\//, ''))?.[0] ?? name;
  return (
    `${shortName} is not installed: eos local, checkpoint and deliver need the repository's development ` +
    'dependencies (run them from a clone: git clone …, npm ci, npm start); verify, read, query, status, state, ' +
    'encode and cost work installed'
  );
}

/** `message` prefixed with the service and endpoint the failed call went to, when the error says. */
function naming(error: unknown, message: string): string {
  const target = failedCallTarget(error);
  if (target === undefined) return message;
  return `${target.service}${target.endpoint === undefined ? '' : ` at ${target.endpoint}`}: ${message}`;
}

/** The exit code and the one line to print for anything a command threw. */
export function classifyFailure(error: unknown): Failure {
  // Before CommanderError, which it extends: thrown by an action (a missing --bucket), nothing printed it yet.
  if (error instanceof InvalidArgumentError || error instanceof OptionError) {
    return { code: EXIT.usage, message: oneLine(error.message) };
  }
  if (error instanceof CommanderError) {
    // Commander has printed its own message (help, --version, a bad flag); 0 for help and --version.
    return { code: error.exitCode === 0 ? EXIT.ok : EXIT.usage, message: '' };
  }
  if (error instanceof AwsUnavailableError) return { code: EXIT.aws, message: oneLine(error.message) };
  if (error instanceof ViolationFoundError) return { code: EXIT.violation, message: oneLine(error.message) };
  if (typeof error === 'object' && error !== null) {
    const aws = awsFailure(error as AwsLikeError);
    if (aws !== undefined) return { code: EXIT.aws, message: naming(error, aws) };
    // An AWS error wrapped by our own (a transient failure, a missing resource) is classified by its cause.
    const cause = (error as { cause?: unknown }).cause;
    if (cause !== undefined && typeof cause === 'object' && cause !== null) {
      const inner = awsFailure(cause as AwsLikeError);
      if (inner !== undefined) return { code: EXIT.aws, message: naming(cause, inner) };
    }
  }
  // A table, bucket or local part that is missing or does not answer: AWS (or its local stand-in) unusable.
  if (error instanceof MissingResourceError) return { code: EXIT.aws, message: oneLine(error.message) };
  // An AWS call that failed some other way, even wrapped by our own error: most often an answer that is not the
  // service's (the endpoint of another server: DynamoDB Local's reply where S3's XML was expected).
  const failedCall = [error, (error as { cause?: unknown } | null)?.cause].find((e) => failedCallTarget(e));
  if (failedCall !== undefined) {
    const detail = failedCall instanceof Error ? oneLine(failedCall.message) : String(failedCall);
    return { code: EXIT.aws, message: naming(failedCall, `failed: ${detail} (is that endpoint right?)`) };
  }
  // Our other errors (a bad input file or setting) say what is wrong: bad usage or input.
  if (error instanceof PipelineError) return { code: EXIT.usage, message: oneLine(error.message) };
  const missing = missingPackage(error);
  if (missing !== undefined) return { code: EXIT.aws, message: missing };
  const message = error instanceof Error ? `${error.name}: ${oneLine(error.message)}` : String(error);
  // Anything else is unexpected (a defect of eos, most likely): it did not succeed, so 1, still on one line.
  return { code: EXIT.violation, message: `${message} (unexpected; rerun with --debug for the stack)` };
}

/** True when the stack should be printed too: `--debug` on the command line. */
export function debugRequested(argv: readonly string[] = process.argv): boolean {
  return argv.includes('--debug');
}

/** Writes the failure's one line (and the stack under `--debug`) and returns its exit code. */
export function reportFailure(
  error: unknown,
  writeError: (text: string) => void = (text) => process.stderr.write(text),
  debug: boolean = debugRequested(),
): ExitCode {
  const failure = classifyFailure(error);
  if (failure.message) writeError(`error: ${failure.message}\n`);
  if (debug && error instanceof Error && !(error instanceof CommanderError)) writeError(`${error.stack}\n`);
  return failure.code;
}
