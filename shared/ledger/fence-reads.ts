/**
 * The processor's reads of a partition's fence: the fence of one lane (sharded key first, then the legacy key,
 * `fences.ts`), the partition's current lane (`epochs.ts`), and the stop record the processor writes onto a fence
 * when it refuses a batch. Strongly consistent; a fence this code did not write is refused, loudly.
 */
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { send, type TableRef } from '../aws/dynamo.ts';
import { MalformedLedgerItemError, PipelineError } from '../errors.ts';
import {
  CLOSED_ATTRIBUTE,
  EPOCH_ATTRIBUTE,
  isRootLane,
  isStopRecord,
  laneOf,
  MAX_EPOCH,
  STOP_ATTRIBUTE,
  type StopRecord,
} from './epochs.ts';
import { IDENTITY_ATTRIBUTE, unpackIdentity } from './fence-identity.ts';
import { fenceKeys } from './fences.ts';
import {
  entryItemsUpTo,
  inlineAttributesIn,
  inlineBytesIn,
  type KeyTemplates,
  templatesIn,
} from './inline-entries.ts';
import { type ItemKey, keys } from './layout.ts';
import { LEGACY_RING_ATTRIBUTE, RING_ATTRIBUTE, unpackRing } from './recent-starts.ts';
import { type FenceIdentity, RECENT_STARTS, type RecordFingerprint, withStart } from './records.ts';

export const NO_FENCE = -1;

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
  /**
   * Bytes of the staged entries the fence item holds inline (`inline-entries.ts`), at most: cleanup only removes
   * them. Undefined: none known (no fence, or a state not read from the item).
   */
  readonly inlineBytes?: number;
  /**
   * The highest offset a staged-entry item of the partition may have, while the fence's mark holds
   * (`inline-entries.ts`); undefined: items may lie anywhere at or below the staged offset.
   */
  readonly entryItemsUpTo?: number;
  /**
   * The key templates inline entries share (`inline-entries.ts`), as the fence item holds them; undefined: not
   * known (no fence, or a state not read from the item).
   */
  readonly templates?: KeyTemplates;
  /**
   * The inline entries' attributes as the fence item holds them (packed values by name), when read from the item:
   * what a chunk past the inline budget moves into entry items (`staging-effects.ts` `flushedEntries`).
   */
  readonly inlineAttributes?: Readonly<Record<string, unknown>>;
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

const NOTHING_STAGED: FenceState = { stagedOffset: NO_FENCE, identity: undefined, updatedAt: undefined };

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
  // One form at a time is written (`fence-identity.ts`); a packed one that names another offset is stale (a writer
  // of the release before moved the fence and left it), and the maps beside it are read instead.
  const packed = unpackIdentity(item[IDENTITY_ATTRIBUTE]);
  if (packed !== undefined && packed.fenceRecord.offset === stagedOffset) return packed;
  const { fenceRecord, batchStart } = item;
  if (!isFingerprint(fenceRecord) || !isFingerprint(batchStart)) return undefined;
  if (fenceRecord.offset !== stagedOffset || batchStart.offset > stagedOffset) return undefined;
  return { fenceRecord, batchStart, recentStarts: ringOf(item, stagedOffset) };
}

/**
 * The fence's ring of recent batch starts (`recent-starts.ts`), oldest first. Advisory (it only turns a false stop
 * into a proven redelivery): a malformed ring counts as absent, and only well-formed starts at or below the fence
 * are kept, at most RECENT_STARTS of them. This release writes the ring packed and removes the list; a processor
 * of an earlier release writes the list and leaves the packed ring as it was. So a list beside a packed ring was
 * written after it, and holds the newer starts: the two are read as one ring, the list's start winning at an
 * offset both hold, as a start staged again replaces the old one ({@link withStart}).
 */
function ringOf(item: Record<string, unknown>, stagedOffset: number): RecordFingerprint[] {
  const listed = item[LEGACY_RING_ATTRIBUTE];
  let ring: RecordFingerprint[] = [];
  for (const start of [
    ...(unpackRing(item[RING_ATTRIBUTE]) ?? []),
    ...(Array.isArray(listed) ? listed : []),
  ]) {
    if (isFingerprint(start) && start.offset <= stagedOffset)
      ring = withStart(ring, start, Number.MAX_SAFE_INTEGER);
  }
  return ring.slice(-RECENT_STARTS);
}

/** A fence item as read: an item without a valid staged offset is malformed (see {@link readFence}). */
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
  const inlineBytes = inlineBytesIn(item);
  const itemsUpTo = entryItemsUpTo(item);
  return {
    stagedOffset,
    identity: identityOf(item, stagedOffset),
    updatedAt: typeof item.updatedAt === 'number' ? item.updatedAt : undefined,
    ...(inlineBytes > 0 ? { inlineBytes } : {}),
    ...(itemsUpTo === undefined ? {} : { entryItemsUpTo: itemsUpTo }),
    templates: templatesIn(item),
    ...(inlineBytes > 0 ? { inlineAttributes: inlineAttributesIn(item) } : {}),
    ...(item[CLOSED_ATTRIBUTE] === undefined ? {} : { closed: true as const }),
    ...(epoch === undefined ? {} : { epoch: epoch as number }),
    ...(isStopRecord(stop) ? { stop } : {}),
  };
}

async function getFence(at: TableRef, key: ItemKey): Promise<Record<string, unknown> | undefined> {
  const { Item } = await send(
    at.doc,
    new GetCommand({ TableName: at.table, Key: key, ConsistentRead: true }),
    'dynamodb:GetItem',
    { missingTable: at.table },
  );
  return Item;
}

/**
 * The partition's fence, strongly consistent: {@link NO_FENCE} when nothing was staged yet. A staged offset that
 * is not a non-negative safe integer is no fence this code wrote: refused, loudly.
 */
export async function readFence(
  at: TableRef,
  pipeline: string,
  topic: string,
  partition: number,
): Promise<FenceState> {
  const item = await getFence(at, fenceKeys.fence(pipeline, topic, partition));
  if (item !== undefined) return fenceStateOf(item, topic, partition);
  // A lane of epoch >= 1 or of a redrive was created after the shards: it never had a legacy key.
  if (!isRootLane(topic)) return NOTHING_STAGED;
  // No sharded fence: a fence written before the shards may still be under the legacy key (`fences.ts`).
  const legacy = await getFence(at, fenceKeys.legacyFence(pipeline, topic, partition));
  if (legacy === undefined) return NOTHING_STAGED;
  if (legacy.movedTo !== undefined) {
    // Moved between the two reads (a retry or another container staged meanwhile): the move created the sharded
    // fence in the same transaction, before this read, so it is there now. Missing again: removed by hand.
    const moved = await getFence(at, fenceKeys.fence(pipeline, topic, partition));
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
export async function readCurrentFence(
  at: TableRef,
  pipeline: string,
  topic: string,
  partition: number,
): Promise<LaneFence> {
  let previous: number | undefined;
  for (let read = 0; read < 3; read++) {
    const root = await readFence(at, pipeline, topic, partition);
    const epoch = root.epoch ?? 0;
    if (epoch === previous) {
      // The root still names a lane found closed: no switch is under way, the ledger is inconsistent (a fence
      // edited or restored by hand). Stop loudly rather than retry forever.
      throw new MalformedLedgerItemError(
        `fence ${laneOf(topic, epoch)}#${partition}`,
        `is closed, but the root fence ${topic}#${partition} still names epoch ${epoch} as current`,
      );
    }
    previous = epoch;
    if (epoch === 0) {
      if (root.closed) {
        throw new MalformedLedgerItemError(`fence ${topic}#${partition}`, 'closed, but names no newer epoch');
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
    const fence = await readFence(at, pipeline, lane, partition);
    if (!fence.closed) return { lane, fence };
  }
  throw new EpochChangedError(topic, partition);
}

/**
 * Writes why the processor stopped a lane onto its fence (`eos epoch` shows it), on condition the fence is still
 * the one judged, not closed, and its stop record still the one read (`fence.stop`, or none): two attempts that
 * saw the same stop never overwrite each other's sighting — the loser's next retry counts it. Best effort: the
 * stop itself is the batch's error, whatever happens here, so any failure is only `false`.
 */
export async function recordStop(
  at: TableRef,
  pipeline: string,
  lane: string,
  partition: number,
  fence: FenceState,
  stop: StopRecord,
): Promise<boolean> {
  const previous = fence.stop;
  const command = new UpdateCommand({
    TableName: at.table,
    Key: fenceKeys.readFrom(pipeline, lane, partition, fence.legacy),
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
  });
  return at.doc.send(command).then(
    () => true,
    () => false,
  );
}

/** The checkpoint head's `compactFenceSince` (`processor/inline-gate.ts`), strongly consistent; undefined if none. */
export async function readCompactFenceSince(at: TableRef, pipeline: string): Promise<number | undefined> {
  const { Item } = await send(
    at.doc,
    new GetCommand({
      TableName: at.table,
      Key: keys.checkpointHead(pipeline),
      ConsistentRead: true,
      ProjectionExpression: 'compactFenceSince',
    }),
    'dynamodb:GetItem(checkpoint head)',
    { missingTable: at.table },
  );
  const since = Item?.compactFenceSince;
  return Number.isSafeInteger(since) ? (since as number) : undefined;
}
