export { fieldCorrelationId, mskBatchCorrelationId } from './correlation.ts';
export { type ObservabilityOptions, observability } from './middleware.ts';
export { METRIC, METRICS_NAMESPACE, type MetricName, metricDimensionsMap, SERVICE_NAME } from './names.ts';
export {
  type BatchCounts,
  type CheckpointOutcome,
  createTelemetry,
  recordBatch,
  recordCheckpoint,
  recordLedgerAges,
  type Telemetry,
} from './telemetry.ts';
