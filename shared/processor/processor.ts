/**
 * The processor: stages an MSK batch exactly once (invariants P1–P6 of DESIGN.md).
 *
 * Per source partition, concurrently across partitions, in offset order within one:
 *
 * ```
 *  fence ──▶ drop records <= fence (P4, redelivery) ──▶ transform each record once; drop keys seen earlier
 *  (cached     in this batch (P4)
 *   in the     │
 *   warm       ▼  for each chunk (<= 100 transaction items, record boundaries)                         (P1)
 *   container) ├─ PutObject in-progress/<stream>/…/<first>-<last>.<attempt>.ndjson.gz  per stream   (P3)
 *              ├─ (first chunk, claims ahead) conditional PutItem per idempotency key, in parallel,
 *              │   naming its claimant (t#p#o): a retry finds its own claim; others are duplicates (P4)
 *              ├─ TransactWriteItems: fence == read value → chunk's last offset                     (P2)
 *              │                      + staged-file entries + idempotency claims + keyed-state deltas
 *              ├─ fence moved?   re-read it, drop what another invocation staged, continue         (P2)
 *              └─ keys claimed?  drop those records (duplicates by key), re-plan the chunk         (P4)
 * ```
 * Before any partition's work, the transform's `prepare` runs once with the event's records (registry schemas;
 * only a transient failure throws, failing the invocation). Poison records — undecodable, rejected, or failing
 * the declared row schema — become dead-letter rows staged through the same path (P6). Transient AWS errors escape, so the
 * event source mapping retries the whole batch; the fence makes the retry harmless (P5). In steady state with
 * offset-only dedupe a batch costs two AWS calls: the PutObject and one transaction — the fence is read once
 * per warm container and re-read only when its condition fails. With idempotency keys, claims are written ahead
 * (DESIGN.md's refinement of P1; setting `claimWrite`), so the transaction stays small; `in-transaction` puts
 * them in the staging transactions instead (one 100-item transaction per ~95 keyed records).
 *
 * Delivery guarantees (as Flink's DeliveryGuarantee): `exactly-once` as above; `at-least-once` applies keyed state
 * without fence or dedupe, in chunks planned as above, then writes rows straight to final objects (duplicates after
 * retries); `none` does the same and swallows every error so the batch is acknowledged anyway (losses under faults).
 * A record DynamoDB refuses for its state is dead-lettered under every guarantee (see below, `direct-state.ts`).
 *
 * ## Source checks (issue 17)
 * Before any effect, in every delivery guarantee: an event whose `eventSourceArn` is not `settings.eventSourceArn`
 * (when set), or holding a topic outside `settings.topics` (when set), is refused with
 * {@link EventSourceRejectedError}; a malformed one with `MalformedEventError`. Both reach
 * {@link ProcessorObserver.eventRejected} (metric `EventsRejected`).
 *
 * ## Offsets that go backwards (L2, issue 9.4): telling a redelivery from a new generation
 * What the mapping does (AWS Lambda docs, "Amazon MSK event sources": Lambda reads each partition sequentially;
 * after it processes a batch it commits the offsets of that batch; if the function returns an error, it retries
 * the whole batch until it succeeds — with the default, infinite, `MaximumRetryAttempts`). So a partition has one
 * batch in flight, and a batch is delivered again only from the consumer group's committed offset: the first
 * offset of the last batch that was not acknowledged. A batch staged (fully or in part) but not acknowledged is
 * therefore redelivered starting at ITS first offset — call it B — and never below it. With "split batch on
 * error" a retry may be a half of the batch: it starts at B or inside [B, F]. Kafka keeps a record's key, value
 * and timestamp in the log, so a redelivered record is byte-identical.
 *
 * Every staging transaction therefore writes into the fence, with the staged offset F, the fingerprints (digest of
 * the exact key and value bytes, and timestamp) of the record AT F and of the delivered batch's first record AT B
 * (`FenceIdentity`), and a ring of the first records of the last `RECENT_STARTS` (8) distinct batches staged
 * (`recentStarts`, under 1 KB: a mapping that lost the offset commits of several acknowledged batches restarts at
 * one of them). It rides in the fence update the transaction makes anyway: the steady state stays at two calls.
 * A batch whose first offset s is at or below F is judged ({@link judgeBatch}):
 *
 * ```
 *   offsets:   ... S ... B ............ F | s > F: new records (above the fence), staged
 *                  ^ S: a remembered batch start (ring)   ^ B batchStart   ^ F fenceRecord
 *   1. the batch holds F, B or a remembered start and that record's fingerprint differs → backwards
 *   2. the batch holds one of them with the same fingerprint                      → redelivery (proven)
 *   3. the batch reaches past F without holding F                                  → backwards
 *   4. s < B (and none of them is in the batch): no redelivery starts there        → backwards
 *   5. otherwise (s inside (B, F], ends before F: a split retry)                   → redelivery
 * ```
 * A recreated topic starting again at 0 below a fence of the old generation hits 1 (the batch reaches B or F with
 * other records), 3 or 4; a consumer group reset below the last staged batch hits 4 (or 2 if it reaches B: then
 * its records are the staged ones, and dropping them is exactly-once). "Backwards" throws
 * {@link OffsetsWentBackwardsError} naming topic, partition, fence and the batch's offsets, reports it to
 * {@link ProcessorObserver.partitionStopped} (metric `OffsetsWentBackwards`), and acknowledges nothing: the mapping
 * retries and the partition stays stopped, loudly, until an operator resumes it. Other partitions go on.
 *
 * Which fence is judged. The first judgement uses the fence this container cached (no read in the steady state);
 * if it says "backwards", the fence is read again and the batch judged against the fresh value before anything is
 * thrown (a stale cache never stops a partition). Every fence read, the first one of a cold container included,
 * and every re-read during the batch (claims ahead, or a failed fence condition) is judged by when the fence last
 * moved:
 * - moved BEFORE this invocation began (`updatedAt` < start): the cache was merely stale, so the batch is judged
 *   in full, as delivered;
 * - moved WHILE this invocation ran: a concurrent or zombie invocation of the same partition staged it. A zombie
 *   can legitimately hold a batch wholly below the new B (its batch was retried, acknowledged, and later batches
 *   staged) — also one that stalled before its first read (a cold start, a slow `prepare`) and so never saw the
 *   fence its batch was delivered against. Fingerprints (1, 2) and rule 3 judge it as usual, and rule 5 (a split
 *   retry) stands. Where rule 4 would say "backwards", the batch is UNPROVEN: no stop, no acknowledgement; the
 *   invocation fails with the retryable {@link UnprovenRedeliveryError} (metric `UnprovenRedeliveries`).
 * Why fail rather than acknowledge or stop: acknowledging drops records, so it needs proof — a fingerprint (rule 2)
 * or the as-delivered rules. Here there is none: a zombie's stale batch and a live batch of another generation (a
 * recreated topic delivered while a zombie of the old one stages) look alike, and "moved while running" compares
 * the staging container's clock (`updatedAt`) with this one's (the start), so a clock skew alone can produce it.
 * Acknowledging would lose the new generation's records; stopping would let a zombie write a false stop. Failing
 * costs nothing either way: a zombie's answer is discarded by the mapping (its batch was retried and acknowledged
 * already), and a live batch is retried in a fresh invocation, which judges it as delivered once the fence no
 * longer moves under it — stopping the partition loudly if it truly went backwards. With a clock skew the retries
 * repeat until real time passes the skew: bounded, and nothing is lost meanwhile.
 * The opposite skew (this container's clock ahead) judges a zombie's batch as delivered and may stop it falsely;
 * such a stop is seen by one attempt only, and a stop counts as confirmed once a second attempt saw it (`eos epoch
 * --start-new` refuses an unconfirmed one).
 * Residual (documented): a batch of another generation that starts inside (B, F], ends before F and holds neither
 * B nor F is taken for a split retry (rule 5); the next batch reaches F and stops the partition. Compaction that
 * removes the record at B or F between a delivery and its retry makes rule 3 or 4 stop a partition falsely (loud,
 * never silent). A rewind to the start of one of the last 8 staged batches (offset commits lost for several
 * acknowledged batches) is proven by the fingerprint there and passes; a rewind deeper than that, or to an offset
 * that was no batch start, stops the partition falsely (rule 4: loud, never silent). Fences written before identities existed carry none: for them only the distance rule applies —
 * a batch starting more than `maxFenceJump` below the fence is backwards (no redelivery is that far below).
 * Operator resumes (new epochs) are the operations issue's: an epoch must get a fence of its own.
 *
 * ## Fence jumps (issue 17)
 * A transaction that moves the fence from F to a chunk starting more than `maxFenceJump` above F is reported to
 * {@link ProcessorObserver.fenceJumped} (metric `FenceJumps` and a warning naming the partition and offsets) once
 * it has committed — reported, not refused: Kafka offsets have gaps (compaction, transaction markers). A forged
 * far-future fence is caught the other way: real batches then start below its B (rule 4).
 *
 * ## Claims that can't be abused (issue 17.2)
 * A claim records its record's digest. A record whose key is held by a claim with the same digest is a duplicate
 * (dropped, P4); with another digest it is a conflict: dead-lettered (through the same exactly-once path) with a
 * reason naming the key and the claimant, and reported to {@link ProcessorObserver.keyConflicts} after its
 * transaction commits (metric `IdempotencyKeyConflicts`). The same within one batch: a later same-key record with
 * another digest is a conflict of the earlier one. A claim is a record's own when claimant and digest both match,
 * so a retry recognises its own claim in both claim modes. Claims written before digests count as duplicates.
 *
 * ## Claims ahead of a batch that fails for good (issue 9.3)
 * A claim written ahead lists the attempts (invocations) that created or confirmed it (`holders`). When the batch
 * then fails deterministically — any error that is not transient (offsets backwards, an item over a DynamoDB limit,
 * a validation error, a missing resource) — the attempt releases the claims of its records still above the fence:
 * it leaves their holders, and a claim left with no holder is marked released (expired), so the next record with
 * its key takes it over inside its fenced transaction. UpdateItem only: the processor role needs no DeleteItem.
 * A claim the mapping's concurrent retry of the same batch confirmed keeps that attempt as holder, so the retry —
 * which in claims-ahead mode commits without putting the claim in its transaction — never loses it; a claim put
 * by a staging transaction (a takeover, or `in-transaction` mode) lists the committing attempt as holder for good
 * (a Put drops whatever holders an earlier attempt left) and is never released. The fence the release judges
 * "still above" by is read again, consistently, not taken from the cache. A record dead-lettered in `ahead` mode
 * because its add meets a text field releases its claim once its dead letter commits. Transient
 * errors (throttling, 5xx, network and DNS failures) keep the claims (the retry confirms and reuses them). What
 * still holds a key without a durable holder, until the record's retry commits it or the TTL expires: a crash
 * after the claims (no code runs; the crashed attempt stays a holder — indistinguishable from a slow live one —
 * and the retry reuses the claim as its own; if instead the retry fails deterministically first, the claim stays
 * to its TTL). A claim whose claimant's fence has passed its offset without staging it can only come from this.
 *
 * ## A state field set as text, then added to (issue 9.3 "conflicting field names")
 * The chunk planner keeps a field that is set and added to in one chunk apart; across chunks and batches DynamoDB
 * refuses the ADD ("incorrect data type"), the same on every retry. The ledger names it
 * (`StateTypeConflictError`); the processor reads the refused state items and dead-letters exactly the records
 * whose adds meet a stored field that is not a number, then stages the chunk again without their state (P6).
 *
 * ## A state item grown past 400 KB (L1, L3)
 * An item collects every field name its records set, so it can outgrow DynamoDB's item limit over many records
 * although each record's deltas are bounded. DynamoDB refuses the chunk, the same on every retry; the ledger names
 * the items (`StateItemTooLargeError`), and the processor reads them and dead-letters exactly the records that would
 * take one past the limit (`state-size.ts`), then stages the chunk again without them, as for a type conflict.
 * Both judgements live in `state-refusal.ts`, which the direct path of the weaker guarantees uses too.
 */
import { randomUUID } from 'node:crypto';
import { isTransient } from '../aws/classify.ts';
import type { AwsClients } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import {
  EventSourceRejectedError,
  InjectedCrashError,
  ItemLimitExceededError,
  MalformedEventError,
  MalformedLedgerItemError,
  OffsetsWentBackwardsError,
  PipelineError,
  UnprovenRedeliveryError,
} from '../errors.ts';
import { type MskEvent, parseMskEvent, partitionBatches } from '../kafka/event.ts';
import type { DecodedRecord, Lineage, PartitionBatch } from '../kafka/record.ts';
import { generationOfLane, isRootLane, parseLane, sightedStop } from '../ledger/epochs.ts';
import { type BucketWrite, digestPrefix, KeyWindow, maxBuckets } from '../ledger/key-window.ts';
import { partitionId, STREAMS, type Stream } from '../ledger/layout.ts';
import {
  type ClaimItem,
  claimantOf,
  type FenceIdentity,
  parseClaimant,
  type RecordFingerprint,
  type StagedFileEntry,
  withStart,
} from '../ledger/records.ts';
import {
  type ClaimHolder,
  ClaimsTakenError,
  EpochChangedError,
  FenceMovedError,
  type FenceState,
  KeyWindowChangedError,
  type LaneFence,
  NO_FENCE,
  StagingLedger,
  StateTypeConflictError,
} from '../ledger/staging-ledger.ts';
import type { ReplayPlan } from '../replay/plan.ts';
import { replaysClaimant } from '../replay/plan.ts';
import { replaySlice } from '../replay/slice.ts';
import { ReplayStore } from '../replay/store.ts';
import { ReplayPlanError } from '../sink/generation-switch.ts';
import { directFinalObjectKey, type ObjectRange, stagedObjectKey } from '../sink/layout.ts';
import { type EncodedObject, encodeNdjson } from '../sink/ndjson.ts';
import { withStagedTime } from '../sink/record-time.ts';
import { StagedWriter } from '../sink/staged-writer.ts';
import { builtinTransform } from '../transforms/registry.ts';
import type { Transform } from '../transforms/types.ts';
import { type Chunk, planChunk } from './chunks.ts';
import { applyDirectState } from './direct-state.ts';
import {
  checkKeySource,
  deadLetterOf,
  type EffectLimits,
  type EvaluatedRecord,
  evaluateRecord,
  foldState,
  inertRecord,
  recordDigest,
} from './evaluate.ts';
import { isStateRefusal, refusedStateRecords, type StateReader } from './state-refusal.ts';

/** A delivered partition batch acknowledged with nothing staged (a replay outside its plan). */
function unstagedReport(batch: PartitionBatch): PartitionReport {
  return {
    topic: batch.topic,
    partition: batch.partition,
    received: batch.records.length,
    ...NO_COUNTS,
    stagedOffset: -1,
  };
}

/** The servers of a `bootstrapServers` list, as a set: the same cluster in any order. */
function serverSet(list: string): string {
  return list
    .split(',')
    .map((server) => server.trim().toLowerCase())
    .filter(Boolean)
    .sort()
    .join(',');
}

/**
 * The source check (issue 17): with `eventSourceArn` or `bootstrapServers` configured, an event must come from that
 * MSK cluster (its ARN) or that self-managed cluster (its bootstrap servers); with neither, any source is accepted.
 */
function checkEventSource(
  event: MskEvent,
  settings: Pick<Settings, 'eventSourceArn' | 'bootstrapServers'>,
): void {
  const { eventSourceArn, bootstrapServers } = settings;
  if (eventSourceArn === undefined && bootstrapServers === undefined) return;
  if (eventSourceArn !== undefined && event.eventSourceArn === eventSourceArn) return;
  if (
    bootstrapServers !== undefined &&
    event.eventSource === 'SelfManagedKafka' &&
    serverSet(event.bootstrapServers) === serverSet(bootstrapServers)
  ) {
    return;
  }
  const got = event.eventSourceArn ?? `${event.eventSource} ${event.bootstrapServers}`;
  const allowed = [eventSourceArn, bootstrapServers].filter((v): v is string => v !== undefined);
  throw new EventSourceRejectedError('event-source', got, allowed);
}

/**
 * How a partition batch finds its lane: `resolve` reads the partition's current epoch (a delivered batch),
 * `explicit` is given one (`stageInLane`: a redrive lane).
 */
type Laning = 'resolve' | 'explicit';

/** The points of a batch where a fault schedule can crash the processor. */
export const PROCESSOR_STEPS = [
  'after-claims',
  'before-stage-write',
  'after-stage-write',
  'after-transaction',
  'before-return',
] as const;
export type ProcessorStep = (typeof PROCESSOR_STEPS)[number];

export interface StepContext {
  readonly topic: string;
  readonly partition: number;
  /** The chunk's index within this partition's batch (0 for before-return). */
  readonly chunk: number;
}

export interface ProcessorHooks {
  /** Awaited at each step; throwing here crashes the invocation at that step (tests, fault injection). */
  onStep?(step: ProcessorStep, context: StepContext): void | Promise<void>;
}

/** A fence move larger than `settings.maxFenceJump`, after the transaction that made it committed. */
export interface FenceJump {
  readonly topic: string;
  readonly partition: number;
  /** The fence before the transaction. */
  readonly fence: number;
  /** The first offset the transaction staged. */
  readonly firstOffset: number;
}

/** A record dead-lettered because its idempotency key is held by a record with another payload. */
export interface KeyConflict {
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly idempotencyKey: string;
  /** `<topic>#<partition>#<offset>` of the holder. */
  readonly claimant: string;
}

/**
 * The errors that stop a partition (L2): the named structural ones (the same on every retry:
 * {@link OffsetsWentBackwardsError}, {@link ItemLimitExceededError}, {@link MalformedLedgerItemError}, a
 * {@link StateTypeConflictError} naming no record) and any other error a batch fails with that is neither transient
 * nor an injected crash: the mapping retries the batch and nothing moves until it passes, so it is reported
 * (metric `PartitionsStopped`) rather than left to the retry alone.
 */
export type PartitionStoppedError = Error;

/**
 * What the processor tells its host as it happens (the Lambda handler turns these into metrics and logs; see
 * `observability/processor-metrics.ts`). Called when the fact is final: a jump or conflict once its transaction
 * has committed (so a crash and retry never count it twice), a stop or a rejection before the error is thrown.
 */
export interface ProcessorObserver {
  eventRejected?(error: MalformedEventError | EventSourceRejectedError): void;
  partitionStopped?(error: PartitionStoppedError): void;
  fenceJumped?(jump: FenceJump): void;
  keyConflicts?(conflicts: readonly KeyConflict[]): void;
  /** A batch failed retryably: below the fence, nothing proves it a redelivery (see "Which fence is judged"). */
  redeliveryUnproven?(error: UnprovenRedeliveryError): void;
}

export interface ProcessorDeps {
  readonly settings: Settings;
  readonly clients: AwsClients;
  /**
   * Defaults to the built-in transform named by `settings.transform`; a user's module is loaded by its host and
   * passed here (`loadTransform` locally, the bundle's static import in Lambda).
   */
  readonly transform?: Transform;
  readonly clock?: Clock;
  /** Unique per invocation; defaults to a random UUID. */
  readonly newAttemptId?: () => string;
  readonly hooks?: ProcessorHooks;
  readonly observer?: ProcessorObserver;
}

export interface PartitionReport {
  readonly topic: string;
  readonly partition: number;
  readonly received: number;
  /** Records at or below the fence: acknowledged without effects (redelivery). */
  readonly duplicatesByOffset: number;
  /** Records whose idempotency key was already claimed by the same payload: acknowledged without effects. */
  readonly duplicatesByKey: number;
  /** Output rows written. */
  readonly stagedRows: number;
  /** Dead-letter rows written (key conflicts included). */
  readonly deadLettered: number;
  /** Records dead-lettered because another payload holds their idempotency key. */
  readonly keyConflicts: number;
  /**
   * Records in which the idempotency key source found nothing (`missingIdempotencyKey`): dead-lettered (counted in
   * `deadLettered` too) or processed by offset only.
   */
  readonly missingKeys: number;
  /** Transactions that moved the fence by more than `maxFenceJump`. */
  readonly fenceJumps: number;
  /** Transactions committed. */
  readonly chunks: number;
  /** The partition's fence after this batch (-1 under at-least-once and none). */
  readonly stagedOffset: number;
}

export interface BatchReport {
  readonly partitions: readonly PartitionReport[];
}

/** The counters of a partition report, as the batch goes. */
type Counts = {
  -readonly [K in Exclude<
    keyof PartitionReport,
    'topic' | 'partition' | 'received' | 'stagedOffset'
  >]: number;
};

/** Counts before anything happened: the start of every partition report. */
const NO_COUNTS: Readonly<Counts> = {
  duplicatesByOffset: 0,
  duplicatesByKey: 0,
  stagedRows: 0,
  deadLettered: 0,
  keyConflicts: 0,
  missingKeys: 0,
  fenceJumps: 0,
  chunks: 0,
};

interface StagedObject {
  readonly stream: Stream;
  readonly key: string;
  readonly encoded: EncodedObject;
}

/** What {@link judgeBatch} decided about a batch against a fence. */
export type Verdict =
  | { readonly kind: 'new' }
  | { readonly kind: 'redelivery' }
  | { readonly kind: 'backwards'; readonly reason: string }
  | { readonly kind: 'unproven' };

/**
 * The rule of the module doc ("Offsets that go backwards"). `records` are the batch's fingerprints in offset order
 * (non-empty); `mode` is `start` for a batch as delivered and `moved` for a batch whose fence another invocation
 * moved while it ran. In `moved`, where rule 4 would say "backwards" (the batch starts below B, holds no
 * fingerprinted record) the verdict is `unproven`: a zombie may legitimately hold such a batch, and so may a live
 * batch of another generation, and nothing tells them apart (see "Which fence is judged"). Pure.
 */
export function judgeBatch(
  records: readonly RecordFingerprint[],
  fence: Pick<FenceState, 'stagedOffset' | 'identity'>,
  maxDistance: number,
  mode: 'start' | 'moved',
): Verdict {
  const F = fence.stagedOffset;
  const first = records[0]!.offset;
  const last = records[records.length - 1]!.offset;
  if (F === NO_FENCE || first > F) return { kind: 'new' };
  const identity = fence.identity;
  if (identity === undefined) {
    return F - first > maxDistance
      ? { kind: 'backwards', reason: `the batch starts more than ${maxDistance} offsets below the fence` }
      : { kind: 'redelivery' };
  }
  const at = new Map(records.map((record) => [record.offset, record]));
  let matched = false;
  const known: ReadonlyArray<readonly [string, RecordFingerprint]> = [
    ['fence', identity.fenceRecord],
    ['first record of the last staged batch', identity.batchStart],
    ...identity.recentStarts.map((print) => ['first record of a recently staged batch', print] as const),
  ];
  for (const [what, print] of known) {
    const held = at.get(print.offset);
    if (held === undefined) continue;
    if (held.digest !== print.digest || held.timestamp !== print.timestamp) {
      return {
        kind: 'backwards',
        reason: `the record at offset ${print.offset} (the ${what}) is not the one staged there`,
      };
    }
    matched = true;
  }
  if (matched) return { kind: 'redelivery' };
  if (last > F) {
    return {
      kind: 'backwards',
      reason: `the batch reaches past the fence without the record staged at ${F}`,
    };
  }
  const B = identity.batchStart.offset;
  if (first < B) {
    if (mode === 'moved') return { kind: 'unproven' };
    return {
      kind: 'backwards',
      reason: `the batch starts below ${B}, where the last staged batch started (a redelivery starts there)`,
    };
  }
  return { kind: 'redelivery' };
}

/**
 * How a batch is judged against a fence: `moved` when the fence's last staging transaction committed while this
 * invocation ran (at or after `startedAt`), else `start`. It holds for the first read as for a re-read: an
 * invocation that stalled before reading anything (a cold container, a slow `prepare`) and finds a fence other
 * invocations moved meanwhile is a zombie whose batch was retried and acknowledged, and may lie wholly below the
 * new batch start; judging it as delivered would stop a healthy partition.
 */
function judgingMode(fence: FenceState, startedAt: number): 'start' | 'moved' {
  return fence.updatedAt !== undefined && fence.updatedAt >= startedAt ? 'moved' : 'start';
}

/** A partition batch's records by offset, with their fingerprints computed on demand. */
class Fingerprints {
  private readonly byOffset = new Map<number, DecodedRecord>();

  constructor(
    readonly batch: PartitionBatch,
    private readonly memo = new Map<number, RecordFingerprint>(),
  ) {
    for (const record of batch.records) this.byOffset.set(record.offset, record);
  }

  /**
   * The same records filed under the partition's current lane (`epochs.ts`): `batch.topic` names the lane the
   * ledger and the staged keys use; each record keeps its own topic for its lineage.
   */
  inLane(lane: string): Fingerprints {
    if (lane === this.batch.topic) return this;
    // The fingerprints already computed (judging the batch against its fence) are the same records': kept.
    return new Fingerprints({ ...this.batch, topic: lane }, this.memo);
  }

  of(offset: number): RecordFingerprint {
    const cached = this.memo.get(offset);
    if (cached) return cached;
    const record = this.byOffset.get(offset)!;
    const print = { offset, digest: recordDigest(record), timestamp: record.timestamp };
    this.memo.set(offset, print);
    return print;
  }

  /** Every record's fingerprint (only when a batch starts at or below the fence: not the steady state). */
  all(): RecordFingerprint[] {
    return this.batch.records.map((record) => this.of(record.offset));
  }

  get firstOffset(): number {
    return this.batch.records[0]!.offset;
  }

  get lastOffset(): number {
    return this.batch.records[this.batch.records.length - 1]!.offset;
  }
}

export class Processor {
  private readonly ledger: StagingLedger;
  private readonly writer: StagedWriter;
  private readonly transform: Transform;
  private readonly clock: Clock;
  private readonly newAttemptId: () => string;
  /** Fences as last read or written by this container, by lane: re-read only when a condition fails. */
  private readonly fences = new Map<string, FenceState>();
  /** Each partition's current lane (`epochs.ts`) as last read: `<topic>` until an operator opens epoch 1. */
  private readonly lanes = new Map<string, string>();
  /**
   * Partition-scoped idempotency: each partition's key window with the fence value it belongs to (see
   * `key-window.ts`), at most {@link WINDOW_CACHE_PARTITIONS} partitions (oldest use evicted: re-read when needed).
   */
  private readonly windows = new Map<string, { readonly fenceOffset: number; readonly window: KeyWindow }>();
  /** Replay plans by generation, read once each (the replay mapping's own; a redrive of a generation's). */
  private readonly replayPlans = new Map<number, Promise<ReplayPlan>>();
  /** Replay mode: per generation lane and partition, the range's last offset (`shared/replay/slice.ts`). */
  private readonly replayEnds = new Map<string, number>();

  constructor(private readonly deps: ProcessorDeps) {
    this.ledger = new StagingLedger(deps.clients.dynamodb, deps.settings.ledgerTable);
    this.writer = new StagedWriter(deps.clients.s3, deps.settings.bucket);
    this.transform = deps.transform ?? builtinTransform(deps.settings.transform);
    checkKeySource(this.transform, deps.settings.idempotencyKey);
    this.clock = deps.clock ?? systemClock;
    this.newAttemptId = deps.newAttemptId ?? (() => randomUUID());
  }

  /**
   * Replay mode (`replayGeneration` set: the replay mapping's processor, `shared/replay/`): stages the part of a
   * delivered batch its generation's plan asks for (`replaySlice`) into the generation lane, by the same protocol
   * as a live batch (the lane's fence drops a redelivery), and acknowledges the rest unstaged. The plan is read
   * once per container (it never changes). Each batch also checks that the plan's epoch is still the partition's
   * current one (one read): offsets of a newer epoch must never be filed as the old epoch's — that fails the
   * batch, and the mapping stops there until the operator plans the replay anew.
   */
  private async replayPartition(
    batch: PartitionBatch,
    generation: number,
    attemptId: string,
    startedAt: number,
  ): Promise<PartitionReport> {
    const { pipelineId, deliveryGuarantee } = this.deps.settings;
    if (deliveryGuarantee !== 'exactly-once')
      throw new ReplayPlanError('a replay needs the exactly-once guarantee');
    const plan = await this.replayPlanOf(generation);
    const slice = replaySlice(plan, batch);
    if (slice === undefined) return unstagedReport(batch);
    const laneId = partitionId(slice.batch.topic, batch.partition);
    const { fence } = await this.explicitLaneFence(slice.batch.topic, batch.partition);
    // Only records after the range: the first one moves the fence past it once; later batches stage nothing (and
    // read nothing more: the mapping runs on until it is removed).
    if (slice.batch.records[0]!.offset > slice.to && fence.stagedOffset >= slice.to)
      return unstagedReport(batch);
    const { lane } = await this.ledger.readCurrentFence(pipelineId, batch.topic, batch.partition);
    if (lane !== slice.range.lane) {
      throw new ReplayPlanError(
        `replay generation ${generation} names ${slice.range.lane} partition ${batch.partition}, but that partition is in ${lane} now (a new epoch opened): plan the replay again for the new epoch`,
      );
    }
    const first = batch.records[0]!.offset;
    const unstarted = async () =>
      // A cached "nothing staged" may be stale (another container started the lane): judged on a fresh read.
      fence.stagedOffset === NO_FENCE &&
      (await this.refreshFence(slice.batch.topic, batch.partition)).stagedOffset === NO_FENCE;
    if (first > slice.range.from && (await unstarted())) {
      // The lane's first records must start the range: offsets from..first-1 never delivered (retention, an
      // AT_TIMESTAMP start) would be shown by no generation after the switch (review of replay, finding 5).
      throw new ReplayPlanError(
        `replay generation ${generation}: the first record delivered of ${batch.topic}-${batch.partition} is at offset ${first}, after the range's start ${slice.range.from}: offsets ${slice.range.from}..${first - 1} cannot be replayed (gone from the topic, or the replay mapping starts after them); plan the replay again from offset ${first}`,
      );
    }
    this.replayEnds.set(laneId, slice.to);
    return this.stagePartition(slice.batch, attemptId, startedAt, 'explicit');
  }

  /**
   * A lane of a replay generation (the replay mapping's, or a redrive round of one), global scope: the live output's
   * claims of these keys whose claimant is a record outside the generation's ranges (one the readers keep showing
   * from the live generation after the switch). The generation judges its records against them as against its own
   * claims, so a key output before the range is not output again in it (reviews of replay, round 1 finding 1 and
   * round 2 finding 3). A live claimant inside the ranges is replayed itself: its own generation's claim decides.
   * One GetItem per key of such a batch; the live path never gets here.
   */
  private async liveHolders(lane: string, keys: readonly string[]): Promise<ClaimHolder[]> {
    const generation = generationOfLane(lane);
    if (generation === 0) return [];
    const plan = await this.replayPlanOf(generation);
    const held = await this.ledger.readLiveClaims(this.deps.settings.pipelineId, keys);
    return held.filter((holder) => !replaysClaimant(plan, holder.claimant));
  }

  /** A generation's plan, read once per container (plans never change). */
  private replayPlanOf(generation: number): Promise<ReplayPlan> {
    const cached = this.replayPlans.get(generation);
    if (cached !== undefined) return cached;
    const reading = (async () => {
      const { clients, settings } = this.deps;
      const plan = await new ReplayStore(clients.dynamodb, settings.ledgerTable, settings.pipelineId).read(
        generation,
      );
      if (plan === undefined) {
        throw new ReplayPlanError(
          `replay generation ${generation} has no plan in ${settings.ledgerTable}: write it with eos replay first`,
        );
      }
      return plan;
    })().catch((error: unknown) => {
      this.replayPlans.delete(generation); // read again on the next batch
      throw error;
    });
    this.replayPlans.set(generation, reading);
    return reading;
  }

  /** Validates the event, then stages every partition; throws to make the mapping retry the batch. */
  async processEvent(input: unknown): Promise<BatchReport> {
    const batches = partitionBatches(this.accept(input));
    const attemptId = this.newAttemptId();
    const startedAt = this.clock.now();
    const { deliveryGuarantee, replayGeneration } = this.deps.settings;
    const work =
      replayGeneration !== undefined
        ? (batch: PartitionBatch) => this.replayPartition(batch, replayGeneration, attemptId, startedAt)
        : deliveryGuarantee === 'exactly-once'
          ? (batch: PartitionBatch) => this.stagePartition(batch, attemptId, startedAt)
          : (batch: PartitionBatch) => this.writeDirect(batch, attemptId);
    try {
      // Once per batch, before any evaluation: registry schemas the records name. Only a transient failure throws
      // here (the batch is retried); a schema the registry lacks dead-letters the records that need it.
      await this.transform.prepare?.(batches.flatMap((batch) => batch.records));
      // allSettled, not all: no partition's work is left running when the invocation fails.
      const settled = await Promise.allSettled(batches.map(work));
      const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failure) throw failure.reason;
      await this.step('before-return', { topic: '', partition: -1, chunk: 0 });
      return { partitions: settled.map((s) => (s as PromiseFulfilledResult<PartitionReport>).value) };
    } catch (error) {
      if (this.deps.settings.deliveryGuarantee !== 'none') throw error;
      // NONE: acknowledge whatever happened; the batch's unwritten effects are lost.
      return { partitions: [] };
    }
  }

  /**
   * Stages records under an explicit redrive lane (`shared/redrive/`: dead letters sent back through the pipeline
   * with the current transform, keyed by their original offsets), by the same protocol as a delivered batch: the
   * lane's fence drops what an earlier (crashed) run of the same round staged, and a retry is harmless.
   * `batch.topic` names the lane; each record keeps its own topic, partition and offset. Exactly-once only.
   */
  async stageInLane(batch: PartitionBatch): Promise<PartitionReport> {
    const lane = parseLane(batch.topic);
    if (lane?.round === undefined) {
      throw new PipelineError(`${batch.topic} is not a redrive lane (<topic>[~<epoch>]~r<round>)`);
    }
    if (this.deps.settings.deliveryGuarantee !== 'exactly-once') {
      throw new PipelineError('a redrive needs the exactly-once guarantee');
    }
    for (const record of batch.records) {
      if (record.topic !== lane.topic || record.partition !== batch.partition) {
        throw new PipelineError(
          `record ${record.topic}-${record.partition}@${record.offset} is not of ${batch.topic}`,
        );
      }
    }
    if (batch.records.length === 0) throw new PipelineError('a redrive batch holds no record');
    const attemptId = this.newAttemptId();
    const startedAt = this.clock.now();
    await this.transform.prepare?.(batch.records);
    const report = await this.stagePartition(batch, attemptId, startedAt, 'explicit');
    await this.step('before-return', { topic: batch.topic, partition: batch.partition, chunk: 0 });
    return report;
  }

  /** Parses the event and applies the source checks, before any effect; reports a rejection. */
  private accept(input: unknown): MskEvent {
    try {
      const event = parseMskEvent(input);
      const { topics } = this.deps.settings;
      checkEventSource(event, this.deps.settings);
      if (topics !== undefined) {
        for (const records of Object.values(event.records)) {
          const topic = records[0]?.topic;
          if (topic !== undefined && !topics.includes(topic)) {
            throw new EventSourceRejectedError('topic', topic, topics);
          }
        }
      }
      return event;
    } catch (error) {
      if (error instanceof MalformedEventError || error instanceof EventSourceRejectedError) {
        this.deps.observer?.eventRejected?.(error);
      }
      throw error;
    }
  }

  private async step(step: ProcessorStep, context: StepContext): Promise<void> {
    await this.deps.hooks?.onStep?.(step, context);
  }

  /** The partition's current lane and its fence: this container's copy, else read (root, then lane). */
  private async fenceOf(topic: string, partition: number): Promise<LaneFence & { cached: boolean }> {
    const lane = this.lanes.get(partitionId(topic, partition));
    const cached = lane === undefined ? undefined : this.fences.get(partitionId(lane, partition));
    if (lane !== undefined && cached !== undefined) return { lane, fence: cached, cached: true };
    return { ...(await this.refreshLane(topic, partition)), cached: false };
  }

  /** A cached lane's fence read anew, or, when an epoch closed it meanwhile, the partition's current lane. */
  private async freshLaneFence(topic: string, partition: number, lane: string): Promise<LaneFence> {
    try {
      return { lane, fence: await this.refreshFence(lane, partition) };
    } catch (error) {
      if (!(error instanceof EpochChangedError)) throw error;
      return this.refreshLane(topic, partition);
    }
  }

  /** Reads the partition's current lane and fence anew (`epochs.ts`). */
  private async refreshLane(topic: string, partition: number): Promise<LaneFence> {
    const current = await this.ledger.readCurrentFence(this.deps.settings.pipelineId, topic, partition);
    this.lanes.set(partitionId(topic, partition), current.lane);
    this.fences.set(partitionId(current.lane, partition), current.fence);
    return current;
  }

  /**
   * Reads a lane's fence anew. A closed lane means an operator opened a newer epoch while this batch held the old
   * one: {@link EpochChangedError} (the mapping's retry reads the new lane).
   */
  private async refreshFence(lane: string, partition: number): Promise<FenceState> {
    const fence = await this.ledger.readFence(this.deps.settings.pipelineId, lane, partition);
    if (fence.closed) {
      this.fences.delete(partitionId(lane, partition));
      for (const [root, cachedLane] of this.lanes) if (cachedLane === lane) this.lanes.delete(root);
      throw new EpochChangedError(lane, partition);
    }
    this.fences.set(partitionId(lane, partition), fence);
    return fence;
  }

  /**
   * The partition's key window as of `fence`: this container's copy when it belongs to that fence value (written by
   * its own last transaction, or read after that fence), else read now. Read after the fence, so a window read here
   * is as new as the fence or newer; a newer one means the fence moved, and the staging condition then fails and
   * both are read again (`key-window.ts`).
   */
  private async windowFor(topic: string, partition: number, fence: FenceState): Promise<KeyWindow> {
    const id = partitionId(topic, partition);
    const cached = this.windows.get(id);
    this.windows.delete(id);
    if (cached !== undefined && cached.fenceOffset === fence.stagedOffset) {
      this.windows.set(id, cached);
      return cached.window;
    }
    const { pipelineId, idempotencyTtlSeconds, idempotencyWindowKeys } = this.deps.settings;
    const limits = { ttlSeconds: idempotencyTtlSeconds, windowKeys: idempotencyWindowKeys };
    const buckets =
      fence.stagedOffset === NO_FENCE
        ? []
        : await this.ledger.readKeyWindow(pipelineId, topic, partition, maxBuckets(limits));
    const window = new KeyWindow(buckets, limits);
    this.rememberWindow(id, fence.stagedOffset, window);
    return window;
  }

  private rememberWindow(id: string, fenceOffset: number, window: KeyWindow): void {
    this.windows.delete(id);
    this.windows.set(id, { fenceOffset, window });
    for (const oldest of this.windows.keys()) {
      if (this.windows.size <= WINDOW_CACHE_PARTITIONS) break;
      this.windows.delete(oldest);
    }
  }

  private evaluate(batch: PartitionBatch): EvaluatedRecord[] {
    const limits = effectLimits(this.deps.settings);
    const replayEnd = this.replayEnds.get(partitionId(batch.topic, batch.partition));
    const replayed = generationOfLane(batch.topic) !== 0;
    return batch.records.map((record) => {
      // A replay's first record after its range only moves the fence (`shared/replay/slice.ts`).
      if (replayEnd !== undefined && record.offset > replayEnd) return inertRecord(record);
      const evaluated = evaluateRecord(this.transform, this.deps.settings.idempotencyKey, record, limits);
      // Keyed state is the live output's (generation 0): a replay generation, and a redrive of its dead letters,
      // rewrite output only. Applying their deltas would count records the live pipeline counted already
      // (docs/operations.md, "Replay into a new generation").
      return replayed && evaluated.state.length > 0 ? { ...evaluated, state: [] } : evaluated;
    });
  }

  /** Throws {@link OffsetsWentBackwardsError} when `judgeBatch` says so. */
  private judge(prints: Fingerprints, fence: FenceState, mode: 'start' | 'moved'): Verdict {
    // The steady state (a batch above the fence) computes no digest at all.
    if (fence.stagedOffset === NO_FENCE || prints.firstOffset > fence.stagedOffset) return { kind: 'new' };
    return judgeBatch(prints.all(), fence, this.deps.settings.maxFenceJump, mode);
  }

  private backwards(prints: Fingerprints, fence: FenceState, reason: string): OffsetsWentBackwardsError {
    const { topic, partition } = prints.batch;
    return new OffsetsWentBackwardsError(
      topic,
      partition,
      fence.stagedOffset,
      prints.firstOffset,
      prints.lastOffset,
      reason,
    );
  }

  /** An unproven redelivery, reported (a warning and `UnprovenRedeliveries`) before it is thrown: no stop record. */
  private unproven(prints: Fingerprints, fence: FenceState): UnprovenRedeliveryError {
    const { topic, partition } = prints.batch;
    const error = new UnprovenRedeliveryError(
      topic,
      partition,
      fence.stagedOffset,
      prints.firstOffset,
      prints.lastOffset,
    );
    this.deps.observer?.redeliveryUnproven?.(error);
    return error;
  }

  /**
   * The lane and fence to start from, judged: a "backwards" against a cached fence is confirmed against a fresh
   * read of the partition's current lane (an operator may have opened a new epoch since), and a confirmed one is
   * recorded on the lane's fence (`eos epoch` shows it) before it is thrown. An `explicit` batch (a redrive lane,
   * `stageInLane`) names its lane itself: no epoch resolution, no stop record.
   */
  private async startingFence(
    prints: Fingerprints,
    laning: Laning,
    startedAt: number,
    attemptId: string,
  ): Promise<LaneFence> {
    const { topic, partition } = prints.batch;
    const explicit = laning === 'explicit';
    const { lane, fence, cached } = explicit
      ? await this.explicitLaneFence(topic, partition)
      : await this.fenceOf(topic, partition);
    const verdict = this.judge(prints, fence, judgingMode(fence, startedAt));
    // Only "new" is taken on the cache's word. A batch at or below a cached fence (redelivery or backwards) is
    // judged against a fresh read: the cached lane may have been closed by a new epoch (or a redrive round)
    // meanwhile, and its records must never be dropped as redeliveries of the old one (review of epochs, finding
    // 1). A read per redelivery only: the steady state (batches above the fence) reads nothing.
    if (verdict.kind === 'new') return { lane, fence };
    if (!cached && verdict.kind === 'redelivery') return { lane, fence };
    // The cached lane's own fence first (one read); only a closed one sends an epoch lane to the root (review of
    // the operations fixes, finding 6). A closed explicit lane fails (EpochChangedError).
    const fresh = !cached
      ? { lane, fence }
      : explicit
        ? { lane, fence: await this.refreshFence(lane, partition) }
        : await this.freshLaneFence(topic, partition, lane);
    const again = cached ? this.judge(prints, fresh.fence, judgingMode(fresh.fence, startedAt)) : verdict;
    if (again.kind === 'unproven') throw this.unproven(prints.inLane(fresh.lane), fresh.fence);
    if (again.kind !== 'backwards') return fresh;
    const stopped = this.backwards(prints.inLane(fresh.lane), fresh.fence, again.reason);
    if (!explicit) await this.recordStop(fresh, stopped, attemptId, startedAt);
    throw stopped;
  }

  /** An explicit lane's fence: this container's copy, else read. */
  private async explicitLaneFence(lane: string, partition: number): Promise<LaneFence & { cached: boolean }> {
    const cached = this.fences.get(partitionId(lane, partition));
    if (cached !== undefined) return { lane, fence: cached, cached: true };
    return { lane, fence: await this.refreshFence(lane, partition), cached: false };
  }

  /**
   * Writes the stop onto the lane's fence, or adds this attempt's sighting to the stop already there for the same
   * fence and batch start (`sightedStop`): a stop two attempts saw is confirmed, and only a confirmed one lets `eos
   * epoch --start-new` open an epoch without `--force` (a zombie's false stop is never retried, so never confirmed).
   */
  private async recordStop(
    { lane, fence }: LaneFence,
    stopped: OffsetsWentBackwardsError,
    attemptId: string,
    startedAt: number,
  ): Promise<void> {
    const stop = sightedStop(
      fence.stop,
      {
        reason: stopped.reason,
        fence: stopped.fence,
        firstOffset: stopped.firstOffset,
        lastOffset: stopped.lastOffset,
        at: this.clock.now(),
      },
      attemptId,
      startedAt,
    );
    if (stop === undefined) return;
    if (await this.ledger.recordStop(this.deps.settings.pipelineId, lane, stopped.partition, fence, stop)) {
      this.fences.set(partitionId(lane, stopped.partition), { ...fence, stop });
    }
  }

  /**
   * Re-reads the fence during the batch and judges the batch against it if it moved: in full when it moved before
   * this invocation began (the cache was stale), by fingerprints only when it moved while this invocation ran.
   */
  private async movedFence(prints: Fingerprints, known: FenceState, startedAt: number): Promise<FenceState> {
    const { topic, partition } = prints.batch;
    const fresh = await this.refreshFence(topic, partition);
    if (fresh.stagedOffset === known.stagedOffset) return fresh;
    if (fresh.stagedOffset < known.stagedOffset) {
      // Only a staging transaction moves a fence, and only up: a lower one was rewritten outside the protocol.
      throw new MalformedLedgerItemError(
        `fence ${topic}#${partition}`,
        `went down from ${known.stagedOffset} to ${fresh.stagedOffset}`,
      );
    }
    const verdict = this.judge(prints, fresh, judgingMode(fresh, startedAt));
    if (verdict.kind === 'backwards') throw this.backwards(prints, fresh, verdict.reason);
    if (verdict.kind === 'unproven') throw this.unproven(prints, fresh);
    return fresh;
  }

  /** EXACTLY_ONCE: the staging protocol of the module doc. */
  private async stagePartition(
    batch: PartitionBatch,
    attemptId: string,
    startedAt: number,
    laning: Laning = 'resolve',
  ): Promise<PartitionReport> {
    let prints = new Fingerprints(batch);
    /** Claims this attempt wrote ahead (or confirmed as its records' own), by record offset. */
    const held = new Map<number, ClaimItem>();
    let known: FenceState = { stagedOffset: NO_FENCE, identity: undefined, updatedAt: undefined };
    try {
      const start = await this.startingFence(prints, laning, startedAt, attemptId);
      // From here on the batch is filed under its lane: every ledger item and staged key names it.
      prints = prints.inLane(start.lane);
      known = start.fence;
      return await this.stageFrom(prints, known, held, attemptId, startedAt, (fence) => {
        known = fence;
      });
    } catch (error) {
      await this.releaseAfter(error, prints, held, attemptId);
      // A new epoch is an operator's act, not a stop: the retry stages the batch there.
      const stop = !(error instanceof EpochChangedError);
      if (stop && !isTransient(error) && !(error instanceof InjectedCrashError)) {
        this.deps.observer?.partitionStopped?.(
          error instanceof Error ? error : new PipelineError(`batch failed with ${String(error)}`),
        );
      }
      throw error;
    }
  }

  /**
   * Issue 9.3: a batch that fails deterministically after writing claims ahead deletes its own claims of records
   * still above the fence (see the module doc). A crash runs no code (an injected crash stands for one); transient
   * errors keep the claims for the retry. A release that fails itself leaves them to the retry or their TTL.
   */
  private async releaseAfter(
    error: unknown,
    prints: Fingerprints,
    held: ReadonlyMap<number, ClaimItem>,
    attemptId: string,
  ): Promise<void> {
    if (held.size === 0 || isTransient(error) || error instanceof InjectedCrashError) return;
    const { topic, partition } = prints.batch;
    try {
      // Records at or below the fence as stored now (a consistent read, not this container's cache: another
      // invocation may have staged them meanwhile) are staged: their claims are theirs. Above it, the release is
      // attempt-scoped (see StagingLedger.releaseClaims): a claim another attempt of the same batch confirmed —
      // or committed, which lists that attempt as holder for good — is left alone.
      const { stagedOffset } = await this.ledger.readFence(this.deps.settings.pipelineId, topic, partition);
      const unstaged = [...held].filter(([offset]) => offset > stagedOffset).map(([, claim]) => claim);
      if (unstaged.length === 0) return;
      await this.ledger.releaseClaims(this.deps.settings.pipelineId, attemptId, unstaged);
    } catch {
      // The original error is what the invocation reports; the claims stay for the retry (or their TTL).
    }
  }

  private async stageFrom(
    prints: Fingerprints,
    start: FenceState,
    held: Map<number, ClaimItem>,
    attemptId: string,
    startedAt: number,
    onFence: (fence: FenceState) => void,
  ): Promise<PartitionReport> {
    const { batch } = prints;
    const { topic, partition } = batch;
    const { settings } = this.deps;
    let known = start;
    /** The batch's records above the fence it started from, as evaluated (before any key decision). */
    const originals = this.evaluate(batch).filter((record) => record.offset > known.stagedOffset);
    const report: Counts = { ...NO_COUNTS, duplicatesByOffset: batch.records.length - originals.length };
    /** The first record of the batch per idempotency key: it claims the key unless another record holds it. */
    const firstWithKey = new Map<string, EvaluatedRecord>();
    for (const record of originals) {
      if (record.idempotencyKey !== undefined && !firstWithKey.has(record.idempotencyKey)) {
        firstWithKey.set(record.idempotencyKey, record);
      }
    }
    /** Keys found held by records outside this batch (claims ahead, or a cancelled transaction). */
    const external = new Map<string, ClaimHolder>();
    /** Offsets dropped as duplicates by key (P4). */
    const dropped = new Set<number>();
    /** Offsets dead-lettered as key conflicts (issue 17.2), reported once their transaction commits. */
    const conflicts = new Map<number, KeyConflict>();
    /**
     * Offsets dead-lettered because DynamoDB refused their state: an add to a field stored as text (issue 9.3), or
     * growth of an item past its 400 KB limit; with the reason.
     */
    const stateRefused = new Map<number, string>();
    let pending: EvaluatedRecord[] = [];
    /**
     * Decides every pending record's key from what is known: a record whose key another record holds (outside the
     * batch, or the batch's first record with that key) is a duplicate when the digests are equal — or when the
     * holder's claim predates digests — and a conflict (dead-lettered, naming key and claimant) otherwise. A record
     * dead-lettered for its state holds no key (a dead letter never does), so the batch's holder of a key is its
     * first record with the key that DynamoDB did not refuse: the same outcome as when the refused record came in
     * an earlier batch. Pure in what it is given, so a retry of the batch decides the same; re-run whenever
     * something new is known.
     */
    const decide = () => {
      dropped.clear();
      conflicts.clear();
      const holders = new Map<string, EvaluatedRecord>();
      for (const record of originals) {
        const key = record.idempotencyKey;
        if (key !== undefined && !holders.has(key) && !stateRefused.has(record.offset))
          holders.set(key, record);
      }
      pending = originals
        .filter((record) => record.offset > known.stagedOffset)
        .map((record) => {
          const key = record.idempotencyKey;
          const refused = stateRefused.get(record.offset);
          if (refused !== undefined) return deadLetterOf(record, refused);
          if (key === undefined) return record;
          const first = holders.get(key)!;
          const holder: ClaimHolder | undefined =
            external.get(key) ??
            (first === record
              ? undefined
              : {
                  idempotencyKey: key,
                  claimant: claimantOf(topic, partition, first.offset),
                  digest: first.digest,
                });
          if (holder === undefined) return record;
          if (sameRecord(holder, record.digest)) {
            dropped.add(record.offset);
            return record;
          }
          conflicts.set(record.offset, {
            topic,
            partition,
            offset: record.offset,
            idempotencyKey: key,
            claimant: holder.claimant,
          });
          return deadLetterOf(
            record,
            `idempotency key ${JSON.stringify(key)} is already claimed by ${holder.claimant} with a different payload`,
          );
        });
    };
    /** Partition-scoped idempotency: the key window as of `known` (see `key-window.ts`). */
    const windowScope = settings.idempotencyScope === 'partition';
    let window: KeyWindow | undefined;
    /** The window's holders of the batch's keys become `external`, as claims found taken do in global scope. */
    const loadWindow = async () => {
      if (!windowScope || firstWithKey.size === 0) return;
      window = await this.windowFor(topic, partition, known);
      external.clear();
      for (const [key, holder] of window.holders(firstWithKey.keys(), this.clock.now())) {
        external.set(key, {
          idempotencyKey: key,
          claimant: `an earlier record of ${topic}-${partition} (key window)`,
          digest: holder.digestPrefix,
          prefixOnly: true,
        });
      }
    };
    await loadWindow();
    if (!windowScope && firstWithKey.size > 0) {
      for (const holder of await this.liveHolders(topic, [...firstWithKey.keys()])) {
        external.set(holder.idempotencyKey, holder);
      }
    }
    decide();
    const setFence = (fence: FenceState) => {
      known = fence;
      this.fences.set(partitionId(topic, partition), fence);
      onFence(fence);
    };
    /** After a re-read: what another invocation staged meanwhile is dropped (P2). */
    const reread = async () => {
      setFence(await this.movedFence(prints, known, startedAt));
      await loadWindow();
      const before = pending.length;
      decide();
      report.duplicatesByOffset += before - pending.length;
    };
    let windowMismatches = 0;
    /** Holders found for taken keys: decided again with them. */
    const resolveTaken = (holders: readonly ClaimHolder[]): void => {
      for (const holder of holders) external.set(holder.idempotencyKey, holder);
      decide();
    };
    const claimsAhead = !windowScope && settings.claimWrite === 'ahead';
    // Claims go ahead only once the first staged write succeeded: a missing bucket writes nothing at all.
    let claimed = !claimsAhead || !pending.some((record) => record.idempotencyKey !== undefined);
    /** Records whose claim goes into the transaction: all keyed ones, or (ahead) expired takeovers. */
    const takeovers = new Set<number>();
    const claimInTransaction = (record: EvaluatedRecord) =>
      !windowScope && record.idempotencyKey !== undefined && (!claimsAhead || takeovers.has(record.offset));
    let writes = 0;
    while (pending.length > 0) {
      // A transaction that creates the sharded fence also writes the legacy fence key (fences.ts): one item less.
      // A redrive lane writes a dead-letter row for every record it resolves without an output row (a duplicate,
      // state only: redriveOutcomeRow), which the planner does not count: one item less for that entry instead
      // (review of the operations fixes, finding 1). Either way a record keeps the budget `evaluate` gave it.
      const settlesLegacy = (known.stagedOffset === NO_FENCE && isRootLane(topic)) || known.legacy === true;
      const redriveLane = parseLane(topic)?.round !== undefined;
      const chunk = planChunk(
        pending,
        dropped,
        settings.maxTransactionItems - (settlesLegacy || redriveLane ? LEGACY_FENCE_ITEMS : 0),
        claimInTransaction,
        windowScope,
      );
      const context = { topic, partition, chunk: report.chunks };
      await this.step('before-stage-write', context);
      const objects = await this.writeObjects(chunk, topic, partition, (range) =>
        stagedObjectKey(settings.pipelineId, range, `${attemptId}.${writes++}`, settings.gzip),
      );
      await this.step('after-stage-write', context);
      if (!claimed) {
        claimed = true;
        // Claims ahead are judged against the fence as it is now, not as this container cached it: records
        // another invocation staged meanwhile must not claim anything.
        const before = pending.length;
        await reread();
        resolveTaken(await this.claimAhead(pending, dropped, takeovers, held, topic, partition, attemptId));
        // Records dropped, turned into conflicts, or claims moved into the transaction: re-plan (the objects
        // just written become orphans).
        const replan =
          pending.length !== before ||
          chunk.kept.some(
            (record) =>
              dropped.has(record.offset) || takeovers.has(record.offset) || conflicts.has(record.offset),
          );
        if (replan) continue;
      }
      const batchStart = prints.of(prints.firstOffset);
      // The fence as known is the fence as stored (a staged offset is written once: the condition below proves
      // it), so the ring carried forward is exact; a fence without a ring seeds it with its own batch start.
      const before = known.identity;
      const identity: FenceIdentity = {
        fenceRecord: prints.of(chunk.lastOffset),
        batchStart,
        recentStarts: withStart(
          before === undefined
            ? []
            : before.recentStarts.length > 0
              ? before.recentStarts
              : [before.batchStart],
          batchStart,
        ),
      };
      const from = known.stagedOffset;
      const keyWindow: BucketWrite[] =
        window?.writesFor(
          chunk.kept.flatMap((record) =>
            record.idempotencyKey === undefined
              ? []
              : [{ key: record.idempotencyKey, digest: record.digest }],
          ),
          this.clock.now(),
        ) ?? [];
      try {
        await this.ledger.stage({
          pipeline: settings.pipelineId,
          topic,
          partition,
          expectedOffset: from,
          // A fence read from the legacy key moves to its shard in this transaction (fences.ts).
          ...(known.legacy ? { fromLegacy: true } : {}),
          newOffset: chunk.lastOffset,
          entries: objects.map((object) => this.entryFor(chunk, object, topic, partition, attemptId)),
          claims: this.claimsFor(chunk.kept.filter(claimInTransaction), topic, partition),
          state: foldState(chunk.kept.flatMap((record) => record.state)),
          ...(keyWindow.length > 0 ? { keyWindow } : {}),
          identity,
          now: this.clock.now(),
          attemptId,
        });
      } catch (error) {
        if (error instanceof FenceMovedError) {
          await reread();
          continue;
        }
        if (error instanceof KeyWindowChangedError) {
          // The window is not what this container's copy says although the fence is: read both again, a few
          // times at most (a writer outside the protocol would otherwise keep this loop going).
          this.windows.delete(partitionId(topic, partition));
          if (++windowMismatches > 3) throw error;
          await reread();
          continue;
        }
        if (error instanceof ClaimsTakenError) {
          const orphaned = await this.releaseOrphans(error.holders, topic, partition);
          resolveTaken(error.holders.filter((holder) => !orphaned.has(holder.idempotencyKey)));
          continue;
        }
        if (isStateRefusal(error)) {
          // Throws the refusal when it finds nothing new to dead-letter (see refusedStateRecords).
          const found = await refusedStateRecords(error, chunk.kept, this.readState, stateRefused);
          for (const [offset, reason] of found) stateRefused.set(offset, reason);
          decide();
          if (claimsAhead) {
            const refused = chunk.kept.filter((record) => stateRefused.has(record.offset));
            await this.handOverRefusedClaims(pending, refused, held, takeovers, attemptId);
          }
          continue;
        }
        throw error;
      }
      this.reportCommitted(chunk, from, conflicts, report, topic, partition);
      setFence({ stagedOffset: chunk.lastOffset, identity, updatedAt: this.clock.now() });
      if (windowScope) {
        // The window as stored now: the one this transaction's fence condition proved, plus its writes (a chunk
        // without keys leaves a copy of the window it started from as it was, now under the new fence).
        const id = partitionId(topic, partition);
        const cached = this.windows.get(id);
        if (window) {
          window = window.withWrites(keyWindow, this.clock.now());
          this.rememberWindow(id, chunk.lastOffset, window);
        } else if (cached?.fenceOffset === from) {
          this.rememberWindow(id, chunk.lastOffset, cached.window);
        }
      }
      await this.releaseStateRefused(chunk, stateRefused, held, attemptId);
      decide();
      await this.step('after-transaction', context);
    }
    return { topic, partition, received: batch.records.length, stagedOffset: known.stagedOffset, ...report };
  }

  /** A keyed-state item as stored now: what a state refusal is judged against (`state-refusal.ts`). */
  private readonly readState: StateReader = (stateKey) =>
    this.ledger.readState(this.deps.settings.pipelineId, stateKey);

  /**
   * Issue 9.3 x P4: a record dead-lettered because DynamoDB refused its state (an add meeting a text field, an item
   * grown past its limit) never claims its key (a dead letter never does), yet in `ahead` mode its claim was
   * written before the refusal. Once the chunk that dead-letters it
   * has committed, this attempt releases that claim (attempt-scoped, as after a failed batch) and stops holding it,
   * so a corrected record with the same key elsewhere is output, as in `in-transaction` mode. A release that fails
   * leaves the claim to its TTL (the dead letter is committed either way).
   */
  private async releaseStateRefused(
    chunk: Chunk,
    stateRefused: ReadonlyMap<number, string>,
    held: Map<number, ClaimItem>,
    attemptId: string,
  ): Promise<void> {
    const claims: ClaimItem[] = [];
    for (const record of chunk.kept) {
      const claim = held.get(record.offset);
      if (claim === undefined || !stateRefused.has(record.offset)) continue;
      claims.push(claim);
      held.delete(record.offset);
    }
    if (claims.length === 0) return;
    try {
      await this.ledger.releaseClaims(this.deps.settings.pipelineId, attemptId, claims);
    } catch {
      // The committed dead letter stands either way; the claim stays until its TTL.
    }
  }

  /**
   * Claims ahead x a state refusal in the same batch: a refused record's key passes to the batch's next record with
   * that key (see `decide`), which wrote no claim ahead. The refused record's claim is released now (attempt-scoped,
   * as after a failed batch) and the new holder takes the key over inside its fenced transaction, so the key is
   * held durably by the record that is output. If another attempt holds the old claim, the takeover meets it and
   * the record is judged against it (a duplicate or a conflict), never output with its key unclaimed. A refused
   * record that was itself a takeover (the key's claim had expired, so none was held ahead) passes the takeover on:
   * its heir takes the expired claim over in its own transaction, as the refused record would have. `refused` are
   * the refused records as they were before being dead-lettered (a dead letter carries no key).
   */
  private async handOverRefusedClaims(
    pending: readonly EvaluatedRecord[],
    refused: readonly EvaluatedRecord[],
    held: Map<number, ClaimItem>,
    takeovers: Set<number>,
    attemptId: string,
  ): Promise<void> {
    const holders = new Map<string, number>();
    for (const record of pending) {
      const key = record.idempotencyKey;
      if (key !== undefined && !holders.has(key)) holders.set(key, record.offset);
    }
    for (const record of refused) {
      if (record.idempotencyKey === undefined || !takeovers.has(record.offset)) continue;
      takeovers.delete(record.offset);
      const heir = holders.get(record.idempotencyKey);
      if (heir !== undefined && heir !== record.offset && !held.has(heir)) takeovers.add(heir);
    }
    const released: ClaimItem[] = [];
    for (const [offset, claim] of held) {
      const heir = holders.get(claim.idempotencyKey);
      if (heir === undefined || heir === offset || held.has(heir)) continue;
      released.push(claim);
      held.delete(offset);
      takeovers.add(heir);
    }
    if (released.length === 0) return;
    try {
      await this.ledger.releaseClaims(this.deps.settings.pipelineId, attemptId, released);
    } catch {
      // Left held: the takeover meets it and the heir is judged against it (see above).
    }
  }

  /** Counts a committed chunk and reports its fence jump and key conflicts (final now: see the observer). */
  private reportCommitted(
    chunk: Chunk,
    from: number,
    conflicts: ReadonlyMap<number, KeyConflict>,
    report: Counts,
    topic: string,
    partition: number,
  ): void {
    report.chunks += 1;
    report.duplicatesByKey += chunk.records.length - chunk.kept.length;
    report.stagedRows += chunk.kept.reduce((n, record) => n + record.output.length, 0);
    report.deadLettered += chunk.kept.filter((record) => record.deadLetter).length;
    report.missingKeys += chunk.kept.filter((record) => record.missingKey).length;
    const committed = chunk.kept.flatMap((record) => {
      const found = conflicts.get(record.offset);
      return found ? [found] : [];
    });
    if (committed.length > 0) {
      report.keyConflicts += committed.length;
      this.deps.observer?.keyConflicts?.(committed);
    }
    if (from !== NO_FENCE && chunk.firstOffset - from > this.deps.settings.maxFenceJump) {
      report.fenceJumps += 1;
      this.deps.observer?.fenceJumped?.({ topic, partition, fence: from, firstOffset: chunk.firstOffset });
    }
  }

  /** Writes one object per stream that has rows in the chunk, in parallel. */
  private async writeObjects(
    chunk: Chunk,
    topic: string,
    partition: number,
    keyFor: (range: ObjectRange) => string,
  ): Promise<StagedObject[]> {
    // With time folders, each row is staged with its record's Kafka timestamp: the coordinator files rows by it
    // and removes it at promote (record-time.ts). Without, the staged rows are exactly the final rows.
    // At-least-once and none write final objects directly, without folders: nothing to stage.
    const { timePartitioning, deliveryGuarantee } = this.deps.settings;
    const stamp =
      timePartitioning === 'none' || deliveryGuarantee !== 'exactly-once'
        ? <R extends { readonly source: object }>(row: R) => row
        : <R extends { readonly source: object }>(row: R, timestamp: number) =>
            withStagedTime(row, timestamp);
    const kept = new Set(chunk.kept);
    const rowsByStream: Record<Stream, readonly unknown[]> = {
      output: chunk.kept.flatMap((record) => record.output.map((row) => stamp(row, record.timestamp))),
      deadletter:
        parseLane(topic)?.round === undefined
          ? chunk.kept.flatMap((record) =>
              record.deadLetter ? [stamp(record.deadLetter, record.timestamp)] : [],
            )
          : chunk.records.flatMap((record) => {
              const row = redriveOutcomeRow(record, kept.has(record));
              return row ? [stamp(row, record.timestamp)] : [];
            }),
    };
    const objects = STREAMS.filter((stream) => rowsByStream[stream].length > 0).map((stream) => {
      const range = {
        stream,
        topic,
        partition,
        firstOffset: chunk.firstOffset,
        lastOffset: chunk.lastOffset,
      };
      return {
        stream,
        key: keyFor(range),
        encoded: encodeNdjson(rowsByStream[stream], this.deps.settings.gzip),
      };
    });
    await Promise.all(objects.map((object) => this.writer.put(object.key, object.encoded)));
    return objects;
  }

  private entryFor(
    chunk: Chunk,
    object: StagedObject,
    topic: string,
    partition: number,
    attemptId: string,
  ): StagedFileEntry {
    return {
      pipeline: this.deps.settings.pipelineId,
      stream: object.stream,
      topic,
      partition,
      firstOffset: chunk.firstOffset,
      lastOffset: chunk.lastOffset,
      key: object.key,
      recordCount: object.encoded.recordCount,
      bytes: object.encoded.bytes,
      sha256: object.encoded.sha256,
      md5: object.encoded.md5,
      gzip: this.deps.settings.gzip,
      attemptId,
      stagedAt: this.clock.now(),
    };
  }

  /**
   * Claims the keys of the records still pending, before any staging transaction. Returns the holders of keys
   * another record holds (the caller tells duplicates from conflicts); expired ones join `takeovers` (taken over
   * inside the fenced transaction); claims created or confirmed join `held`. Safe to repeat: a retry finds its own.
   */
  private async claimAhead(
    pending: readonly EvaluatedRecord[],
    dropped: ReadonlySet<number>,
    takeovers: Set<number>,
    held: Map<number, ClaimItem>,
    topic: string,
    partition: number,
    attemptId: string,
  ): Promise<ClaimHolder[]> {
    const claims = this.claimsFor(
      pending.filter((record) => !dropped.has(record.offset)),
      topic,
      partition,
    );
    if (claims.length === 0) return [];
    const found = await this.ledger.claimAhead(
      this.deps.settings.pipelineId,
      claims,
      this.clock.now(),
      attemptId,
    );
    const orphaned = await this.releaseOrphans(found.taken, topic, partition);
    const expired = new Set([...found.expired, ...orphaned]);
    const heldKeys = new Map(found.held.map((claim) => [claim.idempotencyKey, claim]));
    for (const record of pending) {
      if (record.idempotencyKey === undefined || dropped.has(record.offset)) continue;
      if (expired.has(record.idempotencyKey)) takeovers.add(record.offset);
      const claim = heldKeys.get(record.idempotencyKey);
      if (claim) held.set(record.offset, claim);
    }
    await this.step('after-claims', { topic, partition, chunk: 0 });
    return found.taken.filter((holder) => !orphaned.has(holder.idempotencyKey));
  }

  /**
   * Claims written ahead by an attempt whose lane was then closed by a new epoch (`epochs.ts`), for a record above
   * that lane's final fence: the record can never be staged there, so the claim holds its key for nothing (a crash
   * after the claims, then the switch). Such a claim is released (on condition it still names that record), so
   * that the key is taken over inside this batch's fenced transaction instead of its records being dropped as
   * duplicates of a record that never became durable (review of epochs, finding 2). Only claims of an earlier epoch
   * of this batch's own partition are looked at (a crash before the switch leaves them; a claim of another
   * partition's closed epoch keeps blocking its key until its own retry takes it over, or its TTL), so a duplicate
   * of an open lane costs no read: the fences of those lanes are read in parallel, only when such claims are found
   * taken (review of the operations fixes, finding 5). Returns the keys released.
   */
  private async releaseOrphans(
    taken: readonly ClaimHolder[],
    lane: string,
    partition: number,
  ): Promise<Set<string>> {
    const { pipelineId } = this.deps.settings;
    const own = parseLane(lane);
    const candidates = taken.flatMap((holder) => {
      const claimant = parseClaimant(holder.claimant);
      const of = claimant === undefined ? undefined : parseLane(claimant.lane);
      const earlierEpoch =
        of !== undefined &&
        own !== undefined &&
        claimant!.partition === partition &&
        claimant!.lane !== lane &&
        of.topic === own.topic &&
        of.round === own.round &&
        of.generation === own.generation &&
        of.epoch < own.epoch;
      return earlierEpoch && holder.digest !== undefined
        ? [{ holder, claimant: claimant!, digest: holder.digest }]
        : [];
    });
    if (candidates.length === 0) return new Set();
    const lanes = [...new Set(candidates.map((c) => c.claimant.lane))];
    const fences = new Map(
      await Promise.all(
        lanes.map(
          async (name) =>
            [name, await this.ledger.readFence(pipelineId, name, partition).catch(() => undefined)] as const,
        ),
      ),
    );
    const released = new Set<string>();
    for (const { holder, claimant, digest } of candidates) {
      const fence = fences.get(claimant.lane);
      if (!fence?.closed || claimant.offset <= fence.stagedOffset) continue;
      if (await this.ledger.releaseOrphanClaim(pipelineId, holder.idempotencyKey, holder.claimant, digest)) {
        released.add(holder.idempotencyKey);
      }
    }
    return released;
  }

  private claimsFor(records: readonly EvaluatedRecord[], topic: string, partition: number): ClaimItem[] {
    const expiresAt = Math.floor(this.clock.now() / 1000) + this.deps.settings.idempotencyTtlSeconds;
    return records.flatMap((record) =>
      record.idempotencyKey === undefined
        ? []
        : [
            {
              idempotencyKey: record.idempotencyKey,
              claimant: claimantOf(topic, partition, record.offset),
              digest: record.digest,
              expiresAt,
            },
          ],
    );
  }

  /**
   * AT_LEAST_ONCE and NONE: keyed state applied without fence or dedupe, then rows straight to final objects. The
   * state goes first, in planned chunks (`direct-state.ts`), so a record DynamoDB refuses for its state is written
   * as a dead-letter row rather than an output row, and a refused batch writes no rows before it fails.
   */
  private async writeDirect(batch: PartitionBatch, attemptId: string): Promise<PartitionReport> {
    const { topic, partition } = batch;
    const context = { topic, partition, chunk: 0 };
    const { pipelineId, gzip, maxTransactionItems } = this.deps.settings;
    const evaluated = this.evaluate(batch);
    await this.step('before-stage-write', context);
    const { records, transactions } = await applyDirectState(
      { ledger: this.ledger, pipeline: pipelineId, topic, partition, maxItems: maxTransactionItems },
      evaluated,
    );
    const chunk: Chunk = {
      records,
      kept: records,
      firstOffset: records[0]!.offset,
      lastOffset: records[records.length - 1]!.offset,
    };
    await this.writeObjects(chunk, topic, partition, (range) =>
      directFinalObjectKey(pipelineId, range, attemptId, gzip),
    );
    await this.step('after-stage-write', context);
    await this.step('after-transaction', context);
    return {
      topic,
      partition,
      received: records.length,
      duplicatesByOffset: 0,
      duplicatesByKey: 0,
      stagedRows: records.reduce((n, record) => n + record.output.length, 0),
      deadLettered: records.filter((record) => record.deadLetter).length,
      keyConflicts: 0,
      missingKeys: records.filter((record) => record.missingKey).length,
      fenceJumps: 0,
      chunks: transactions,
      stagedOffset: NO_FENCE,
    };
  }
}

/**
 * The dead-letter row of a record staged in a redrive lane (`shared/redrive/`): its dead letter, or, for a record
 * the redrive resolved without an output row (dropped as a duplicate of a key the same payload holds, or turned
 * into keyed state only), a row marked `resolved` saying so. The committed log then says for every redriven record
 * that the redrive handled it, so no later run sends it again (review of redrive, finding 1).
 */
function redriveOutcomeRow(
  record: EvaluatedRecord,
  kept: boolean,
): ({ readonly source: Lineage } & Record<string, unknown>) | undefined {
  if (kept && record.deadLetter) return { ...record.deadLetter };
  if (kept && record.output.length > 0) return undefined;
  const why = kept
    ? 'the transform made no output row (state only)'
    : 'a duplicate: the same payload holds its key';
  return { source: record.source, error: `redriven: ${why}`, raw: record.raw, resolved: true };
}

/** Items the legacy fence key takes in a transaction that creates a partition's sharded fence (fences.ts). */
const LEGACY_FENCE_ITEMS = 1;

/**
 * The bounds a record's effects are evaluated against (anything over them is dead-lettered, L1): one transaction
 * item less than the setting, since the first staging of a partition also settles its legacy fence key (fences.ts)
 * and a redrive lane's chunk keeps an item for its dead-letter entry, and a record must fit a chunk of its own then
 * too; two items per key in partition scope (the window's bucket). The redrive judges with the same bounds.
 */
export function effectLimits(
  settings: Pick<Settings, 'maxTransactionItems' | 'idempotencyScope' | 'missingIdempotencyKey'>,
): EffectLimits {
  return {
    maxTransactionItems: settings.maxTransactionItems - LEGACY_FENCE_ITEMS,
    keyItems: settings.idempotencyScope === 'partition' ? 2 : 1,
    missingIdempotencyKey: settings.missingIdempotencyKey,
  };
}

/** Partitions whose key windows one container keeps (each up to `idempotencyWindowKeys` × 16 bytes). */
const WINDOW_CACHE_PARTITIONS = 16;

/**
 * Whether a held key's record is the same record (a duplicate) rather than a conflict. A key window keeps only a
 * digest prefix (`key-window.ts`); a claim written before digests has none, and counts as a duplicate.
 */
function sameRecord(holder: ClaimHolder, digest: string): boolean {
  if (holder.digest === undefined) return true;
  return holder.prefixOnly ? holder.digest === digestPrefix(digest) : holder.digest === digest;
}

export function createProcessor(deps: ProcessorDeps): Processor {
  return new Processor(deps);
}

export { NO_FENCE };
