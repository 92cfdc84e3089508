/**
 * The processor's side of the ledger: read a partition's fence, and apply one chunk's effects in ONE DynamoDB
 * transaction (P1, P2). This adapter only translates; the protocol lives in `shared/processor`.
 *
 * Transaction items, in this order (the order matters: cancellation reasons are reported by index):
 *   0      the fence: stagedOffset := newOffset, on condition stagedOffset = expected (or absent when expected -1)
 *   1..    staged-file entries (one per stream with rows), each on condition the entry does not exist
 *   ...    idempotency claims, each on condition: absent, expired, or already ours
 *   ...    keyed-state deltas (ADD), guarded by the fence condition of the same transaction
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  type DynamoDBDocumentClient,
  GetCommand,
  PutCommand,
  TransactWriteCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { MissingResourceError, PipelineError } from '../errors.ts';
import type { StateDelta } from '../transforms/types.ts';
import { keys } from './layout.ts';
import type { ClaimItem, StagedFileEntry } from './records.ts';

/** The fence is not at the value this invocation started from: someone else staged (P2). */
export class FenceMovedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
    readonly expected: number,
  ) {
    super(`fence of ${topic}-${partition} is no longer at ${expected}`);
  }
}

/** Some idempotency keys of the chunk are claimed by other records (P4). */
export class ClaimsTakenError extends PipelineError {
  constructor(readonly idempotencyKeys: readonly string[]) {
    super(`idempotency keys already claimed: ${idempotencyKeys.join(', ')}`);
  }
}

export interface StagingTransaction {
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  /** The fence value the invocation read (-1: no fence yet). */
  readonly expectedOffset: number;
  /** The chunk's last offset: the fence after this transaction. */
  readonly newOffset: number;
  readonly entries: readonly StagedFileEntry[];
  readonly claims: readonly ClaimItem[];
  /** Folded per key: at most one delta per state key. */
  readonly state: readonly StateDelta[];
  /** Epoch ms. */
  readonly now: number;
}

export const NO_FENCE = -1;

/** What writing claims ahead found: keys another record holds, and keys whose holder's claim has expired. */
export interface ClaimsAhead {
  readonly taken: string[];
  /** To be taken over inside the staging transaction (conditioned on still being expired). */
  readonly expired: string[];
}

/** `expiresAt` of a claim returned with a failed condition (plain or DynamoDB-typed), if any. */
function expiresAtOf(item: unknown): number | undefined {
  const value = (item as { expiresAt?: unknown } | undefined)?.expiresAt;
  if (typeof value === 'number') return value;
  const typed = (value as { N?: string } | undefined)?.N;
  return typed === undefined ? undefined : Number(typed);
}

/** Claims written ahead at once per partition batch: enough to hide latency, few enough not to throttle. */
const CLAIM_CONCURRENCY = 32;

type TransactItem = NonNullable<
  ConstructorParameters<typeof TransactWriteCommand>[0]['TransactItems']
>[number];

export class StagingLedger {
  private readonly doc: DynamoDBDocumentClient;

  constructor(
    dynamodb: DynamoDBClient,
    private readonly table: string,
  ) {
    this.doc = ledgerDocumentClient(dynamodb);
  }

  /** The partition's staged offset, strongly consistent; {@link NO_FENCE} when nothing was staged yet. */
  async readFence(pipeline: string, topic: string, partition: number): Promise<number> {
    try {
      const { Item } = await this.doc.send(
        new GetCommand({
          TableName: this.table,
          Key: keys.fence(pipeline, topic, partition),
          ConsistentRead: true,
        }),
      );
      return typeof Item?.stagedOffset === 'number' ? Item.stagedOffset : NO_FENCE;
    } catch (error) {
      this.rethrow('dynamodb:GetItem', error);
    }
  }

  /** Applies a chunk's effects atomically, or throws {@link FenceMovedError} / {@link ClaimsTakenError}. */
  async stage(txn: StagingTransaction): Promise<void> {
    const items = [this.fenceItem(txn), ...txn.entries.map((e) => this.entryItem(txn, e))];
    const claimsStart = items.length;
    items.push(...txn.claims.map((claim) => this.claimItem(txn, claim)));
    items.push(...txn.state.map((delta) => this.stateItem(txn.pipeline, delta)));
    try {
      await this.doc.send(new TransactWriteCommand({ TransactItems: items }));
    } catch (error) {
      const reasons = cancellationReasons(error);
      if (reasons) this.explainCancellation(txn, reasons, claimsStart);
      this.rethrow('dynamodb:TransactWriteItems', error);
    }
  }

  /**
   * Writes claims ahead of the staging transaction (DESIGN.md's refinement of P1), as conditional puts in
   * parallel: absent, expired, or already naming this claimant (a retry of the same record). Returns the keys
   * another record holds: those records are duplicates. A claim written here whose record never commits stays
   * until the record's retry re-claims it as its own (same claimant) and commits it.
   */
  async claimAhead(pipeline: string, claims: readonly ClaimItem[], now: number): Promise<ClaimsAhead> {
    const result: ClaimsAhead = { taken: [], expired: [] };
    let next = 0;
    let failure: { error: unknown } | undefined;
    const worker = async (): Promise<void> => {
      // Stop at the first real error: no put of this invocation outlives its failure.
      while (next < claims.length && !failure) {
        const claim = claims[next++]!;
        try {
          await this.doc.send(new PutCommand(this.claimAheadPut(pipeline, claim)));
        } catch (error) {
          if ((error as { name?: string }).name !== 'ConditionalCheckFailedException') {
            failure ??= { error };
            continue;
          }
          const held = expiresAtOf((error as { Item?: unknown }).Item);
          (held !== undefined && held < Math.floor(now / 1000) ? result.expired : result.taken).push(
            claim.idempotencyKey,
          );
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(CLAIM_CONCURRENCY, claims.length) }, worker));
    if (failure) this.rethrow('dynamodb:PutItem', failure.error);
    return result;
  }

  /**
   * AT_LEAST_ONCE / NONE baseline: keyed-state deltas without fence or condition, in transactions of at most 100
   * items. A retried batch adds its deltas again — the duplication those guarantees accept. Returns the number
   * of transactions.
   */
  async applyState(pipeline: string, deltas: readonly StateDelta[]): Promise<number> {
    let transactions = 0;
    for (let start = 0; start < deltas.length; start += 100) {
      const items = deltas.slice(start, start + 100).map((delta) => this.stateItem(pipeline, delta));
      try {
        await this.doc.send(new TransactWriteCommand({ TransactItems: items }));
      } catch (error) {
        this.rethrow('dynamodb:TransactWriteItems', error);
      }
      transactions += 1;
    }
    return transactions;
  }

  private explainCancellation(
    txn: StagingTransaction,
    reasons: ReadonlyArray<{ Code?: string }>,
    claimsStart: number,
  ): void {
    const failed = (index: number) => reasons[index]?.Code === 'ConditionalCheckFailed';
    // A failed entry condition means another invocation staged the same range: the fence moved too.
    if (failed(0) || txn.entries.some((_, i) => failed(1 + i))) {
      throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
    }
    const taken = txn.claims.filter((_, i) => failed(claimsStart + i)).map((claim) => claim.idempotencyKey);
    if (taken.length > 0) throw new ClaimsTakenError(taken);
  }

  private rethrow(operation: string, error: unknown): never {
    if ((error as { name?: string }).name === 'ResourceNotFoundException') {
      throw new MissingResourceError(`table ${this.table}`, 'does not exist', { cause: error });
    }
    rethrowClassified(operation, error);
  }

  private fenceItem(txn: StagingTransaction): TransactItem {
    const absent = txn.expectedOffset === NO_FENCE;
    return {
      Update: {
        TableName: this.table,
        Key: keys.fence(txn.pipeline, txn.topic, txn.partition),
        UpdateExpression:
          'SET stagedOffset = :new, updatedAt = :now, topic = :topic, #partition = :partition',
        ConditionExpression: absent ? 'attribute_not_exists(pk)' : 'stagedOffset = :expected',
        ExpressionAttributeNames: { '#partition': 'partition' },
        ExpressionAttributeValues: {
          ':new': txn.newOffset,
          ':now': txn.now,
          ':topic': txn.topic,
          ':partition': txn.partition,
          ...(absent ? {} : { ':expected': txn.expectedOffset }),
        },
      },
    };
  }

  private entryItem(txn: StagingTransaction, entry: StagedFileEntry): TransactItem {
    return {
      Put: {
        TableName: this.table,
        Item: {
          ...keys.staged(txn.pipeline, txn.topic, txn.partition, entry.lastOffset, entry.stream),
          ...entry,
        },
        ConditionExpression: 'attribute_not_exists(pk)',
      },
    };
  }

  private claimItem(txn: StagingTransaction, claim: ClaimItem): TransactItem {
    return { Put: this.claimPut(txn.pipeline, claim, txn.now) };
  }

  /**
   * Ahead of the transaction a claim may only be created or confirmed, never taken over: taking over another
   * record's expired claim happens inside the fenced transaction, so an invocation that turns out to apply
   * nothing (a stale fence) cannot steal a key from a record still waiting for its retry.
   */
  private claimAheadPut(pipeline: string, claim: ClaimItem) {
    return {
      TableName: this.table,
      Item: { ...keys.claim(pipeline, claim.idempotencyKey), ...claim },
      ConditionExpression: 'attribute_not_exists(pk) OR claimant = :claimant',
      ExpressionAttributeValues: { ':claimant': claim.claimant },
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
    };
  }

  private claimPut(pipeline: string, claim: ClaimItem, now: number) {
    return {
      TableName: this.table,
      Item: { ...keys.claim(pipeline, claim.idempotencyKey), ...claim },
      // Absent, expired (TTL deletion lags by up to days), or already ours (a retry of the same record).
      ConditionExpression: 'attribute_not_exists(pk) OR expiresAt < :nowSeconds OR claimant = :claimant',
      ExpressionAttributeValues: { ':nowSeconds': Math.floor(now / 1000), ':claimant': claim.claimant },
    };
  }

  private stateItem(pipeline: string, delta: StateDelta): TransactItem {
    const names: Record<string, string> = {};
    const values: Record<string, unknown> = { ':stateKey': delta.key };
    const sets = ['stateKey = :stateKey'];
    const adds: string[] = [];
    Object.entries(delta.fields).forEach(([field, value], i) => {
      names[`#f${i}`] = field;
      values[`:f${i}`] = value;
      sets.push(`#f${i} = :f${i}`);
    });
    Object.entries(delta.add).forEach(([field, value], i) => {
      names[`#a${i}`] = field;
      values[`:a${i}`] = value;
      adds.push(`#a${i} :a${i}`);
    });
    return {
      Update: {
        TableName: this.table,
        Key: keys.state(pipeline, delta.key),
        UpdateExpression: `SET ${sets.join(', ')}${adds.length ? ` ADD ${adds.join(', ')}` : ''}`,
        ExpressionAttributeNames: Object.keys(names).length ? names : undefined,
        ExpressionAttributeValues: values,
      },
    };
  }
}
