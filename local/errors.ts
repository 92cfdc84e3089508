/** Errors of the local runner: the emulator, fault specs and input files. All extend {@link PipelineError}. */
import { PipelineError } from '../shared/errors.ts';

/** A record that could never fit in one invocation's payload, so the mapping could never deliver it. */
export class RecordTooLargeError extends PipelineError {
  constructor(
    readonly partition: number,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super(
      `a record of ${bytes} bytes (as sent in the event) exceeds the ${limit}-byte invocation payload limit`,
    );
  }
}

/** A partition the log does not have. */
export class UnknownPartitionError extends PipelineError {
  constructor(
    readonly partition: number,
    readonly partitions: number,
  ) {
    super(`partition ${partition} is out of range (the topic has partitions 0..${partitions - 1})`);
  }
}

/** The input file cannot be used; `line` is 1-based, absent when the whole file is at fault. */
export class InputFileError extends PipelineError {
  constructor(
    readonly file: string,
    readonly line: number | undefined,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${file}${line === undefined ? '' : `:${line}`}: ${message}`, options);
  }
}

/** A command-line option (or fault spec) is malformed; `option` names it as the user wrote it. */
export class OptionError extends PipelineError {
  constructor(
    readonly option: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`${option}: ${message}`, options);
  }
}

/** A batch kept failing with errors that were not injected: the pipeline has a real problem. */
export class BatchRetriesExhaustedError extends PipelineError {
  constructor(
    readonly partitions: readonly number[],
    readonly attempts: number,
    options?: { cause?: unknown },
  ) {
    const detail = options?.cause instanceof Error ? `: ${options.cause.message}` : '';
    super(`batch of partitions ${partitions.join(', ')} failed ${attempts} times${detail}`, options);
  }
}

/**
 * The table or bucket of an `eos local` run already holds its pipeline (an earlier run's): the run would judge
 * rows and items it did not produce. `found` says what, one clause per resource.
 */
export class PipelineInUseError extends PipelineError {
  constructor(
    readonly pipeline: string,
    readonly found: readonly string[],
  ) {
    super(
      `pipeline ${pipeline} is already there: ${found.join('; ')}. A run would judge what it did not produce: ` +
        'use another EOS_PIPELINE_ID, EOS_LEDGER_TABLE or EOS_BUCKET, or --reuse to run on them anyway',
    );
  }
}
