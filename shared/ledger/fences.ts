/**
 * Where partition fences live (for scale): spread over {@link FENCE_SHARDS} partition keys, so that a
 * pipeline of 1,000 Kafka partitions, each staging about once a second, writes each key about 63 times a second —
 * far under DynamoDB's per-partition-key write limit (1,000 write units a second), which one key for every fence
 * would pass. A fence's shard is a pure function of (topic, partition): consecutive partitions of a topic take
 * consecutive shards, so a topic's partitions spread evenly.
 *
 * Fences written by releases before the shards live under the one legacy key `<pl>#FENCE`. A processor that finds
 * no sharded fence reads the legacy one; its staging transaction then creates the sharded fence (absent) and
 * marks the legacy one moved (`movedTo`, on condition its staged offset is still the one read and it is not moved
 * yet): the move is atomic with the staging, and a zombie that still holds the legacy view fails its condition
 * and reads again. Readers of every fence (the coordinator's begin, `eos status`, the monitor) read the legacy key
 * FIRST and then the shards: a fence moved between the two reads is found in its shard (the move committed before
 * the shard read), so no partition is ever missing from a cut; where both are found, the higher offset wins (a
 * fence only moves up). The processor never deletes the legacy item (its role has no DeleteItem); a moved item
 * is ignored by its `movedTo`.
 *
 * Free of SDK imports (the CLI's help and the stack load the layout); the reader of every fence is
 * `readFenceItems` in `staged-entries.ts`.
 */
/** A fence item's key (the shape of `layout.ts`'s `ItemKey`, which builds on this module). */
type ItemKey = { readonly pk: string; readonly sk: string };

/** Partition keys the fences are spread over. Fixed: a fence's key must never change while it is in use. */
export const FENCE_SHARDS = 16;

/** 32-bit FNV-1a of a string (a stable, dependency-free hash: the shard must be the same in every release). */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    hash ^= byte;
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/** The shard of a partition's fence: the topic's hash plus the partition number, modulo the shard count. */
export function fenceShard(topic: string, partition: number): number {
  return (fnv1a(topic) + partition) % FENCE_SHARDS;
}

export const fenceKeys = {
  /** The legacy key every fence had before the shards (read, and marked moved, never written anew). */
  legacyPk: (pipeline: string): string => `${pipeline}#FENCE`,
  shardPk: (pipeline: string, shard: number): string => `${pipeline}#FENCE#${String(shard).padStart(2, '0')}`,
  /** Every partition key holding fences, the legacy one first (see the module comment for why first). */
  allPks: (pipeline: string): string[] => [
    fenceKeys.legacyPk(pipeline),
    ...Array.from({ length: FENCE_SHARDS }, (_, shard) => fenceKeys.shardPk(pipeline, shard)),
  ],
  fence: (pipeline: string, topic: string, partition: number): ItemKey => ({
    pk: fenceKeys.shardPk(pipeline, fenceShard(topic, partition)),
    sk: `${topic}#${partition}`,
  }),
  legacyFence: (pipeline: string, topic: string, partition: number): ItemKey => ({
    pk: fenceKeys.legacyPk(pipeline),
    sk: `${topic}#${partition}`,
  }),
  /** Where a fence was read from: its legacy key when the read found it there, else its shard. */
  readFrom: (pipeline: string, topic: string, partition: number, legacy: boolean | undefined): ItemKey =>
    legacy ? fenceKeys.legacyFence(pipeline, topic, partition) : fenceKeys.fence(pipeline, topic, partition),
};

/** The IAM leading-key patterns of every fence (legacy and shards). */
export function fenceLeadingKeys(pipeline: string): string[] {
  return [fenceKeys.legacyPk(pipeline), `${fenceKeys.legacyPk(pipeline)}#*`];
}
