/**
 * The coordinator's publish step: the parts publishing works with, taken from the coordinator's, and the step's
 * small answer for the state machine (references only, like every other step's).
 */
import { TableSnapshots } from '../../ledger/table-snapshots.ts';
import { type PublishParts, publishCheckpoint } from './publish.ts';
import type { PublisherFactory, PublisherParts, PublishOutput } from './publisher.ts';
import type { PublishTarget } from './target.ts';

export { NoPublishTargetError, type PublishOutput } from './publisher.ts';

/** Publishing's parts from the coordinator's and the table to publish to. */
export function publishParts(parts: PublisherParts, target: PublishTarget): PublishParts {
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
export async function publishStep(parts: PublishParts, checkpointId: number): Promise<PublishOutput> {
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

/** The publisher of a coordinator that publishes its checkpoints to `target`. */
export function tablePublisher(target: PublishTarget): PublisherFactory {
  return (parts) => {
    const publishing = publishParts(parts, target);
    return {
      snapshots: publishing.snapshots,
      publish: (checkpointId) => publishStep(publishing, checkpointId),
    };
  };
}
