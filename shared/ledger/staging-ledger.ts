/**
 * The processor's side of the ledger: read a partition's fence, and apply one chunk's effects in ONE DynamoDB
 * transaction (P1, P2). This adapter only translates; the protocol lives in `shared/processor`.
 *
 * Transaction items, in this order (the order matters: cancellation reasons are reported by index):
 *   0      the fence: stagedOffset := newOffset and its identity (the fingerprints of the record at newOffset and
 *          of the delivered batch's first record), on condition stagedOffset = expected (or absent when -1)
 *   1..    staged-file entries (one per stream with rows), each on condition the entry does not exist
 *   ...    idempotency claims, each on condition: absent, expired, or already ours (same claimant and digest);
 *          a failed one returns the holder, so the processor tells a duplicate (same digest) from a conflict
 *   ...    key-window buckets (partition-scoped idempotency, `key-window.ts`): whole-item Puts, each on condition
 *          the bucket is as the processor's window says (absent, or holding that many entries)
 *   ...    keyed-state deltas (ADD), guarded by the fence condition of the same transaction
 *
 * The identity rides in the fence update the transaction makes anyway: no extra call in the steady state.
 * A transaction DynamoDB refuses for a limit (an item over 400 KB: `ValidationError`/`ValidationException`) is
 * structural, not transient: {@link ItemLimitExceededError} names the partition and the refused item; for keyed-state
 * items it is a {@link StateItemTooLargeError}, naming their state keys, which the processor resolves record by record.
 *
 * Claims written ahead list the attempts that created or confirmed them (`holders`); a claim a staging transaction
 * puts lists the committing attempt, which never leaves. Claims of a batch that then
 * fails deterministically are released by their attempt ({@link StagingLedger.releaseClaims}): the attempt leaves
 * `holders`, and a claim left without holders is marked expired — never deleted, so the processor needs no
 * DeleteItem or ConditionCheckItem, and never while another attempt of the same batch relies on it.
 */

import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import {
  type DynamoDBDocumentClient,
  GetCommand,
  QueryCommand,
  TransactWriteCommand,
  UpdateCommand,
} from '@aws-sdk/lib-dynamodb';
import { cancellationReasons, isLimitExceeded, rethrowClassified } from '../aws/classify.ts';
import { ledgerDocumentClient } from '../aws/clients.ts';
import { mapLimit } from '../concurrency.ts';
import {
  ItemLimitExceededError,
  MalformedLedgerItemError,
  MissingResourceError,
  PipelineError,
} from '../errors.ts';
import type { StateDelta } from '../transforms/types.ts';
import {
  CLOSED_ATTRIBUTE,
  EPOCH_ATTRIBUTE,
  generationOfLane,
  isRootLane,
  isStopRecord,
  laneOf,
  MAX_EPOCH,
  STOP_ATTRIBUTE,
  type StopRecord,
} from './epochs.ts';
import { fenceKeys } from './fences.ts';
import { type BucketWrite, bucketOf, ENTRY_BYTES, type KeyWindowBucket } from './key-window.ts';
import { type ItemKey, keys } from './layout.ts';
import {
  type ClaimItem,
  type FenceIdentity,
  parseClaimant,
  RECENT_STARTS,
  type RecordFingerprint,
  type StagedFileEntry,
} from './records.ts';

/** The output generation whose claims a claimant (`<lane>#<partition>#<offset>`) takes: its lane's (`layout.ts`). */
function claimGeneration(claimant: string): number {
  const of = parseClaimant(claimant);
  return of === undefined ? 0 : generationOfLane(of.lane);
}

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

/**
 * A key-window bucket is not what the processor's window said although the fence was (only a writer outside the
 * protocol, or a defect, can do that): the processor reads the window again.
 */
export class KeyWindowChangedError extends PipelineError {
  constructor(
    readonly topic: string,
    readonly partition: number,
  ) {
    super(`key window of ${topic}-${partition} changed without its fence moving`);
  }
}

/** Who holds a claim another record found taken (the digest is absent on claims written before digests). */
export interface ClaimHolder {
  readonly idempotencyKey: string;
  readonly claimant: string;
  readonly digest: string | undefined;
  /** A key window's holder: `digest` is only the digest's prefix (`key-window.ts` digestPrefix). */
  readonly prefixOnly?: true;
}

/** Some idempotency keys of the chunk are claimed by other records (P4); `holders` says by whom. */
export class ClaimsTakenError extends PipelineError {
  constructor(readonly holders: readonly ClaimHolder[]) {
    super(`idempotency keys already claimed: ${holders.map((h) => h.idempotencyKey).join(', ')}`);
  }
}

/**
 * DynamoDB refused an ADD because the state field it adds to holds something other than a number (a field set as
 * text by an earlier record, in an earlier chunk or batch). `stateKeys` are the state keys that may hold it: the
 * refused items when DynamoDB names them, else every state key of the transaction. Deterministic: the processor
 * dead-letters the records whose adds meet a non-number (see `StagingLedger.readState`) and stages the rest.
 */
export class StateTypeConflictError extends PipelineError {
  constructor(
    readonly stateKeys: readonly string[],
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(`state ADD to a field that is not a number (${stateKeys.join(', ')}): ${detail}`, options);
  }
}

/**
 * DynamoDB refused keyed-state items as larger than its item limit (400 KB): an item grown over many records that
 * set new field names. `stateKeys` are the refused items when DynamoDB names them, else every state key of the
 * transaction. The processor dead-letters the records that would take an item past the limit and stages the rest
 * (`processor/state-size.ts`); when none would, it stops the partition with this error, as any item limit.
 */
export class StateItemTooLargeError extends ItemLimitExceededError {
  constructor(
    topic: string,
    partition: number,
    readonly stateKeys: readonly string[],
    items: readonly string[],
    detail: string,
    options?: { cause?: unknown },
  ) {
    super(topic, partition, items, detail, options);
  }
}

/** DynamoDB's words for an ADD (or another operand) meeting an attribute of the wrong type. */
const WRONG_TYPE = /incorrect (operand|data) type|operand type/i;

/** A partition's fence as read: the staged offset and, when the fence carries it, its identity. */
export interface FenceState {
  readonly stagedOffset: number;
  /** Undefined for no fence and for fences written before identities (unknown: the distance rule only). */
  readonly identity: FenceIdentity | undefined;
  /** Epoch ms of the fence's last staging transaction (undefined for no fence). */
  readonly updatedAt: number | undefined;
  /** Read from the legacy key (`fences.ts`): the next staging transaction moves it to its shard. */
  readonly legacy?: true;
  /** The lane was closed by the switch to a newer epoch (`epochs.ts`): nothing stages on it any more. */
  readonly closed?: true;
  /** On the root (epoch-0) fence: the partition's current epoch, when it is not 0 (`epochs.ts`). */
  readonly epoch?: number;
  /** Why the processor last stopped this lane, until its next staging transaction (`epochs.ts`). */
  readonly stop?: StopRecord;
}

/** A partition's current lane (`epochs.ts`) and that lane's fence. */
export interface LaneFence {
  /** `<topic>` in epoch 0, `<topic>~<N>` in epoch N. */
  readonly lane: string;
  readonly fence: FenceState;
}

/**
 * The partition's epoch changed while this invocation held the old one (`epochs.ts`): the batch fails, releasing
 * the claims it wrote ahead (not transient: a retry in the new lane must be able to take them over), and the
 * mapping's retry stages it in the new epoch.
 */
export class EpochChangedError extends PipelineError {
  constructor(
    readonly lane: string,
    readonly partition: number,
  ) {
    super(
      `${lane}-${partition} was closed by an operator's switch to a new epoch while this batch ran; the retry stages it in the new epoch`,
    );
  }
}

export interface StagingTransaction {
  readonly pipeline: string;
  readonly topic: string;
  readonly partition: number;
  /** The fence value the invocation read (-1: no fence yet). */
  readonly expectedOffset: number;
  /** That value was read from the legacy fence key: this transaction moves the fence to its shard (`fences.ts`). */
  readonly fromLegacy?: boolean;
  /** The chunk's last offset: the fence after this transaction. */
  readonly newOffset: number;
  readonly entries: readonly StagedFileEntry[];
  readonly claims: readonly ClaimItem[];
  /** Folded per key: at most one delta per state key. */
  readonly state: readonly StateDelta[];
  /** Partition-scoped idempotency: the key-window buckets this chunk writes (see `key-window.ts`). */
  readonly keyWindow?: readonly BucketWrite[];
  /** What the fence will say about the records it moves past (see {@link FenceIdentity}). */
  readonly identity: FenceIdentity;
  /** Epoch ms. */
  readonly now: number;
  /**
   * The attempt staging this transaction: every claim it puts lists it as holder, for good (see
   * {@link StagingLedger.releaseClaims}).
   */
  readonly attemptId: string;
}

/** What names a refusal of keyed-state items: the partition and the transaction's folded deltas. */
interface StateRefusalContext {
  readonly topic: string;
  readonly partition: number;
  readonly state: readonly StateDelta[];
}

/** AT_LEAST_ONCE / NONE: one chunk's keyed-state deltas of a partition, applied without fence (see applyState). */
export interface DirectStateTransaction extends StateRefusalContext {
  readonly pipeline: string;
}

export const NO_FENCE = -1;

/** DynamoDB's limit on the items of one TransactWriteItems. */
const MAX_TRANSACTION_ITEMS = 100;

/** What writing claims ahead found: keys another record holds, and keys whose holder's claim has expired. */
export interface ClaimsAhead {
  readonly taken: ClaimHolder[];
  /** To be taken over inside the staging transaction (conditioned on still being expired). */
  readonly expired: string[];
  /** The claims this call created or confirmed as its records' own (released if the batch fails for good). */
  readonly held: ClaimItem[];
}

/** `expiresAt` of a released claim: expired for every reader, so the next record with its key takes it over. */
export const RELEASED = 0;

/** An attribute of an item returned with a failed condition, plain (document client) or DynamoDB-typed. */
function attributeOf(item: unknown, name: string): string | number | undefined {
  const value = (item as Record<string, unknown> | undefined)?.[name];
  if (typeof value === 'number' || typeof value === 'string') return value;
  const typed = value as { N?: string; S?: string } | undefined;
  if (typed?.N !== undefined) return Number(typed.N);
  return typed?.S;
}

function holderOf(idempotencyKey: string, item: unknown): ClaimHolder {
  const claimant = attributeOf(item, 'claimant');
  const digest = attributeOf(item, 'digest');
  return {
    idempotencyKey,
    claimant: typeof claimant === 'string' ? claimant : '(unknown)',
    digest: typeof digest === 'string' ? digest : undefined,
  };
}

function isFingerprint(value: unknown): value is RecordFingerprint {
  const v = value as Partial<RecordFingerprint> | undefined;
  return (
    typeof v === 'object' &&
    v !== null &&
    Number.isSafeInteger(v.offset) &&
    typeof v.digest === 'string' &&
    typeof v.timestamp === 'number'
  );
}

/**
 * The identity of a fence item, or undefined when it has none or a malformed one (treated as unknown, like a fence
 * written before identities; a fence whose record fingerprint is not at its staged offset is malformed too).
 */
function identityOf(item: Record<string, unknown>, stagedOffset: number): FenceIdentity | undefined {
  const { fenceRecord, batchStart, recentStarts } = item;
  if (!isFingerprint(fenceRecord) || !isFingerprint(batchStart)) return undefined;
  if (fenceRecord.offset !== stagedOffset || batchStart.offset > stagedOffset) return undefined;
  // The ring is advisory (it only turns a false stop into a proven redelivery): a malformed one counts as absent,
  // and only well-formed starts at or below the fence are kept, at most RECENT_STARTS of them.
  const starts = Array.isArray(recentStarts)
    ? recentStarts.filter((s): s is RecordFingerprint => isFingerprint(s) && s.offset <= stagedOffset)
    : [];
  return { fenceRecord, batchStart, recentStarts: starts.slice(-RECENT_STARTS) };
}

/** A fence item as read: an item without a valid staged offset is malformed (see {@link StagingLedger.readFence}). */
function fenceStateOf(item: Record<string, unknown>, topic: string, partition: number): FenceState {
  // An item without a staged offset would read as "no fence" while the staging condition (item absent) fails
  // forever: malformed, like any other value that is not an offset.
  const stagedOffset = item.stagedOffset;
  if (typeof stagedOffset !== 'number' || !Number.isSafeInteger(stagedOffset) || stagedOffset < 0) {
    throw new MalformedLedgerItemError(
      `fence ${topic}#${partition}`,
      `staged offset ${String(stagedOffset)} is not an offset`,
    );
  }
  const epoch = item[EPOCH_ATTRIBUTE];
  if (
    epoch !== undefined &&
    (!Number.isSafeInteger(epoch) || (epoch as number) < 1 || (epoch as number) > MAX_EPOCH)
  ) {
    throw new MalformedLedgerItemError(
      `fence ${topic}#${partition}`,
      `epoch ${String(epoch)} is not an epoch`,
    );
  }
  const stop = item[STOP_ATTRIBUTE];
  return {
    stagedOffset,
    identity: identityOf(item, stagedOffset),
    updatedAt: typeof item.updatedAt === 'number' ? item.updatedAt : undefined,
    ...(item[CLOSED_ATTRIBUTE] === undefined ? {} : { closed: true as const }),
    ...(epoch === undefined ? {} : { epoch: epoch as number }),
    ...(isStopRecord(stop) ? { stop } : {}),
  };
}

/**
 * A claim is this record's own when it names the same claimant and the same digest: a retry of the record. The
 * same claimant with another digest is another record at the same offset (a new topic generation, a new epoch).
 * Claims written before digests existed match on the claimant alone.
 */
const OWN_CLAIM = '(claimant = :claimant AND (digest = :digest OR attribute_not_exists(digest)))';

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

  /**
   * The partition's fence, strongly consistent: {@link NO_FENCE} when nothing was staged yet. A staged offset that
   * is not a non-negative safe integer is no fence this code wrote: refused, loudly.
   */
  async readFence(pipeline: string, topic: string, partition: number): Promise<FenceState> {
    const item = await this.getFence(fenceKeys.fence(pipeline, topic, partition));
    if (item !== undefined) return fenceStateOf(item, topic, partition);
    // A lane of epoch >= 1 or of a redrive was created after the shards: it never had a legacy key.
    if (!isRootLane(topic)) return { stagedOffset: NO_FENCE, identity: undefined, updatedAt: undefined };
    // No sharded fence: a fence written before the shards may still be under the legacy key (`fences.ts`).
    const legacy = await this.getFence(fenceKeys.legacyFence(pipeline, topic, partition));
    if (legacy === undefined) return { stagedOffset: NO_FENCE, identity: undefined, updatedAt: undefined };
    if (legacy.movedTo !== undefined) {
      // Moved between the two reads (a retry or another container staged meanwhile): the move created the sharded
      // fence in the same transaction, before this read, so it is there now. Missing again: removed by hand.
      const moved = await this.getFence(fenceKeys.fence(pipeline, topic, partition));
      if (moved !== undefined) return fenceStateOf(moved, topic, partition);
      throw new MalformedLedgerItemError(
        `fence ${topic}#${partition}`,
        `the legacy fence says it moved to ${String(legacy.movedTo)}, where no fence is`,
      );
    }
    return { ...fenceStateOf(legacy, topic, partition), legacy: true };
  }

  /**
   * The partition's current lane and its fence (`epochs.ts`): the root (epoch-0) fence names the current epoch; in
   * epoch N >= 1 the lane's own fence is read after it. A lane found closed was switched between the two reads: the
   * root is read again (a switch is an operator's act, so twice is already rare; the third time is refused as a
   * transient failure).
   */
  async readCurrentFence(pipeline: string, topic: string, partition: number): Promise<LaneFence> {
    let previous: number | undefined;
    for (let read = 0; read < 3; read++) {
      const root = await this.readFence(pipeline, topic, partition);
      const epoch = root.epoch ?? 0;
      if (epoch === previous) {
        // The root still names a lane found closed: no switch is under way, the ledger is inconsistent (a fence
        // edited or restored by hand). Stop loudly rather than retry forever (review of epochs, finding 4).
        throw new MalformedLedgerItemError(
          `fence ${laneOf(topic, epoch)}#${partition}`,
          `is closed, but the root fence ${topic}#${partition} still names epoch ${epoch} as current`,
        );
      }
      previous = epoch;
      if (epoch === 0) {
        if (root.closed) {
          throw new MalformedLedgerItemError(
            `fence ${topic}#${partition}`,
            'closed, but names no newer epoch',
          );
        }
        return { lane: topic, fence: root };
      }
      if (!root.closed) {
        throw new MalformedLedgerItemError(
          `fence ${topic}#${partition}`,
          `names epoch ${epoch} but is not closed`,
        );
      }
      const lane = laneOf(topic, epoch);
      const fence = await this.readFence(pipeline, lane, partition);
      if (!fence.closed) return { lane, fence };
    }
    throw new EpochChangedError(topic, partition);
  }

  /**
   * Writes why the processor stopped a lane onto its fence (`eos epoch` shows it), on condition the fence is still
   * the one judged, not closed, and its stop record still the one read (`fence.stop`, or none): two attempts that
   * saw the same stop never overwrite each other's sighting — the loser's next retry counts it. Best effort: the
   * stop itself is the batch's error, whatever happens here.
   */
  async recordStop(
    pipeline: string,
    lane: string,
    partition: number,
    fence: FenceState,
    stop: StopRecord,
  ): Promise<boolean> {
    const key = fenceKeys.readFrom(pipeline, lane, partition, fence.legacy);
    const previous = fence.stop;
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: key,
          UpdateExpression: 'SET #stop = :stop',
          ConditionExpression:
            'stagedOffset = :fence AND attribute_not_exists(#closed) AND ' +
            (previous === undefined
              ? 'attribute_not_exists(#stop)'
              : '#stop.#at = :at AND #stop.firstOffset = :first'),
          ExpressionAttributeNames: {
            '#stop': STOP_ATTRIBUTE,
            '#closed': CLOSED_ATTRIBUTE,
            ...(previous === undefined ? {} : { '#at': 'at' }),
          },
          ExpressionAttributeValues: {
            ':stop': stop,
            ':fence': fence.stagedOffset,
            ...(previous === undefined ? {} : { ':at': previous.at, ':first': previous.firstOffset }),
          },
        }),
      );
      return true;
    } catch {
      return false;
    }
  }

  private async getFence(key: ItemKey): Promise<Record<string, unknown> | undefined> {
    try {
      const { Item } = await this.doc.send(
        new GetCommand({ TableName: this.table, Key: key, ConsistentRead: true }),
      );
      return Item;
    } catch (error) {
      this.rethrow('dynamodb:GetItem', error);
    }
  }

  /**
   * A keyed-state item as stored (strongly consistent), or undefined: read only after a
   * {@link StateTypeConflictError}, to find which added fields hold something other than a number.
   */
  async readState(pipeline: string, stateKey: string): Promise<Record<string, unknown> | undefined> {
    try {
      const { Item } = await this.doc.send(
        new GetCommand({ TableName: this.table, Key: keys.state(pipeline, stateKey), ConsistentRead: true }),
      );
      return Item;
    } catch (error) {
      this.rethrow('dynamodb:GetItem', error);
    }
  }

  /**
   * Applies a chunk's effects atomically, or throws {@link FenceMovedError} / {@link ClaimsTakenError} /
   * {@link StateTypeConflictError} / {@link ItemLimitExceededError}.
   */
  async stage(txn: StagingTransaction): Promise<void> {
    const moves = this.touchesLegacy(txn) ? [this.legacyItem(txn)] : [];
    const items = [this.fenceItem(txn), ...moves, ...txn.entries.map((e) => this.entryItem(txn, e))];
    const labels = [
      'fence',
      ...moves.map(() => 'legacy fence'),
      ...txn.entries.map((e) => `staged entry ${e.stream} ${e.firstOffset}..${e.lastOffset}`),
    ];
    const claimsStart = items.length;
    items.push(...txn.claims.map((claim) => this.claimItem(txn, claim)));
    labels.push(...txn.claims.map((claim) => `claim ${claim.idempotencyKey}`));
    const windowWrites = txn.keyWindow ?? [];
    items.push(...windowWrites.map((write) => this.bucketItem(txn, write)));
    labels.push(...windowWrites.map((write) => `key-window bucket ${write.bucket.seq}`));
    items.push(...txn.state.map((delta) => this.stateItem(txn.pipeline, delta)));
    labels.push(...txn.state.map((delta) => `state ${delta.key}`));
    if (items.length > MAX_TRANSACTION_ITEMS) {
      // The planner keeps a chunk within the limit (the legacy fence item included): a defect, named, not retried.
      throw new ItemLimitExceededError(
        txn.topic,
        txn.partition,
        [`${items.length} transaction items`],
        `more than DynamoDB's ${MAX_TRANSACTION_ITEMS} items in one transaction`,
      );
    }
    try {
      await this.doc.send(new TransactWriteCommand({ TransactItems: items }));
    } catch (error) {
      const reasons = cancellationReasons(error);
      if (reasons) this.explainCancellation(txn, reasons, claimsStart, labels, error);
      this.explainStateRefusal(txn, labels, error);
      this.rethrow('dynamodb:TransactWriteItems', error);
    }
  }

  /**
   * Marks a claim released (expired for every reader) on condition it still names exactly `claimant` and `digest`:
   * for a claim whose record can never be staged (its lane was closed by a new epoch below it, see the processor's
   * `releaseOrphans`). Returns whether it was released (false: it changed meanwhile).
   */
  /**
   * The live output's (generation 0) claims of `idempotencyKeys` that are not released, by key: what a replay
   * generation judges its records' keys against too (`Processor.liveHolders`). An expired claim counts: it is what
   * the live pipeline judged the range's records by when it ran (review of replay, round 2 finding 1); DynamoDB's TTL
   * deletion removes it some time later, and with it this memory (a documented limit). GetItem per key (the
   * processor role has no BatchGetItem), eight in flight.
   */
  async readLiveClaims(pipeline: string, idempotencyKeys: readonly string[]): Promise<ClaimHolder[]> {
    const items = await mapLimit(idempotencyKeys, 8, async (key) => {
      try {
        const { Item } = await this.doc.send(
          new GetCommand({ TableName: this.table, Key: keys.claim(pipeline, key, 0), ConsistentRead: true }),
        );
        return Item;
      } catch (error) {
        return this.rethrow('dynamodb:GetItem(claim)', error);
      }
    });
    return items.flatMap((item) =>
      item === undefined ||
      typeof item.claimant !== 'string' ||
      typeof item.idempotencyKey !== 'string' ||
      item.expiresAt === RELEASED
        ? []
        : [
            {
              idempotencyKey: item.idempotencyKey,
              claimant: item.claimant,
              digest: typeof item.digest === 'string' ? item.digest : undefined,
            },
          ],
    );
  }

  async releaseOrphanClaim(
    pipeline: string,
    idempotencyKey: string,
    claimant: string,
    digest: string,
  ): Promise<boolean> {
    try {
      await this.doc.send(
        new UpdateCommand({
          TableName: this.table,
          Key: keys.claim(pipeline, idempotencyKey, claimGeneration(claimant)),
          UpdateExpression: 'SET expiresAt = :released',
          ConditionExpression: 'claimant = :claimant AND digest = :digest',
          ExpressionAttributeValues: { ':released': RELEASED, ':claimant': claimant, ':digest': digest },
        }),
      );
      return true;
    } catch (error) {
      if ((error as { name?: string }).name === 'ConditionalCheckFailedException') return false;
      this.rethrow('dynamodb:UpdateItem(claim)', error);
    }
  }

  /**
   * Releases the claims an attempt wrote ahead (or confirmed) for a batch that then failed deterministically (issue
   * 9.3), so that a duplicate of their keys elsewhere is not dropped because of a claim whose record never becomes
   * durable. Attempt-scoped, by UpdateItem only (the processor role has no DeleteItem):
   *   1. remove `attemptId` from the claim's `holders`, on condition the claim still names exactly its record
   *      (claimant and digest) and lists this attempt;
   *   2. if that left no holder, mark the claim released (`expiresAt` := 0, so the next record with the key takes
   *      it over inside its fenced transaction, as any expired claim), on condition it still has no holder.
   * A claim another live attempt confirmed (the mapping's retry of the same batch, which may commit it without
   * putting it in its transaction) lists that attempt too, so it is never released by this one; a claim put by a
   * staging transaction (a takeover, or `in-transaction` mode) lists the committing attempt as holder, which
   * never releases what it committed (its records are at or below the fence), so it is never released.
   * A claim left by a crashed attempt keeps that attempt as holder: its retry confirms it as its own (same claimant
   * and digest), and others see its claimant and digest until its TTL. Returns how many claims were released.
   */
  async releaseClaims(pipeline: string, attemptId: string, claims: readonly ClaimItem[]): Promise<number> {
    let released = 0;
    for (const claim of claims) {
      const key = keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant));
      const ours = { ':claimant': claim.claimant, ':digest': claim.digest };
      let left: Record<string, unknown> | undefined;
      try {
        ({ Attributes: left } = await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: key,
            UpdateExpression: 'DELETE holders :attempts',
            ConditionExpression: 'claimant = :claimant AND digest = :digest AND contains(holders, :attempt)',
            ExpressionAttributeValues: { ...ours, ':attempts': new Set([attemptId]), ':attempt': attemptId },
            ReturnValues: 'ALL_NEW',
          }),
        ));
      } catch (error) {
        if ((error as { name?: string }).name === 'ConditionalCheckFailedException') continue; // not ours now
        this.rethrow('dynamodb:UpdateItem', error);
      }
      if (left?.holders !== undefined) continue; // another attempt holds it: its claim now
      try {
        await this.doc.send(
          new UpdateCommand({
            TableName: this.table,
            Key: key,
            UpdateExpression: 'SET expiresAt = :released',
            ConditionExpression:
              'claimant = :claimant AND digest = :digest AND attribute_not_exists(holders)',
            ExpressionAttributeValues: { ...ours, ':released': RELEASED },
          }),
        );
        released += 1;
      } catch (error) {
        if ((error as { name?: string }).name === 'ConditionalCheckFailedException') continue; // confirmed meanwhile
        this.rethrow('dynamodb:UpdateItem', error);
      }
    }
    return released;
  }

  /**
   * Writes claims ahead of the staging transaction (DESIGN.md's refinement of P1), as conditional puts in
   * parallel: absent, or already naming this claimant with this digest (a retry of the same record). Returns who
   * holds the keys another record holds (the processor compares digests: duplicate or conflict) and the claims it
   * holds now. A claim written here whose record never commits stays until the record's retry re-claims it as its
   * own and commits it, or until the batch fails deterministically and releases it ({@link releaseClaims}). Each
   * claim created or confirmed lists `attemptId` among its holders: a release removes only its own attempt.
   */
  async claimAhead(
    pipeline: string,
    claims: readonly ClaimItem[],
    now: number,
    attemptId: string,
  ): Promise<ClaimsAhead> {
    const result: ClaimsAhead = { taken: [], expired: [], held: [] };
    let next = 0;
    let failure: { error: unknown } | undefined;
    const worker = async (): Promise<void> => {
      // Stop at the first real error: no put of this invocation outlives its failure.
      while (next < claims.length && !failure) {
        const claim = claims[next++]!;
        try {
          await this.doc.send(new UpdateCommand(this.claimAheadUpdate(pipeline, claim, attemptId)));
          result.held.push(claim);
        } catch (error) {
          if ((error as { name?: string }).name !== 'ConditionalCheckFailedException') {
            failure ??= { error };
            continue;
          }
          const item = (error as { Item?: unknown }).Item;
          const expiresAt = attributeOf(item, 'expiresAt');
          if (typeof expiresAt === 'number' && expiresAt < Math.floor(now / 1000)) {
            result.expired.push(claim.idempotencyKey);
          } else {
            result.taken.push(holderOf(claim.idempotencyKey, item));
          }
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(CLAIM_CONCURRENCY, claims.length) }, worker));
    if (failure) this.rethrow('dynamodb:UpdateItem', failure.error);
    return result;
  }

  /**
   * AT_LEAST_ONCE / NONE: one chunk's keyed-state deltas (folded per key, planned within DynamoDB's limits as a
   * staging chunk is) in one transaction, without fence or condition. A retried batch adds its deltas again: the
   * duplication those guarantees accept. A refused item throws as in {@link stage}: {@link StateTypeConflictError}
   * or {@link StateItemTooLargeError}, which the processor resolves record by record.
   */
  async applyState(txn: DirectStateTransaction): Promise<void> {
    if (txn.state.length === 0) return;
    if (txn.state.length > MAX_TRANSACTION_ITEMS) {
      throw new ItemLimitExceededError(
        txn.topic,
        txn.partition,
        [`${txn.state.length} transaction items`],
        `more than DynamoDB's ${MAX_TRANSACTION_ITEMS} items in one transaction`,
      );
    }
    const items = txn.state.map((delta) => this.stateItem(txn.pipeline, delta));
    const labels = txn.state.map((delta) => `state ${delta.key}`);
    try {
      await this.doc.send(new TransactWriteCommand({ TransactItems: items }));
    } catch (error) {
      const reasons = cancellationReasons(error);
      if (reasons) this.explainStateCancellation(txn, reasons, labels, error);
      this.explainStateRefusal(txn, labels, error);
      this.rethrow('dynamodb:TransactWriteItems', error);
    }
  }

  private explainCancellation(
    txn: StagingTransaction,
    reasons: ReadonlyArray<{ Code?: string; Message?: string; Item?: Record<string, unknown> }>,
    claimsStart: number,
    labels: readonly string[],
    error: unknown,
  ): void {
    const failed = (index: number) => reasons[index]?.Code === 'ConditionalCheckFailed';
    // A failed entry condition means another invocation staged the same range: the fence moved too. So does a
    // failed legacy move (another invocation moved or moved past it).
    const legacy = this.touchesLegacy(txn);
    const entriesStart = legacy ? 2 : 1;
    if (failed(0) || (legacy && failed(1)) || txn.entries.some((_, i) => failed(entriesStart + i))) {
      throw new FenceMovedError(txn.topic, txn.partition, txn.expectedOffset);
    }
    const taken = txn.claims.flatMap((claim, i) =>
      failed(claimsStart + i) ? [holderOf(claim.idempotencyKey, reasons[claimsStart + i]?.Item)] : [],
    );
    if (taken.length > 0) throw new ClaimsTakenError(taken);
    const windowStart = claimsStart + txn.claims.length;
    if ((txn.keyWindow ?? []).some((_, i) => failed(windowStart + i))) {
      throw new KeyWindowChangedError(txn.topic, txn.partition);
    }
    this.explainStateCancellation(txn, reasons, labels, error);
  }

  /**
   * A cancelled transaction whose keyed-state items (its last `txn.state.length` items) DynamoDB refused: an ADD
   * meeting a field that is not a number, or an item over a limit. Anything else is left to the caller.
   */
  private explainStateCancellation(
    txn: StateRefusalContext,
    reasons: ReadonlyArray<{ Code?: string; Message?: string }>,
    labels: readonly string[],
    error: unknown,
  ): void {
    const stateStart = labels.length - txn.state.length;
    const wrongType = txn.state.filter((_, i) => {
      const reason = reasons[stateStart + i];
      return reason?.Code === 'ValidationError' && WRONG_TYPE.test(reason.Message ?? '');
    });
    if (wrongType.length > 0) {
      throw new StateTypeConflictError(
        wrongType.map((delta) => delta.key),
        'ValidationError',
        { cause: error },
      );
    }
    // A limit (an item over 400 KB): the same on every retry, so structural, never transient.
    const refused = reasons.flatMap((reason, i) => (reason.Code === 'ValidationError' ? [i] : []));
    const detail = refused.map((i) => reasons[i]?.Message ?? 'ValidationError').join('; ');
    if (refused.length > 0 && refused.every((i) => i >= stateStart)) {
      throw new StateItemTooLargeError(
        txn.topic,
        txn.partition,
        refused.map((i) => txn.state[i - stateStart]!.key),
        refused.map((i) => labels[i]!),
        detail,
        { cause: error },
      );
    }
    if (refused.length > 0) {
      throw new ItemLimitExceededError(
        txn.topic,
        txn.partition,
        refused.map((i) => labels[i] ?? `item ${i}`),
        detail,
        { cause: error },
      );
    }
  }

  /**
   * A refusal DynamoDB (Local) answers for the whole request, naming no item: an ADD of the wrong type, or a limit
   * (a Put over the size limit). Every state key of the transaction is then a candidate.
   */
  private explainStateRefusal(txn: StateRefusalContext, labels: readonly string[], error: unknown): void {
    const { name, message } = error as { name?: string; message?: string };
    if (name === 'ValidationException' && WRONG_TYPE.test(message ?? '')) {
      throw new StateTypeConflictError(
        txn.state.map((delta) => delta.key),
        String(message),
        { cause: error },
      );
    }
    if (!isLimitExceeded(error)) return;
    // The state items first, then the first item (the fence of a staging transaction).
    const candidates = labels.filter((label) => label.startsWith('state ')).concat(labels.slice(0, 1));
    if (txn.state.length > 0) {
      throw new StateItemTooLargeError(
        txn.topic,
        txn.partition,
        txn.state.map((delta) => delta.key),
        candidates,
        String(message),
        { cause: error },
      );
    }
    throw new ItemLimitExceededError(txn.topic, txn.partition, candidates, String(message), {
      cause: error,
    });
  }

  private rethrow(operation: string, error: unknown): never {
    if ((error as { name?: string }).name === 'ResourceNotFoundException') {
      throw new MissingResourceError(`table ${this.table}`, 'does not exist', { cause: error });
    }
    rethrowClassified(operation, error);
  }

  /**
   * A transaction that creates the sharded fence also settles the legacy key (see {@link legacyItem}); a lane of
   * epoch >= 1 never had one (`epochs.ts`).
   */
  private touchesLegacy(txn: StagingTransaction): boolean {
    return txn.fromLegacy === true || (txn.expectedOffset === NO_FENCE && isRootLane(txn.topic));
  }

  /**
   * The legacy fence key's part of a transaction that creates the sharded fence (`fences.ts`): a legacy fence (the
   * value read) is marked moved and loses its staged offset, on condition it is still that value and not moved;
   * for a new partition a moved marker is created, on condition nothing is there. Either way a processor of the
   * release before the shards (a rolling deploy, a zombie) can no longer stage on the legacy key: its condition
   * (the staged offset it read, or the key absent) fails, and it stops on the fence without an offset.
   */
  private legacyItem(txn: StagingTransaction): TransactItem {
    const moved = fenceKeys.fence(txn.pipeline, txn.topic, txn.partition);
    const fresh = txn.expectedOffset === NO_FENCE;
    return {
      Update: {
        TableName: this.table,
        Key: fenceKeys.legacyFence(txn.pipeline, txn.topic, txn.partition),
        // The marker names its partition, as a fence does (readers of the release before the shards list them).
        UpdateExpression: fresh
          ? 'SET movedTo = :movedTo, movedFrom = :none, topic = :topic, #partition = :partition'
          : 'SET movedTo = :movedTo, movedFrom = stagedOffset REMOVE stagedOffset',
        ConditionExpression: fresh
          ? 'attribute_not_exists(pk)'
          : 'stagedOffset = :expected AND attribute_not_exists(movedTo) AND attribute_not_exists(#closed)',
        ExpressionAttributeNames: fresh ? { '#partition': 'partition' } : { '#closed': CLOSED_ATTRIBUTE },
        ExpressionAttributeValues: fresh
          ? { ':movedTo': moved.pk, ':none': NO_FENCE, ':topic': txn.topic, ':partition': txn.partition }
          : { ':movedTo': moved.pk, ':expected': txn.expectedOffset },
      },
    };
  }

  private fenceItem(txn: StagingTransaction): TransactItem {
    // The sharded fence is created (absent) for a new partition or lane and when the legacy one moves. A closed
    // fence (an operator opened a newer epoch, `epochs.ts`) takes no staging: the condition sends a processor that
    // still holds it to read the new lane. Staging clears a stop record: the partition moves again.
    const absent = txn.fromLegacy === true || txn.expectedOffset === NO_FENCE;
    return {
      Update: {
        TableName: this.table,
        Key: keys.fence(txn.pipeline, txn.topic, txn.partition),
        UpdateExpression:
          'SET stagedOffset = :new, updatedAt = :now, topic = :topic, #partition = :partition, ' +
          'fenceRecord = :fenceRecord, batchStart = :batchStart, recentStarts = :recentStarts REMOVE #stop',
        ConditionExpression: absent
          ? 'attribute_not_exists(pk)'
          : 'stagedOffset = :expected AND attribute_not_exists(#closed)',
        ExpressionAttributeNames: {
          '#partition': 'partition',
          '#stop': STOP_ATTRIBUTE,
          ...(absent ? {} : { '#closed': CLOSED_ATTRIBUTE }),
        },
        ExpressionAttributeValues: {
          ':new': txn.newOffset,
          ':now': txn.now,
          ':topic': txn.topic,
          ':partition': txn.partition,
          ':fenceRecord': txn.identity.fenceRecord,
          ':batchStart': txn.identity.batchStart,
          ':recentStarts': txn.identity.recentStarts,
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
    // The holder comes back with a failed condition: duplicate (same digest) or conflict.
    return {
      Put: {
        ...this.claimPut(txn.pipeline, claim, txn.now, txn.attemptId),
        ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
      },
    };
  }

  /**
   * Ahead of the transaction a claim may only be created or confirmed, never taken over: taking over another
   * record's expired claim happens inside the fenced transaction, so an invocation that turns out to apply
   * nothing (a stale fence) cannot steal a key from a record still waiting for its retry.
   */
  private claimAheadUpdate(pipeline: string, claim: ClaimItem, attemptId: string) {
    return {
      TableName: this.table,
      Key: keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant)),
      UpdateExpression:
        'SET idempotencyKey = :key, claimant = :claimant, digest = :digest, expiresAt = :expiresAt ' +
        'ADD holders :attempts',
      ConditionExpression: `attribute_not_exists(pk) OR ${OWN_CLAIM}`,
      ExpressionAttributeValues: {
        ':key': claim.idempotencyKey,
        ':claimant': claim.claimant,
        ':digest': claim.digest,
        ':expiresAt': claim.expiresAt,
        ':attempts': new Set([attemptId]),
      },
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD' as const,
    };
  }

  private claimPut(pipeline: string, claim: ClaimItem, now: number, attemptId: string) {
    return {
      TableName: this.table,
      // The committing attempt stays a holder for good: a Put replaces the item, so the holders an earlier
      // attempt left (which may still release) are gone, and a claim without holders could be marked released.
      // With this holder, the release's "mark released" step (conditioned on no holders) never frees a claim a
      // transaction committed.
      Item: {
        ...keys.claim(pipeline, claim.idempotencyKey, claimGeneration(claim.claimant)),
        ...claim,
        holders: new Set([attemptId]),
      },
      // Absent, expired (TTL deletion lags by up to days), or already ours (a retry of the same record).
      ConditionExpression: `attribute_not_exists(pk) OR expiresAt < :nowSeconds OR ${OWN_CLAIM}`,
      ExpressionAttributeValues: {
        ':nowSeconds': Math.floor(now / 1000),
        ':claimant': claim.claimant,
        ':digest': claim.digest,
      },
    };
  }

  private bucketItem(txn: StagingTransaction, { bucket, previousEntries }: BucketWrite): TransactItem {
    const fresh = previousEntries === undefined;
    return {
      Put: {
        TableName: this.table,
        Item: {
          ...keys.keyWindowBucket(txn.pipeline, txn.topic, txn.partition, bucket.seq),
          seq: bucket.seq,
          createdAt: bucket.createdAt,
          expiresAt: bucket.expiresAt,
          entries: bucket.entries,
        },
        ConditionExpression: fresh ? 'attribute_not_exists(pk)' : 'size(entries) = :bytes',
        ...(fresh ? {} : { ExpressionAttributeValues: { ':bytes': previousEntries * ENTRY_BYTES } }),
      },
    };
  }

  /**
   * The newest `buckets` key-window buckets of a partition (strongly consistent; read after the fence, see
   * `key-window.ts`). Expired buckets are returned too: the window ignores them by their `expiresAt`.
   */
  async readKeyWindow(
    pipeline: string,
    topic: string,
    partition: number,
    buckets: number,
  ): Promise<KeyWindowBucket[]> {
    const found: KeyWindowBucket[] = [];
    let start: Record<string, unknown> | undefined;
    do {
      let page: { Items?: Record<string, unknown>[]; LastEvaluatedKey?: Record<string, unknown> };
      try {
        page = await this.doc.send(
          new QueryCommand({
            TableName: this.table,
            KeyConditionExpression: 'pk = :pk AND begins_with(sk, :w)',
            ExpressionAttributeValues: { ':pk': keys.keyWindowPk(pipeline, topic, partition), ':w': 'W#' },
            ScanIndexForward: false,
            ConsistentRead: true,
            Limit: buckets - found.length,
            ...(start ? { ExclusiveStartKey: start } : {}),
          }),
        );
      } catch (error) {
        this.rethrow('dynamodb:Query', error);
      }
      for (const item of page.Items ?? []) found.push(bucketOf(item, `key window ${topic}#${partition}`));
      start = page.LastEvaluatedKey;
    } while (start && found.length < buckets);
    return found;
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
