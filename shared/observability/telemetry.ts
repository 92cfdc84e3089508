/**
 * Structured JSON logs and CloudWatch EMF metrics for every pipeline Lambda (Powertools logger and metrics).
 *
 * One {@link Telemetry} per handler module, created at cold start. The metric names and dimensions come from
 * `names.ts`, which the stack's alarms read too: what is emitted here is what the alarms watch.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { METRIC, METRICS_NAMESPACE, pipelineDimensions, SERVICE_NAME } from './names.ts';

export interface Telemetry {
  readonly logger: Logger;
  readonly metrics: Metrics;
}

export interface TelemetryOptions {
  /** The pipeline id: a dimension of every metric and a key of every log line. */
  readonly pipeline: string;
  /** Which Lambda logs: `processor`, `coordinator-begin`, `monitor`, … */
  readonly component: string;
}

export function createTelemetry(options: TelemetryOptions): Telemetry {
  const logger = new Logger({
    serviceName: SERVICE_NAME,
    persistentKeys: { pipeline: options.pipeline, component: options.component },
  });
  const metrics = new Metrics({
    namespace: METRICS_NAMESPACE,
    serviceName: SERVICE_NAME,
    defaultDimensions: pipelineDimensions(options.pipeline),
    logger,
  });
  return { logger, metrics };
}

/** What one processor invocation did, summed over its partitions. */
export interface BatchCounts {
  readonly staged: number;
  readonly duplicatesByOffset: number;
  readonly duplicatesByKey: number;
  readonly deadLettered: number;
  /** Records in which the idempotency key source found nothing (dead-lettered or processed by offset only). */
  readonly missingKeys: number;
}

/**
 * Adds the batch's counts. Zeros are emitted too, so every series has a point per invocation and a Sum alarm
 * reads 0, not "missing", on a healthy pipeline.
 */
export function recordBatch(metrics: Metrics, counts: BatchCounts): void {
  metrics.addMetric(METRIC.recordsStaged, MetricUnit.Count, counts.staged);
  metrics.addMetric(METRIC.duplicatesByOffset, MetricUnit.Count, counts.duplicatesByOffset);
  metrics.addMetric(METRIC.duplicatesByKey, MetricUnit.Count, counts.duplicatesByKey);
  metrics.addMetric(METRIC.deadLettered, MetricUnit.Count, counts.deadLettered);
  metrics.addMetric(METRIC.missingKeys, MetricUnit.Count, counts.missingKeys);
}

export interface CheckpointOutcome {
  readonly outcome: 'committed' | 'aborted';
  /** From begin to the COMMITTED or ABORTED write. */
  readonly durationMs: number;
  /** Committed only: staging to visibility of the checkpoint's oldest covered entry (`CommitLatency`). */
  readonly commitLatencyMs?: number;
}

/** For the coordinator's commit and abort steps. */
export function recordCheckpoint(metrics: Metrics, checkpoint: CheckpointOutcome): void {
  const name = checkpoint.outcome === 'committed' ? METRIC.checkpointsCommitted : METRIC.checkpointsAborted;
  metrics.addMetric(name, MetricUnit.Count, 1);
  metrics.addMetric(METRIC.checkpointDuration, MetricUnit.Milliseconds, checkpoint.durationMs);
  if (checkpoint.commitLatencyMs !== undefined)
    metrics.addMetric(METRIC.commitLatency, MetricUnit.Milliseconds, checkpoint.commitLatencyMs);
}

/** Ages in seconds of the oldest uncommitted staged file and of the last commit (undefined: never committed). */
export function recordLedgerAges(
  metrics: Metrics,
  ages: { readonly oldestUncommittedStagedSeconds: number; readonly lastCommitSeconds?: number },
): void {
  metrics.addMetric(
    METRIC.oldestUncommittedStagedAge,
    MetricUnit.Seconds,
    ages.oldestUncommittedStagedSeconds,
  );
  if (ages.lastCommitSeconds !== undefined) {
    metrics.addMetric(METRIC.lastCommitAge, MetricUnit.Seconds, ages.lastCommitSeconds);
  }
}
