/**
 * What `eos epoch` reads and writes (`epochs.ts`): each partition's epochs, why its current one stopped,
 * and the switch to a new epoch.
 *
 * The switch of one partition from epoch N to N+1 is one conditional write, so a crash anywhere leaves each
 * partition either switched or not, and running the command again finishes the rest: a partition whose current
 * epoch has staged nothing yet is left as it is (`fresh`), so a second run never opens a second epoch.
 * - N = 0: the root fence gets `epoch = 1` and `closedAt`, on condition its staged offset is still the one read,
 *   it is not closed and names no epoch (and, for a legacy fence, has not moved to its shard).
 * - N >= 1: a transaction sets the root's `epoch` to N+1 (on condition it is still N) and closes lane N (on
 *   condition its staged offset is still the one read and it is not closed).
 * Nothing else changes: the closed lane keeps its staged offset, so the coordinator's next checkpoint commits what
 * it staged (C2), and its staged entries, key window and final objects stay where they are.
 *
 * Without `force`, only a stopped partition switches: its current lane carries a stop record for the fence it
 * still has (the processor writes it when offsets go backwards). A partition that is not stopped may still be
 * receiving records of the current epoch: opening a new epoch then would take a redelivery of records already
 * staged as new records of the new epoch (duplicates across epochs). `force` is for a planned migration, after
 * the mapping was moved to the new source and before it delivered anything. The stop must also be confirmed
 * (`isConfirmedStop`: two invocations saw it), else the switch is refused as `unconfirmed`: a zombie invocation
 * judging a stale batch on a clock ahead of the stagers' can write a false stop while the partition's live batch
 * is in flight, and a switch then would stage that batch again in the new epoch; a real stop is confirmed by the
 * mapping's first retry of the refused batch.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import { TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { classified, sendConditional, type TableRef, type TransactItem } from '../aws/dynamo.ts';
import type { Clock } from '../clock.ts';
import {
  CLOSED_ATTRIBUTE,
  EPOCH_ATTRIBUTE,
  isConfirmedStop,
  isStopRecord,
  laneOf,
  parseLane,
  STOP_ATTRIBUTE,
  type StopRecord,
} from './epochs.ts';
import { type FenceState, NO_FENCE, readFence } from './fence-reads.ts';
import { fenceKeys } from './fences.ts';
import { readFenceItems } from './staged-entries.ts';

/** One epoch of a partition as the ledger holds it. */
export interface EpochView {
  readonly epoch: number;
  /** `<topic>` or `<topic>~<epoch>`. */
  readonly lane: string;
  /** The lane's fence (-1: nothing staged in this epoch yet). */
  readonly stagedOffset: number;
  /** Epoch ms the lane was closed by the switch to the next epoch; absent for the current one. */
  readonly closedAt?: number;
  /** Why the processor stopped the lane, if it did (kept on a closed lane: why it was closed). */
  readonly stop?: StopRecord;
}

export interface PartitionEpochs {
  readonly topic: string;
  readonly partition: number;
  /** The current epoch. */
  readonly epoch: number;
  /** Oldest first; the last is the current one. */
  readonly epochs: readonly EpochView[];
}

export type SwitchOutcome =
  /** Epoch `epoch` is open; the previous one was closed at its fence `closedFence`. */
  | { readonly kind: 'opened'; readonly epoch: number; readonly closedFence: number }
  /** The current epoch has staged nothing: it is as new as a new epoch would be (a second run lands here). */
  | { readonly kind: 'fresh'; readonly epoch: number }
  /** Not stopped (no stop record for its fence): refused without `force`. */
  | { readonly kind: 'not-stopped'; readonly epoch: number; readonly stagedOffset: number }
  /** Stopped, but seen by one invocation only (the mapping's retry has not confirmed it): refused without `force`. */
  | {
      readonly kind: 'unconfirmed';
      readonly epoch: number;
      readonly stagedOffset: number;
      readonly stop: StopRecord;
    }
  /** The fence changed between the read and the write (a batch staged, or another switch): run again. */
  | { readonly kind: 'changed'; readonly epoch: number };

export interface PartitionSwitch {
  readonly topic: string;
  readonly partition: number;
  readonly outcome: SwitchOutcome;
}

const numberOf = (value: unknown): number | undefined =>
  typeof value === 'number' && Number.isSafeInteger(value) ? value : undefined;

/** A switch lost to a change of the fence: a failed condition, or a cancelled transaction. */
const lostSwitch = (error: unknown): boolean =>
  error instanceof ConditionalCheckFailedException ||
  (error as { name?: string }).name === 'TransactionCanceledException';

export class EpochLedger {
  private readonly at: TableRef;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
    private readonly pipeline: string,
    private readonly clock: Clock,
  ) {
    this.at = { doc: ledgerDocumentClient(dynamodb), table };
  }

  /** Every partition that has a fence in some epoch, with its epochs, by topic and partition. */
  async partitions(): Promise<PartitionEpochs[]> {
    const items = await classified('dynamodb:Query(fences)', () =>
      readFenceItems(this.at.doc, this.table, this.pipeline),
    );
    const byPartition = new Map<
      string,
      { topic: string; partition: number; views: EpochView[]; current: number }
    >();
    for (const item of items) {
      const lane = typeof item.topic === 'string' ? parseLane(item.topic) : undefined;
      const partition = numberOf(item.partition);
      const stagedOffset = numberOf(item.stagedOffset);
      // Redrive lanes (`shared/redrive/`) and replay generations (`shared/replay/`) are no epochs.
      if (lane === undefined || lane.round !== undefined || lane.generation !== undefined) continue;
      if (partition === undefined || stagedOffset === undefined) continue;
      const id = `${lane.topic}#${partition}`;
      const entry = byPartition.get(id) ?? { topic: lane.topic, partition, views: [], current: 0 };
      byPartition.set(id, entry);
      const closedAt = numberOf(item[CLOSED_ATTRIBUTE]);
      const stop = item[STOP_ATTRIBUTE];
      entry.views.push({
        epoch: lane.epoch,
        lane: laneOf(lane.topic, lane.epoch),
        stagedOffset,
        ...(closedAt === undefined ? {} : { closedAt }),
        ...(isStopRecord(stop) ? { stop } : {}),
      });
      if (lane.epoch === 0) entry.current = numberOf(item[EPOCH_ATTRIBUTE]) ?? 0;
    }
    return [...byPartition.values()]
      .map(({ topic, partition, views, current }) => {
        // The current epoch may have staged nothing yet: it has no fence item, but it is still the current one.
        const epochs = views.some((view) => view.epoch === current)
          ? views
          : [...views, { epoch: current, lane: laneOf(topic, current), stagedOffset: NO_FENCE }];
        return { topic, partition, epoch: current, epochs: epochs.sort((a, b) => a.epoch - b.epoch) };
      })
      .sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : a.partition - b.partition));
  }

  /** Opens a new epoch for one partition (see the module doc). */
  async startNew(
    topic: string,
    partition: number,
    options: { force?: boolean } = {},
  ): Promise<SwitchOutcome> {
    const root = await readFence(this.at, this.pipeline, topic, partition);
    const epoch = root.epoch ?? 0;
    const lane = laneOf(topic, epoch);
    const current = epoch === 0 ? root : await readFence(this.at, this.pipeline, lane, partition);
    if (current.closed) return { kind: 'changed', epoch };
    if (current.stagedOffset === NO_FENCE) return { kind: 'fresh', epoch };
    if (!options.force && current.stop?.fence !== current.stagedOffset) {
      return { kind: 'not-stopped', epoch, stagedOffset: current.stagedOffset };
    }
    const stop = current.stop;
    if (!options.force && stop !== undefined && !isConfirmedStop(stop)) {
      return { kind: 'unconfirmed', epoch, stagedOffset: current.stagedOffset, stop };
    }
    const now = this.clock.now();
    const switched =
      epoch === 0
        ? await sendConditional(
            this.at.doc,
            new UpdateCommand(this.closeRoot(topic, partition, root, now)),
            'dynamodb:switch epoch',
            { lost: lostSwitch },
          )
        : await sendConditional(
            this.at.doc,
            new TransactWriteCommand({ TransactItems: this.closeLane(topic, partition, root, current, now) }),
            'dynamodb:switch epoch',
            { lost: lostSwitch },
          );
    if (switched === undefined) return { kind: 'changed', epoch };
    return { kind: 'opened', epoch: epoch + 1, closedFence: current.stagedOffset };
  }

  /** Epoch 0 → 1: the root fence is both the lane closed and the pointer set. */
  private closeRoot(topic: string, partition: number, root: FenceState, now: number) {
    const key = fenceKeys.readFrom(this.pipeline, topic, partition, root.legacy);
    return {
      TableName: this.table,
      Key: key,
      UpdateExpression: 'SET #epoch = :next, #closed = :now',
      ConditionExpression:
        'stagedOffset = :fence AND attribute_not_exists(#closed) AND attribute_not_exists(#epoch)' +
        (root.legacy ? ' AND attribute_not_exists(movedTo)' : ''),
      ExpressionAttributeNames: { '#epoch': EPOCH_ATTRIBUTE, '#closed': CLOSED_ATTRIBUTE },
      ExpressionAttributeValues: { ':next': 1, ':now': now, ':fence': root.stagedOffset },
    };
  }

  /** Epoch N ≥ 1 → N+1: the root's pointer moves and lane N closes, in one transaction. */
  private closeLane(
    topic: string,
    partition: number,
    root: FenceState,
    current: FenceState,
    now: number,
  ): TransactItem[] {
    const epoch = root.epoch!;
    const rootKey = fenceKeys.readFrom(this.pipeline, topic, partition, root.legacy);
    return [
      {
        Update: {
          TableName: this.table,
          Key: rootKey,
          UpdateExpression: 'SET #epoch = :next',
          ConditionExpression: '#epoch = :epoch',
          ExpressionAttributeNames: { '#epoch': EPOCH_ATTRIBUTE },
          ExpressionAttributeValues: { ':next': epoch + 1, ':epoch': epoch },
        },
      },
      {
        Update: {
          TableName: this.table,
          Key: fenceKeys.fence(this.pipeline, laneOf(topic, epoch), partition),
          UpdateExpression: 'SET #closed = :now',
          ConditionExpression: 'stagedOffset = :fence AND attribute_not_exists(#closed)',
          ExpressionAttributeNames: { '#closed': CLOSED_ATTRIBUTE },
          ExpressionAttributeValues: { ':now': now, ':fence': current.stagedOffset },
        },
      },
    ];
  }
}
