/**
 * What the coordinator's phases work with: the settings, the AWS clients, the ledger's and the bucket's stores and
 * the limits. Built once per coordinator from its options ({@link coordinatorParts}); each phase function takes
 * only the parts it names.
 */
import type { AwsClients } from '../aws/clients.ts';
import { type Clock, systemClock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import { CheckpointStore } from '../ledger/checkpoints.ts';
import { StagedEntries } from '../ledger/staged-entries.ts';
import { ReplayStore } from '../replay/store.ts';
import { ManifestStore } from '../sink/manifest-store.ts';
import { DEFAULT_PROMOTION_LIMITS, type PromotionLimits } from './promote/final-plan.ts';
import { type OutputShape, outputShapeOf } from './promote/folder-plan.ts';
import { PlanStore } from './promote/plan-store.ts';
import { PARTITIONS_PER_SHARD } from './shards.ts';

/** The sink of the coordinator's log lines (a Powertools Logger fits). */
export interface CoordinatorLog {
  info(message: string, extra?: Record<string, unknown>): void;
  error(message: string, extra?: Record<string, unknown>): void;
}

const silentLog: CoordinatorLog = { info: () => {}, error: () => {} };

export interface CoordinatorOptions {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly clock?: Clock;
  readonly log?: CoordinatorLog;
  readonly promotionLimits?: Partial<PromotionLimits>;
  /** S3 requests in flight per shard (verification, promotion, deletion). Default 16. */
  readonly concurrency?: number;
  /** Most staged objects one orphan sweep examines (it continues from there next time). Default 10,000. */
  readonly orphanSweepLimit?: number;
  /** Changed partitions per shard (`shards.ts`). Default {@link PARTITIONS_PER_SHARD}. */
  readonly partitionsPerShard?: number;
}

export interface CoordinatorParts {
  readonly settings: Settings;
  readonly clients: AwsClients;
  readonly clock: Clock;
  readonly log: CoordinatorLog;
  /** The checkpoint head, records and cut pages. */
  readonly store: CheckpointStore;
  /** The staged entries the processors wrote. */
  readonly ledger: StagedEntries;
  /** Plans, promotion records and candidates. */
  readonly plans: PlanStore;
  readonly manifests: ManifestStore;
  readonly replays: ReplayStore;
  readonly limits: PromotionLimits;
  /** What final objects look like (format, time folders): recorded in each plan, read by promote from there. */
  readonly shape: OutputShape;
  /** S3 requests in flight per shard (verification, promotion, deletion). */
  readonly concurrency: number;
  /** Most staged objects one orphan sweep examines. */
  readonly orphanSweepLimit: number;
  /** Changed partitions per shard. */
  readonly partitionsPerShard: number;
}

/** The stores and limits every phase shares, with the options' defaults. */
export function coordinatorParts(options: CoordinatorOptions): CoordinatorParts {
  const { settings, clients } = options;
  const { dynamodb, s3 } = clients;
  const { ledgerTable, bucket, pipelineId } = settings;
  return {
    settings,
    clients,
    clock: options.clock ?? systemClock,
    log: options.log ?? silentLog,
    store: new CheckpointStore(dynamodb, ledgerTable, pipelineId),
    ledger: new StagedEntries(dynamodb, ledgerTable, pipelineId),
    plans: new PlanStore(s3, bucket, pipelineId),
    manifests: new ManifestStore(s3, bucket, pipelineId),
    replays: new ReplayStore(dynamodb, ledgerTable, pipelineId),
    limits: { ...DEFAULT_PROMOTION_LIMITS, ...options.promotionLimits },
    shape: outputShapeOf(settings),
    concurrency: options.concurrency ?? 16,
    orphanSweepLimit: options.orphanSweepLimit ?? 10_000,
    partitionsPerShard: options.partitionsPerShard ?? PARTITIONS_PER_SHARD,
  };
}

/** The lease a transition written at `now` holds the checkpoint for. */
export function leaseUntil(settings: Settings, now: number): number {
  return now + settings.checkpointLeaseSeconds * 1000;
}
