/**
 * The S3 side of a chunk (P3): one NDJSON object per stream with rows, under a key unique to the attempt, and the
 * staged-file entry the staging transaction records for each. At-least-once and none write final objects the
 * same way, without folders.
 */
import type { Lineage } from '../kafka/record.ts';
import { parseLane } from '../ledger/epochs.ts';
import { STREAMS, type Stream } from '../ledger/layout.ts';
import type { StagedFileEntry } from '../ledger/records.ts';
import type { ObjectRange } from '../sink/layout.ts';
import { type EncodedObject, encodeNdjson } from '../sink/ndjson.ts';
import { withStagedTime } from '../sink/record-time.ts';
import type { Chunk } from './chunks.ts';
import type { ProcessorContext } from './context.ts';
import type { EvaluatedRecord } from './evaluate.ts';

export interface StagedObject {
  readonly stream: Stream;
  readonly key: string;
  readonly encoded: EncodedObject;
}

/** Where the chunk's objects go: the object key of a stream's range. */
export type ObjectKeyOf = (range: ObjectRange) => string;

/**
 * The dead-letter row of a record staged in a redrive lane (`shared/redrive/`): its dead letter, or, for a record
 * the redrive resolved without an output row (dropped as a duplicate of a key the same payload holds, or turned
 * into keyed state only), a row marked `resolved` saying so. The committed log then says for every redriven record
 * that the redrive handled it, so no later run sends it again.
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

/** Writes one object per stream that has rows in the chunk, in parallel. */
export async function writeObjects(
  ctx: ProcessorContext,
  chunk: Chunk,
  topic: string,
  partition: number,
  keyFor: ObjectKeyOf,
): Promise<StagedObject[]> {
  // With time folders, each row is staged with its record's Kafka timestamp: the coordinator files rows by it
  // and removes it at promote (record-time.ts). Without, the staged rows are exactly the final rows.
  // At-least-once and none write final objects directly, without folders: nothing to stage.
  const { timePartitioning, deliveryGuarantee, gzip } = ctx.settings;
  const stamp =
    timePartitioning === 'none' || deliveryGuarantee !== 'exactly-once'
      ? <R extends { readonly source: object }>(row: R) => row
      : <R extends { readonly source: object }>(row: R, timestamp: number) => withStagedTime(row, timestamp);
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
    const range = { stream, topic, partition, firstOffset: chunk.firstOffset, lastOffset: chunk.lastOffset };
    return { stream, key: keyFor(range), encoded: encodeNdjson(rowsByStream[stream], gzip) };
  });
  await Promise.all(objects.map((object) => ctx.writer.put(object.key, object.encoded)));
  return objects;
}

/** The staged-file entry of an object the chunk wrote. */
export function entryFor(
  ctx: ProcessorContext,
  chunk: Chunk,
  object: StagedObject,
  topic: string,
  partition: number,
  attemptId: string,
): StagedFileEntry {
  return {
    pipeline: ctx.settings.pipelineId,
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
    gzip: ctx.settings.gzip,
    attemptId,
    stagedAt: ctx.clock.now(),
  };
}
