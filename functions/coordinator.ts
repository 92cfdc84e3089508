/**
 * The checkpoint coordinator's Lambda handlers: one per step of the state machine (`shared/coordinator`), each a
 * thin middy wrapper that validates the payload and calls the protocol. Settings come from `EOS_*` variables.
 * A thrown error's `name` becomes the Step Functions error name (`TransientAwsError` is retried in place; the
 * rest, before the decision, Catch into abort). JSON logs carry the checkpoint id as correlation id; commit and
 * abort emit the checkpoint metrics the alarms watch (commit also `CommitLatency`, which the commit step computes).
 * `publish` is deployed only with an Iceberg table (`EOS_ICEBERG_*`, on its function alone): its coordinator also
 * holds the table's catalog.
 */
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { DEFAULT_PIPELINE_ID, settingsFromEnv } from '../shared/config/settings.ts';
import {
  type Coordinator,
  type CoordinatorLog,
  createCoordinator,
} from '../shared/coordinator/coordinator.ts';
import {
  abortInputSchema,
  beginInputSchema,
  checkpointRefSchema,
  shardInputSchema,
} from '../shared/coordinator/messages.ts';
import { publishTargetFromSettings } from '../shared/coordinator/publish/target-from-settings.ts';
import { fieldCorrelationId } from '../shared/observability/correlation.ts';
import { observability } from '../shared/observability/middleware.ts';
import { METRIC } from '../shared/observability/names.ts';
import { createTelemetry, recordCheckpoint } from '../shared/observability/telemetry.ts';

const telemetry = createTelemetry({
  pipeline: process.env.EOS_PIPELINE_ID || DEFAULT_PIPELINE_ID,
  component: 'coordinator',
});

const log: CoordinatorLog = {
  info: (message, extra) => telemetry.logger.info(message, extra ?? {}),
  error: (message, extra) => telemetry.logger.error(message, extra ?? {}),
};

let coordinator: Coordinator | undefined;

/** Built on first use, so that a bad setting fails the invocation with an error that names it. */
function core(): Coordinator {
  coordinator ??= createCoordinator({ settings: settingsFromEnv(), clients: createAwsClients(), log });
  return coordinator;
}

let publisher: Promise<Coordinator> | undefined;

/**
 * The coordinator with the table it publishes to, built on first use (an S3 Tables catalog asks the service for the
 * table's location once); a failed build is not kept, so the next invocation tries again.
 */
function publishingCore(): Promise<Coordinator> {
  publisher ??= (async () => {
    const settings = settingsFromEnv();
    const clients = createAwsClients();
    const publishTarget = await publishTargetFromSettings(settings, clients);
    return createCoordinator({ settings, clients, log, ...(publishTarget ? { publishTarget } : {}) });
  })().catch((error: unknown) => {
    publisher = undefined;
    throw error;
  });
  return publisher;
}

function step<T>(name: string, run: (event: unknown) => Promise<T>) {
  return middy(async (event: unknown): Promise<T> => {
    telemetry.logger.appendKeys({ step: name });
    return run(event);
  }).use(observability(telemetry, { correlationId: fieldCorrelationId('checkpointId') }));
}

export const begin = step('begin', (event) => core().begin(beginInputSchema.parse(event)));
export const prepare = step('prepare', (event) => core().prepare(shardInputSchema.parse(event)));
export const decide = step('decide', (event) => core().decide(checkpointRefSchema.parse(event)));
export const promote = step('promote', (event) => core().promote(shardInputSchema.parse(event)));
export const commit = step('commit', async (event) => {
  const output = await core().commit(checkpointRefSchema.parse(event));
  recordCheckpoint(telemetry.metrics, {
    outcome: 'committed',
    durationMs: Date.now() - output.begunAt,
    commitLatencyMs: output.commitLatencyMs,
  });
  return output;
});
export const publish = step('publish', async (event) => {
  const input = checkpointRefSchema.parse(event);
  return (await publishingCore()).publish(input);
});
export const cleanup = step('cleanup', (event) => core().cleanup(shardInputSchema.parse(event)));
export const abort = step('abort', async (event) => {
  const output = await core().abort(abortInputSchema.parse(event));
  if (output.outcome === 'aborted')
    telemetry.metrics.addMetric(METRIC.checkpointsAborted, MetricUnit.Count, 1);
  return output;
});
