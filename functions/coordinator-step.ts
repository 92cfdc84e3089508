/**
 * What every coordinator Lambda entry shares: the telemetry (JSON logs, EMF metrics) of the `coordinator`
 * component, the protocol's log on top of it, and the middy wrapper of one step, whose JSON logs carry the
 * checkpoint id as correlation id and the step's name.
 */
import middy from '@middy/core';
import { DEFAULT_PIPELINE_ID } from '../shared/config/settings.ts';
import type { CoordinatorLog } from '../shared/coordinator/coordinator.ts';
import { fieldCorrelationId } from '../shared/observability/correlation.ts';
import { observability } from '../shared/observability/middleware.ts';
import { createTelemetry } from '../shared/observability/telemetry.ts';

export const telemetry = createTelemetry({
  pipeline: process.env.EOS_PIPELINE_ID || DEFAULT_PIPELINE_ID,
  component: 'coordinator',
});

export const log: CoordinatorLog = {
  info: (message, extra) => telemetry.logger.info(message, extra ?? {}),
  error: (message, extra) => telemetry.logger.error(message, extra ?? {}),
};

/** One step's handler: `run` gets the raw payload, validates it and calls the protocol. */
export function step<T>(name: string, run: (event: unknown) => Promise<T>) {
  return middy(async (event: unknown): Promise<T> => {
    telemetry.logger.appendKeys({ step: name });
    return run(event);
  }).use(observability(telemetry, { correlationId: fieldCorrelationId('checkpointId') }));
}
