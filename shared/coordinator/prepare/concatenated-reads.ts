/**
 * Prepare's reads of the members of concatenated objects (NDJSON without time folders: `plan-partition.ts` one
 * partition at a time, `plan-merged.ts` a shard's merged objects): each staged object read and verified once under
 * the shard's read slots (C3), and the first that holds rows staged with a timestamp (time folders switched off
 * since) stops the reads, since its stream then needs a census rather than its bytes concatenated.
 */
import type { S3Client } from '@aws-sdk/client-s3';
import { mapLimit } from '../../concurrency.ts';
import type { StagedFileEntry } from '../../ledger/records.ts';
import { mayHoldStagedTime } from '../../sink/record-time.ts';
import type { StagedMember } from '../promote/final-plan.ts';
import type { ReadMember } from '../promote/object-bytes.ts';
import { StagedObjectLostError } from '../promote/promoter.ts';
import type { Slots } from './slots.ts';
import { verifyStagedObject } from './staged-check.ts';

/** A member holds rows staged with a timestamp: every read after it throws this too. */
export class StampedMemberError extends Error {
  constructor() {
    super('a member holds rows staged with a timestamp');
  }
}

export interface ConcatenatedReads {
  /** A member's verified bytes; {@link StampedMemberError} once any member read held a staged timestamp. */
  readonly read: ReadMember;
  /** Whether a member read so far held rows staged with a timestamp. */
  stamped(): boolean;
}

/** Where prepare reads: the bucket, and the shard's read slots. */
export interface StagedReads {
  readonly s3: S3Client;
  readonly bucket: string;
  readonly slots: Slots;
}

/** Reads of the members among `entries` (`where` names them in the error for a member that is not). */
export function concatenatedReads(
  { s3, bucket, slots }: StagedReads,
  entries: readonly StagedFileEntry[],
  where: string,
): ConcatenatedReads {
  const byKey = new Map(entries.map((e) => [e.key, e]));
  let found = false;
  const read: ReadMember = (m: StagedMember) =>
    slots.run(async () => {
      if (found) throw new StampedMemberError();
      const entry = byKey.get(m.key);
      if (!entry) throw new StagedObjectLostError(m.key, `not among the covered objects of its ${where}`);
      const { body, text } = await verifyStagedObject(s3, bucket, entry);
      if (mayHoldStagedTime(text)) found = true;
      if (found) throw new StampedMemberError();
      return body;
    });
  return { read, stamped: () => found };
}

/** Verifies the entries without rows: they are no member of any object, but covered all the same. */
export async function verifyEmptyEntries(
  { s3, bucket, slots }: StagedReads,
  entries: readonly StagedFileEntry[],
): Promise<void> {
  await mapLimit(
    entries.filter((e) => e.recordCount === 0),
    slots.size,
    async (entry) => {
      await slots.run(() => verifyStagedObject(s3, bucket, entry));
    },
  );
}
