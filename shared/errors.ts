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

/**
 * A partition's offsets went backwards past its fence (L2): a recreated topic, a consumer group reset to an
 * earlier offset, a migrated cluster. The batch's records cannot be told from a redelivery by position alone, and
 * the fence's fingerprints say they are not one; the partition stops (nothing is acknowledged) until an operator
 * resumes it. `fence` is the staged offset, `firstOffset`/`lastOffset` the batch's range.
 */
export class OffsetsWentBackwardsError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly fence: number,
    readonly firstOffset: number,
    readonly lastOffset: number,
    readonly reason: string,
  ) {
    super(
      `offsets of ${topic}-${partition} went backwards: batch ${firstOffset}..${lastOffset} against fence ` +
        `${fence}: ${reason}; the partition stops until an operator resumes it`,
    );
  }
}

/**
 * A batch at or below its partition's fence that nothing proves a redelivery, judged while the fence moved during
 * this invocation (L2, P4): a zombie's stale batch (already retried and acknowledged) and a live batch of another
 * generation look alike then, and the clock comparison that said "moved" is no evidence either way. Nothing is
 * acknowledged and nothing is recorded: the invocation fails so that the mapping retries the batch in a fresh
 * invocation, which judges it as delivered (a zombie's failure is discarded, its batch was acknowledged already).
 * Retryable: `$retryable` is the AWS SDK's mark `isTransient` honours, so every classifier (claim release, stop
 * reporting, the handler's log) treats it as a transient failure, never as a stop.
 */
export class UnprovenRedeliveryError extends PipelineError {
  readonly $retryable = { throttling: false };

  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly fence: number,
    readonly firstOffset: number,
    readonly lastOffset: number,
  ) {
    super(
      `batch ${firstOffset}..${lastOffset} of ${topic}-${partition} lies below the start of the last batch staged ` +
        `at fence ${fence}, which moved while this invocation ran, and no fingerprint proves it a redelivery; ` +
        'nothing acknowledged, the batch will be retried',
    );
  }
}

/** An event from a source or topic this processor is not configured for; rejected before any effect. */
export class EventSourceRejectedError extends PipelineError {
  constructor(
    readonly check: 'event-source' | 'topic',
    readonly got: string,
    readonly allowed: readonly string[],
  ) {
    super(`event rejected: ${check} "${got}" is not one of the configured (${allowed.join(', ')})`);
  }
}

/**
 * A staging transaction would break a DynamoDB limit (an item over 400 KB, for example a state item grown over many
 * records): structural, never retried as transient. Names the partition and the item(s) DynamoDB refused.
 */
export class ItemLimitExceededError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly items: readonly string[],
    readonly detail: string,
    options?: { cause?: unknown },
  ) {
    super(
      `staging ${topic}-${partition} exceeds a DynamoDB limit at ${items.join(', ') || 'an item'}: ${detail}`,
      options,
    );
  }
}

/**
 * A record's topic is not a Kafka topic name (1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`). Topic names become
 * parts of S3 keys and ledger keys, so such an event is rejected whole, before any effect.
 */
export class InvalidTopicNameError extends MalformedEventError {
  constructor(
    path: string,
    readonly topic: string,
  ) {
    super(
      path,
      `${JSON.stringify(topic)} is not a Kafka topic name (1-249 of [a-zA-Z0-9._-], not "." or "..")`,
    );
  }
}

/** A ledger item the pipeline reads does not have the shape the pipeline writes (corrupted or forged): structural. */
export class MalformedLedgerItemError extends PipelineError {
  constructor(
    readonly item: string,
    message: string,
  ) {
    super(`ledger item ${item} is malformed: ${message}`);
  }
}

/**
 * The `transform` setting names no built-in transform (and is not a module path: see `shared/transforms/load.ts`).
 * `known` lists the built-ins.
 */
export class UnknownTransformError extends PipelineError {
  constructor(
    readonly transformName: string,
    readonly known: readonly string[],
  ) {
    super(
      `unknown transform "${transformName}": not a built-in (known: ${known.join(', ')}) and not a module path` +
        ' (a path to a .ts/.js/.mjs file, optionally followed by #<export>)',
    );
  }
}

/** A transform module named by path does not exist. `path` is the resolved absolute path. */
export class TransformModuleNotFoundError extends PipelineError {
  constructor(
    readonly path: string,
    options?: { cause?: unknown },
  ) {
    super(`transform module not found: ${path}`, options);
  }
}

/**
 * A transform module imports something that does not resolve from where the module lives (a package not installed
 * in the user's project). The transform API itself always resolves (`transforms/load.ts`).
 */
export class TransformDependencyMissingError extends PipelineError {
  constructor(
    readonly path: string,
    readonly dependency: string,
    options?: { cause?: unknown },
  ) {
    const pkg = dependency.startsWith('@')
      ? dependency.split('/').slice(0, 2).join('/')
      : dependency.split('/')[0];
    super(
      `transform module ${path} imports '${dependency}', which does not resolve from its folder: install it there (npm install ${pkg}) or import it by a relative path`,
      options,
    );
  }
}

/** A transform module loads but has no export of that name. `found` lists the exports it has. */
export class TransformExportMissingError extends PipelineError {
  constructor(
    readonly path: string,
    readonly exportName: string | undefined,
    readonly found: readonly string[],
  ) {
    const exports = found.length === 0 ? 'none' : found.join(', ');
    super(
      exportName === undefined
        ? `transform module ${path} has no default export and no single export made by defineTransform (exports: ${exports})`
        : `transform module ${path} has no export "${exportName}" (exports: ${exports})`,
    );
  }
}

/** A transform module's export exists but was not made by `defineTransform`. */
export class NotATransformError extends PipelineError {
  constructor(
    readonly path: string,
    readonly exportName: string,
    readonly found: string,
  ) {
    super(
      `export "${exportName}" of ${path} is not a transform made by defineTransform (it is ${found}); ` +
        'write `export default defineTransform({ … })`',
    );
  }
}

/** A schema or definition mistake, found when the module is loaded (never per record). */
export class InvalidTransformDefinitionError extends PipelineError {
  constructor(
    readonly transformName: string,
    message: string,
  ) {
    super(`transform "${transformName}": ${message}`);
  }
}

/** The processor handler was given something not made by `defineTransform` (synth should have refused it). */
export class InvalidBundledTransformError extends PipelineError {
  constructor(readonly found: string) {
    super(`the processor's transform is not a transform made by defineTransform (it is ${found})`);
  }
}
