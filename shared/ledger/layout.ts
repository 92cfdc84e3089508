/**
 * The ledger's DynamoDB layout, defined once: the local parts create the table from {@link LEDGER_TABLE_LAYOUT}
 * and the CDK stack declares it from the same object.
 *
 * One table, generic keys `pk` (S) and `sk` (S). Every key starts with the pipeline id, so pipelines (and test
 * files) can share a table. Kafka topic names use only `[a-zA-Z0-9._-]`, so `#` is a safe separator.
 *
 * | item              | pk                                      | sk                                  |
 * |-------------------|-----------------------------------------|-------------------------------------|
 * | partition fence   | `<pl>#FENCE#<shard, 2 digits>`          | `<topic>#<partition>`               |
 * | staged-file entry | `<pl>#STAGED#<topic>#<partition>`       | `<lastOffset, 20 digits>#<stream>`  |
 * | (or inline)       | in the fence item, attribute `e:<lastOffset>:<stream>` (`inline-entries.ts`)  |
 * | idempotency claim | `<pl>#CLAIM#<key>`                      | `CLAIM` (generation G: `CLAIM#g<G>`) |
 * | replay plan       | `<pl>#REPLAY`                           | `G#<generation, 9 digits>`          |
 * | key-window bucket | `<pl>#KEYS#<topic>#<partition>`         | `W#<seq, 12 digits>`                |
 * | keyed state       | `<pl>#STATE#<stateKey>`                 | `STATE`                             |
 * | checkpoint head   | `<pl>#CHECKPOINT`                       | `HEAD`                              |
 * | checkpoint N      | `<pl>#CHECKPOINT`                       | `<N, 12 digits>`                    |
 * | orphan sweep mark | `<pl>#CHECKPOINT`                       | `SWEEP`                             |
 * | cleaned-up mark   | `<pl>#CHECKPOINT`                       | `CLEANED`                           |
 * | pending cut       | `<pl>#CHECKPOINT`                       | `PENDINGCUT#<cutId>`                |
 * | table snapshot N  | `<pl>#CHECKPOINT`                       | `TABLESNAP#<N, 12 digits>`          |
 * | published mark    | `<pl>#CHECKPOINT`                       | `PUBLISHED`                         |
 * | cut page          | `<pl>#CHECKPOINT#CUT#<cutId>`           | `C#<shard, 2>#<page, 6>` / `U#<page, 6>` |
 *
 * Who writes what (the stack's IAM scopes each role to these leading keys; see `infra/`):
 * - the processor: `<pl>#FENCE#*` (and the legacy `<pl>#FENCE`, see `fences.ts`), `<pl>#STAGED#*`, `<pl>#CLAIM#*`, `<pl>#KEYS#*` (partition-scoped idempotency,
 *   `key-window.ts`), `<pl>#STATE#*` — and nothing else;
 * - the coordinator: every `<pl>#CHECKPOINT…` item (head, records, sweep mark, cut pages), and deletes of
 *   staged entries it promoted (an inline one by removing its attribute from the fence item). Nothing the commit path trusts lies under a processor key: a processor that
 *   is compromised can stage garbage (prepare refuses it) but cannot move the head, forge a cut or a vote.
 *
 * A checkpoint's cut is not in its record: it is written as cut pages (`cut-pages.ts`, each far under DynamoDB's
 * 400 KB at any number of partitions, L3) under a pk unique to the begin that wrote them (`cutId`).
 *
 * Fences are spread over 16 partition keys by (topic, partition) (`fences.ts`: one key for all would take more
 * writes a second than DynamoDB allows one key at 1,000 partitions), so the coordinator reads every partition's
 * staged offset with one strongly consistent Query per shard, in parallel. Staged entries are spread per source partition; within one, the sort key
 * orders them by offset, so "covered by checkpoint N" (previous cut < lastOffset <= cut) is one key range.
 */

import { fenceKeys } from './fences.ts';

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

/** Sort-key prefix of the table snapshot records under the checkpoint pk (above `HEAD`: never in its history). */
export const TABLE_SNAPSHOT_PREFIX = 'TABLESNAP#';

/** Sort-key prefix of the pending-cut notes under the checkpoint pk. */
export const PENDING_CUT_PREFIX = 'PENDINGCUT#';

export function padOffset(offset: number): string {
  return String(offset).padStart(OFFSET_DIGITS, '0');
}

export function padCheckpointId(id: number): string {
  return String(id).padStart(CHECKPOINT_DIGITS, '0');
}

export const keys = {
  fence: (pipeline: string, topic: string, partition: number): ItemKey =>
    fenceKeys.fence(pipeline, topic, partition),
  /** The key fences had before the shards (`fences.ts`). */
  legacyFence: (pipeline: string, topic: string, partition: number): ItemKey =>
    fenceKeys.legacyFence(pipeline, topic, partition),
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
  /**
   * An idempotency key's claim. Output generation G >= 1 (a replay, `shared/replay/`) claims its keys under the
   * same pk with sort key `CLAIM#g<G>`: a replayed range judges its keys afresh, apart from the live output's
   * claims, and no key text can reach another generation's item (the sort key is not the user's).
   */
  claim: (pipeline: string, idempotencyKey: string, generation = 0): ItemKey => ({
    pk: `${pipeline}#CLAIM#${idempotencyKey}`,
    sk: generation === 0 ? 'CLAIM' : `CLAIM#g${generation}`,
  }),
  /** The pk of every replay plan of a pipeline (`shared/replay/`): operators write it, processors never. */
  replayPk: (pipeline: string): string => `${pipeline}#REPLAY`,
  replayPlan: (pipeline: string, generation: number): ItemKey => ({
    pk: `${pipeline}#REPLAY`,
    sk: `G#${String(generation).padStart(9, '0')}`,
  }),
  keyWindowPk: (pipeline: string, topic: string, partition: number): string =>
    `${pipeline}#KEYS#${topic}#${partition}`,
  keyWindowBucket: (pipeline: string, topic: string, partition: number, seq: number): ItemKey => ({
    pk: `${pipeline}#KEYS#${topic}#${partition}`,
    sk: `W#${padCheckpointId(seq)}`,
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
  /** The orphan sweep's continuation mark (coordinator-owned). */
  sweepMark: (pipeline: string): ItemKey => ({ pk: `${pipeline}#CHECKPOINT`, sk: 'SWEEP' }),
  /** The last checkpoint whose cleanup, and every earlier one's, is known complete (coordinator-owned). */
  cleanedMark: (pipeline: string): ItemKey => ({ pk: `${pipeline}#CHECKPOINT`, sk: 'CLEANED' }),
  /** A cut whose pages a begin is writing (coordinator-owned): found again if that begin crashed before allocating. */
  pendingCut: (pipeline: string, cutId: string): ItemKey => ({
    pk: `${pipeline}#CHECKPOINT`,
    sk: `${PENDING_CUT_PREFIX}${cutId}`,
  }),
  /** The Iceberg snapshot checkpoint N became (coordinator-owned, `table-snapshots.ts`). */
  tableSnapshot: (pipeline: string, checkpointId: number): ItemKey => ({
    pk: `${pipeline}#CHECKPOINT`,
    sk: `${TABLE_SNAPSHOT_PREFIX}${padCheckpointId(checkpointId)}`,
  }),
  /** The last checkpoint published to the Iceberg table, every earlier one with it (coordinator-owned). */
  publishedMark: (pipeline: string): ItemKey => ({ pk: `${pipeline}#CHECKPOINT`, sk: 'PUBLISHED' }),
  cutPagesPk: (pipeline: string, cutId: string): string => `${pipeline}#CHECKPOINT#CUT#${cutId}`,
  /** A page of the partitions whose cut moved, dealt to `shard`. */
  changedCutPage: (pipeline: string, cutId: string, shard: number, page: number): ItemKey => ({
    pk: `${pipeline}#CHECKPOINT#CUT#${cutId}`,
    sk: `${CUT_PAGE_CHANGED}${String(shard).padStart(2, '0')}#${String(page).padStart(6, '0')}`,
  }),
  changedCutPagesOf: (shard: number): string => `${CUT_PAGE_CHANGED}${String(shard).padStart(2, '0')}#`,
  /** A page of the partitions whose cut did not move (carried to the next checkpoint). */
  unchangedCutPage: (pipeline: string, cutId: string, page: number): ItemKey => ({
    pk: `${pipeline}#CHECKPOINT#CUT#${cutId}`,
    sk: `${CUT_PAGE_UNCHANGED}${String(page).padStart(6, '0')}`,
  }),
} as const;

export const CUT_PAGE_CHANGED = 'C#';
export const CUT_PAGE_UNCHANGED = 'U#';

/**
 * Most bytes of partition entries in one cut page, counted as DynamoDB sizes them (an upper bound: UTF-8 bytes of
 * the partition name, 21 bytes per number, 1 byte per list element, 3 per list). 100 KB leaves room for the keys
 * and fixed attributes and stays a quarter of the 400 KB item limit whatever the topic names are.
 */
export const CUT_PAGE_BUDGET_BYTES = 100 * 1024;

/** `<topic>#<partition>` — how partitions are named in cuts and fences. */
export function partitionId(topic: string, partition: number): string {
  return `${topic}#${partition}`;
}

export function parsePartitionId(id: string): { topic: string; partition: number } {
  const at = id.lastIndexOf('#');
  return { topic: id.slice(0, at), partition: Number(id.slice(at + 1)) };
}
