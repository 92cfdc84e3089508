/**
 * The publish step as the coordinator sees it: a port. The coordinator's other steps never publish, so the
 * coordinator holds only this interface, and the code that publishes (`step.ts` `tablePublisher`, the Iceberg
 * writer, hyparquet to read row positions) is given to it by whoever runs the publish step: the publish function's
 * own entry and the local runner. The other steps' bundle then carries none of it.
 */
import { PipelineError } from '../../errors.ts';
import type { TableSnapshots } from '../../ledger/table-snapshots.ts';
import type { CoordinatorParts } from '../parts.ts';

export interface PublishOutput {
  readonly checkpointId: number;
  /** The published mark after the step. */
  readonly publishedUpTo: number;
  /** Checkpoints the step brought to the mark (appended, found in the table, or recorded before). */
  readonly published: number;
}

/** A publish step ran without an Iceberg table to publish to: the definition and the coordinator disagree. */
export class NoPublishTargetError extends PipelineError {}

/** What a publisher is built from: the coordinator's parts. */
export type PublisherParts = Pick<
  CoordinatorParts,
  'settings' | 'clients' | 'clock' | 'log' | 'store' | 'manifests'
>;

export interface Publisher {
  /** The table snapshot records, whose published mark begin reads on an idle pipeline. */
  readonly snapshots: Pick<TableSnapshots, 'readMark'>;
  /** Publishes committed checkpoint `checkpointId` (and every earlier one not yet published). */
  publish(checkpointId: number): Promise<PublishOutput>;
}

/** Builds the coordinator's publisher from its parts. */
export type PublisherFactory = (parts: PublisherParts) => Publisher;
