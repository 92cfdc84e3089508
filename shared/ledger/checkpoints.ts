/**
 * Checkpoint records in the ledger: the pipeline's checkpoint head and one item per checkpoint id (keys in
 * `layout.ts`: `keys.checkpointHead`, `keys.checkpoint`). This module only translates: the protocol (which
 * transition is allowed when) is `shared/coordinator`'s.
 *
 * - The head names the checkpoint in flight (or the last one), its attempt, status, lease and owner, and the last
 *   committed id. Allocation is one conditional write on the head (C1): it succeeds only if the head is still
 *   exactly what the caller read.
 * - Checkpoint N's item holds its cut, the previous committed cut, its shard count and the prepare votes. An
 *   aborted attempt of N is followed by attempt k+1 of the same N (manifest ids stay gap-free, C7); the item keeps
 *   the history of aborted attempts in `aborts`.
 * - Every transition updates head and item in ONE transaction conditioned on (id, attempt, status) of both.
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ConditionalCheckFailedException } from '@aws-sdk/client-dynamodb';
import {
  type DynamoDBDocumentClient,
  GetCommand,
  TransactWriteCommand,
  type TransactWriteCommandInput,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { PipelineError } from '../errors.ts';
import { keys } from './layout.ts';

export const CHECKPOINT_STATUS = {
  /** Id allocated, cut recorded; prepare shards are verifying and voting. */
  BEGUN: 'BEGUN',
  /** Every shard voted yes: every covered staged object verified, promotion planned. */
  PREPARED: 'PREPARED',
  /** The decision (C4): from here the checkpoint only rolls forward. */
  COMMITTING: 'COMMITTING',
  /** The manifest is written; the checkpoint's output is visible. */
  COMMITTED: 'COMMITTED',
  /** Nothing was promoted; the covered staged data waits for the next attempt (C6). */
  ABORTED: 'ABORTED',
} as const;
export type CheckpointStatus = (typeof CHECKPOINT_STATUS)[keyof typeof CHECKPOINT_STATUS];

export const IN_FLIGHT_STATUSES: readonly CheckpointStatus[] = ['BEGUN', 'PREPARED', 'COMMITTING'];
export const BEFORE_DECISION_STATUSES: readonly CheckpointStatus[] = ['BEGUN', 'PREPARED'];

export function isInFlight(status: CheckpointStatus): boolean {
  return IN_FLIGHT_STATUSES.includes(status);
}

export interface CheckpointHead {
  /** The checkpoint in flight, or the last one (committed or aborted); 0 before the first. */
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: CheckpointStatus;
  /** Epoch ms; an in-flight checkpoint whose lease has passed is recovered by the next execution. */
  readonly leaseUntil: number;
  /** The execution that holds the lease. */
  readonly owner: string;
  /** The last committed checkpoint id; 0 before the first commit. */
  readonly committedId: number;
  /** Aborts since the last commit: a growing number means the pipeline is stuck (alarm on it). */
  readonly consecutiveAborts: number;
  readonly lastAbortReason?: string;
  readonly updatedAt: number;
}

/** The head of a pipeline that never took a checkpoint. */
export const INITIAL_HEAD: CheckpointHead = {
  checkpointId: 0,
  attempt: 0,
  status: 'COMMITTED',
  leaseUntil: 0,
  owner: '',
  committedId: 0,
  consecutiveAborts: 0,
  updatedAt: 0,
};

export interface AbortNote {
  readonly attempt: number;
  readonly reason: string;
  readonly at: number;
}

export interface CheckpointRecord {
  readonly pipeline: string;
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: CheckpointStatus;
  readonly owner: string;
  /** Per partition (`<topic>#<partition>`), the staged offset read at begin (C2). */
  readonly cut: Record<string, number>;
  /** The previous committed checkpoint's cut (partitions absent there start at -1). */
  readonly previousCut: Record<string, number>;
  readonly previousCheckpointId: number;
  readonly shardCount: number;
  /** Shards whose prepare voted yes for this attempt. */
  readonly votes?: ReadonlySet<number>;
  readonly begunAt: number;
  readonly decidedAt?: number;
  readonly committedAt?: number;
  readonly abortedAt?: number;
  readonly abortReason?: string;
  readonly aborts?: readonly AbortNote[];
}

/** A conditional write lost: the head or the record is no longer what the caller expected. */
export class CheckpointConflictError extends PipelineError {
  constructor(
    readonly checkpointId: number,
    readonly attempt: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(`checkpoint ${checkpointId} attempt ${attempt}: ${message}`, options);
  }
}

export interface TransitionRequest {
  readonly checkpointId: number;
  readonly attempt: number;
  readonly from: readonly CheckpointStatus[];
  readonly to: CheckpointStatus;
  /** Extra attributes to SET on the head (besides status and updatedAt). */
  readonly head?: Record<string, unknown>;
  /** Extra attributes to SET on the record (besides status). */
  readonly record?: Record<string, unknown>;
  /** Appended to the record's `aborts` list. */
  readonly abortNote?: AbortNote;
  /** An extra condition on the record, e.g. `size(votes) = :shardCount`, with its values. */
  readonly recordCondition?: { readonly expression: string; readonly values: Record<string, unknown> };
  readonly now: number;
}

function isConditionFailure(error: unknown): boolean {
  if (error instanceof ConditionalCheckFailedException) return true;
  return (cancellationReasons(error) ?? []).some((reason) => reason.Code === 'ConditionalCheckFailed');
}

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
  private readonly doc: DynamoDBDocumentClient;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
    private readonly pipeline: string,
  ) {
    this.doc = ledgerDocumentClient(dynamodb);
  }

  /** The head, read strongly consistently; undefined before the first checkpoint. */
  async readHead(): Promise<CheckpointHead | undefined> {
    const item = await this.get(keys.checkpointHead(this.pipeline), 'readHead');
    return item as CheckpointHead | undefined;
  }

  async readRecord(checkpointId: number): Promise<CheckpointRecord | undefined> {
    const item = await this.get(keys.checkpoint(this.pipeline, checkpointId), 'readRecord');
    return item as CheckpointRecord | undefined;
  }

  /** The committed cut of checkpoint `committedId`; empty for 0. */
  async committedCut(committedId: number): Promise<Record<string, number>> {
    if (committedId === 0) return {};
    const record = await this.readRecord(committedId);
    if (record?.status !== 'COMMITTED') {
      throw new CheckpointConflictError(
        committedId,
        record?.attempt ?? 0,
        'the head calls it committed but its record does not',
      );
    }
    return record.cut;
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
      ...(expected?.lastAbortReason ? { lastAbortReason: expected.lastAbortReason } : {}),
      updatedAt: now,
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
    const { aborts: _aborts, votes: _votes, ...fields } = record;
    const set = setClause('r', fields);
    const input: TransactWriteCommandInput = {
      TransactItems: [
        {
          Put: {
            TableName: this.table,
            Item: { ...keys.checkpointHead(this.pipeline), ...head },
            ...headCondition,
          },
        },
        {
          Update: {
            TableName: this.table,
            Key: keys.checkpoint(this.pipeline, record.checkpointId),
            // A fresh id, or the next attempt of an aborted one: never over a live or committed record.
            ConditionExpression:
              'attribute_not_exists(pk) OR (#r_status = :aborted AND attempt = :previousAttempt)',
            UpdateExpression: `SET ${set.sets.join(', ')} REMOVE votes, decidedAt, abortedAt, abortReason`,
            ExpressionAttributeNames: set.names,
            ExpressionAttributeValues: {
              ...set.vals,
              ':aborted': 'ABORTED',
              ':previousAttempt': record.attempt - 1,
            },
          },
        },
      ],
    };
    try {
      await this.doc.send(new TransactWriteCommand(input));
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      return rethrowClassified('dynamodb:TransactWriteItems(allocate checkpoint)', error);
    }
  }

  /** Moves head and record from one of `from` to `to`, both conditioned on (id, attempt, status). */
  async transition(request: TransitionRequest): Promise<void> {
    const { checkpointId, attempt, from, to } = request;
    const fromValues = Object.fromEntries(from.map((status, i) => [`:from${i}`, status]));
    const fromList = Object.keys(fromValues).join(', ');
    const head = setClause('h', { ...request.head, status: to, updatedAt: request.now });
    const record = setClause('r', { ...request.record, status: to });
    const recordSets = [...record.sets];
    const recordValues: Record<string, unknown> = { ...record.vals, ...fromValues, ':attempt': attempt };
    if (request.abortNote) {
      recordSets.push('aborts = list_append(if_not_exists(aborts, :emptyList), :abortNote)');
      recordValues[':emptyList'] = [];
      recordValues[':abortNote'] = [request.abortNote];
    }
    const extra = request.recordCondition;
    try {
      await this.doc.send(
        new TransactWriteCommand({
          TransactItems: [
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
                UpdateExpression: `SET ${recordSets.join(', ')}`,
                ExpressionAttributeNames: record.names,
                ExpressionAttributeValues: { ...recordValues, ...extra?.values },
              },
            },
          ],
        }),
      );
    } catch (error) {
      if (isConditionFailure(error)) {
        throw new CheckpointConflictError(
          checkpointId,
          attempt,
          `cannot move from ${from.join('|')} to ${to}`,
          { cause: error },
        );
      }
      rethrowClassified(`dynamodb:TransactWriteItems(${to})`, error);
    }
  }

  /**
   * Takes over an expired in-flight checkpoint for recovery: renews its lease under a new owner, conditioned on
   * the lease the caller saw (two recoverers: one wins). Returns false when it lost.
   */
  async takeOver(expected: CheckpointHead, owner: string, leaseUntil: number, now: number): Promise<boolean> {
    try {
      await this.doc.send(
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
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      return rethrowClassified('dynamodb:UpdateItem(take over checkpoint)', error);
    }
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
    try {
      await this.doc.send(
        new UpdateCommand(this.leaseRenewal(checkpointId, attempt, status, leaseUntil, now)),
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      rethrowClassified('dynamodb:UpdateItem', error);
    }
  }

  /**
   * Records shard `shard`'s yes vote (idempotent: a set) and renews the lease, so that a long prepare is not
   * taken for a dead one. Both conditioned on (id, attempt, BEGUN).
   */
  async vote(
    checkpointId: number,
    attempt: number,
    shard: number,
    leaseUntil: number,
    now: number,
  ): Promise<void> {
    try {
      await this.doc.send(
        new TransactWriteCommand({
          TransactItems: [
            {
              Update: {
                TableName: this.table,
                Key: keys.checkpoint(this.pipeline, checkpointId),
                ConditionExpression: 'attempt = :attempt AND #status = :begun',
                UpdateExpression: 'ADD votes :shard',
                ExpressionAttributeNames: { '#status': 'status' },
                ExpressionAttributeValues: {
                  ':attempt': attempt,
                  ':begun': 'BEGUN',
                  ':shard': new Set([shard]),
                },
              },
            },
            { Update: this.leaseRenewal(checkpointId, attempt, 'BEGUN', leaseUntil, now) },
          ],
        }),
      );
    } catch (error) {
      if (isConditionFailure(error)) {
        throw new CheckpointConflictError(
          checkpointId,
          attempt,
          `shard ${shard} cannot vote: the attempt is no longer BEGUN`,
          { cause: error },
        );
      }
      rethrowClassified('dynamodb:TransactWriteItems(vote)', error);
    }
  }

  private async get(
    key: { pk: string; sk: string },
    operation: string,
  ): Promise<Record<string, unknown> | undefined> {
    try {
      const result = await this.doc.send(
        new GetCommand({ TableName: this.table, Key: key, ConsistentRead: true }),
      );
      if (!result.Item) return undefined;
      const { pk: _pk, sk: _sk, ...rest } = result.Item;
      return rest;
    } catch (error) {
      return rethrowClassified(`dynamodb:GetItem(${operation})`, error);
    }
  }
}
