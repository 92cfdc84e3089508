/**
 * Error classification: which AWS failures are transient (retry the whole batch) and which are not. Everything
 * not transient is deterministic: the same request fails the same way on every retry, so the processor treats it
 * as a stop (and releases its claims written ahead), never as something a retry could fix. Limits DynamoDB
 * enforces per request ({@link isLimitExceeded}) are the structural kind named by `ItemLimitExceededError`.
 */
import { TransientAwsError } from '../errors.ts';

const TRANSIENT_NAMES = new Set([
  'ThrottlingException',
  'Throttling',
  'ThrottledException',
  'ProvisionedThroughputExceededException',
  'RequestLimitExceeded',
  'TransactionConflictException',
  'TransactionInProgressException',
  'InternalServerError',
  'InternalError',
  'ServiceUnavailable',
  'ServiceUnavailableException',
  'SlowDown',
  'RequestTimeout',
  'RequestTimeoutException',
  'TimeoutError',
  'ECONNRESET',
  'ECONNREFUSED',
  'EPIPE',
  'ETIMEDOUT',
  // Network failures below HTTP (DNS, routing, an aborted socket): the request may not have reached DynamoDB, or
  // may have been applied; either way a retry of the whole batch is what resolves it, never a release or a stop.
  'EAI_AGAIN',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EHOSTDOWN',
  'ECONNABORTED',
  'ESOCKETTIMEDOUT',
  'NetworkingError',
  'AbortError',
]);

interface AwsLikeError {
  name?: string;
  code?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: unknown;
}

/** True for throttling, 5xx, transaction conflicts and network errors. */
export function isTransient(error: unknown): boolean {
  if (error instanceof TransientAwsError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const e = error as AwsLikeError;
  if (e.name && TRANSIENT_NAMES.has(e.name)) return true;
  if (e.code && TRANSIENT_NAMES.has(e.code)) return true;
  const status = e.$metadata?.httpStatusCode;
  if (status !== undefined && status >= 500) return true;
  return Boolean(e.$retryable);
}

/** DynamoDB's per-item cancellation reasons of a cancelled transaction, or undefined for other errors. */
export interface CancellationReason {
  Code?: string;
  Message?: string;
  Item?: Record<string, unknown>;
}

export function cancellationReasons(error: unknown): CancellationReason[] | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const e = error as { name?: string; CancellationReasons?: CancellationReason[] };
  return e.name === 'TransactionCanceledException' ? (e.CancellationReasons ?? []) : undefined;
}

/** A conditional write that lost: a ConditionalCheckFailedException, or a transaction a failed condition cancelled. */
export function isConditionFailure(error: unknown): boolean {
  if ((error as { name?: unknown } | null)?.name === 'ConditionalCheckFailedException') return true;
  return (cancellationReasons(error) ?? []).some((reason) => reason.Code === 'ConditionalCheckFailed');
}

/** Re-throws transient errors as {@link TransientAwsError}; others unchanged. */
export function rethrowClassified(operation: string, error: unknown): never {
  if (error instanceof TransientAwsError) throw error;
  if (isTransient(error)) throw new TransientAwsError(operation, { cause: error });
  const reasons = cancellationReasons(error);
  if (reasons?.some((reason) => reason.Code === 'TransactionConflict' || reason.Code === 'ThrottlingError')) {
    throw new TransientAwsError(operation, { cause: error });
  }
  throw error;
}

/**
 * DynamoDB refused the request for a limit it enforces per item or request (an item over 400 KB, for example a
 * state item grown over many records): a `ValidationException` about a size or limit, or a cancelled transaction
 * whose reasons include a `ValidationError`. Deterministic: a retry sends the same items.
 */
export function isLimitExceeded(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  const e = error as { name?: string; message?: string };
  if (e.name === 'ValidationException') return /size|exceed|limit/i.test(e.message ?? '');
  return cancellationReasons(error)?.some((reason) => reason.Code === 'ValidationError') ?? false;
}
