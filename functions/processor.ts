/**
 * The processor Lambda: a thin middy handler over `shared/processor`. Settings and clients are built once per
 * container (a malformed setting fails the cold start with a message naming it); the processor instance is kept
 * warm so that its cached fences save a read per batch. JSON logs carry the batch's correlation id (its
 * partitions and offset ranges, the same on every retry); EMF metrics count what each batch did, and the
 * processor's observer emits the structural ones (see `processor-metrics.ts`).
 */
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import { mskBatchCorrelationId } from '../shared/observability/correlation.ts';
import { observability } from '../shared/observability/middleware.ts';
import { batchCounts, processorObserver } from '../shared/observability/processor-metrics.ts';
import { createTelemetry, recordBatch } from '../shared/observability/telemetry.ts';
import { type BatchReport, createProcessor } from '../shared/processor/processor.ts';

const settings = settingsFromEnv();
const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'processor' });
// The observer emits the structural metrics (offsets backwards, fence jumps, key conflicts, rejected events) as they
// happen, failed invocations included.
const processor = createProcessor({
  settings,
  clients: createAwsClients(),
  observer: processorObserver(telemetry),
});

/** Throws on any transient failure so that the event source mapping retries the whole batch. */
export const handler = middy()
  .use(observability(telemetry, { correlationId: mskBatchCorrelationId }))
  .handler(async (event: unknown): Promise<BatchReport> => {
    const report = await processor.processEvent(event);
    const counts = batchCounts(report);
    recordBatch(telemetry.metrics, counts);
    telemetry.logger.info('batch staged', { ...counts, partitions: report.partitions.length });
    return report;
  });
