/**
 * The coordinator's publish step: the parts publishing works with, taken from the coordinator's, and the step's
 * small answer for the state machine (references only, like every other step's).
 */
import { PipelineError } from '../../errors.ts';
import { TableSnapshots } from '../../ledger/table-snapshots.ts';
import type { CoordinatorParts } from '../parts.ts';
import { type PublishParts, publishCheckpoint } from './publish.ts';
import type { PublishTarget } from './target.ts';

export interface PublishOutput {
  readonly checkpointId: number;
  /** The published mark after the step. */
  readonly publishedUpTo: number;
  /** Checkpoints the step brought to the mark (appended, found in the table, or recorded before). */
  readonly published: number;
}

/** A publish step ran without an Iceberg table to publish to: the definition and the coordinator disagree. */
export class NoPublishTargetError extends PipelineError {}

type StepParts = Pick<CoordinatorParts, 'settings' | 'clients' | 'clock' | 'log' | 'store' | 'manifests'>;

/** Publishing's parts from the coordinator's and the table to publish to. */
export function publishParts(parts: StepParts, target: PublishTarget): PublishParts {
  const { settings, clients } = parts;
  return {
    pipelineId: settings.pipelineId,
    bucket: settings.bucket,
    s3: clients.s3,
    clock: parts.clock,
    log: parts.log,
    store: parts.store,
    manifests: parts.manifests,
    snapshots: new TableSnapshots(clients.dynamodb, settings.ledgerTable, settings.pipelineId),
    target,
  };
}

/** Publishes committed checkpoint `checkpointId` (and every earlier one not yet published). */
export async function publishStep(
  parts: PublishParts | undefined,
  checkpointId: number,
): Promise<PublishOutput> {
  if (!parts) throw new NoPublishTargetError(`checkpoint ${checkpointId}: no Iceberg table to publish to`);
  const outcome = await publishCheckpoint(parts, checkpointId);
  for (const done of outcome.published) {
    parts.log.info('checkpoint published to the Iceberg table', {
      checkpointId: done.checkpointId,
      snapshotId: String(done.snapshotId),
      how: done.how,
    });
  }
  return { checkpointId, publishedUpTo: outcome.publishedUpTo, published: outcome.published.length };
}
