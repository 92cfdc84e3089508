/**
 * The checkpoint coordinator's Lambda handlers: one per step of the state machine (`shared/coordinator`), each a
 * thin middy wrapper that validates the payload and calls the protocol. Settings come from `EOS_*` variables.
 * A thrown error's `name` becomes the Step Functions error name (`TransientAwsError` is retried in place; the
 * rest, before the decision, Catch into abort). JSON logs carry the checkpoint id as correlation id; commit and
 * abort emit the checkpoint metrics the alarms watch (commit also `CommitLatency`, which the commit step computes).
 * The publish step, deployed only with an Iceberg table, is an entry of its own (`coordinator-publish.ts`).
 */
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { createAwsClients } from '../shared/aws/clients.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../shared/coordinator/coordinator.ts';
import {
  abortInputSchema,
  beginInputSchema,
  checkpointRefSchema,
  shardInputSchema,
} from '../shared/coordinator/messages.ts';
import { METRIC } from '../shared/observability/names.ts';
import { recordCheckpoint } from '../shared/observability/telemetry.ts';
import { log, step, telemetry } from './coordinator-step.ts';

let coordinator: Coordinator | undefined;

/** Built on first use, so that a bad setting fails the invocation with an error that names it. */
function core(): Coordinator {
  coordinator ??= createCoordinator({ settings: settingsFromEnv(), clients: createAwsClients(), log });
  return coordinator;
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
export const cleanup = step('cleanup', (event) => core().cleanup(shardInputSchema.parse(event)));
export const abort = step('abort', async (event) => {
  const output = await core().abort(abortInputSchema.parse(event));
  if (output.outcome === 'aborted')
    telemetry.metrics.addMetric(METRIC.checkpointsAborted, MetricUnit.Count, 1);
  return output;
});
