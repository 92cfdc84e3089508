/**
 * Checkpoint records in the ledger: the pipeline's checkpoint head and one item per checkpoint id (their shapes in
 * `checkpoint-records.ts`). This module only translates: the protocol (which transition is allowed when) is
 * `shared/coordinator`'s.
 *
 * - The head names the checkpoint in flight (or the last one), its attempt, status, lease and owner, and the last
 *   committed id. Allocation is one conditional write on the head (C1): it succeeds only if the head is still
 *   exactly what the caller read.
 * - Checkpoint N's item holds a reference to its cut (`cutId`, page counts), the previous committed cut's id, its
 *   shard count, the prepare votes and, per shard, the SHA-256 of the plan that shard voted for. An aborted
 *   attempt of N is followed by attempt k+1 of the same N (manifest ids stay gap-free, C7); the item keeps a
 *   bounded abort history (L3).
 * - The cut itself lives in cut pages (`cut-pages.ts`); cleanup's marks beside the records in `checkpoint-marks.ts`.
 * - Every transition updates head and item in ONE transaction conditioned on (id, attempt, status) of both.
 *
 * Size bound of every item written here (L3): head ≈ fixed fields + one reason ≤ 1,000 chars; record ≈ fixed
 * fields + ≤ 16 votes + ≤ 16 digests + ≤ 16 cleaned shards + ≤ 5 reasons ≤ 1,000 chars. None depends on the number
 * of partitions, aborts or checkpoints.
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { TransactWriteCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { isConditionFailure } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { send, sendConditional, type TransactItem } from '../aws/dynamo.ts';
import {
  type CheckpointLedger,
  markShardCleaned,
  readAttributes,
  readCleanedMarkIfAny,
  readSweepMark,
  writeCleanedMark,
  writeSweepMark,
} from './checkpoint-marks.ts';
import {
  type AbortNote,
  CheckpointConflictError,
  type CheckpointHead,
  type CheckpointRecord,
  type CheckpointStatus,
  RECENT_ABORTS,
  type TransitionRequest,
  truncateReason,
} from './checkpoint-records.ts';
import {
  type CutEntry,
  type CutPages,
  type CutReference,
  clearPendingCut,
  deleteCut,
  notePendingCut,
  pendingCuts,
  readCut,
  writeCut,
} from './cut-pages.ts';
import { keys } from './layout.ts';

export {
  type AbortNote,
  BEFORE_DECISION_STATUSES,
  CHECKPOINT_STATUS,
  CheckpointConflictError,
  type CheckpointHead,
  type CheckpointRecord,
  type CheckpointStatus,
  IN_FLIGHT_STATUSES,
  INITIAL_HEAD,
  isInFlight,
  MAX_ABORT_REASON,
  RECENT_ABORTS,
  type TransitionRequest,
  truncateReason,
} from './checkpoint-records.ts';
export { type CutEntry, type CutPages, CutPagesError, cutEntrySize, paginateCut } from './cut-pages.ts';

function setClause(
  prefix: string,
  values: Record<string, unknown>,
): { sets: string[]; names: Record<string, string>; vals: Record<string, unknown> } {
  const sets: string[] = [];
  const names: Record<string, string> = {};
  const vals: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(values)) {
    if (value === undefined) continue;
    names[`#${prefix}_${field}`] = field;
    vals[`:${prefix}_${field}`] = value;
    sets.push(`#${prefix}_${field} = :${prefix}_${field}`);
  }
  return { sets, names, vals };
}

export class CheckpointStore {
  private readonly at: CheckpointLedger;
  private readonly table: string;
  private readonly pipeline: string;

  constructor(dynamodb: DynamoDBClient, table: string, pipeline: string) {
    this.at = { doc: ledgerDocumentClient(dynamodb), table, pipeline };
    this.table = table;
    this.pipeline = pipeline;
  }

  /** The head, read strongly consistently; undefined before the first checkpoint. */
  async readHead(): Promise<CheckpointHead | undefined> {
    const item = await readAttributes(this.at, keys.checkpointHead(this.pipeline), 'readHead');
    return item as CheckpointHead | undefined;
  }

  async readRecord(checkpointId: number): Promise<CheckpointRecord | undefined> {
    const item = await readAttributes(this.at, keys.checkpoint(this.pipeline, checkpointId), 'readRecord');
    return item as CheckpointRecord | undefined;
  }

  /** Checkpoint `committedId`'s record (which must be COMMITTED) and its whole cut; nothing for 0. */
  async committedCut(committedId: number): Promise<{ record?: CheckpointRecord; cut: Map<string, number> }> {
    if (committedId === 0) return { cut: new Map() };
    const record = await this.readRecord(committedId);
    if (record?.status !== 'COMMITTED') {
      throw new CheckpointConflictError(
        committedId,
        record?.attempt ?? 0,
        'the head calls it committed but its record does not',
      );
    }
    const cut = new Map<string, number>();
    // A record written before cut pages existed carries its cut inline (bounded by the old limits, read once:
    // the next commit writes pages). Nothing else of the old shape is read.
    const legacy = (record as { cut?: unknown }).cut;
    if (typeof record.cutId !== 'string' && legacy && typeof legacy === 'object') {
      for (const [partition, offset] of Object.entries(legacy)) {
        if (Number.isSafeInteger(offset)) cut.set(partition, offset as number);
      }
      return { record: { ...record, cutId: '' }, cut };
    }
    for (const entry of await this.readCut(record)) cut.set(entry.partition, entry.cut);
    return { record, cut };
  }

  /** Writes a cut as pages under a fresh `cutId`, before the allocation that names it (`cut-pages.ts`). */
  writeCut(
    cutId: string,
    shards: readonly (readonly CutEntry[])[],
    unchanged: readonly CutEntry[],
  ): Promise<CutPages> {
    return writeCut(this.at, cutId, shards, unchanged);
  }

  /** The cut entries of one shard (changed partitions only), or of the whole cut; in page order. */
  readCut(record: CutReference, shard?: number): Promise<CutEntry[]> {
    return readCut(this.at, record, shard);
  }

  /** Deletes every page of a cut that is no longer needed; how many there were. */
  deleteCut(cutId: string): Promise<number> {
    return deleteCut(this.at, cutId);
  }

  /**
   * The cleaned-up mark: every checkpoint up to it had its cleanup complete (0 = none known). Cleanup catches up
   * on the committed checkpoints after it whose cleanup never completed, so nothing they leave grows forever (L3).
   */
  async readCleanedMark(): Promise<number> {
    return (await this.readCleanedMarkIfAny()) ?? 0;
  }

  /** The cleaned-up mark, or undefined for a pipeline from the release before the mark. */
  readCleanedMarkIfAny(): Promise<number | undefined> {
    return readCleanedMarkIfAny(this.at);
  }

  /** Moves the cleaned-up mark from `expected` to `upTo`; false when it was not `expected` any more. */
  writeCleanedMark(expected: number, upTo: number, now: number): Promise<boolean> {
    return writeCleanedMark(this.at, expected, upTo, now);
  }

  /** Records that a shard's cleanup of a COMMITTED checkpoint finished; true when every shard's has. */
  markShardCleaned(checkpointId: number, attempt: number, shard: number): Promise<boolean> {
    return markShardCleaned(this.at, checkpointId, attempt, shard);
  }

  /** Notes that a begin is about to write the pages of `cutId` (`cut-pages.ts`). */
  notePendingCut(cutId: string, now: number): Promise<void> {
    return notePendingCut(this.at, cutId, now);
  }

  clearPendingCut(cutId: string): Promise<void> {
    return clearPendingCut(this.at, cutId);
  }

  /** Pending-cut notes written before `notedBefore`, at most `limit`, oldest cutIds first by key. */
  pendingCuts(notedBefore: number, limit: number): Promise<string[]> {
    return pendingCuts(this.at, notedBefore, limit);
  }

  /** The orphan sweep's continuation mark ('' = start from the lowest key). */
  readSweepMark(): Promise<string> {
    return readSweepMark(this.at);
  }

  /** Moves the sweep mark from `expected` to `after`; false when another sweep moved it first. */
  writeSweepMark(expected: string, after: string, now: number): Promise<boolean> {
    return writeSweepMark(this.at, expected, after, now);
  }

  /**
   * C1: allocates checkpoint `record.checkpointId` (attempt `record.attempt`) if the head is still `expected`
   * (absent when undefined). Returns false when another execution changed the head first.
   */
  async allocate(
    expected: CheckpointHead | undefined,
    record: CheckpointRecord,
    leaseUntil: number,
    now: number,
  ): Promise<boolean> {
    const head: CheckpointHead = {
      checkpointId: record.checkpointId,
      attempt: record.attempt,
      status: 'BEGUN',
      leaseUntil,
      owner: record.owner,
      committedId: expected?.committedId ?? 0,
      consecutiveAborts: expected?.consecutiveAborts ?? 0,
      ...(expected?.lastAbortReason ? { lastAbortReason: truncateReason(expected.lastAbortReason) } : {}),
      updatedAt: now,
      packedEntriesSince: expected?.packedEntriesSince ?? now,
      compactFenceSince: expected?.compactFenceSince ?? now,
    };
    const headCondition = expected
      ? {
          ConditionExpression: 'checkpointId = :hid AND attempt = :hattempt AND #status = :hstatus',
          ExpressionAttributeNames: { '#status': 'status' },
          ExpressionAttributeValues: {
            ':hid': expected.checkpointId,
            ':hattempt': expected.attempt,
            ':hstatus': expected.status,
          },
        }
      : { ConditionExpression: 'attribute_not_exists(pk)' };
    const items: TransactItem[] = [
      {
        Put: {
          TableName: this.table,
          Item: { ...keys.checkpointHead(this.pipeline), ...head },
          ...headCondition,
        },
      },
      this.allocationOfRecord(record),
      // A pipeline's first checkpoint starts the cleaned-up mark at 0, so a missing mark always means a
      // pipeline from before the mark (see readCleanedMarkIfAny).
      ...(expected
        ? []
        : [
            {
              Put: {
                TableName: this.table,
                Item: { ...keys.cleanedMark(this.pipeline), upTo: 0, updatedAt: now },
              },
            },
          ]),
    ];
    const allocated = await sendConditional(
      this.at.doc,
      new TransactWriteCommand({ TransactItems: items }),
      'dynamodb:TransactWriteItems(allocate checkpoint)',
    );
    return allocated !== undefined;
  }

  /** The record's part of an allocation: a fresh id, or the next attempt of an aborted one. */
  private allocationOfRecord(record: CheckpointRecord): TransactItem {
    const { recentAborts: _recent, abortCount: _count, votes: _votes, ...fields } = record;
    // A fresh attempt votes afresh: no digest of an aborted attempt's plans survives.
    const set = setClause('r', { ...fields, planDigests: {} });
    return {
      Update: {
        TableName: this.table,
        Key: keys.checkpoint(this.pipeline, record.checkpointId),
        // Never over a live or committed record.
        ConditionExpression:
          'attribute_not_exists(pk) OR (#r_status = :aborted AND attempt = :previousAttempt)',
        // An aborted attempt's switches go unless this attempt names its own (SET and REMOVE of one name
        // cannot share an expression).
        UpdateExpression: `SET ${set.sets.join(', ')} REMOVE votes, decidedAt, abortedAt, abortReason${record.generationSwitches === undefined ? ', generationSwitches' : ''}`,
        ExpressionAttributeNames: set.names,
        ExpressionAttributeValues: {
          ...set.vals,
          ':aborted': 'ABORTED',
          ':previousAttempt': record.attempt - 1,
        },
      },
    };
  }

  /** The record's abort history after one more abort of `note.attempt`: bounded, newest last. */
  static abortHistory(
    record: Pick<CheckpointRecord, 'abortCount' | 'recentAborts'> | undefined,
    note: AbortNote,
  ): { abortCount: number; recentAborts: AbortNote[] } {
    const bounded = { ...note, reason: truncateReason(note.reason) };
    const recent = [...(record?.recentAborts ?? []).filter((n) => n.attempt !== note.attempt), bounded];
    return {
      abortCount: (record?.abortCount ?? 0) + 1,
      recentAborts: recent.slice(-RECENT_ABORTS),
    };
  }

  /** Moves head and record from one of `from` to `to`, both conditioned on (id, attempt, status). */
  async transition(request: TransitionRequest): Promise<void> {
    const { checkpointId, attempt, from, to } = request;
    const fromValues = Object.fromEntries(from.map((status, i) => [`:from${i}`, status]));
    const fromList = Object.keys(fromValues).join(', ');
    const head = setClause('h', { ...request.head, status: to, updatedAt: request.now });
    const record = setClause('r', { ...request.record, status: to });
    const extra = request.recordCondition;
    const items: TransactItem[] = [
      {
        Update: {
          TableName: this.table,
          Key: keys.checkpointHead(this.pipeline),
          ConditionExpression: `checkpointId = :id AND attempt = :attempt AND #h_status IN (${fromList})`,
          UpdateExpression: `SET ${head.sets.join(', ')}`,
          ExpressionAttributeNames: head.names,
          ExpressionAttributeValues: {
            ...head.vals,
            ...fromValues,
            ':id': checkpointId,
            ':attempt': attempt,
          },
        },
      },
      {
        Update: {
          TableName: this.table,
          Key: keys.checkpoint(this.pipeline, checkpointId),
          ConditionExpression: `attempt = :attempt AND #r_status IN (${fromList})${extra ? ` AND ${extra.expression}` : ''}`,
          UpdateExpression: `SET ${record.sets.join(', ')}`,
          ExpressionAttributeNames: record.names,
          ExpressionAttributeValues: { ...record.vals, ...fromValues, ':attempt': attempt, ...extra?.values },
        },
      },
    ];
    await send(
      this.at.doc,
      new TransactWriteCommand({ TransactItems: items }),
      `dynamodb:TransactWriteItems(${to})`,
      {
        explain: (error) => {
          if (!isConditionFailure(error)) return;
          throw new CheckpointConflictError(
            checkpointId,
            attempt,
            `cannot move from ${from.join('|')} to ${to}`,
            {
              cause: error,
            },
          );
        },
      },
    );
  }

  /**
   * Takes over an expired in-flight checkpoint for recovery: renews its lease under a new owner, conditioned on
   * the lease the caller saw (two recoverers: one wins). Returns false when it lost.
   */
  async takeOver(expected: CheckpointHead, owner: string, leaseUntil: number, now: number): Promise<boolean> {
    const taken = await sendConditional(
      this.at.doc,
      new UpdateCommand({
        TableName: this.table,
        Key: keys.checkpointHead(this.pipeline),
        ConditionExpression:
          'checkpointId = :id AND attempt = :attempt AND #status = :status AND leaseUntil = :lease',
        UpdateExpression: 'SET #owner = :owner, leaseUntil = :newLease, updatedAt = :now',
        ExpressionAttributeNames: { '#status': 'status', '#owner': 'owner' },
        ExpressionAttributeValues: {
          ':id': expected.checkpointId,
          ':attempt': expected.attempt,
          ':status': expected.status,
          ':lease': expected.leaseUntil,
          ':owner': owner,
          ':newLease': leaseUntil,
          ':now': now,
        },
      }),
      'dynamodb:UpdateItem(take over checkpoint)',
    );
    return taken !== undefined;
  }

  /** The head update that renews a lease, conditioned on (id, attempt, status). */
  private leaseRenewal(
    checkpointId: number,
    attempt: number,
    status: CheckpointStatus,
    leaseUntil: number,
    now: number,
  ) {
    return {
      TableName: this.table,
      Key: keys.checkpointHead(this.pipeline),
      ConditionExpression: 'checkpointId = :id AND attempt = :attempt AND #status = :status',
      UpdateExpression: 'SET leaseUntil = :lease, updatedAt = :now',
      ExpressionAttributeNames: { '#status': 'status' },
      ExpressionAttributeValues: {
        ':id': checkpointId,
        ':attempt': attempt,
        ':status': status,
        ':lease': leaseUntil,
        ':now': now,
      },
    };
  }

  /**
   * Renews the lease of a checkpoint still in `status` (promote does, after the decision), so that a long
   * roll-forward is not taken for a dead one. False when the head moved on (another attempt, or a takeover).
   */
  async renewLease(
    checkpointId: number,
    attempt: number,
    status: CheckpointStatus,
    leaseUntil: number,
    now: number,
  ): Promise<boolean> {
    const renewed = await sendConditional(
      this.at.doc,
      new UpdateCommand(this.leaseRenewal(checkpointId, attempt, status, leaseUntil, now)),
      'dynamodb:UpdateItem',
    );
    return renewed !== undefined;
  }

  /**
   * Records shard `shard`'s yes vote (idempotent: a set) and renews the lease, so that a long prepare is not
   * taken for a dead one. Both conditioned on (id, attempt, BEGUN).
   */
  async vote(
    checkpointId: number,
    attempt: number,
    shard: number,
    planDigest: string,
    leaseUntil: number,
    now: number,
  ): Promise<void> {
    const ballot: TransactItem = {
      Update: {
        TableName: this.table,
        Key: keys.checkpoint(this.pipeline, checkpointId),
        // Only a shard the attempt was dealt votes: decide counts votes against shardCount.
        ConditionExpression: 'attempt = :attempt AND #status = :begun AND shardCount > :shardNumber',
        // The digest and the vote land together: a yes vote is a vote for exactly these plan bytes.
        UpdateExpression: 'ADD votes :shard SET planDigests.#shard = :digest',
        ExpressionAttributeNames: { '#status': 'status', '#shard': String(shard) },
        ExpressionAttributeValues: {
          ':attempt': attempt,
          ':begun': 'BEGUN',
          ':shardNumber': shard,
          ':shard': new Set([shard]),
          ':digest': planDigest,
        },
      },
    };
    const renewal: TransactItem = {
      Update: this.leaseRenewal(checkpointId, attempt, 'BEGUN', leaseUntil, now),
    };
    await send(
      this.at.doc,
      new TransactWriteCommand({ TransactItems: [ballot, renewal] }),
      'dynamodb:TransactWriteItems(vote)',
      {
        explain: (error) => {
          if (!isConditionFailure(error)) return;
          throw new CheckpointConflictError(
            checkpointId,
            attempt,
            `shard ${shard} cannot vote: the attempt is no longer BEGUN`,
            { cause: error },
          );
        },
      },
    );
  }
}
