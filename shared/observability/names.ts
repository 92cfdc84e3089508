/**
 * The pipeline's metric names, namespace and dimensions, defined once: the handlers emit them (EMF, through
 * {@link ./telemetry.ts}) and the CDK stack's alarms and dashboard read them. Free of SDK imports, so infra can
 * use it without pulling in Powertools.
 */

export const METRICS_NAMESPACE = 'ExactlyOncePipeline';
/** Powertools adds `service` to every metric's dimensions; alarms must match it exactly. */
export const SERVICE_NAME = 'exactly-once-pipeline';

export const METRIC = {
  /** Records whose effects a staging transaction made durable (P1). */
  recordsStaged: 'RecordsStaged',
  /** Redelivered records at or below the partition's staged offset, acknowledged without effects (P4). */
  duplicatesByOffset: 'DuplicatesDroppedByOffset',
  /** Records whose business idempotency key was already claimed (P4). */
  duplicatesByKey: 'DuplicatesDroppedByKey',
  /** Poison records written to the dead-letter stream (P6). */
  deadLettered: 'RecordsDeadLettered',
  /** From a checkpoint's begin to its COMMITTED (or ABORTED) write, milliseconds. */
  checkpointDuration: 'CheckpointDuration',
  checkpointsCommitted: 'CheckpointsCommitted',
  checkpointsAborted: 'CheckpointsAborted',
  /** Age of the oldest staged file no committed checkpoint covers yet, seconds (0 when none waits). */
  oldestUncommittedStagedAge: 'OldestUncommittedStagedAge',
  /** Seconds since the last COMMITTED checkpoint (emitted by the monitor). */
  lastCommitAge: 'LastCommitAge',
  /** Aborted attempts since the last commit, from the checkpoint head (emitted by the monitor). */
  consecutiveAborts: 'ConsecutiveCheckpointAborts',
  /** A batch whose offsets went backwards past the fence (recreated topic, reset consumer group): the partition stops (L2). */
  offsetsWentBackwards: 'OffsetsWentBackwards',
  /** A batch whose first offset lies further above the fence than the configured bound (gap or forged fence). */
  fenceJumps: 'FenceJumps',
  /** A partition stopped for a structural reason other than offsets going backwards (an item over a DynamoDB limit, a malformed fence). */
  partitionsStopped: 'PartitionsStopped',
  /** A record whose idempotency key was claimed by a record with a different payload: dead-lettered as a conflict. */
  keyConflicts: 'IdempotencyKeyConflicts',
  /** An event rejected before any effect: wrong event source, unknown topic, malformed shape. */
  eventsRejected: 'EventsRejected',
} as const;

export type MetricName = (typeof METRIC)[keyof typeof METRIC];

/** The dimensions every pipeline metric carries (besides Powertools' `service`). */
export function pipelineDimensions(pipeline: string): { pipeline: string } {
  return { pipeline };
}

/** The full dimension map as CloudWatch stores it: what an alarm on an EMF metric must name. */
export function metricDimensionsMap(pipeline: string): Record<string, string> {
  return { service: SERVICE_NAME, ...pipelineDimensions(pipeline) };
}
