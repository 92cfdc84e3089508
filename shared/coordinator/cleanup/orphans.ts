/**
 * Orphan staged objects (P3): an in-progress object that no ledger entry references — its staging transaction
 * never committed (a crashed or fenced-out attempt), or its entry was already promoted and cleaned up. Never
 * promoted; deleted once older than the grace period, which exceeds the processor's timeout so that an object
 * whose transaction is still on its way is never taken for an orphan.
 *
 * The coordinator's own leftovers under `_coordinator/` (plans and candidate final objects that a zombie
 * step wrote after its attempt's abort or its checkpoint's cleanup) are not staged objects and not swept here:
 * every cleanup deletes those of checkpoints below the one it cleans (`PlanStore.deleteCheckpointsBelow`).
 */
import type { S3Client } from '@aws-sdk/client-s3';
import type { Stream } from '../../ledger/layout.ts';
import type { StagedEntries } from '../../ledger/staged-entries.ts';
import { inProgressPrefix } from '../../sink/layout.ts';
import { deleteKeys, listObjects } from '../../sink/objects.ts';
import type { CoordinatorParts } from '../parts.ts';

export interface StagedKeyParts {
  readonly stream: Stream;
  readonly topic: string;
  readonly partition: number;
  readonly firstOffset: number;
  readonly lastOffset: number;
  readonly attemptId: string;
}

const STAGED_KEY =
  /^(output|deadletter)\/topic=([^/]+)\/partition=(\d+)\/(\d{20})-(\d{20})\.(.+)\.ndjson(?:\.gz)?$/;

/** The parts of a staged object's key (`stagedObjectKey` in layout.ts), or undefined for any other key. */
export function parseStagedKey(pipeline: string, key: string): StagedKeyParts | undefined {
  const prefix = inProgressPrefix(pipeline);
  if (!key.startsWith(prefix)) return undefined;
  const match = STAGED_KEY.exec(key.slice(prefix.length));
  if (!match) return undefined;
  return {
    stream: match[1] as Stream,
    topic: match[2]!,
    partition: Number(match[3]),
    firstOffset: Number(match[4]),
    lastOffset: Number(match[5]),
    attemptId: match[6]!,
  };
}

/** Where the sweep continues from: a coordinator-owned ledger item (`CheckpointStore` sweep mark). */
export interface SweepMark {
  /** The last key examined by the previous sweep; '' to start from the lowest key. */
  read(): Promise<string>;
  /** Moves the mark, conditioned on it still being `expected`; false when another sweep moved it first. */
  write(expected: string, after: string): Promise<boolean>;
}

export interface SweepOptions {
  readonly s3: S3Client;
  readonly bucket: string;
  readonly pipeline: string;
  readonly ledger: StagedEntries;
  readonly now: number;
  readonly graceMs: number;
  /** Where the previous sweep stopped. Without it every sweep starts at the lowest key. */
  readonly mark?: SweepMark;
  /** Most objects examined per sweep (the rest wait for the next one). Default 10,000. */
  readonly limit?: number;
}

/**
 * Deletes orphan staged objects older than the grace period; returns their keys. Incremental: each
 * sweep examines at most `limit` staged objects after the persisted mark, in key order across both streams, and
 * moves the mark to the last one examined; a sweep that reaches the end resets it, so the next starts over. Every
 * orphan is therefore examined within ⌈staged objects / limit⌉ sweeps, wherever its key sorts. Safety does not
 * depend on the mark: each object is judged against its ledger entry, so a stale or lost mark only means some
 * objects are examined again.
 */
export async function sweepOrphans(options: SweepOptions): Promise<string[]> {
  const orphans: string[] = [];
  const limit = options.limit ?? 10_000;
  const after = (await options.mark?.read()) ?? '';
  let examined = 0;
  let last = after;
  for await (const object of listObjects(
    options.s3,
    options.bucket,
    inProgressPrefix(options.pipeline),
    limit,
    after === '' ? undefined : after,
  )) {
    examined++;
    last = object.key;
    if (options.now - object.lastModified < options.graceMs) continue;
    const parts = parseStagedKey(options.pipeline, object.key);
    if (!parts) continue;
    const entry = await options.ledger.entryAt(parts.topic, parts.partition, parts.lastOffset, parts.stream);
    if (entry?.key !== object.key) orphans.push(object.key);
  }
  await deleteKeys(options.s3, options.bucket, orphans);
  // Fewer than `limit` objects: the listing reached the end; the next sweep starts from the lowest key again.
  await options.mark?.write(after, examined < limit ? '' : last);
  return orphans;
}

/** The coordinator's sweep (cleanup, abort): its mark is in the ledger, so each continues where the last stopped. */
export async function sweepCoordinatorOrphans(
  parts: Pick<
    CoordinatorParts,
    'settings' | 'clients' | 'clock' | 'log' | 'store' | 'ledger' | 'orphanSweepLimit'
  >,
): Promise<number> {
  const { settings, store, clock } = parts;
  const orphans = await sweepOrphans({
    s3: parts.clients.s3,
    bucket: settings.bucket,
    pipeline: settings.pipelineId,
    ledger: parts.ledger,
    now: clock.now(),
    graceMs: settings.orphanGraceSeconds * 1000,
    limit: parts.orphanSweepLimit,
    mark: {
      read: () => store.readSweepMark(),
      write: (expected, after) => store.writeSweepMark(expected, after, clock.now()),
    },
  });
  if (orphans.length > 0) parts.log.info('deleted orphan staged objects', { count: orphans.length });
  return orphans.length;
}
