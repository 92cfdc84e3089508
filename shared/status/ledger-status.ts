/**
 * The pipeline's state as the ledger holds it, for `eos status` and the monitor: the checkpoint history (last
 * committed, in flight, aborted), per partition the staged offset (fence) and the committed offset (the last
 * committed cut), the staged files no committed checkpoint covers yet with the age of the oldest, and the
 * freshness that follows from them: how far committed output lags staging, per partition and overall.
 *
 * Read-only and strongly consistent. Costs: one Query for the checkpoints (newest first), one for the fences and
 * one per partition for its uncommitted staged entries (a key range: lastOffset > committed cut).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, GetCommand, QueryCommand } from '@aws-sdk/lib-dynamodb';
import { classified, queryAll, send } from '../aws/dynamo.ts';
import type { Clock } from '../clock.ts';
import { CheckpointStore } from '../ledger/checkpoints.ts';
import { inlineItemsOf, mayHaveEntryItems } from '../ledger/inline-entries.ts';
import { keys, partitionId, STREAMS, type Stream } from '../ledger/layout.ts';
import { readFenceItems } from '../ledger/staged-entries.ts';
import {
  type AbortedAttempt,
  abortedAttempts,
  type CheckpointView,
  type HeadView,
  isInFlight,
  toCheckpointView,
  toHeadView,
} from './checkpoint-view.ts';

export interface PartitionStatus {
  readonly topic: string;
  readonly partition: number;
  /** The fence: highest offset whose effects are staged (-1: none). */
  readonly stagedOffset: number;
  /** The last committed checkpoint's cut for this partition (-1: nothing committed yet). */
  readonly committedOffset: number;
  /** Staged files above the committed cut, per stream. */
  readonly uncommittedFiles: Readonly<Record<Stream, number>>;
  readonly uncommittedRecords: number;
  /** Epoch ms of the oldest uncommitted staged file, if any. */
  readonly oldestUncommittedStagedAt?: number;
  /** Epoch ms of the partition's last staging transaction (the fence's `updatedAt`), if the fence records one. */
  readonly lastStagedAt?: number;
  readonly freshness: PartitionFreshness;
}

/**
 * How far a partition's committed output lags its staging, as far as the ledger can tell. Staging is in offset
 * order (P2), so everything a partition staged before its oldest uncommitted file is committed: the age of that
 * file bounds the lag. Cleanup deletes committed entries, so when the last committed data was staged is known
 * exactly only when nothing waits (then it is the fence's last staging); while files wait, only that it was
 * staged no later than the oldest of them.
 */
export interface PartitionFreshness {
  /** Age of the oldest uncommitted staged file, seconds; 0 when nothing waits (everything staged is committed). */
  readonly committedBehindStagingSeconds: number;
  /**
   * When the newest committed data was staged (epoch ms): `exact` (nothing waits; the fence's last staging) or
   * `at-or-before` (files wait; the oldest waiting file's staging). Absent when nothing is committed yet, or the
   * fence records no time.
   */
  readonly lastCommittedStaged?: { readonly at: number; readonly bound: 'exact' | 'at-or-before' };
}

/** The pipeline-wide freshness: the worst partition's. */
export interface PipelineFreshness {
  /** Committed output is at most this many seconds behind staging (0: it holds everything staged). */
  readonly committedBehindStagingSeconds: number;
  /** The partition that lags most (absent when none lags). */
  readonly worstPartition?: { readonly topic: string; readonly partition: number };
}

export interface LedgerStatus {
  readonly pipeline: string;
  readonly readAt: number;
  /** The checkpoint head: which checkpoint is in flight or last, the last committed id, consecutive aborts. */
  readonly head?: HeadView;
  readonly lastCommitted?: CheckpointView;
  readonly inFlight?: CheckpointView;
  /** Aborted attempts of checkpoints after the last committed one (newest first). */
  readonly abortedSinceLastCommit: readonly AbortedAttempt[];
  /** The newest checkpoints, newest first. */
  readonly history: readonly CheckpointView[];
  readonly partitions: readonly PartitionStatus[];
  /** Seconds; 0 when no staged file waits. */
  readonly oldestUncommittedStagedAgeSeconds: number;
  /** Seconds since the last commit; undefined before the first. */
  readonly lastCommitAgeSeconds?: number;
  readonly freshness: PipelineFreshness;
}

export interface LedgerStatusOptions {
  readonly dynamodb: DynamoDBClient;
  readonly table: string;
  readonly pipeline: string;
  readonly clock: Clock;
  /** How many of the newest checkpoints to list (default 10). */
  readonly historyLimit?: number;
}

export async function readLedgerStatus(options: LedgerStatusOptions): Promise<LedgerStatus> {
  const documents = DynamoDBDocumentClient.from(options.dynamodb);
  const readAt = options.clock.now();
  const [head, history, fences] = await Promise.all([
    getItem(documents, options.table, keys.checkpointHead(options.pipeline)).then(toHeadView),
    readHistory(documents, options),
    // Legacy key first, then the shards (fences.ts); a moved legacy marker without a fence of its own is skipped.
    classified('dynamodb:Query(fences)', () =>
      readFenceItems(documents, options.table, options.pipeline),
    ).then((items) => items.filter((item) => typeof item.stagedOffset === 'number')),
  ]);
  const committedId = head?.committedId ?? 0;
  const [lastCommittedView, inFlight] = await Promise.all([
    checkpointById(documents, options, history, committedId),
    head && isInFlight(head) ? checkpointById(documents, options, history, head.checkpointId) : undefined,
  ]);
  const lastCommitted = lastCommittedView && (await withCommittedCut(options, lastCommittedView));
  const partitions = await Promise.all(
    fences.map((fence) => readPartition(documents, options, fence, lastCommitted, readAt)),
  );
  partitions.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const oldest = Math.min(...partitions.map((p) => p.oldestUncommittedStagedAt ?? Number.POSITIVE_INFINITY));
  const worst = partitions.find((p) => p.oldestUncommittedStagedAt === oldest);
  return {
    pipeline: options.pipeline,
    readAt,
    head,
    lastCommitted,
    inFlight,
    abortedSinceLastCommit: history.filter((c) => c.id > committedId).flatMap(abortedAttempts),
    history,
    partitions,
    oldestUncommittedStagedAgeSeconds: Number.isFinite(oldest) ? Math.max(0, (readAt - oldest) / 1000) : 0,
    lastCommitAgeSeconds:
      lastCommitted?.endedAt === undefined ? undefined : Math.max(0, (readAt - lastCommitted.endedAt) / 1000),
    freshness: {
      committedBehindStagingSeconds: Math.max(
        0,
        ...partitions.map((p) => p.freshness.committedBehindStagingSeconds),
      ),
      ...(worst ? { worstPartition: { topic: worst.topic, partition: worst.partition } } : {}),
    },
  };
}

/** See {@link PartitionFreshness}. */
export function partitionFreshness(
  partition: Pick<
    PartitionStatus,
    'stagedOffset' | 'committedOffset' | 'oldestUncommittedStagedAt' | 'lastStagedAt'
  >,
  readAt: number,
): PartitionFreshness {
  const waiting = partition.oldestUncommittedStagedAt;
  const committed = partition.committedOffset >= 0;
  if (waiting !== undefined) {
    return {
      committedBehindStagingSeconds: Math.max(0, (readAt - waiting) / 1000),
      ...(committed ? { lastCommittedStaged: { at: waiting, bound: 'at-or-before' as const } } : {}),
    };
  }
  // Nothing waits. Only when the committed cut is the fence is the fence's last staging committed data (a
  // fence above the cut with no entry above it would be a damaged ledger: no claim then).
  const exact =
    committed && partition.committedOffset === partition.stagedOffset && partition.lastStagedAt !== undefined;
  return {
    committedBehindStagingSeconds: 0,
    ...(exact ? { lastCommittedStaged: { at: partition.lastStagedAt!, bound: 'exact' as const } } : {}),
  };
}

/** The last committed checkpoint with its cut, read page by page from its cut pages. */
async function withCommittedCut(options: LedgerStatusOptions, view: CheckpointView): Promise<CheckpointView> {
  const store = new CheckpointStore(options.dynamodb, options.table, options.pipeline);
  const { cut } = await store.committedCut(view.id);
  return { ...view, cut };
}

/** The newest checkpoint records (ids are zero-padded, so the sort key orders them; HEAD sorts above them all). */
async function readHistory(
  documents: DynamoDBDocumentClient,
  options: LedgerStatusOptions,
): Promise<CheckpointView[]> {
  const limit = options.historyLimit ?? 10;
  const page = await send(
    documents,
    new QueryCommand({
      TableName: options.table,
      KeyConditionExpression: 'pk = :pk AND sk < :head',
      ExpressionAttributeValues: {
        ':pk': keys.checkpointPk(options.pipeline),
        ':head': keys.checkpointHead(options.pipeline).sk,
      },
      ScanIndexForward: false,
      ConsistentRead: true,
      Limit: limit,
    }),
    'dynamodb:Query(checkpoint history)',
  );
  return (page.Items ?? []).map(toCheckpointView).filter((view) => view !== undefined);
}

/** From the history when it holds it; else one more read (the last commit may be older than the history). */
async function checkpointById(
  documents: DynamoDBDocumentClient,
  options: LedgerStatusOptions,
  history: readonly CheckpointView[],
  id: number,
): Promise<CheckpointView | undefined> {
  if (id <= 0) return undefined;
  const known = history.find((view) => view.id === id);
  if (known) return known;
  const item = await getItem(documents, options.table, keys.checkpoint(options.pipeline, id));
  return item && toCheckpointView(item);
}

async function getItem(
  documents: DynamoDBDocumentClient,
  table: string,
  key: { pk: string; sk: string },
): Promise<Record<string, unknown> | undefined> {
  const result = await send(
    documents,
    new GetCommand({ TableName: table, Key: key, ConsistentRead: true }),
    'dynamodb:GetItem(checkpoint)',
  );
  return result.Item;
}

async function readPartition(
  documents: DynamoDBDocumentClient,
  options: LedgerStatusOptions,
  fence: Record<string, unknown>,
  lastCommitted: CheckpointView | undefined,
  readAt: number,
): Promise<PartitionStatus> {
  const topic = String(fence.topic);
  const partition = Number(fence.partition);
  const committedOffset = lastCommitted?.cut.get(partitionId(topic, partition)) ?? -1;
  // Entries kept inline in the fence item come with it; entry items are queried only where some may lie.
  const inline = inlineItemsOf(
    fence,
    { pipeline: options.pipeline, topic, partition, fence: keys.fence(options.pipeline, topic, partition) },
    { above: committedOffset, upTo: Number.MAX_SAFE_INTEGER },
  ).flatMap((item) => (item.kind === 'entry' ? [item.entry as unknown as Record<string, unknown>] : []));
  const items = !mayHaveEntryItems(fence, committedOffset)
    ? []
    : await queryAll(
        documents,
        {
          TableName: options.table,
          KeyConditionExpression: 'pk = :pk AND sk > :committed',
          ExpressionAttributeValues: {
            ':pk': keys.stagedPk(options.pipeline, topic, partition),
            ':committed': keys.stagedUpTo(committedOffset),
          },
          // STREAM is a DynamoDB reserved word.
          ProjectionExpression: '#stream, lastOffset, recordCount, stagedAt',
          ExpressionAttributeNames: { '#stream': 'stream' },
          ConsistentRead: true,
        },
        'dynamodb:Query(staged entries)',
      );
  // An entry moved from the fence into an item between the two reads (`staging-transaction.ts`) counts once.
  const asItems = new Set(items.map((item) => `${String(item.lastOffset)}#${String(item.stream)}`));
  const entries = [
    ...inline.filter((entry) => !asItems.has(`${String(entry.lastOffset)}#${String(entry.stream)}`)),
    ...items,
  ];
  const uncommittedFiles = Object.fromEntries(STREAMS.map((s) => [s, 0])) as Record<Stream, number>;
  let uncommittedRecords = 0;
  let oldest: number | undefined;
  for (const entry of entries) {
    const stream = entry.stream as Stream;
    if (stream in uncommittedFiles) uncommittedFiles[stream] += 1;
    uncommittedRecords += Number(entry.recordCount ?? 0);
    const stagedAt = Number(entry.stagedAt);
    if (Number.isFinite(stagedAt) && (oldest === undefined || stagedAt < oldest)) oldest = stagedAt;
  }
  const updatedAt = Number(fence.updatedAt);
  const status = {
    topic,
    partition,
    stagedOffset: Number(fence.stagedOffset ?? -1),
    committedOffset,
    uncommittedFiles,
    uncommittedRecords,
    oldestUncommittedStagedAt: oldest,
    // 0 is what a fence without a time reads as in hand-made ledgers: not a time.
    lastStagedAt: Number.isFinite(updatedAt) && updatedAt > 0 ? updatedAt : undefined,
  };
  return { ...status, freshness: partitionFreshness(status, readAt) };
}
