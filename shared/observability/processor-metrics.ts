/**
 * What the processor's batch report and its observer events mean in metrics and logs (the processor handler wires
 * both). Metric names come from `names.ts`, which the stack's alarms read.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import type { SchemaLookupMiss } from '../decode/decoders.ts';
import { OffsetsWentBackwardsError } from '../errors.ts';
import type { BatchReport, ProcessorObserver } from '../processor/processor.ts';
import { METRIC, REDELIVERY_DROPS_LOG } from './names.ts';
import type { BatchCounts, Telemetry } from './telemetry.ts';

/**
 * Sums a batch report over its partitions. "Staged" counts every record whose effects a staging transaction made
 * durable (P1), dead-lettered ones included — they are staged too, into the dead-letter stream (P6).
 */
export function batchCounts(report: BatchReport): BatchCounts {
  let staged = 0;
  let duplicatesByOffset = 0;
  let duplicatesByKey = 0;
  let deadLettered = 0;
  let missingKeys = 0;
  for (const partition of report.partitions) {
    staged += partition.received - partition.duplicatesByOffset - partition.duplicatesByKey;
    duplicatesByOffset += partition.duplicatesByOffset;
    duplicatesByKey += partition.duplicatesByKey;
    deadLettered += partition.deadLettered;
    missingKeys += partition.missingKeys;
  }
  return { staged, duplicatesByOffset, duplicatesByKey, deadLettered, missingKeys };
}

/**
 * One structured line per partition of the batch that dropped redelivered records, naming topic, partition and
 * the count (`REDELIVERY_DROPS_LOG`): the stack's Contributor Insights rule sums them by topic and partition, so a
 * burst on one partition (offsets went backwards, a consumer group reset, a mapping that lost its offset commits)
 * stands out, which the `DuplicatesDroppedByOffset` total cannot show without a dimension per partition.
 */
export function logRedeliveryDrops(logger: Pick<Logger, 'info'>, report: BatchReport): void {
  for (const p of report.partitions) {
    if (p.duplicatesByOffset === 0) continue;
    logger.info(REDELIVERY_DROPS_LOG.message, {
      topic: p.topic,
      partition: p.partition,
      [REDELIVERY_DROPS_LOG.countField]: p.duplicatesByOffset,
      received: p.received,
    });
  }
}

/**
 * The processor's events as metrics and logs, emitted when the processor reports them (not from the batch
 * report): a partition stopped or an event rejected fails the invocation, and a jump or conflict that committed
 * before a later failure would otherwise never be counted. The observability middleware flushes metrics after a
 * failed invocation too.
 *
 * - rejected event → `EventsRejected` + an error log naming the check;
 * - offsets went backwards → `OffsetsWentBackwards` + an error log naming topic, partition, fence and offsets;
 *   other structural stops (an item over a DynamoDB limit, a malformed fence) → `PartitionsStopped` + an error log
 *   naming the partition and the item (the failed invocation is logged and alarmed on as non-transient by the
 *   middleware as well);
 * - a batch below the fence that nothing proved a redelivery while the fence moved → `UnprovenRedeliveries` + a
 *   warning naming the partition and offsets (retryable: no stop, the middleware logs the failure as transient);
 * - fence jump → `FenceJumps` + a warning naming the partition and both offsets;
 * - key conflicts → `IdempotencyKeyConflicts` (their number) + a warning per conflict naming key and claimant.
 */
export function processorObserver(telemetry: Telemetry): ProcessorObserver {
  const { logger, metrics } = telemetry;
  return {
    eventRejected(error) {
      metrics.addMetric(METRIC.eventsRejected, MetricUnit.Count, 1);
      logger.error('event rejected before any effect', { error });
    },
    partitionStopped(error) {
      if (error instanceof OffsetsWentBackwardsError) {
        metrics.addMetric(METRIC.offsetsWentBackwards, MetricUnit.Count, 1);
        logger.error('partition stopped: offsets went backwards', {
          topic: error.topic,
          partition: error.partition,
          fence: error.fence,
          firstOffset: error.firstOffset,
          lastOffset: error.lastOffset,
          reason: error.reason,
        });
        return;
      }
      metrics.addMetric(METRIC.partitionsStopped, MetricUnit.Count, 1);
      logger.error('partition stopped: structural error', { error });
    },
    redeliveryUnproven(error) {
      metrics.addMetric(METRIC.unprovenRedeliveries, MetricUnit.Count, 1);
      logger.warn(
        'batch below the fence not proven a redelivery: nothing acknowledged, the mapping retries it',
        {
          topic: error.topic,
          partition: error.partition,
          fence: error.fence,
          firstOffset: error.firstOffset,
          lastOffset: error.lastOffset,
        },
      );
    },
    fenceJumped(jump) {
      metrics.addMetric(METRIC.fenceJumps, MetricUnit.Count, 1);
      logger.warn('fence jumped further than maxFenceJump', { ...jump });
    },
    keyConflicts(conflicts) {
      metrics.addMetric(METRIC.keyConflicts, MetricUnit.Count, conflicts.length);
      for (const conflict of conflicts)
        logger.warn('idempotency key conflict: record dead-lettered', { ...conflict });
    },
  };
}

/**
 * The decoders' report of a schema id that found no schema (`onSchemaLookupMiss`): `SchemaLookupMisses` and a
 * warning naming the id, the outcome and the answer. Its records are dead-lettered with the same detail; the count
 * is what tells a producer's unknown schema ids from a registry that refuses the processor.
 */
export function schemaLookupMisses(telemetry: Telemetry): (miss: SchemaLookupMiss) => void {
  return (miss) => {
    telemetry.metrics.addMetric(METRIC.schemaLookupMisses, MetricUnit.Count, 1);
    telemetry.logger.warn('schema id found no schema: its records are dead-lettered', { ...miss });
  };
}
