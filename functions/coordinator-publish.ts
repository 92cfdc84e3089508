/**
 * The coordinator's publish step (deployed only with an Iceberg table, the construct's `iceberg` prop): an entry of
 * its own, so that the catalog clients it may load (Glue, S3 Tables) are bundled with it alone and not with the
 * other steps. Its settings are the pipeline's `EOS_*` variables and the table's `EOS_ICEBERG_*`, set on its function
 * only. The payload is the checkpoint reference every checkpoint step takes (`messages.ts`), validated before
 * anything is read.
 */
import { createAwsClients } from '../shared/aws/clients.ts';
import { settingsFromEnv } from '../shared/config/settings.ts';
import { type Coordinator, createCoordinator } from '../shared/coordinator/coordinator.ts';
import { checkpointRefSchema } from '../shared/coordinator/messages.ts';
import { tablePublisher } from '../shared/coordinator/publish/step.ts';
import { publishTargetFromSettings } from '../shared/coordinator/publish/target-from-settings.ts';
import { log, step } from './coordinator-step.ts';

let publisher: Promise<Coordinator> | undefined;

/**
 * The coordinator with the table it publishes to, built on first use (an S3 Tables catalog asks the service for the
 * table's location once); a failed build is not kept, so the next invocation tries again.
 */
function publishingCore(): Promise<Coordinator> {
  publisher ??= (async () => {
    const settings = settingsFromEnv();
    const clients = createAwsClients();
    const publishTarget = await publishTargetFromSettings(settings, clients);
    return createCoordinator({
      settings,
      clients,
      log,
      ...(publishTarget ? { publisher: tablePublisher(publishTarget) } : {}),
    });
  })().catch((error: unknown) => {
    publisher = undefined;
    throw error;
  });
  return publisher;
}

export const publish = step('publish', async (event) => {
  const input = checkpointRefSchema.parse(event);
  return (await publishingCore()).publish(input);
});
