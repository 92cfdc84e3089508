/**
 * The ledger's DynamoDB layout, defined once: the local parts create the table from {@link LEDGER_TABLE_LAYOUT}
 * and the CDK stack declares it from the same object.
 *
 * One table, generic keys `pk` (S) and `sk` (S). Every key starts with the pipeline id, so pipelines (and test
 * files) can share a table. Kafka topic names use only `[a-zA-Z0-9._-]`, so `#` is a safe separator.
 *
 * | item              | pk                                      | sk                                  |
 * |-------------------|-----------------------------------------|-------------------------------------|
 * | partition fence   | `<pl>#FENCE`                            | `<topic>#<partition>`               |
 * | staged-file entry | `<pl>#STAGED#<topic>#<partition>`       | `<lastOffset, 20 digits>#<stream>`  |
 * | idempotency claim | `<pl>#CLAIM#<key>`                      | `CLAIM`                             |
 * | keyed state       | `<pl>#STATE#<stateKey>`                 | `STATE`                             |
 * | checkpoint head   | `<pl>#CHECKPOINT`                       | `HEAD`                              |
 * | checkpoint N      | `<pl>#CHECKPOINT`                       | `<N, 12 digits>`                    |
 *
 * All fences of a pipeline share one partition key, so the coordinator reads every partition's staged offset
 * with one strongly consistent Query. Staged entries are spread per source partition; within one, the sort key
 * orders them by offset, so "covered by checkpoint N" (previous cut < lastOffset <= cut) is one key range.
 */

export const LEDGER_TABLE_LAYOUT = {
  partitionKey: 'pk',
  sortKey: 'sk',
  /** Epoch seconds; DynamoDB TTL deletes expired idempotency claims. */
  timeToLiveAttribute: 'expiresAt',
  billingMode: 'PAY_PER_REQUEST',
} as const;

/** The two output streams of a pipeline, each staged and promoted the same way. */
export const STREAMS = ['output', 'deadletter'] as const;
export type Stream = (typeof STREAMS)[number];

export interface ItemKey {
  readonly pk: string;
  readonly sk: string;
}

const OFFSET_DIGITS = 20;
const CHECKPOINT_DIGITS = 12;

export function padOffset(offset: number): string {
  return String(offset).padStart(OFFSET_DIGITS, '0');
}

export function padCheckpointId(id: number): string {
  return String(id).padStart(CHECKPOINT_DIGITS, '0');
}

export const keys = {
  fencePk: (pipeline: string): string => `${pipeline}#FENCE`,
  fence: (pipeline: string, topic: string, partition: number): ItemKey => ({
    pk: `${pipeline}#FENCE`,
    sk: `${topic}#${partition}`,
  }),
  stagedPk: (pipeline: string, topic: string, partition: number): string =>
    `${pipeline}#STAGED#${topic}#${partition}`,
  staged: (
    pipeline: string,
    topic: string,
    partition: number,
    lastOffset: number,
    stream: Stream,
  ): ItemKey => ({
    pk: `${pipeline}#STAGED#${topic}#${partition}`,
    sk: `${padOffset(lastOffset)}#${stream}`,
  }),
  /** Sort-key bound: every staged entry with lastOffset <= offset sorts at or below this. */
  stagedUpTo: (offset: number): string => `${padOffset(offset)}#~`,
  claim: (pipeline: string, idempotencyKey: string): ItemKey => ({
    pk: `${pipeline}#CLAIM#${idempotencyKey}`,
    sk: 'CLAIM',
  }),
  statePrefix: (pipeline: string): string => `${pipeline}#STATE#`,
  state: (pipeline: string, stateKey: string): ItemKey => ({
    pk: `${pipeline}#STATE#${stateKey}`,
    sk: 'STATE',
  }),
  checkpointPk: (pipeline: string): string => `${pipeline}#CHECKPOINT`,
  checkpointHead: (pipeline: string): ItemKey => ({ pk: `${pipeline}#CHECKPOINT`, sk: 'HEAD' }),
  checkpoint: (pipeline: string, id: number): ItemKey => ({
    pk: `${pipeline}#CHECKPOINT`,
    sk: padCheckpointId(id),
  }),
} as const;

/** `<topic>#<partition>` — how partitions are named in cuts and fences. */
export function partitionId(topic: string, partition: number): string {
  return `${topic}#${partition}`;
}

export function parsePartitionId(id: string): { topic: string; partition: number } {
  const at = id.lastIndexOf('#');
  return { topic: id.slice(0, at), partition: Number(id.slice(at + 1)) };
}
