/**
 * Which service and endpoint a failed AWS call went to, carried on its error (`clients.ts` tags every error its
 * clients throw), so that the CLI's one-line message can say which of them answered. A module of its own, without
 * the SDK, so that the CLI's failure messages load nothing heavy.
 */
export type AwsService = 'DynamoDB' | 'S3';

export interface FailedCallTarget {
  readonly service: AwsService;
  /** undefined: AWS's own endpoint for the region. */
  readonly endpoint: string | undefined;
}

const TARGET = Symbol.for('eos.failedCallTarget');

/** `error`, tagged with `target` unless it already names one (the innermost call is the one that failed). */
export function tagWithTarget(error: unknown, target: FailedCallTarget): unknown {
  if (typeof error === 'object' && error !== null && !(TARGET in error))
    Object.defineProperty(error, TARGET, { value: target, enumerable: false });
  return error;
}

/** The service and endpoint of the call an error came from, when it came from the pipeline's clients. */
export function failedCallTarget(error: unknown): FailedCallTarget | undefined {
  return typeof error === 'object' && error !== null
    ? (error as { [TARGET]?: FailedCallTarget })[TARGET]
    : undefined;
}
