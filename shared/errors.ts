/**
 * One family of errors for the whole pipeline. Match with `instanceof`, never by name strings.
 * Every error sets `name`, chains `cause`, and may carry the context that explains it.
 */
export class PipelineError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A setting is missing or malformed. `setting` names it the way the user wrote it (env var or option). */
export class InvalidSettingError extends PipelineError {
  constructor(
    readonly setting: string,
    message: string,
  ) {
    super(`invalid setting ${setting}: ${message}`);
  }
}

/** The incoming event does not match the MSK event schema. `path` names the bad field. */
export class MalformedEventError extends PipelineError {
  constructor(
    readonly path: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`malformed MSK event at ${path}: ${message}`, options);
  }
}

/**
 * A failure that is expected to pass: throttling, a 5xx, a transaction conflict, a network error.
 * The processor lets it escape so that the event source mapping retries the whole batch (P5, P6).
 */
export class TransientAwsError extends PipelineError {
  constructor(
    readonly operation: string,
    options?: { cause?: unknown },
  ) {
    const detail = options?.cause instanceof Error ? `${options.cause.name}: ${options.cause.message}` : '';
    super(
      `transient AWS error in ${operation}${detail ? ` (${detail})` : ''}; the batch will be retried`,
      options,
    );
  }
}

/** A resource the pipeline needs (table, bucket) does not exist or is not reachable with these settings. */
export class MissingResourceError extends PipelineError {
  constructor(
    readonly resource: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${resource}: ${message}`, options);
  }
}

/** A crash injected by a fault schedule (tests and the local runner only). */
export class InjectedCrashError extends PipelineError {
  constructor(readonly step: string) {
    super(`injected crash at ${step}`);
  }
}
