/**
 * One partition batch staged exactly once (P1–P6), from the fence it was judged against. In offset order:
 *
 * ```
 *  drop records <= fence (P4, redelivery) ──▶ evaluate each record once; decide keys seen earlier (P4)
 *     │
 *     ├─ (claims ahead) re-read the fence; a conditional put per idempotency key, batched,
 *     │   naming its claimant (t#p#o): a retry finds its own claim; others are duplicates      (P4)
 *     ▼  for each chunk (<= 100 transaction items, record boundaries)                              (P1)
 *     ├─ PutObject in-progress/<stream>/…/<first>-<last>.<attempt>.ndjson.gz  per stream        (P3)
 *     ├─ TransactWriteItems: fence == read value → chunk's last offset                          (P2)
 *     │                      + staged-file entries + idempotency claims + keyed-state deltas
 *     ├─ fence moved?   re-read it, drop what another invocation staged, continue              (P2)
 *     ├─ keys claimed?  drop those records (duplicates by key), re-plan the chunk              (P4)
 *     └─ state refused? dead-letter exactly the records DynamoDB refuses, re-plan (P6, L1)
 * ```
 * Claims go ahead (`claimWrite: ahead`) before the first chunk is planned, so a batch holding a key claimed
 * elsewhere writes no object for it; `in-transaction` puts them in the staging transactions. Each transaction also
 * writes the fence's identity (`batch-judge.ts`), riding in the fence update it makes anyway. A transaction that moves the fence more
 * than `maxFenceJump` is reported once committed, not refused (offsets have gaps).
 */
import type { PartitionBatch } from '../kafka/record.ts';
import { isRootLane, parseLane } from '../ledger/epochs.ts';
import { INLINE_BYTES_BUDGET } from '../ledger/inline-entries.ts';
import type { BucketWrite } from '../ledger/key-window.ts';
import {
  ClaimHandoverLostError,
  type ClaimHolder,
  ClaimsTakenError,
  FenceMovedError,
  type FenceState,
  KeyWindowChangedError,
  NO_FENCE,
  type StagedFence,
  type StagingTransaction,
} from '../ledger/staging-ledger.ts';
import { stagedObjectKey } from '../sink/layout.ts';
import { BatchWindow } from './batch-window.ts';
import { fenceEntriesAfter, identityFor } from './chunk-fence.ts';
import { type Chunk, planChunk } from './chunks.ts';
import type { HeldClaims } from './claims.ts';
import { reportCommitted } from './committed-chunk.ts';
import type { ProcessorContext } from './context.ts';
import { inlineBytesOfAll, placeEntries } from './entry-placement.ts';
import { type EvaluatedRecord, foldState } from './evaluate.ts';
import { evaluateBatch, LEGACY_FENCE_ITEMS } from './evaluate-batch.ts';
import { decideKeys } from './key-decision.ts';
import type { KeyConflict } from './observer.ts';
import { type Counts, NO_COUNTS, type PartitionReport } from './report.ts';
import { entryFor, type StagedObject, writeObjects } from './staged-objects.ts';
import type { StagerAttempt, StagerParts } from './stager-parts.ts';
import { isStateRefusal, RelearningBound, refusedStateRecords } from './state-refusal.ts';

export type { StagerAttempt, StagerParts } from './stager-parts.ts';

export class PartitionStager {
  private readonly ctx: ProcessorContext;
  private readonly batch: PartitionBatch;
  private readonly topic: string;
  private readonly partition: number;
  private known: FenceState;
  /** The batch's records above the fence it started from, as evaluated (before any key decision). */
  private originals: readonly EvaluatedRecord[] = [];
  private report: Counts = { ...NO_COUNTS };
  /** The first record of the batch per idempotency key: it claims the key unless another record holds it. */
  private readonly firstWithKey = new Map<string, EvaluatedRecord>();
  /** Keys found held by records outside this batch (claims ahead, or a cancelled transaction). */
  private readonly external = new Map<string, ClaimHolder>();
  /** Offsets dead-lettered because DynamoDB refused their state (a text field added to, an item past 400 KB). */
  private readonly stateRefused = new Map<number, string>();
  private pending: EvaluatedRecord[] = [];
  /** Offsets dropped as duplicates by key (P4). */
  private dropped: ReadonlySet<number> = new Set();
  /** Offsets dead-lettered as key conflicts, reported once their transaction commits. */
  private conflicts: ReadonlyMap<number, KeyConflict> = new Map();
  /** Partition-scoped idempotency: the key window as of `known` (`batch-window.ts`). */
  private readonly windowScope: boolean;
  private readonly window: BatchWindow;
  private windowMismatches = 0;
  /** Condition refusals of the chunk that made no progress (see `MAX_CONDITION_RELEARNING`). */
  private readonly relearning = new RelearningBound();
  private readonly claimsAhead: boolean;
  /** Claims ahead still to write: once per batch, before its first chunk is planned. */
  private claimsPending = false;
  /** The claims ahead have been written: a record that comes to hold its key later claims it in the transaction. */
  private claimsWritten = false;
  /** Offsets of the batch another invocation staged meanwhile (their outcome is not known here). */
  private readonly foreign = new Set<number>();
  /** Claims held, and records whose claim goes into the transaction in `ahead` mode (expired takeovers). */
  private readonly holds: HeldClaims;
  private writes = 0;

  constructor(
    private readonly parts: StagerParts,
    private readonly attempt: StagerAttempt,
  ) {
    this.ctx = parts.ctx;
    this.batch = attempt.prints.batch;
    this.topic = this.batch.topic;
    this.partition = this.batch.partition;
    this.known = attempt.start;
    this.windowScope = this.ctx.settings.idempotencyScope === 'partition';
    this.window = new BatchWindow(parts.windows, this.ctx.clock, this.topic, this.partition);
    this.claimsAhead = !this.windowScope && this.ctx.settings.claimWrite === 'ahead';
    this.holds = { held: attempt.held, takeovers: new Set() };
  }

  /** Stages every pending record, chunk by chunk; the partition's report once the last chunk committed. */
  async run(): Promise<PartitionReport> {
    await this.begin();
    if (this.claimsPending) await this.claimAhead();
    while (this.pending.length > 0) {
      const chunk = this.planNext();
      const context = { topic: this.topic, partition: this.partition, chunk: this.report.chunks };
      await this.ctx.step('before-stage-write', context);
      const objects = await this.writeChunk(chunk);
      await this.ctx.step('after-stage-write', context);
      if (!(await this.commit(chunk, objects))) continue;
      await this.ctx.step('after-transaction', context);
    }
    const { topic, partition, batch } = this;
    return {
      topic,
      partition,
      received: batch.records.length,
      stagedOffset: this.known.stagedOffset,
      ...this.report,
    };
  }

  /** Evaluates the records above the fence and decides their keys from what is known before any write. */
  private async begin(): Promise<void> {
    const { ctx, batch, topic, partition } = this;
    const evaluated = evaluateBatch(
      ctx.transform,
      ctx.settings,
      batch,
      this.parts.replay.endOf(topic, partition),
    );
    this.originals = evaluated.filter((record) => record.offset > this.known.stagedOffset);
    this.report = { ...NO_COUNTS, duplicatesByOffset: batch.records.length - this.originals.length };
    for (const record of this.originals) {
      if (record.idempotencyKey !== undefined && !this.firstWithKey.has(record.idempotencyKey)) {
        this.firstWithKey.set(record.idempotencyKey, record);
      }
    }
    await this.loadWindow();
    if (!this.windowScope && this.firstWithKey.size > 0) {
      for (const holder of await this.parts.replay.liveHolders(topic, [...this.firstWithKey.keys()])) {
        this.external.set(holder.idempotencyKey, holder);
      }
    }
    this.decide();
    this.claimsPending =
      this.claimsAhead && this.pending.some((record) => record.idempotencyKey !== undefined);
  }

  /** Decides every pending record's key from what is known (`key-decision.ts`); re-run whenever that grows. */
  private decide(): void {
    const decision = decideKeys({
      topic: this.topic,
      partition: this.partition,
      originals: this.originals,
      stagedOffset: this.known.stagedOffset,
      external: this.external,
      stateRefused: this.stateRefused,
      unknownOutcome: this.foreign,
    });
    this.pending = decision.pending;
    this.dropped = decision.dropped;
    this.conflicts = decision.conflicts;
    if (this.claimsAhead && this.claimsWritten) this.claimNewHolders();
  }

  /**
   * After the claims ahead, a record can come to hold its key without a claim of its own: the heir of a record
   * refused its state, or the next record with the key when the first one was staged by another invocation
   * (output or a dead letter: not known here). Its claim goes into the fenced transaction, on condition that no
   * other record holds the key; if one does, the transaction says who and the record is judged against it.
   */
  private claimNewHolders(): void {
    const { held, takeovers } = this.holds;
    for (const record of this.pending) {
      if (record.idempotencyKey === undefined || this.dropped.has(record.offset)) continue;
      if (!held.has(record.offset)) takeovers.add(record.offset);
    }
  }

  /** The window's holders of the batch's keys become `external`, as claims found taken do in global scope. */
  private async loadWindow(): Promise<void> {
    if (!this.windowScope || this.firstWithKey.size === 0) return;
    await this.window.loadHolders(this.known, this.firstWithKey.keys(), this.external);
  }

  private setFence(fence: FenceState): void {
    this.known = fence;
    this.parts.fences.remember(this.topic, this.partition, fence);
  }

  /** After a re-read: what another invocation staged meanwhile is dropped (P2). */
  private async reread(): Promise<void> {
    const fenceBefore = this.known.stagedOffset;
    this.setFence(await this.parts.judge.moved(this.attempt.prints, this.known, this.attempt.startedAt));
    for (const record of this.originals) {
      const stagedElsewhere = record.offset > fenceBefore && record.offset <= this.known.stagedOffset;
      if (stagedElsewhere) this.foreign.add(record.offset);
    }
    await this.loadWindow();
    const before = this.pending.length;
    this.decide();
    this.report.duplicatesByOffset += before - this.pending.length;
  }

  /** Holders found for taken keys: decided again with them. */
  private resolveTaken(holders: readonly ClaimHolder[]): void {
    for (const holder of holders) this.external.set(holder.idempotencyKey, holder);
    this.decide();
  }

  /** Records whose claim goes into the transaction: all keyed ones, or (ahead) expired takeovers. */
  private readonly claimInTransaction = (record: EvaluatedRecord): boolean =>
    !this.windowScope &&
    record.idempotencyKey !== undefined &&
    (!this.claimsAhead || this.holds.takeovers.has(record.offset));

  /** A claim item in the transaction: a claim put, or the release of a claim held by a record refused its state. */
  private readonly claimItemInTransaction = (record: EvaluatedRecord): boolean =>
    this.claimInTransaction(record) ||
    (this.stateRefused.has(record.offset) && this.holds.held.has(record.offset));

  /**
   * The next chunk. A transaction that creates the sharded fence also writes the legacy fence key (fences.ts): one
   * item less. A redrive lane writes a dead-letter row for every record it resolves without an output row, which
   * the planner does not count: one item less for that entry instead. Either way a record keeps the budget
   * evaluation gave it.
   */
  private planNext(): Chunk {
    const { known, topic } = this;
    const settlesLegacy = (known.stagedOffset === NO_FENCE && isRootLane(topic)) || known.legacy === true;
    const redriveLane = parseLane(topic)?.round !== undefined;
    return planChunk(
      this.pending,
      this.dropped,
      this.ctx.settings.maxTransactionItems - (settlesLegacy || redriveLane ? LEGACY_FENCE_ITEMS : 0),
      this.claimItemInTransaction,
      this.windowScope,
    );
  }

  private writeChunk(chunk: Chunk): Promise<StagedObject[]> {
    const { settings } = this.ctx;
    const { attemptId } = this.attempt;
    return writeObjects(this.ctx, chunk, this.topic, this.partition, (range) =>
      stagedObjectKey(settings.pipelineId, range, `${attemptId}.${this.writes++}`, settings.gzip),
    );
  }

  /**
   * Claims ahead, once, before the first chunk is planned. They are judged against the fence as it is now, not as
   * this container cached it: records another invocation staged meanwhile must not claim anything. Planning after
   * them means no staged object is written for a record whose key turns out to be held elsewhere (it would be an
   * orphan: a PUT for nothing).
   */
  private async claimAhead(): Promise<void> {
    this.claimsPending = false;
    await this.reread();
    const { topic, partition } = this;
    const taken = await this.parts.claims.claimAhead(
      this.pending,
      this.dropped,
      this.holds,
      topic,
      partition,
      this.attempt.attemptId,
    );
    this.claimsWritten = true;
    this.resolveTaken(taken);
  }

  /** The chunk's staging transaction; true once committed, false when the chunk must be planned again. */
  private async commit(chunk: Chunk, objects: readonly StagedObject[]): Promise<boolean> {
    const { ctx, topic, partition, known } = this;
    const { attemptId } = this.attempt;
    const identity = identityFor(this.attempt.prints, this.known, chunk);
    const from = known.stagedOffset;
    const keys = chunk.kept.flatMap((record) =>
      record.idempotencyKey === undefined ? [] : [{ key: record.idempotencyKey, digest: record.digest }],
    );
    const keyWindow: BucketWrite[] = this.window.writesFor(keys);
    const handovers = this.parts.claims.handoversOf(chunk.kept, this.stateRefused, this.holds.held);
    const entries = objects.map((object) => entryFor(ctx, chunk, object, topic, partition, attemptId));
    const added = inlineBytesOfAll(entries, known.templates);
    const fits = (fence: FenceState) =>
      entries.length > 0 && (fence.inlineBytes ?? 0) + added <= INLINE_BYTES_BUDGET;
    // One gate lets entries inline and the identity be packed: both wait for this release's readers.
    const compact = await this.parts.inlineGate.allows(ctx.clock.now());
    const target = {
      ctx,
      topic,
      partition,
      known: this.known,
      remember: (fence: FenceState) => this.setFence(fence),
    };
    const { inline, flush } = await placeEntries(target, entries, fits, compact);
    // The fence as known now: placing the entries may have read it again (the same offset, a fresher copy).
    const current = this.known;
    let staged: StagingTransaction;
    let written: StagedFence;
    try {
      staged = {
        pipeline: ctx.settings.pipelineId,
        topic,
        partition,
        expectedOffset: from,
        // A fence read from the legacy key moves to its shard in this transaction (fences.ts).
        ...(known.legacy ? { fromLegacy: true } : {}),
        newOffset: chunk.lastOffset,
        entries,
        ...(inline ? { inline: true } : {}),
        ...(flush === undefined ? {} : { flush }),
        ...(current.entryItemsUpTo === undefined ? {} : { entryItemsUpTo: current.entryItemsUpTo }),
        ...(current.templates === undefined ? {} : { templates: current.templates }),
        claims: this.parts.claims.claimsFor(chunk.kept.filter(this.claimInTransaction), topic, partition),
        ...(handovers.length > 0 ? { handovers } : {}),
        state: foldState(chunk.kept.flatMap((record) => record.state)),
        ...(keyWindow.length > 0 ? { keyWindow } : {}),
        identity,
        ...(compact ? { compact: true } : {}),
        now: ctx.clock.now(),
        attemptId,
      };
      written = await ctx.ledger.stage(staged);
    } catch (error) {
      await this.refused(error, chunk);
      return false;
    }
    reportCommitted(ctx, this.report, { chunk, from, topic, partition, conflicts: this.conflicts });
    this.relearning.committed();
    this.setFence({
      stagedOffset: chunk.lastOffset,
      identity,
      updatedAt: ctx.clock.now(),
      ...fenceEntriesAfter(current, staged, written, added),
    });
    if (this.windowScope) this.window.committed(chunk, from, keyWindow);
    // Released or handed over by the transaction: no longer this attempt's to release if the batch fails.
    for (const record of chunk.kept)
      if (this.stateRefused.has(record.offset)) this.holds.held.delete(record.offset);
    this.decide();
    return true;
  }

  /** What a refused staging transaction teaches; throws what it cannot resolve (the batch fails). */
  private async refused(error: unknown, chunk: Chunk): Promise<void> {
    if (error instanceof FenceMovedError) return this.reread();
    if (error instanceof KeyWindowChangedError) {
      // The window is not what this container's copy says although the fence is: read both again, a few times at
      // most (a writer outside the protocol would otherwise keep this loop going).
      this.parts.windows.forget(this.topic, this.partition);
      if (++this.windowMismatches > 3) throw error;
      return this.reread();
    }
    if (error instanceof ClaimHandoverLostError) {
      // Not the dead-lettered records' claims any more: nothing of theirs to release; whoever holds them now holds
      // their keys.
      const lost = new Set(error.idempotencyKeys);
      for (const [offset, claim] of this.holds.held) {
        if (this.stateRefused.has(offset) && lost.has(claim.idempotencyKey)) this.holds.held.delete(offset);
      }
      return this.resolveTaken(error.holders);
    }
    if (error instanceof ClaimsTakenError) {
      const orphaned = await this.parts.claims.releaseOrphans(error.holders, this.topic, this.partition);
      return this.resolveTaken(error.holders.filter((holder) => !orphaned.has(holder.idempotencyKey)));
    }
    if (!isStateRefusal(error)) throw error;
    // Throws the refusal when it finds nothing new to dead-letter (see refusedStateRecords).
    const read = (stateKey: string) => this.ctx.ledger.readState(this.ctx.settings.pipelineId, stateKey);
    const found = await refusedStateRecords(error, chunk.kept, read, this.stateRefused);
    this.relearning.judge(error, found, this.stateRefused);
    for (const [offset, reason] of found) this.stateRefused.set(offset, reason);
    this.decide();
    if (this.claimsAhead) {
      const refused = chunk.kept.filter((record) => this.stateRefused.has(record.offset));
      this.parts.claims.handOverRefusedClaims(this.pending, refused, this.holds);
    }
  }
}
