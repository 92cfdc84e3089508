/**
 * The publish Lambda handler (`functions/coordinator-publish.ts`): its table from `EOS_ICEBERG_*` variables, its payload
 * validated like every step's before anything is read, a committed checkpoint appended to the table once.
 */
import type { Context } from 'aws-lambda';
import { beforeAll, describe, expect, it } from 'vitest';
import { settingsToEnv } from '../../shared/config/settings.ts';
import type { PublishOutput } from '../../shared/coordinator/coordinator.ts';
import { publishedCheckpointProperty } from '../../shared/coordinator/publish/target.ts';
import { freshResources, type TestResources } from '../support/aws.ts';
import { commitNext, PUBLISH_COLUMNS, type PublishSetup, publishSetup } from '../support/publish.ts';

let res: TestResources;
let setup: PublishSetup;
const context = { functionName: 'coordinator-publish', awsRequestId: 'r-1' } as Context;
const execution = 'arn:aws:states:us-east-1:123456789012:execution:coordinator:publish';

beforeAll(async () => {
  res = await freshResources('publish-handler');
  setup = publishSetup(res, 'ph');
  process.env.POWERTOOLS_LOG_LEVEL = 'SILENT';
  // The publish function's environment as the construct sets it: the pipeline's settings and its table's.
  Object.assign(
    process.env,
    settingsToEnv({
      ledgerTable: res.table,
      bucket: res.bucket,
      pipelineId: setup.settings.pipelineId,
      outputFormat: 'parquet',
      timePartitioning: 'hour',
      outputColumns: PUBLISH_COLUMNS,
      icebergCatalog: 'file',
    }),
  );
});

describe('the publish handler', () => {
  it('rejects a malformed payload before loading the table or reading the ledger', async () => {
    const handlers = await import('../../functions/coordinator-publish.ts');
    for (const payload of [
      { checkpointId: 1, attempt: 1 },
      { execution, checkpointId: 'one', attempt: 1 },
      { execution, checkpointId: 0, attempt: 1 },
      { execution, checkpointId: 1, attempt: 0 },
    ]) {
      await expect(handlers.publish(payload, context)).rejects.toThrow(/execution|checkpointId|attempt/);
    }
    expect(await setup.catalog.load()).toBeUndefined();
  });

  it('publishes a committed checkpoint to the table its settings name, once', async () => {
    await commitNext(res, setup);
    const handlers = await import('../../functions/coordinator-publish.ts');
    const ref = { execution, checkpointId: 1, attempt: 1 };
    const first = (await handlers.publish(ref, context)) as PublishOutput;
    expect(first).toEqual({ checkpointId: 1, publishedUpTo: 1, published: 1 });
    const again = (await handlers.publish(ref, context)) as PublishOutput;
    expect(again).toEqual({ checkpointId: 1, publishedUpTo: 1, published: 0 });
    const state = await setup.catalog.load();
    expect(state?.metadata.snapshots).toHaveLength(1);
    expect(state?.metadata.properties[publishedCheckpointProperty(setup.settings.pipelineId)]).toBe('1');
  });

  it('refuses a checkpoint that is not committed, naming it', async () => {
    const handlers = await import('../../functions/coordinator-publish.ts');
    await expect(handlers.publish({ execution, checkpointId: 9, attempt: 1 }, context)).rejects.toThrow(
      /checkpoint 9/,
    );
  });
});
