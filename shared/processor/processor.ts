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
 * Poison records become dead-letter rows staged through the same path (P6). Transient AWS errors escape, so the
 * event source mapping retries the whole batch; the fence makes the retry harmless (P5). In steady state with
 * offset-only dedupe a batch costs two AWS calls: the PutObject and one transaction — the fence is read once
 * per warm container and re-read only when its condition fails. With idempotency keys, claims are written ahead
 * (DESIGN.md's refinement of P1; setting `claimWrite`), so the transaction stays small; `in-transaction` puts
 * them in the staging transactions instead (one 100-item transaction per ~95 keyed records).
 *
 * Delivery guarantees (as Flink's DeliveryGuarantee): `exactly-once` as above; `at-least-once` writes rows
 * straight to final objects and applies keyed state without fence or dedupe (duplicates after retries);
 * `none` does the same and swallows every error so the batch is acknowledged anyway (losses under faults).
 */
import { randomUUID } from 'node:crypto';
import type { AwsClients } from '../aws/clients.ts';
import type { Clock } from '../clock.ts';
import { systemClock } from '../clock.ts';
import type { Settings } from '../config/settings.ts';
import { parseMskEvent, partitionBatches } from '../kafka/event.ts';
import type { PartitionBatch } from '../kafka/record.ts';
import { partitionId, STREAMS, type Stream } from '../ledger/layout.ts';
import type { ClaimItem, StagedFileEntry } from '../ledger/records.ts';
import { ClaimsTakenError, FenceMovedError, NO_FENCE, StagingLedger } from '../ledger/staging-ledger.ts';
import { directFinalObjectKey, type ObjectRange, stagedObjectKey } from '../sink/layout.ts';
import { type EncodedObject, encodeNdjson } from '../sink/ndjson.ts';
import { StagedWriter } from '../sink/staged-writer.ts';
import { transformNamed } from '../transforms/registry.ts';
import type { Transform } from '../transforms/types.ts';
import { type Chunk, planChunk } from './chunks.ts';
import { type EvaluatedRecord, evaluateRecord, foldState } from './evaluate.ts';

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

export interface ProcessorDeps {
  readonly settings: Settings;
  readonly clients: AwsClients;
  /** Defaults to the transform named by `settings.transform`. */
  readonly transform?: Transform;
  readonly clock?: Clock;
  /** Unique per invocation; defaults to a random UUID. */
  readonly newAttemptId?: () => string;
  readonly hooks?: ProcessorHooks;
}

export interface PartitionReport {
  readonly topic: string;
  readonly partition: number;
  readonly received: number;
  /** Records at or below the fence: acknowledged without effects (redelivery). */
  readonly duplicatesByOffset: number;
  /** Records whose idempotency key was already claimed: acknowledged without effects. */
  readonly duplicatesByKey: number;
  /** Output rows written. */
  readonly stagedRows: number;
  readonly deadLettered: number;
  /** Transactions committed. */
  readonly chunks: number;
  /** The partition's fence after this batch (-1 under at-least-once and none). */
  readonly stagedOffset: number;
}

export interface BatchReport {
  readonly partitions: readonly PartitionReport[];
}

interface StagedObject {
  readonly stream: Stream;
  readonly key: string;
  readonly encoded: EncodedObject;
}

export class Processor {
  private readonly ledger: StagingLedger;
  private readonly writer: StagedWriter;
  private readonly transform: Transform;
  private readonly clock: Clock;
  private readonly newAttemptId: () => string;
  /** Fences as last read or written by this container: re-read only when a condition fails. */
  private readonly fences = new Map<string, number>();

  constructor(private readonly deps: ProcessorDeps) {
    this.ledger = new StagingLedger(deps.clients.dynamodb, deps.settings.ledgerTable);
    this.writer = new StagedWriter(deps.clients.s3, deps.settings.bucket);
    this.transform = deps.transform ?? transformNamed(deps.settings.transform);
    this.clock = deps.clock ?? systemClock;
    this.newAttemptId = deps.newAttemptId ?? (() => randomUUID());
  }

  /** Validates the event, then stages every partition; throws to make the mapping retry the batch. */
  async processEvent(input: unknown): Promise<BatchReport> {
    const batches = partitionBatches(parseMskEvent(input));
    const attemptId = this.newAttemptId();
    const work =
      this.deps.settings.deliveryGuarantee === 'exactly-once'
        ? (batch: PartitionBatch) => this.stagePartition(batch, attemptId)
        : (batch: PartitionBatch) => this.writeDirect(batch, attemptId);
    try {
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

  private async step(step: ProcessorStep, context: StepContext): Promise<void> {
    await this.deps.hooks?.onStep?.(step, context);
  }

  private async fenceOf(topic: string, partition: number): Promise<number> {
    const id = partitionId(topic, partition);
    const cached = this.fences.get(id);
    if (cached !== undefined) return cached;
    return this.refreshFence(topic, partition);
  }

  private async refreshFence(topic: string, partition: number): Promise<number> {
    const fence = await this.ledger.readFence(this.deps.settings.pipelineId, topic, partition);
    this.fences.set(partitionId(topic, partition), fence);
    return fence;
  }

  private evaluate(batch: PartitionBatch): EvaluatedRecord[] {
    return batch.records.map((record) =>
      evaluateRecord(this.transform, this.deps.settings.idempotencyKey, record),
    );
  }

  /** EXACTLY_ONCE: the staging protocol of the module doc. */
  private async stagePartition(batch: PartitionBatch, attemptId: string): Promise<PartitionReport> {
    const { topic, partition } = batch;
    let fence = await this.fenceOf(topic, partition);
    let pending = this.evaluate(batch).filter((record) => record.offset > fence);
    const dropped = duplicateKeysWithin(pending);
    const claimsAhead = this.deps.settings.claimWrite === 'ahead';
    // Claims go ahead only once the first staged write succeeded: a missing bucket writes nothing at all.
    let claimed = !claimsAhead || !pending.some((record) => record.idempotencyKey !== undefined);
    /** Records whose claim goes into the transaction: all keyed ones, or (ahead) expired takeovers. */
    const takeovers = new Set<number>();
    const claimInTransaction = (record: EvaluatedRecord) =>
      record.idempotencyKey !== undefined && (!claimsAhead || takeovers.has(record.offset));
    const report = {
      duplicatesByOffset: batch.records.length - pending.length,
      duplicatesByKey: 0,
      stagedRows: 0,
      deadLettered: 0,
      chunks: 0,
    };
    let writes = 0;
    while (pending.length > 0) {
      const chunk = planChunk(pending, dropped, this.deps.settings.maxTransactionItems, claimInTransaction);
      const context = { topic, partition, chunk: report.chunks };
      await this.step('before-stage-write', context);
      const objects = await this.writeObjects(chunk, topic, partition, (range) =>
        stagedObjectKey(
          this.deps.settings.pipelineId,
          range,
          `${attemptId}.${writes++}`,
          this.deps.settings.gzip,
        ),
      );
      await this.step('after-stage-write', context);
      if (!claimed) {
        claimed = true;
        // Claims ahead are judged against the fence as it is now, not as this container cached it: records
        // another invocation staged meanwhile must not claim anything.
        fence = await this.refreshFence(topic, partition);
        const before = pending.length;
        pending = pending.filter((record) => record.offset > fence);
        report.duplicatesByOffset += before - pending.length;
        await this.claimAhead(pending, dropped, takeovers, topic, partition);
        // Records dropped or claims moved into the transaction: re-plan (the objects just written become orphans).
        const replan =
          pending.length !== before ||
          chunk.kept.some((record) => dropped.has(record.offset) || takeovers.has(record.offset));
        if (replan) continue;
      }
      try {
        await this.ledger.stage({
          pipeline: this.deps.settings.pipelineId,
          topic,
          partition,
          expectedOffset: fence,
          newOffset: chunk.lastOffset,
          entries: objects.map((object) => this.entryFor(chunk, object, topic, partition, attemptId)),
          claims: this.claimsFor(chunk.kept.filter(claimInTransaction), topic, partition),
          state: foldState(chunk.kept.flatMap((record) => record.state)),
          now: this.clock.now(),
        });
      } catch (error) {
        if (error instanceof FenceMovedError) {
          fence = await this.refreshFence(topic, partition);
          const before = pending.length;
          pending = pending.filter((record) => record.offset > fence);
          report.duplicatesByOffset += before - pending.length;
          continue;
        }
        if (error instanceof ClaimsTakenError) {
          const taken = new Set(error.idempotencyKeys);
          for (const record of chunk.kept)
            if (record.idempotencyKey && taken.has(record.idempotencyKey)) dropped.add(record.offset);
          continue;
        }
        throw error;
      }
      fence = chunk.lastOffset;
      this.fences.set(partitionId(topic, partition), fence);
      report.chunks += 1;
      report.duplicatesByKey += chunk.records.length - chunk.kept.length;
      report.stagedRows += chunk.kept.reduce((n, record) => n + record.output.length, 0);
      report.deadLettered += chunk.kept.filter((record) => record.deadLetter).length;
      pending = pending.slice(chunk.records.length);
      await this.step('after-transaction', context);
    }
    return { topic, partition, received: batch.records.length, stagedOffset: fence, ...report };
  }

  /** Writes one object per stream that has rows in the chunk, in parallel. */
  private async writeObjects(
    chunk: Chunk,
    topic: string,
    partition: number,
    keyFor: (range: ObjectRange) => string,
  ): Promise<StagedObject[]> {
    const rowsByStream: Record<Stream, readonly unknown[]> = {
      output: chunk.kept.flatMap((record) => record.output),
      deadletter: chunk.kept.flatMap((record) => (record.deadLetter ? [record.deadLetter] : [])),
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
   * Claims the keys of the records still pending, before any staging transaction; records whose key another
   * record holds join `dropped` (duplicates by key). Safe to repeat: a retry finds its own claims.
   */
  private async claimAhead(
    pending: readonly EvaluatedRecord[],
    dropped: Set<number>,
    takeovers: Set<number>,
    topic: string,
    partition: number,
  ): Promise<void> {
    const claims = this.claimsFor(
      pending.filter((record) => !dropped.has(record.offset)),
      topic,
      partition,
    );
    if (claims.length === 0) return;
    const found = await this.ledger.claimAhead(this.deps.settings.pipelineId, claims, this.clock.now());
    const taken = new Set(found.taken);
    const expired = new Set(found.expired);
    for (const record of pending) {
      if (record.idempotencyKey === undefined) continue;
      if (taken.has(record.idempotencyKey)) dropped.add(record.offset);
      if (expired.has(record.idempotencyKey)) takeovers.add(record.offset);
    }
    await this.step('after-claims', { topic, partition, chunk: 0 });
  }

  private claimsFor(records: readonly EvaluatedRecord[], topic: string, partition: number): ClaimItem[] {
    const expiresAt = Math.floor(this.clock.now() / 1000) + this.deps.settings.idempotencyTtlSeconds;
    return records.flatMap((record) =>
      record.idempotencyKey === undefined
        ? []
        : [
            {
              idempotencyKey: record.idempotencyKey,
              claimant: `${topic}#${partition}#${record.offset}`,
              expiresAt,
            },
          ],
    );
  }

  /** AT_LEAST_ONCE and NONE: rows straight to final objects, keyed state applied without fence or dedupe. */
  private async writeDirect(batch: PartitionBatch, attemptId: string): Promise<PartitionReport> {
    const { topic, partition } = batch;
    const records = this.evaluate(batch);
    const chunk: Chunk = {
      records,
      kept: records,
      firstOffset: records[0]!.offset,
      lastOffset: records[records.length - 1]!.offset,
    };
    const context = { topic, partition, chunk: 0 };
    const { pipelineId, gzip } = this.deps.settings;
    await this.step('before-stage-write', context);
    await this.writeObjects(chunk, topic, partition, (range) =>
      directFinalObjectKey(pipelineId, range, attemptId, gzip),
    );
    await this.step('after-stage-write', context);
    const chunks = await this.ledger.applyState(
      pipelineId,
      foldState(records.flatMap((record) => record.state)),
    );
    await this.step('after-transaction', context);
    return {
      topic,
      partition,
      received: records.length,
      duplicatesByOffset: 0,
      duplicatesByKey: 0,
      stagedRows: records.reduce((n, record) => n + record.output.length, 0),
      deadLettered: records.filter((record) => record.deadLetter).length,
      chunks,
      stagedOffset: NO_FENCE,
    };
  }
}

/** Offsets of records whose idempotency key appeared earlier in the same batch. */
function duplicateKeysWithin(records: readonly EvaluatedRecord[]): Set<number> {
  const seen = new Set<string>();
  const dropped = new Set<number>();
  for (const record of records) {
    if (record.idempotencyKey === undefined) continue;
    if (seen.has(record.idempotencyKey)) dropped.add(record.offset);
    seen.add(record.idempotencyKey);
  }
  return dropped;
}

export function createProcessor(deps: ProcessorDeps): Processor {
  return new Processor(deps);
}

export { NO_FENCE };
