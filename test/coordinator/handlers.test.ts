/** The Lambda handlers (`functions/coordinator.ts`): settings from EOS_* variables, payloads validated. */
import type { Context } from 'aws-lambda';
import { beforeAll, describe, expect, it } from 'vitest';
import { parseSettings, settingsToEnv } from '../../shared/config/settings.ts';
import type { BeginOutput } from '../../shared/coordinator/messages.ts';
import { createProcessor } from '../../shared/processor/processor.ts';
import { readCommitted } from '../../shared/sink/reader.ts';
import { freshResources, type TestResources, uniqueName } from '../support/aws.ts';
import { mskEvent, orderRecords } from '../support/msk.ts';

let res: TestResources;
const pipelineId = uniqueName('h');
const context = { functionName: 'coordinator', awsRequestId: 'r-1' } as Context;

beforeAll(async () => {
  res = await freshResources('handlers');
  process.env.POWERTOOLS_LOG_LEVEL = 'SILENT';
  Object.assign(process.env, settingsToEnv({ ledgerTable: res.table, bucket: res.bucket, pipelineId }));
});

describe('coordinator handlers', () => {
  it('run one checkpoint step by step, as the state machine invokes them', async () => {
    const settings = parseSettings({ ledgerTable: res.table, bucket: res.bucket, pipelineId });
    await createProcessor({ settings, clients: res.clients }).processEvent(mskEvent(orderRecords(0, 0, 3)));
    const handlers = await import('../../functions/coordinator.ts');
    const execution = 'arn:aws:states:us-east-1:123456789012:execution:coordinator:one';
    const begun = (await handlers.begin({ execution }, context)) as BeginOutput;
    expect(begun).toMatchObject({ action: 'checkpoint', checkpointId: 1, attempt: 1, shards: [0] });
    const ref = { execution, checkpointId: 1, attempt: 1 };
    await handlers.prepare({ ...ref, shard: 0 }, context);
    await handlers.decide(ref, context);
    await handlers.promote({ ...ref, shard: 0 }, context);
    await handlers.commit(ref, context);
    await handlers.cleanup({ ...ref, shard: 0 }, context);
    const rows = [];
    for await (const r of readCommitted({ s3: res.clients.s3, bucket: res.bucket, pipeline: pipelineId }))
      rows.push(r);
    expect(rows).toHaveLength(3);
    expect(await handlers.begin({ execution: `${execution}-2` }, context)).toMatchObject({ action: 'empty' });
  });

  it('reject a malformed payload before touching anything', async () => {
    const handlers = await import('../../functions/coordinator.ts');
    await expect(handlers.prepare({ checkpointId: 'one' }, context)).rejects.toThrow(
      /execution|checkpointId/,
    );
  });
});
