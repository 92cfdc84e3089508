/**
 * The direct path of `at-least-once` and `none`: keyed state applied without fence or dedupe, then rows straight
 * to final objects (duplicates after retries). The state goes first, in planned chunks (`direct-state.ts`), so a
 * record DynamoDB refuses for its state is written as a dead-letter row rather than an output row, and a refused
 * batch writes no rows before it fails.
 */
import type { PartitionBatch } from '../kafka/record.ts';
import { NO_FENCE } from '../ledger/staging-ledger.ts';
import { directFinalObjectKey } from '../sink/layout.ts';
import type { Chunk } from './chunks.ts';
import type { ProcessorContext } from './context.ts';
import { applyDirectState } from './direct-state.ts';
import type { EvaluatedRecord } from './evaluate.ts';
import type { PartitionReport } from './report.ts';
import { writeObjects } from './staged-objects.ts';

/** Writes a partition batch's effects directly; `evaluated` are its records, evaluated once. */
export async function writeDirect(
  ctx: ProcessorContext,
  batch: PartitionBatch,
  evaluated: readonly EvaluatedRecord[],
  attemptId: string,
): Promise<PartitionReport> {
  const { topic, partition } = batch;
  const context = { topic, partition, chunk: 0 };
  const { pipelineId, gzip, maxTransactionItems } = ctx.settings;
  await ctx.step('before-stage-write', context);
  const { records, transactions } = await applyDirectState(
    { ledger: ctx.ledger, pipeline: pipelineId, topic, partition, maxItems: maxTransactionItems },
    evaluated,
  );
  const chunk: Chunk = {
    records,
    kept: records,
    firstOffset: records[0]!.offset,
    lastOffset: records[records.length - 1]!.offset,
  };
  await writeObjects(ctx, chunk, topic, partition, (range) =>
    directFinalObjectKey(pipelineId, range, attemptId, gzip),
  );
  await ctx.step('after-stage-write', context);
  await ctx.step('after-transaction', context);
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
