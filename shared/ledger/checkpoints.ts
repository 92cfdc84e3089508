/**
 * Checkpoint records in the ledger: the pipeline's checkpoint head and one item per checkpoint id (keys in
 * `layout.ts`: `keys.checkpointHead`, `keys.checkpoint`). This module only translates: the protocol (which
 * transition is allowed when) is `shared/coordinator`'s.
 *
 * - The head names the checkpoint in flight (or the last one), its attempt, status, lease and owner, and the last
 *   committed id. Allocation is one conditional write on the head (C1): it succeeds only if the head is still
 *   exactly what the caller read.
 * - Checkpoint N's item holds a reference to its cut (`cutId`, page counts), the previous committed cut's id, its
 *   shard count, the prepare votes and, per shard, the SHA-256 of the plan that shard voted for. An aborted
 *   attempt of N is followed by attempt k+1 of the same N (manifest ids stay gap-free, C7); the item keeps a
 *   bounded abort history: `abortCount` and the last {@link RECENT_ABORTS} notes, reasons truncated to
 *   {@link MAX_ABORT_REASON} characters (L3).
 * - The cut itself lives in cut pages (`layout.ts`): immutable items written before the allocation that names
 *   them, each bounded by {@link CUT_PAGE_BUDGET_BYTES}, read with paged Queries. A reader checks it found exactly
 *   the page counts the record names, so a lost page fails loudly instead of shrinking the cut.
 * - Every transition updates head and item in ONE transaction conditioned on (id, attempt, status) of both.
 *
 * Size bound of every item written here (L3): head ≈ fixed fields + one reason ≤ 1,000 chars; record ≈ fixed
 * fields + ≤ 16 votes + ≤ 16 digests + ≤ 16 cleaned shards + ≤ 5 reasons ≤ 1,000 chars; cut page ≤ 100 KB of
 * entries + keys; sweep mark ≈ one S3 key; cleaned-up mark and pending-cut notes ≈ fixed fields. None depends on the number of partitions, aborts or checkpoints.
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  DeleteCommand,
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  QueryCommand,
  type QueryCommandOutput,
  TransactWriteCommand,
  type TransactWriteCommandInput,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { isConditionFailure, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { mapLimit } from '../concurrency.ts';
import { PipelineError } from '../errors.ts';
import { CUT_PAGE_BUDGET_BYTES, keys, PENDING_CUT_PREFIX } from './layout.ts';

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

/** How many abort notes a record keeps (the newest); older ones are only counted in `abortCount`. */
export const RECENT_ABORTS = 5;
/** Longest abort reason stored (head and record); longer ones are cut with a marker. */
export const MAX_ABORT_REASON = 1000;

export function truncateReason(reason: string): string {
  return reason.length <= MAX_ABORT_REASON
    ? reason
    : `${reason.slice(0, MAX_ABORT_REASON - 13)} …[truncated]`;
}

/** One partition of a cut: the previous committed offset (-1: none) and this checkpoint's cut (C2). */
export interface CutEntry {
  readonly partition: string;
  readonly previous: number;
  readonly cut: number;
}

/** How many cut pages a begin wrote: per shard the pages of changed partitions, and the unchanged pages. */
export interface CutPages {
  readonly changed: readonly number[];
  readonly unchanged: number;
}

/** A cut page the checkpoint record names is missing, or an extra one appeared: the cut cannot be trusted. */
export class CutPagesError extends PipelineError {}

export interface CheckpointRecord {
  readonly pipeline: string;
  readonly checkpointId: number;
  readonly attempt: number;
  readonly status: CheckpointStatus;
  readonly owner: string;
  /** The pk suffix of this attempt's cut pages: unique to the begin that wrote them. */
  readonly cutId: string;
  readonly cutPages: CutPages;
  /** Partitions in the cut, and how many of them moved (the ones this checkpoint covers). */
  readonly partitions: number;
  readonly changedPartitions: number;
  readonly previousCheckpointId: number;
  /** The cutId of checkpoint `previousCheckpointId` ('' for none): cleanup deletes its pages once this commits. */
  readonly previousCutId: string;
  readonly shardCount: number;
  /**
   * Replay generations this checkpoint switches readers to (`shared/replay/`): chosen by begin (switch requested,
   * every range covered by this cut), written into the manifest by commit. Absent: none.
   */
  readonly generationSwitches?: readonly number[];
  /** Shards whose prepare voted yes for this attempt. */
  readonly votes?: ReadonlySet<number>;
  /** Shards whose cleanup finished once this checkpoint COMMITTED (review R2-5: a cleanup that never ran is caught up). */
  readonly cleanedShards?: ReadonlySet<number>;
  /** Per shard (as a string), the hex SHA-256 of the plan that shard's yes vote is for (issue 17). */
  readonly planDigests?: Readonly<Record<string, string>>;
  readonly begunAt: number;
  readonly decidedAt?: number;
  readonly committedAt?: number;
  readonly abortedAt?: number;
  readonly abortReason?: string;
  /** Aborted attempts of this checkpoint id, all of them. */
  readonly abortCount?: number;
  /** The newest {@link RECENT_ABORTS} aborted attempts, oldest first. */
  readonly recentAborts?: readonly AbortNote[];
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
  /** An extra condition on the record, e.g. `size(votes) = :shardCount`, with its values. */
  readonly recordCondition?: { readonly expression: string; readonly values: Record<string, unknown> };
  readonly now: number;
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

  /**
   * Writes a cut as pages under a fresh `cutId` (before the allocation that names it): the changed partitions of
   * each shard, then the unchanged ones, each page at most {@link CUT_PAGE_BUDGET_BYTES} of entries. Each put is
   * conditioned on the page not existing (a cutId is never reused). Returns the page counts for the record.
   */
  async writeCut(
    cutId: string,
    shards: readonly (readonly CutEntry[])[],
    unchanged: readonly CutEntry[],
  ): Promise<CutPages> {
    const puts: { key: { pk: string; sk: string }; entries: readonly CutEntry[] }[] = [];
    const changed = shards.map((entries, shard) => {
      const pages = paginateCut(entries);
      pages.forEach((page, index) => {
        puts.push({ key: keys.changedCutPage(this.pipeline, cutId, shard, index), entries: page });
      });
      return pages.length;
    });
    const unchangedPages = paginateCut(unchanged);
    unchangedPages.forEach((page, index) => {
      puts.push({ key: keys.unchangedCutPage(this.pipeline, cutId, index), entries: page });
    });
    await mapLimit(puts, 8, async ({ key, entries }) => {
      try {
        await this.doc.send(
          new PutCommand({
            TableName: this.table,
            Item: { ...key, entries: entries.map((e) => [e.partition, e.previous, e.cut]) },
            ConditionExpression: 'attribute_not_exists(pk)',
          }),
        );
      } catch (error) {
        rethrowClassified('dynamodb:PutItem(cut page)', error);
      }
    });
    return { changed, unchanged: unchangedPages.length };
  }

  /** The cut entries of one shard (changed partitions only), or of the whole cut; in page order. */
  async readCut(
    record: Pick<CheckpointRecord, 'cutId' | 'cutPages' | 'checkpointId' | 'attempt'>,
    shard?: number,
  ): Promise<CutEntry[]> {
    const pk = keys.cutPagesPk(this.pipeline, record.cutId);
    const prefix = shard === undefined ? undefined : keys.changedCutPagesOf(shard);
    const expected =
      shard === undefined
        ? record.cutPages.changed.reduce((sum, n) => sum + n, 0) + record.cutPages.unchanged
        : (record.cutPages.changed[shard] ?? 0);
    const entries: CutEntry[] = [];
    let pages = 0;
    let startKey: Record<string, unknown> | undefined;
    do {
      let result: QueryCommandOutput;
      try {
        result = await this.doc.send(
          new QueryCommand({
            TableName: this.table,
            ConsistentRead: true,
            KeyConditionExpression: prefix ? 'pk = :pk AND begins_with(sk, :prefix)' : 'pk = :pk',
            ExpressionAttributeValues: prefix ? { ':pk': pk, ':prefix': prefix } : { ':pk': pk },
            ExclusiveStartKey: startKey,
          }),
        );
      } catch (error) {
        return rethrowClassified('dynamodb:Query(cut pages)', error);
      }
      for (const item of result.Items ?? []) {
        pages++;
        for (const tuple of (item.entries ?? []) as unknown[]) entries.push(parseCutTuple(tuple));
      }
      startKey = result.LastEvaluatedKey;
    } while (startKey);
    if (pages !== expected) {
      throw new CutPagesError(
        `checkpoint ${record.checkpointId} attempt ${record.attempt}: found ${pages} cut pages${shard === undefined ? '' : ` of shard ${shard}`} under ${record.cutId}, its record names ${expected}`,
      );
    }
    return entries;
  }

  /** Deletes every page of a cut that is no longer needed (a lost begin, an aborted attempt, a superseded cut). */
  async deleteCut(cutId: string): Promise<number> {
    if (!cutId) return 0;
    const pk = keys.cutPagesPk(this.pipeline, cutId);
    const found: string[] = [];
    let startKey: Record<string, unknown> | undefined;
    do {
      try {
        const result = await this.doc.send(
          new QueryCommand({
            TableName: this.table,
            KeyConditionExpression: 'pk = :pk',
            ExpressionAttributeValues: { ':pk': pk },
            ProjectionExpression: 'sk',
            ExclusiveStartKey: startKey,
          }),
        );
        for (const item of result.Items ?? []) found.push(String(item.sk));
        startKey = result.LastEvaluatedKey;
      } catch (error) {
        return rethrowClassified('dynamodb:Query(cut pages)', error);
      }
    } while (startKey);
    await mapLimit(found, 8, async (sk) => {
      try {
        await this.doc.send(
          new DeleteCommand({
            TableName: this.table,
            Key: { pk, sk },
            ConditionExpression: 'attribute_exists(entries)',
          }),
        );
      } catch (error) {
        if (!isConditionFailure(error)) rethrowClassified('dynamodb:DeleteItem(cut page)', error);
      }
    });
    return found.length;
  }

  /**
   * The cleaned-up mark: every checkpoint up to it had its cleanup complete (0 = none known). Cleanup catches up
   * on the committed checkpoints after it whose cleanup never completed, so nothing they leave grows forever (L3).
   */
  async readCleanedMark(): Promise<number> {
    return (await this.readCleanedMarkIfAny()) ?? 0;
  }

  /**
   * The cleaned-up mark, or undefined when there is none: a pipeline allocates its first checkpoint together with
   * a mark of 0, so a missing mark means a pipeline from the release before the mark (review R2b-7).
   */
  async readCleanedMarkIfAny(): Promise<number | undefined> {
    const item = await this.get(keys.cleanedMark(this.pipeline), 'readCleanedMark');
    if (item === undefined) return undefined;
    return Number.isSafeInteger(item.upTo) ? (item.upTo as number) : 0;
  }

  /** Moves the cleaned-up mark from `expected` to `upTo` (conditioned, so it only moves forward by one step's
   * knowledge); false when it was not `expected` any more. */
  async writeCleanedMark(expected: number, upTo: number, now: number): Promise<boolean> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { ...keys.cleanedMark(this.pipeline), upTo, updatedAt: now },
          ConditionExpression:
            expected === 0 ? 'attribute_not_exists(pk) OR upTo = :expected' : 'upTo = :expected',
          ExpressionAttributeValues: { ':expected': expected },
        }),
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      return rethrowClassified('dynamodb:PutItem(cleaned-up mark)', error);
    }
  }

  /**
   * Records that shard `shard`'s cleanup of a COMMITTED checkpoint finished (a set: idempotent); true when every
   * shard's has.
   */
  async markShardCleaned(checkpointId: number, attempt: number, shard: number): Promise<boolean> {
    try {
      const result = await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: keys.checkpoint(this.pipeline, checkpointId),
          ConditionExpression: 'attempt = :attempt AND #status = :committed',
          UpdateExpression: 'ADD cleanedShards :shard',
          ExpressionAttributeNames: { '#status': 'status' },
          ExpressionAttributeValues: {
            ':attempt': attempt,
            ':committed': 'COMMITTED',
            ':shard': new Set([shard]),
          },
          ReturnValues: 'ALL_NEW',
        }),
      );
      const record = result.Attributes as CheckpointRecord | undefined;
      return (record?.cleanedShards?.size ?? 0) >= (record?.shardCount ?? Number.POSITIVE_INFINITY);
    } catch (error) {
      if (isConditionFailure(error)) {
        throw new CheckpointConflictError(
          checkpointId,
          attempt,
          `shard ${shard} cleaned up, but the attempt is not COMMITTED`,
          {
            cause: error,
          },
        );
      }
      return rethrowClassified('dynamodb:UpdateItem(cleaned shard)', error);
    }
  }

  /**
   * Notes that a begin is about to write the pages of `cutId` (before it writes them). The begin removes the note
   * once the allocation names the cut or its pages are deleted; a begin that crashed in between leaves the note,
   * and {@link pendingCuts} finds its pages again (no record names them, so nothing else ever would).
   */
  async notePendingCut(cutId: string, now: number): Promise<void> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { ...keys.pendingCut(this.pipeline, cutId), cutId, notedAt: now },
        }),
      );
    } catch (error) {
      rethrowClassified('dynamodb:PutItem(pending cut)', error);
    }
  }

  async clearPendingCut(cutId: string): Promise<void> {
    try {
      await this.doc.send(
        new DeleteCommand({ TableName: this.table, Key: keys.pendingCut(this.pipeline, cutId) }),
      );
    } catch (error) {
      rethrowClassified('dynamodb:DeleteItem(pending cut)', error);
    }
  }

  /** Pending-cut notes written before `notedBefore`, at most `limit`, oldest cutIds first by key. */
  async pendingCuts(notedBefore: number, limit: number): Promise<string[]> {
    const found: string[] = [];
    let startKey: Record<string, unknown> | undefined;
    do {
      try {
        const result = await this.doc.send(
          new QueryCommand({
            TableName: this.table,
            ConsistentRead: true,
            KeyConditionExpression: 'pk = :pk AND begins_with(sk, :prefix)',
            ExpressionAttributeValues: {
              ':pk': keys.checkpointPk(this.pipeline),
              ':prefix': PENDING_CUT_PREFIX,
            },
            ExclusiveStartKey: startKey,
          }),
        );
        for (const item of result.Items ?? []) {
          if (
            typeof item.cutId === 'string' &&
            typeof item.notedAt === 'number' &&
            item.notedAt < notedBefore
          )
            found.push(item.cutId);
          if (found.length >= limit) return found;
        }
        startKey = result.LastEvaluatedKey;
      } catch (error) {
        return rethrowClassified('dynamodb:Query(pending cuts)', error);
      }
    } while (startKey);
    return found;
  }

  /** The orphan sweep's continuation mark: the last staged key it examined ('' = start from the lowest key). */
  async readSweepMark(): Promise<string> {
    const item = await this.get(keys.sweepMark(this.pipeline), 'readSweepMark');
    return typeof item?.after === 'string' ? item.after : '';
  }

  /**
   * Moves the sweep mark from `expected` to `after`, conditioned on it still being `expected`: of two sweeps
   * (a zombie's and a live one) one moves it; the other's result is dropped, which only means some objects are
   * examined again. False when it lost.
   */
  async writeSweepMark(expected: string, after: string, now: number): Promise<boolean> {
    try {
      await this.doc.send(
        new PutCommand({
          TableName: this.table,
          Item: { ...keys.sweepMark(this.pipeline), after, updatedAt: now },
          ConditionExpression: 'attribute_not_exists(pk) OR #after = :expected',
          ExpressionAttributeNames: { '#after': 'after' },
          ExpressionAttributeValues: { ':expected': expected },
        }),
      );
      return true;
    } catch (error) {
      if (isConditionFailure(error)) return false;
      return rethrowClassified('dynamodb:PutItem(sweep mark)', error);
    }
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
    const { recentAborts: _recent, abortCount: _count, votes: _votes, ...fields } = record;
    // A fresh attempt votes afresh: no digest of an aborted attempt's plans survives.
    const set = setClause('r', { ...fields, planDigests: {} });
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
        },
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
    const recordSets = [...record.sets];
    const recordValues: Record<string, unknown> = { ...record.vals, ...fromValues, ':attempt': attempt };
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
    planDigest: string,
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
                // The digest and the vote land together: a yes vote is a vote for exactly these plan bytes.
                UpdateExpression: 'ADD votes :shard SET planDigests.#shard = :digest',
                ExpressionAttributeNames: { '#status': 'status', '#shard': String(shard) },
                ExpressionAttributeValues: {
                  ':attempt': attempt,
                  ':begun': 'BEGUN',
                  ':shard': new Set([shard]),
                  ':digest': planDigest,
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

/** Splits entries into pages of at most {@link CUT_PAGE_BUDGET_BYTES} (DynamoDB's size rule, upper bound). */
export function paginateCut(entries: readonly CutEntry[]): CutEntry[][] {
  const pages: CutEntry[][] = [];
  let page: CutEntry[] = [];
  let bytes = 3;
  for (const entry of entries) {
    const size = cutEntrySize(entry);
    if (page.length > 0 && bytes + size > CUT_PAGE_BUDGET_BYTES) {
      pages.push(page);
      page = [];
      bytes = 3;
    }
    page.push(entry);
    bytes += size;
  }
  if (page.length > 0) pages.push(page);
  return pages;
}

/** An upper bound of one entry's DynamoDB size: a list (3) of a string and two numbers (≤ 21 each), 1 per element. */
export function cutEntrySize(entry: CutEntry): number {
  return 3 + 3 + Buffer.byteLength(entry.partition, 'utf8') + 2 * 21;
}

function parseCutTuple(tuple: unknown): CutEntry {
  if (
    !Array.isArray(tuple) ||
    tuple.length !== 3 ||
    typeof tuple[0] !== 'string' ||
    !Number.isSafeInteger(tuple[1]) ||
    !Number.isSafeInteger(tuple[2])
  ) {
    throw new CutPagesError(`a cut page holds a malformed entry ${JSON.stringify(tuple)}`);
  }
  return { partition: tuple[0], previous: tuple[1] as number, cut: tuple[2] as number };
}
