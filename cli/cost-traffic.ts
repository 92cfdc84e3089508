/**
 * The traffic a steady rate makes (`cost-model.ts` prices it): batches per second and their size, and the shape of
 * one checkpoint (shards, partitions, staged files, final objects). See `cost-model.ts`'s module comment for the
 * rule MSK's batching follows and how final objects are cut and merged.
 */

import type { Workflow } from '../shared/coordinator/definition.ts';
export const MONTH_SECONDS = 30 * 24 * 3600;

export interface CheckpointShape {
  readonly shards: number;
  readonly partitions: number;
  readonly stagedFiles: number;
  readonly finalObjects: number;
}

export interface CostInput {
  readonly recordsPerSecond: number;
  readonly recordBytes: number;
  readonly partitions: number;
  readonly checkpointIntervalMinutes: number;
  readonly batchingWindowSeconds: number;
  readonly batchSize: number;
  /** Distinct state keys a batch can touch (0: a transform without keyed state). */
  readonly stateKeys: number;
  /** Managed Flink KPUs; default from the assumed throughput per KPU. */
  readonly flinkKpus?: number;
  /**
   * How NDJSON final objects are cut (the `finalObjects` setting): `merged`, a shard's partition objects packed
   * into objects of up to the promotion limits; `partition`, one a partition. Default `merged`.
   */
  readonly finalObjects?: 'merged' | 'partition';
  /** The workflow each checkpoint runs (`coordinatorWorkflow`); default the stack's. */
  readonly coordinatorWorkflow?: Workflow;
}

/** How the coordinator cuts a checkpoint into shards and final objects, as the benchmark read it. */
export interface CheckpointLayout {
  readonly maxShards: number;
  /** Partitions that moved per shard before a checkpoint gets another (the coordinator's `PARTITIONS_PER_SHARD`). */
  readonly partitionsPerShard: number;
  readonly promotionLimits: {
    readonly maxObjectBytes: number;
    readonly maxMembers: number;
    readonly maxObjectRows: number;
  };
}

export interface Traffic {
  readonly batchesPerSecond: number;
  readonly recordsPerBatch: number;
  readonly checkpointsPerMonth: number;
  readonly checkpoint: CheckpointShape;
}

/** Batches, their size and the shape of a checkpoint at a steady rate (see the module's comment). */
export function trafficOf(counts: CheckpointLayout, input: CostInput): Traffic {
  const { recordsPerSecond: rate, partitions, batchingWindowSeconds: window, batchSize } = input;
  const perPartitionWindow = window > 0 ? partitions / window : Number.POSITIVE_INFINITY;
  const batchesPerSecond = rate <= 0 ? 0 : Math.max(rate / batchSize, Math.min(perPartitionWindow, rate));
  const recordsPerBatch = batchesPerSecond > 0 ? rate / batchesPerSecond : 0;
  const intervalSeconds = input.checkpointIntervalMinutes * 60;
  const files = batchesPerSecond * intervalSeconds;
  const touched = Math.min(partitions, files);
  const limits = counts.promotionLimits;
  const perPartition = (x: number) => (touched > 0 ? x / touched : 0);
  const filesEach = perPartition(files);
  const recordsEach = perPartition(rate * intervalSeconds);
  const objectsEach =
    touched > 0
      ? Math.max(
          1,
          Math.ceil(filesEach / limits.maxMembers),
          Math.ceil(recordsEach / limits.maxObjectRows),
          Math.ceil((recordsEach * input.recordBytes) / limits.maxObjectBytes),
        )
      : 0;
  const shards = Math.min(counts.maxShards, Math.max(1, Math.ceil(touched / counts.partitionsPerShard)));
  const partitionObjects = touched * objectsEach;
  return {
    batchesPerSecond,
    recordsPerBatch,
    checkpointsPerMonth: MONTH_SECONDS / intervalSeconds,
    checkpoint: {
      shards,
      partitions: touched,
      stagedFiles: files,
      finalObjects:
        (input.finalObjects ?? 'merged') === 'merged' && partitionObjects > 0
          ? mergedObjectCount(partitionObjects, shards, {
              bytes: (recordsEach * input.recordBytes) / objectsEach,
              members: filesEach / objectsEach,
              limits,
            })
          : partitionObjects,
    },
  };
}

/**
 * Merged final objects (`coordinator/promote/merged-plan.ts`): each shard packs its partition objects whole, in
 * order, into objects of at most the promotion limits' bytes and members, so as many fit one as fit by both.
 */
export function mergedObjectCount(
  partitionObjects: number,
  shards: number,
  each: { bytes: number; members: number; limits: CheckpointLayout['promotionLimits'] },
): number {
  const fit = Math.max(
    1,
    Math.min(
      Math.floor(each.limits.maxObjectBytes / Math.max(1, each.bytes)),
      Math.floor(each.limits.maxMembers / Math.max(1, each.members)),
    ),
  );
  return shards * Math.ceil(partitionObjects / shards / fit);
}
