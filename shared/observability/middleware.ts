/**
 * The middy middlewares every pipeline handler uses, in one call:
 *
 * ```ts
 * const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'processor' });
 * export const handler = middy(core).use(observability(telemetry, { correlationId: mskBatchCorrelationId }));
 * ```
 *
 * 1. Powertools `injectLambdaContext`: the Lambda context (request id, cold start, function) in every log line;
 *    keys appended during an invocation are reset after it.
 * 2. Powertools `logMetrics`: flushes the invocation's EMF metrics after success and after failure alike, so a
 *    failed batch's counts are not lost (a retry emits its own).
 * 3. Correlation: sets the logger's correlation id (see `correlation.ts`) and logs a failed invocation once, with
 *    whether it is transient (the mapping retries the batch) or not.
 */
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import type { MiddlewareObj } from '@middy/core';
import { isTransient } from '../aws/classify.ts';
import type { Telemetry } from './telemetry.ts';

export interface ObservabilityOptions {
  /** Derives the correlation id from the event; without it the log lines carry none. */
  readonly correlationId?: (event: unknown) => string | undefined;
  /** Log the whole incoming event (debugging only: records may hold personal data). */
  readonly logEvent?: boolean;
}

export function observability(telemetry: Telemetry, options: ObservabilityOptions = {}): MiddlewareObj[] {
  return [
    injectLambdaContext(telemetry.logger, {
      resetKeys: true,
      logEvent: options.logEvent ?? false,
    }) as MiddlewareObj,
    logMetrics(telemetry.metrics, { captureColdStartMetric: true }) as MiddlewareObj,
    correlation(telemetry, options.correlationId),
  ];
}

function correlation(
  telemetry: Telemetry,
  derive: ((event: unknown) => string | undefined) | undefined,
): MiddlewareObj {
  return {
    before: (request) => {
      const id = derive?.(request.event);
      if (id !== undefined) telemetry.logger.setCorrelationId(id);
    },
    onError: (request) => {
      telemetry.logger.error('invocation failed', {
        transient: isTransient(request.error),
        error: request.error as Error,
      });
    },
  };
}
