/**
 * The monitor Lambda (scheduled by the stack every checkpoint interval): a thin middy wrapper over
 * {@link runMonitor}. Reads the same `EOS_*` settings as the other functions.
 */
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { systemClock } from '../shared/clock.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import { observability } from '../shared/observability/middleware.ts';
import { type MonitorReport, runMonitor } from '../shared/observability/monitor.ts';
import { createTelemetry } from '../shared/observability/telemetry.ts';

const settings = settingsFromEnv();
const { dynamodb } = createAwsClients();
const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'monitor' });

export const handler = middy()
  .use(observability(telemetry))
  .handler(
    (): Promise<MonitorReport> =>
      runMonitor({
        dynamodb,
        table: settings.ledgerTable,
        pipeline: settings.pipelineId,
        clock: systemClock,
        telemetry,
        // The stack gives the monitor the publish step's table settings when there is a table.
        publishes: settings.icebergCatalog !== undefined,
      }),
  );
