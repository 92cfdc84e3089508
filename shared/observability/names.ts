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
  /**
   * Staging to visibility, ms: a committed checkpoint's COMMITTED write minus the oldest `stagedAt` of the staged
   * entries it covered (the worst record of the checkpoint; emitted by the coordinator's commit step).
   */
  commitLatency: 'CommitLatency',
  /**
   * Records staged but not committed yet, summed over the partitions (emitted by the monitor). Per-partition
   * detail stays in the monitor's log line: a per-partition dimension would be one custom metric per partition.
   */
  uncommittedRecords: 'UncommittedRecords',
  /** Seconds since the last COMMITTED checkpoint (emitted by the monitor). */
  lastCommitAge: 'LastCommitAge',
  /**
   * Committed checkpoints the Iceberg table does not hold yet: the last committed id less the published mark
   * (emitted by the monitor, with a table only). A publish that fails is retried by the next checkpoint, so a
   * count that keeps growing means the publish fails every time.
   */
  unpublishedCheckpoints: 'UnpublishedCheckpoints',
  /** Aborted attempts since the last commit, from the checkpoint head (emitted by the monitor). */
  consecutiveAborts: 'ConsecutiveCheckpointAborts',
  /** A batch whose offsets went backwards past the fence (recreated topic, reset consumer group): the partition stops (L2). */
  offsetsWentBackwards: 'OffsetsWentBackwards',
  /**
   * A batch below its partition's fence that nothing proved a redelivery while the fence moved during the invocation
   * (a zombie's stale batch, or a batch of another generation): nothing acknowledged, the invocation failed
   * retryably and the mapping's retry judges it as delivered. Occasional ones are zombies; a steady count on one
   * partition means the retries keep meeting a moving fence or a clock far ahead.
   */
  unprovenRedeliveries: 'UnprovenRedeliveries',
  /** A batch whose first offset lies further above the fence than the configured bound (gap or forged fence). */
  fenceJumps: 'FenceJumps',
  /** A partition stopped for a structural reason other than offsets going backwards (an item over a DynamoDB limit, a malformed fence). */
  partitionsStopped: 'PartitionsStopped',
  /** A record whose idempotency key was claimed by a record with a different payload: dead-lettered as a conflict. */
  keyConflicts: 'IdempotencyKeyConflicts',
  /**
   * A schema id (the producer's choice) that found no schema: the registry has none, refused the lookup (a 4xx
   * other than 408/429, Glue AccessDenied or InvalidInput), or the batch named more new ids than are looked up at
   * once. The records naming it are dead-lettered with the answer; a steady count means a producer writes with a
   * schema the pipeline cannot read, or the processor lacks the registry's permission.
   */
  schemaLookupMisses: 'SchemaLookupMisses',
  /**
   * Records in which the idempotency key source found nothing (a missing header or field, a transform returning no
   * key): dead-lettered or processed by offset only, per `missingIdempotencyKey`. Above zero, the key source
   * probably names the wrong header or field.
   */
  missingKeys: 'IdempotencyKeysMissing',
  /** An event rejected before any effect: wrong event source, unknown topic, malformed shape. */
  eventsRejected: 'EventsRejected',
} as const;

export type MetricName = (typeof METRIC)[keyof typeof METRIC];

/** Metrics only a pipeline with an Iceberg table emits: the cost of a pipeline without one leaves them out. */
export const TABLE_ONLY_METRICS: readonly MetricName[] = [METRIC.unpublishedCheckpoints];

/** The dimensions every pipeline metric carries (besides Powertools' `service`). */
export function pipelineDimensions(pipeline: string): { pipeline: string } {
  return { pipeline };
}

/** The full dimension map as CloudWatch stores it: what an alarm on an EMF metric must name. */
export function metricDimensionsMap(pipeline: string): Record<string, string> {
  return { service: SERVICE_NAME, ...pipelineDimensions(pipeline) };
}

/**
 * The processor's log line per partition of a batch that dropped redelivered records (at or below the fence), with
 * `topic`, `partition` and `duplicatesDroppedByOffset`: the Contributor Insights rule of the stack keys on it, so
 * its filter and the logger name the same message.
 */
export const REDELIVERY_DROPS_LOG = {
  message: 'redelivered records dropped',
  countField: 'duplicatesDroppedByOffset',
} as const;

/**
 * Metrics AWS emits itself, read by the alarms and the dashboard (never emitted here). `OffsetLag`: Lambda's
 * metric of a Kafka event source mapping (namespace `AWS/Lambda`, dimension `FunctionName`): the difference
 * between the topic's latest offset and the last offset the mapping's consumer group processed, at topic level.
 */
export const AWS_LAMBDA_METRIC = { offsetLag: 'OffsetLag' } as const;
