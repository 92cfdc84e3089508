/**
 * The processor Lambda's handler, as a factory over a transform: a thin middy handler over `shared/processor`.
 * Imported through `processor-handler.ts` (every decoder format ready, for a user's module) or by the stock
 * `processor.ts` (which loads the Avro and Protobuf codecs only for a transform that needs them).
 * The construct bundles a generated entry for a user's transform module,
 *
 * ```ts
 * import transform from '<the user's module>';
 * import { createProcessorHandler } from '<project>/functions/processor-handler.ts';
 * export const handler = createProcessorHandler({ transform });
 * ```
 * so the transform arrives by static import (esbuild bundles it) and is never looked up at run time; the built-ins
 * go through `functions/processor.ts`, which passes the one `EOS_TRANSFORM` names.
 *
 * Settings and clients are built once per container, when the factory is called at module load (a malformed
 * setting fails the cold start with a message naming it); the processor instance is kept warm so that its cached
 * fences save a read per batch. JSON logs carry the batch's correlation id (its partitions and offset ranges, the
 * same on every retry); EMF metrics count what each batch did, a partition that dropped redelivered records gets
 * a line of its own (for the Contributor Insights rule), and the processor's observer emits the structural ones
 * (see `processor-metrics.ts`).
 */
import middy from '@middy/core';
import { createAwsClients } from '../shared/aws/clients.ts';
import { formatIdempotencyKeySource, type Settings, settingsFromEnv } from '../shared/config/settings.ts';
import { InvalidBundledTransformError } from '../shared/errors.ts';
import { mskBatchCorrelationId } from '../shared/observability/correlation.ts';
import { observability } from '../shared/observability/middleware.ts';
import {
  batchCounts,
  logRedeliveryDrops,
  processorObserver,
  schemaLookupMisses,
} from '../shared/observability/processor-metrics.ts';
import { createTelemetry, recordBatch } from '../shared/observability/telemetry.ts';
import { type BatchReport, createProcessor } from '../shared/processor/processor.ts';
import { type AdapterDependencies, toTransform } from '../shared/transforms/adapter.ts';
import { isTransformDefinition } from '../shared/transforms/api.ts';

export interface ProcessorHandlerOptions {
  /** The transform's definition: the user module's export, or a built-in. */
  readonly transform: unknown;
  /** Defaults to `settingsFromEnv()` (the `EOS_*` variables; `EOS_TRANSFORM` is not used when a transform is given). */
  readonly settings?: Settings;
  /**
   * What the transform's decoders reach outside through: the registry fetch (default: the global `fetch`) and
   * Glue's `GetSchemaVersion` (none by default: the construct's generated entry passes
   * `glueSchemaVersionLookup()` from `shared/decode/glue-schemas.ts` only for a transform that declares a Glue
   * registry, so no other processor bundles the Glue client).
   */
  readonly decode?: AdapterDependencies;
}

export type ProcessorHandler = middy.MiddyfiedHandler<unknown, BatchReport>;

/** Builds the handler; throws at module load (a cold start) when the settings or the transform are invalid. */
export function createProcessorHandler(options: ProcessorHandlerOptions): ProcessorHandler {
  if (!isTransformDefinition(options.transform)) {
    const found = options.transform === null ? 'null' : typeof options.transform;
    throw new InvalidBundledTransformError(found);
  }
  const settings = options.settings ?? settingsFromEnv();
  const telemetry = createTelemetry({ pipeline: settings.pipelineId, component: 'processor' });
  // The observer emits the structural metrics (offsets backwards, fence jumps, key conflicts, rejected events) as
  // they happen, failed invocations included.
  const processor = createProcessor({
    settings,
    clients: createAwsClients(),
    transform: toTransform(options.transform, {
      onSchemaLookupMiss: schemaLookupMisses(telemetry),
      ...options.decode,
    }),
    observer: processorObserver(telemetry),
    // A coordinator of the release before inline entries may still run after a deploy: wait for it to be gone.
    inlineEntries: 'after-coordinator-upgrade',
  });
  /** Throws on any transient failure so that the event source mapping retries the whole batch. */
  return middy<unknown, BatchReport>()
    .use(observability(telemetry, { correlationId: mskBatchCorrelationId }))
    .handler(async (event: unknown): Promise<BatchReport> => {
      const report = await processor.processEvent(event);
      const counts = batchCounts(report);
      recordBatch(telemetry.metrics, counts);
      telemetry.logger.info('batch staged', { ...counts, partitions: report.partitions.length });
      if (counts.missingKeys > 0) {
        // Usually a key source naming the wrong header or field (json:deviceid for deviceId): say which.
        telemetry.logger.warn('records without an idempotency key', {
          missingKeys: counts.missingKeys,
          idempotencyKey: formatIdempotencyKeySource(settings.idempotencyKey),
          missingIdempotencyKey: settings.missingIdempotencyKey,
        });
      }
      logRedeliveryDrops(telemetry.logger, report);
      return report;
    });
}
