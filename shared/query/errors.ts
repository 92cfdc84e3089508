/**
 * The errors of `eos query`, each mapped to an exit code by cli/failures.ts through its base class:
 * a missing engine is a missing resource (3, like a missing Java for `eos local`), bad SQL is bad input (2).
 * A committed file that does not match its manifest stays the reader's `CommittedFileError` (the command turns it
 * into a violation, 1).
 */
import { MissingResourceError, PipelineError } from '../errors.ts';

/** The query engine (`@duckdb/node-api`, an optional dependency) cannot be loaded. */
export class QueryEngineMissingError extends MissingResourceError {
  constructor(options?: { cause?: unknown }) {
    const detail = options?.cause instanceof Error ? ` (${options.cause.message.split('\n')[0]})` : '';
    super(
      'eos query',
      `needs DuckDB's Node API, an optional dependency that is not installed here: run \`npm install @duckdb/node-api\`${detail}`,
      options,
    );
  }
}

/** The user's SQL was refused or failed in DuckDB; the message is DuckDB's first line. */
export class QuerySqlError extends PipelineError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(`the query failed: ${message}`, options);
  }
}

/** An export directory that holds no export of this pipeline (no `bucket/<pipeline>/_manifests/`). */
export class ExportDirectoryError extends PipelineError {}
