/**
 * The LocalStack path's recorded event (`examples/localstack/msk-event.json`, what `scripts/localstack.sh` sends
 * with `awslocal lambda invoke`) on the local parts: the deployed processor handler accepts it as the mapping
 * would deliver it, a checkpoint run by the coordinator's state machine (the interpreter, as in `eos local`)
 * commits it, and `verifySink` (what `eos verify` runs) finds every good record once and the malformed one as
 * its dead letter. Invoking it twice, as a retried `lambda invoke` would, changes nothing.
 *
 * LocalStack itself cannot run here (no Docker): this proves the event and the commands' inputs, not LocalStack.
 */
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { createProcessorHandler } from '../../functions/processor-handler.ts';
import { createLocalCoordinator } from '../../local/coordinator-runner.ts';
import type { MskEvent } from '../../shared/kafka/event.ts';
import { verifySink } from '../../shared/sink/verify.ts';
import { builtinDefinition } from '../../shared/transforms/registry.ts';
import { freshResources, settingsIn, type TestResources } from '../support/aws.ts';
import { lambdaContext } from '../support/lambda-context.ts';

const EVENT_FILE = new URL('../../examples/localstack/msk-event.json', import.meta.url);
const event = JSON.parse(readFileSync(EVENT_FILE, 'utf8')) as MskEvent;

let res: TestResources;
beforeAll(async () => {
  res = await freshResources('lstack');
});

describe('the LocalStack path', () => {
  it('the recorded MSK event is processed, committed and verified exactly once, also when invoked twice', async () => {
    const settings = settingsIn(res, 'lstack', {
      eventSourceArn: event.eventSourceArn,
      topics: 'orders',
    });
    const handler = createProcessorHandler({ transform: builtinDefinition('orders'), settings });
    const first = await handler(event, lambdaContext('eos-processor', 'req-1'));
    const again = await handler(event, lambdaContext('eos-processor', 'req-1'));
    // The retried invocation finds every record already staged: nothing is staged again.
    expect(first.partitions.map((p) => p.stagedRows)).toEqual([5, 3]);
    expect(again.partitions.map((p) => [p.stagedRows, p.duplicatesByOffset])).toEqual([
      [0, 5],
      [0, 4],
    ]);

    const local = createLocalCoordinator({ settings, clients: res.clients });
    const outcome = await local.runCheckpoint();
    expect(outcome.status).toBe('committed');

    const result = await verifySink({
      s3: res.clients.s3,
      bucket: settings.bucket,
      pipeline: settings.pipelineId,
    });
    expect(result.problems).toEqual([]);
    expect(result.ok).toBe(true);
    const total = Object.values(event.records).reduce((sum, records) => sum + records.length, 0);
    expect(result.rows).toEqual({ output: total - 1, deadletter: 1 });
  });
});
