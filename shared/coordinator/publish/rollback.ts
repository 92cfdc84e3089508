/**
 * Whether the table still holds what the ledger says is published. An operator (or a tool) can roll an Iceberg
 * table back: set main to an older snapshot, or point the catalog at an older metadata file. A checkpoint the
 * ledger records as published would then be missing from the table, and appending the next one over it would make
 * that loss silent. Maintenance, which expires snapshots but never main's head, must not look like a rollback.
 *
 * Judged against the published mark (checkpoint M, its snapshot S, sequence number s):
 * - the table has no metadata, or its published-checkpoint property names less than M (an older metadata file);
 * - S is listed but not in main's history (main set back past it);
 * - S is no longer listed (expired) and main's head has a sequence number below s: every snapshot committed after
 *   S, compactions included, has a higher one, so the head is older than S.
 */
import { PipelineError } from '../../errors.ts';
import { checkpointOfProperty, mainHeadSequence } from '../../iceberg/append.ts';
import type { TableState } from '../../iceberg/catalog.ts';
import { mainHistory } from '../../iceberg/table-metadata.ts';
import type { PublishedMark } from '../../ledger/table-snapshots.ts';

/** The table no longer holds a checkpoint the ledger records as published: nothing is appended over it. */
export class IcebergTableRolledBackError extends PipelineError {}

/** Why the table does not hold the mark's checkpoint, or undefined when it does. */
function rollbackOf(
  state: TableState | undefined,
  mark: PublishedMark,
  property: string,
): string | undefined {
  const snapshot = mark.snapshot;
  if (mark.upTo === 0 || snapshot === undefined) return undefined;
  if (state === undefined) return 'the table has no metadata';
  const { metadata } = state;
  const named = checkpointOfProperty(metadata, property);
  if (named < mark.upTo) return `its ${property} is ${named}`;
  const listed = metadata.snapshots.some((candidate) => candidate['snapshot-id'] === snapshot.snapshotId);
  if (listed) {
    return mainHistory(metadata).includes(snapshot.snapshotId)
      ? undefined
      : `snapshot ${snapshot.snapshotId} is not in main's history`;
  }
  const head = mainHeadSequence(metadata);
  return head < snapshot.sequenceNumber
    ? `main's head has sequence number ${head}, below ${snapshot.sequenceNumber}`
    : undefined;
}

/** Throws {@link IcebergTableRolledBackError} (one line) when the table lost the mark's checkpoint. */
export function assertNotRolledBack(
  state: TableState | undefined,
  mark: PublishedMark,
  property: string,
  location: string,
): void {
  const why = rollbackOf(state, mark, property);
  if (why === undefined) return;
  throw new IcebergTableRolledBackError(
    `the Iceberg table ${location} was rolled back below checkpoint ${mark.upTo} (snapshot ${mark.snapshot?.snapshotId}), which the ledger records as published (${why}): nothing is appended over it; restore the table's metadata to a version that holds it`,
  );
}
